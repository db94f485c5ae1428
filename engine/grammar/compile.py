"""Constraint -> checked llguidance grammars, bound to one tokenizer and vocabulary size.

llguidance (Rust, with Python bindings) was chosen over xgrammar and outlines-core: it reads a
Hugging Face ``tokenizer.json`` directly (no ``transformers`` at run time), its Lark dialect
names special tokens (``<|channel|>``) so the harmony header and the JSON body live in one
grammar, it compiles JSON Schema lazily (no per-schema precompute of the 201k-token
vocabulary), and its mask costs tens of microseconds per token. Building the tokenizer index
takes about a second at 201k tokens, so it is cached per tokenizer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import llguidance as llg
from tokenizers import Tokenizer

from ..tokenizer import HARMONY_SPECIALS, SpecialTokens
from .spec import Constraint, GrammarError, after_analysis_grammar, first_grammar

_cache_lock = threading.Lock()
_ll_cache: dict[tuple[int, int], tuple[Tokenizer, llg.LLTokenizer]] = {}


def ll_tokenizer(tok: Tokenizer, vocab_size: int, eos: int) -> llg.LLTokenizer:
    """The llguidance view of ``tok`` with ``vocab_size`` logits (ids past the tokenizer are never allowed)."""
    key = (id(tok), vocab_size)
    with _cache_lock:
        hit = _ll_cache.get(key)
        if hit is not None and hit[0] is tok:
            return hit[1]
    made = llg.LLTokenizer(tok.to_str(), n_vocab=vocab_size, eos_token=eos)
    with _cache_lock:
        _ll_cache[key] = (tok, made)  # keeps tok alive so id() stays unique
    return made


def prepare_vocabulary(tok: Tokenizer, special: SpecialTokens, vocab_size: int) -> None:
    """Build (and cache) the tokenizer index ``compile_constraint`` needs, ahead of the first request."""
    ll_tokenizer(tok, vocab_size, special.return_)


@dataclass(frozen=True)
class CompiledConstraint:
    """Grammars checked against one tokenizer; cheap to start a guide from (one per generation)."""

    constraint: Constraint
    ll_tok: Any  # llg.LLTokenizer
    special: SpecialTokens
    vocab_size: int
    first: str
    after_analysis: str
    special_ids: tuple[int, ...]  # every harmony special (banned in free analysis except <|end|>)


def _check(grammar: str, ll_tok: llg.LLTokenizer) -> None:
    is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, ll_tok)
    if is_error:
        raise GrammarError(_short(messages[0] if messages else "invalid grammar"))
    m = llg.LLMatcher(ll_tok, grammar, log_level=0)
    if m.is_error():
        raise GrammarError(_short(m.get_error()))


def _short(msg: str) -> str:
    first = msg.strip().splitlines()[0] if msg.strip() else msg
    return first[:300]


def compile_constraint(c: Constraint, tok: Tokenizer, special: SpecialTokens, vocab_size: int) -> CompiledConstraint:
    """Check ``c`` and bind it to the tokenizer; raises :class:`GrammarError` naming the problem."""
    ll_tok = ll_tokenizer(tok, vocab_size, special.return_)
    first = llg.LLMatcher.grammar_from_lark(first_grammar(c))
    after = llg.LLMatcher.grammar_from_lark(after_analysis_grammar(c))
    _check(first, ll_tok)
    if c.analysis_budget != 0:
        _check(after, ll_tok)
    ids = tuple(i for s in HARMONY_SPECIALS if (i := tok.token_to_id(s)) is not None and i < vocab_size)
    return CompiledConstraint(c, ll_tok, special, vocab_size, first, after, ids)

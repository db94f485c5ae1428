"""The ordinary encoder's memo (engine/harmony/codec.py): a follow-up's repeated messages are not encoded again, and
the ids are the same as encoding them afresh."""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer

from engine.harmony import codec
from engine.harmony.codec import OrdinaryEncoder
from engine.harmony.render import render_conversation
from engine.tokenizer import SpecialTokens
from engine.types import Conversation, Message

WORDS = ["def", "return", "class", " model", "\n    ", "<|start|>", "über", "🙂", "x = 1", "# note", "self.config"]


def text(seed: int, n: int) -> str:
    r = random.Random(seed)
    return "".join(r.choice(WORDS) + r.choice([" ", "", "\n"]) for _ in range(n))


def test_kept_encodings_equal_fresh_ones_and_are_copies(tok: Tokenizer) -> None:
    enc = OrdinaryEncoder(tok)
    fresh = OrdinaryEncoder(tok)
    for seed in range(6):
        t = text(seed, 400)  # long enough to be kept, special-token strings included (the by-hand path)
        assert len(t) >= codec.MEMO_MIN
        first = enc.encode(t)
        assert enc.known_length(t) == len(first)
        again = enc.encode(t)
        assert again == first == fresh._encode(t)
        again.append(-1)  # the caller owns its list
        assert enc.encode(t) == first
    short = "x = 1"
    assert enc.encode(short) == fresh._encode(short) and enc.known_length(short) is None  # not worth keeping


def test_the_memo_forgets_the_oldest_beyond_its_characters(tok: Tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "MEMO_CHARS", 12_000)
    enc = OrdinaryEncoder(tok)
    texts = [text(seed, 300) for seed in range(10)]
    for t in texts:
        enc.encode(t)
    kept = [enc.known_length(t) is not None for t in texts]
    assert kept[-1] and not kept[0]
    assert enc._memo_chars <= 12_000 and enc._memo_chars == sum(len(t) for t in enc._memo)


def test_a_follow_up_renders_the_same_ids_with_its_earlier_messages_kept(tok: Tokenizer, sp: SpecialTokens) -> None:
    first = Conversation(messages=(Message("user", text(1, 300)), Message("assistant", text(2, 300))),
                         current_date="2026-01-01")
    follow = Conversation(messages=(*first.messages, Message("user", text(3, 200))), current_date="2026-01-01")
    OrdinaryEncoder._cache.clear()  # a fresh shared encoder: nothing kept yet
    cold = render_conversation(follow, tok, sp)
    OrdinaryEncoder._cache.clear()
    render_conversation(first, tok, sp)  # the earlier request
    enc = OrdinaryEncoder.for_tokenizer(tok)
    assert all(enc.known_length(m.content) is not None for m in first.messages)
    assert render_conversation(follow, tok, sp) == cold


def test_the_size_check_counts_kept_texts_exactly(tok: Tokenizer) -> None:
    from app.api import prompt_size

    OrdinaryEncoder._cache.clear()
    seen, new = text(4, 2000), text(5, 2000)
    n_seen = len(OrdinaryEncoder.for_tokenizer(tok).encode(seen))  # rendered by an earlier request
    chunked = sum(len(e.ids) for e in tok.encode_batch(prompt_size.chunks(new), add_special_tokens=False))
    assert prompt_size.batch_count(tok, [seen, new], rendered=True) == n_seen + chunked
    assert prompt_size.batch_count(tok, [seen], rendered=True) == n_seen
    # a raw completion prompt is encoded with its special-token strings parsed: never the ordinary count
    raw = sum(len(e.ids) for e in tok.encode_batch(prompt_size.chunks(seen), add_special_tokens=False))
    assert raw != n_seen and prompt_size.batch_count(tok, [seen]) == raw

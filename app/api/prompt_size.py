"""Does a prompt fit the context? Answered without stalling the event loop.

``tokenizers``' ``encode`` holds the GIL for its whole run (a 4 MiB message: seconds during which
no other client is served), so the check goes in three steps: (1) a bound from the character
count alone: a token is at most ``max_token_chars`` characters, so a text of C characters has at
least C / max_token_chars tokens; a 15 MiB body is refused here in microseconds; (2) a short prompt
is rendered exactly on a worker thread (a few milliseconds); (3) a long one is counted with
``encode_batch`` over whitespace-aligned chunks, which releases the GIL; the count equals the
exact one except for the rare token merged across a chunk boundary, and the harmony framing is
added as a per-message allowance.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.harmony import OrdinaryEncoder
from engine.types import Conversation

if TYPE_CHECKING:
    from tokenizers import Tokenizer

EXACT_CHARS = 32_768  # below this a prompt is rendered exactly
CHUNK_CHARS = 16_384
FRAME_TOKENS_PER_MESSAGE = 12  # <|start|>role<|channel|>...<|message|>...<|end|> and the like
FRAME_TOKENS_FIXED = 160  # system message (identity, date, channels line)

_max_chars: dict[int, tuple[Any, int]] = {}
_BOUNDARY = re.compile(r"(?<=\S) (?=\S)")


def max_token_chars(tok: Tokenizer) -> int:
    """Characters in the longest vocabulary entry (byte-level BPE: one character per byte)."""
    hit = _max_chars.get(id(tok))
    if hit is None or hit[0] is not tok:
        longest = max((len(t) for t in tok.get_vocab(with_added_tokens=False)), default=1)
        hit = _max_chars[id(tok)] = (tok, max(longest, 1))
    return hit[1]


def conversation_texts(conv: Conversation) -> list[str]:
    texts: list[str] = []
    for m in conv.messages:
        texts += [m.content, m.reasoning or "", *(c.name + c.arguments for c in m.tool_calls)]
    for t in conv.tools:
        texts.append(t.name + t.description + (json.dumps(t.parameters, ensure_ascii=False) if t.parameters else ""))
    return [t for t in texts if t]


def chunks(text: str) -> list[str]:
    """Split before single spaces between non-space characters, about CHUNK_CHARS apart."""
    out: list[str] = []
    start = 0
    while len(text) - start > CHUNK_CHARS:
        m = _BOUNDARY.search(text, start + CHUNK_CHARS)
        cut = m.start() if m is not None and m.start() < start + 4 * CHUNK_CHARS else start + CHUNK_CHARS
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


def batch_count(tok: Tokenizer, texts: list[str], rendered: bool = False) -> int:
    """Tokens of ``texts`` counted in chunks. ``rendered``: the texts are a conversation's, which the renderer
    encodes as ordinary text, so those it kept (an earlier request's messages) count exactly from there."""
    enc = OrdinaryEncoder.for_tokenizer(tok) if rendered else None
    n, rest = 0, []
    for t in texts:
        known = enc.known_length(t) if enc is not None else None
        if known is None:
            rest.append(t)
        else:
            n += known
    pieces = [c for t in rest for c in chunks(t)]
    return n + sum(len(e.ids) for e in tok.encode_batch(pieces, add_special_tokens=False)) if pieces else n


def lower_bound(texts: list[str], tok: Tokenizer) -> int:
    return sum(len(t) for t in texts) // max_token_chars(tok)


def estimate_conversation(conv: Conversation, tok: Tokenizer, exact: Callable[[], int]) -> int:
    """Token count of a rendered conversation (run on a worker thread)."""
    texts = conversation_texts(conv)
    if sum(len(t) for t in texts) < EXACT_CHARS:
        return exact()
    frame = FRAME_TOKENS_FIXED + FRAME_TOKENS_PER_MESSAGE * (len(conv.messages) + 1)
    return batch_count(tok, texts, rendered=True) + frame

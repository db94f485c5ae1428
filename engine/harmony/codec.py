"""Text ↔ token helpers for harmony: ordinary encoding and UTF-8-safe incremental decoding.

Harmony encodes every text piece with ``encode_ordinary``: a special-token string such as
``<|start|>`` typed by a user must stay ordinary BPE tokens. ``tokenizers`` always splits
added-token strings out of the text (``add_special_tokens=False`` only disables the
post-processor template), so text that contains one is tokenized through the
normalizer → pre-tokenizer → model pipeline by hand, which never sees the added tokens.

Every chat request carries the whole conversation, so a follow-up re-encodes texts the last
request already encoded: 25-35 ms of a 14k-token coding conversation on the 2-core machine, on
the way to the first token. The encoder keeps the encodings of long texts it has seen (an LRU
bounded by characters), so a follow-up encodes only its new messages.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections import OrderedDict
from typing import ClassVar

from tokenizers import Tokenizer

MEMO_CHARS = 8 << 20  # characters of text whose encodings are kept (a long conversation's messages; ids as u32)
MEMO_MIN = 512  # shorter texts are cheaper to encode again than to keep


class OrdinaryEncoder:
    """Encodes text as ordinary tokens, never producing added/special token ids."""

    _cache: ClassVar[dict[int, tuple[Tokenizer, OrdinaryEncoder]]] = {}

    @classmethod
    def for_tokenizer(cls, tok: Tokenizer) -> OrdinaryEncoder:
        """A shared encoder for ``tok`` (building one scans every added token: ~10 ms with the
        real tokenizer's 1,090 specials, too much for every prompt)."""
        hit = cls._cache.get(id(tok))
        if hit is None or hit[0] is not tok:
            if len(cls._cache) >= 4:
                cls._cache.clear()
            hit = cls._cache[id(tok)] = (tok, cls(tok))
        return hit[1]

    def __init__(self, tok: Tokenizer) -> None:
        self._tok = tok
        contents = sorted({t.content for t in tok.get_added_tokens_decoder().values()}, key=len, reverse=True)
        self._added = re.compile("|".join(re.escape(c) for c in contents)) if contents else None
        self._memo: OrderedDict[str, array[int]] = OrderedDict()
        self._memo_chars = 0
        self._lock = threading.Lock()  # the API's size check and the engine's render share the encoder

    def encode(self, text: str) -> list[int]:
        """The ordinary token ids of ``text`` (a new list: the caller may change it)."""
        if len(text) < MEMO_MIN:
            return self._encode(text)
        with self._lock:
            hit = self._memo.get(text)
            if hit is not None:
                self._memo.move_to_end(text)
                return hit.tolist()
        ids = self._encode(text)
        if len(text) <= MEMO_CHARS // 4:
            with self._lock:
                if text not in self._memo:
                    self._memo[text] = array("I", ids)
                    self._memo_chars += len(text)
                    while self._memo_chars > MEMO_CHARS:
                        old, _ = self._memo.popitem(last=False)
                        self._memo_chars -= len(old)
        return ids

    def known_length(self, text: str) -> int | None:
        """How many tokens ``text`` encodes to, if its encoding is kept; else None."""
        with self._lock:
            hit = self._memo.get(text)
        return None if hit is None else len(hit)

    def _encode(self, text: str) -> list[int]:
        if not text:
            return []
        if self._added is None or self._added.search(text) is None:
            # Fast path (the common case): nothing the added-token matcher could split out.
            return list(self._tok.encode(text, add_special_tokens=False).ids)
        return self._encode_by_hand(text)

    def _encode_by_hand(self, text: str) -> list[int]:
        tok = self._tok
        if tok.normalizer is not None:
            text = tok.normalizer.normalize_str(text)
        pieces = tok.pre_tokenizer.pre_tokenize_str(text) if tok.pre_tokenizer is not None else [(text, (0, 0))]
        ids: list[int] = []
        for piece, _span in pieces:
            ids.extend(t.id for t in tok.model.tokenize(piece))
        return ids


class IncrementalDecoder:
    """Turns a stream of ordinary token ids into text deltas without splitting a UTF-8
    character across deltas (byte-level BPE tokens can end mid-character).

    Keeps a small window [prefix, read) of the last emitted tokens so each step decodes
    only a few ids: a step emits only when the decoded window grew and does not end in an
    incomplete character (U+FFFD). Deltas concatenated equal ``tok.decode(all ids)``.
    """

    def __init__(self, tok: Tokenizer) -> None:
        self._tok = tok
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    @property
    def ids(self) -> list[int]:
        return self._ids

    def _decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False) if ids else ""

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        new_text = self._decode(self._ids[self._prefix :])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._ids)
            return new_text[len(prefix_text) :]
        return ""

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character decodes as U+FFFD)."""
        if self._read == len(self._ids):
            return ""
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        new_text = self._decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return new_text[len(prefix_text) :] if new_text.startswith(prefix_text) else new_text

"""The deterministic token sequence the engine benchmarks feed as context and prompt.

It is the shipped 13k coding conversation (bench/data/coding-13k.jsonl, first request)
rendered in harmony by the engine under test, with a fixed date, repeated when a longer
sequence is asked for and cut to length. Real text routes experts the way a conversation does,
which matters for the GPU engine's residency; random ids would not. Without the request file
a seeded pseudo-random sequence over ordinary (non-special) tokens stands in, and the report
says which source was used.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from engine.session import Engine

REQUESTS_FILE = Path(__file__).resolve().parents[1] / "data" / "coding-13k.jsonl"
FIXED_DATE = "2026-01-01"  # rendering uses today's date otherwise; the sequence must not change daily


def _rendered_conversation(engine: Engine, path: Path) -> list[int]:
    from app.api.chat_request import parse_chat_request

    with path.open(encoding="utf-8") as f:
        body = json.loads(f.readline())
    req = parse_chat_request(body, context_limit=1 << 30, vocab_size=engine.config.vocab_size)
    return engine.render(replace(req.conversation, current_date=FIXED_DATE))


def _seeded_ids(engine: Engine, n: int, seed: int = 0) -> list[int]:
    vocab = engine.config.vocab_size
    special = set(engine.tokenizer.get_added_tokens_decoder())
    pool = np.array([i for i in range(vocab) if i not in special], dtype=np.int64)
    return [int(x) for x in np.random.default_rng(seed).choice(pool, size=n)]


def context_tokens(engine: Engine, n: int, path: Path = REQUESTS_FILE) -> tuple[list[int], str]:
    """``n`` token ids and a description of where they came from."""
    if n <= 0:
        return [], "empty"
    if path.is_file():
        base = _rendered_conversation(engine, path)
        reps = -(-n // len(base))
        source = f"{path.name} request 0 rendered in harmony ({len(base)} tokens"
        source += f", repeated x{reps})" if reps > 1 else ")"
        return (base * reps)[:n], source
    return _seeded_ids(engine, n), "seeded pseudo-random ordinary tokens (request set not found)"

"""Staging the next layer's experts before its routing is known ("lookahead").

A layer cannot plan its copies until its routing reaches the host, so between the end of layer
L's copies and the start of L+1's the copy engine idles for the serial part of a layer: the
CPU's results back, combine, L+1's dense work and attention, the routing sync, planning (~7 ms
x 36 layers of a 1.38 s 600-token prompt on the H200 machine, session 7). Any prompt of a few
hundred tokens uses nearly every expert of a layer (600 tokens: 19 pairs per expert on average),
so copying some of L+1's non-resident experts into spare scratch slots while layer L finishes is
almost never wasted. Layer L+1 then computes them from those slots like resident experts, and
the split plans only the rest (a shorter staging lane, a smaller CPU share).

Which experts: the ones the previous prompt used most at that layer (a conversation's routing
follows its text), else the lowest ids; the copies go in id order into consecutive slots, so
runs of consecutive experts become one 2-D copy per part (direct.plan_copies). Below
``MIN_MEAN_PAIRS`` pairs per expert too many guesses would go unused, so short prompts (fewer
than 128 tokens at 128 experts, top-4) skip it. Which slot an expert is read from changes no
bits: a GEMM tile reads one expert's bytes wherever they are (bench.gpu.direct_check compares).
"""

from __future__ import annotations

from typing import Any

import numpy as np

MIN_MEAN_PAIRS = 4.0  # uniform routing leaves an expert unused with probability ~exp(-mean): 2% at 4


def worth_it(tokens: int, topk: int, experts: int) -> bool:
    return tokens * topk >= MIN_MEAN_PAIRS * experts


def choose_ahead(table_row: np.ndarray, slots: list[int], history: np.ndarray | None = None) -> dict[int, int]:
    """Expert -> lookahead slot for one layer: non-resident experts (``table_row < 0``), those with
    the most pairs in ``history`` (the previous prompt's counts at this layer) first, ties and no
    history by id; at most one per slot, assigned in id order."""
    nonres = np.flatnonzero(np.asarray(table_row) < 0)
    if not len(slots) or not len(nonres):
        return {}
    if history is not None and len(history) == len(table_row):
        order = np.argsort(-np.asarray(history)[nonres], kind="stable")
        nonres = nonres[order]
    chosen = sorted(int(e) for e in nonres[: len(slots)])
    return dict(zip(chosen, slots, strict=False))


def with_ahead(table_row: np.ndarray, ahead: dict[int, int]) -> np.ndarray:
    """The layer's slot table with the staged-ahead experts readable from their lookahead slots."""
    if not ahead:
        return table_row
    row = np.array(table_row, copy=True)
    for e, s in ahead.items():
        row[e] = s
    return row


class Lookahead:
    """The state of one prompt: which layer's experts sit in the lookahead slots, the event after
    their copies (the compute stream waits for it before the layer's first wave) and the event
    after the last GEMM that read the slots (the copy stream waits for it before overwriting)."""

    def __init__(self, slots: list[int]) -> None:
        self.slots = slots
        self.enabled = bool(slots)
        self.layer = -1
        self.experts: dict[int, int] = {}
        self.copied: Any = None  # CUDA event: the lookahead copies are done
        self.read: Any = None  # CUDA event: the last GEMM reading a lookahead slot is done
        self.history: np.ndarray | None = None  # [layers, experts] pairs of the previous prompt
        self.active = False  # this prompt is long enough

    def begin(self, tokens: int, topk: int, experts: int, history: np.ndarray | None) -> None:
        self.layer, self.experts, self.copied = -1, {}, None
        self.active = self.enabled and worth_it(tokens, topk, experts)
        self.history = history

    def take(self, layer: int) -> dict[int, int]:
        """The experts staged ahead for ``layer`` (empty if none); forgets them."""
        got = self.experts if self.layer == layer else {}
        self.layer, self.experts = -1, {}
        return got

    def history_row(self, layer: int) -> np.ndarray | None:
        h = self.history
        return h[layer] if h is not None and layer < len(h) else None

    def reset(self) -> None:
        self.layer, self.experts, self.copied, self.read = -1, {}, None, None

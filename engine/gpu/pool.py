"""Residency bookkeeping of the VRAM expert slots (no CUDA here; the copier moves bytes).

Slots ``0 .. n_static-1`` hold the static hot set and are never evicted; the rest are
adaptive. A slot is FREE, COPYING (bytes on their way; never read, never evicted) or
RESIDENT. The slot table ``table[layer, expert] -> slot or -1`` is what the router kernel
reads (it lives in pinned host memory), so this class is the only writer and keeps one
invariant: the table points only at RESIDENT slots. An eviction clears the victim's table
entry before its slot is reused; the copier orders the copy after every GPU read issued
before that point.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

Key = tuple[int, int]  # (layer, expert)


class SlotState(IntEnum):
    FREE = 0
    COPYING = 1
    RESIDENT = 2


@dataclass
class Slot:
    index: int
    static: bool
    state: SlotState = SlotState.FREE
    key: Key | None = None


class SlotPool:
    def __init__(self, n_slots: int, n_static: int, table: np.ndarray) -> None:
        if not 0 <= n_static <= n_slots:
            raise ValueError(f"static slots {n_static} must be within the pool of {n_slots}")
        if table.dtype != np.int32 or table.ndim != 2:
            raise ValueError("slot table must be int32 [layers, experts]")
        self.table = table
        self.table[:] = -1
        self.slots = [Slot(i, i < n_static) for i in range(n_slots)]
        self.n_static = n_static
        self.where: dict[Key, int] = {}  # key -> slot, for RESIDENT and COPYING slots
        # numpy mirrors of the slots (state, layer, expert) so a victim is picked without a Python loop
        # over every slot (~0.1 ms per admission at 260 slots): the decoder picks while the GPU waits
        self._state = np.zeros(n_slots, dtype=np.int8)
        self._layer = np.zeros(n_slots, dtype=np.int64)
        self._expert = np.zeros(n_slots, dtype=np.int64)
        self._adaptive = np.arange(n_slots) >= n_static

    # ---- queries --------------------------------------------------------------------------
    @property
    def n_slots(self) -> int:
        return len(self.slots)

    def slot_of(self, key: Key) -> int:
        """Readable slot of an expert, or -1 (also -1 while its copy is in flight)."""
        return int(self.table[key])

    def is_tracked(self, key: Key) -> bool:
        """Resident or on its way."""
        return key in self.where

    def copying(self) -> list[int]:
        return [s.index for s in self.slots if s.state == SlotState.COPYING]

    def occupancy(self) -> list[tuple[int, int, int]]:
        """Per layer (static resident, adaptive resident, experts not resident)."""
        layers, experts = self.table.shape
        st = np.zeros(layers, dtype=np.int64)
        ad = np.zeros(layers, dtype=np.int64)
        for s in self.slots:
            if s.state == SlotState.RESIDENT and s.key is not None:
                (st if s.static else ad)[s.key[0]] += 1
        return [(int(a), int(b), int(experts - a - b)) for a, b in zip(st, ad, strict=True)]

    def free_slots(self, static: bool | None = None) -> list[int]:
        free = self._state == SlotState.FREE
        if static is not None:
            free &= ~self._adaptive if static else self._adaptive
        return np.flatnonzero(free).tolist()

    def _set(self, s: Slot, state: SlotState, key: Key | None) -> None:
        s.state, s.key = state, key
        self._state[s.index] = state
        if key is not None:
            self._layer[s.index], self._expert[s.index] = key

    # ---- transitions ----------------------------------------------------------------------
    def pick_victim(self, scores: np.ndarray, below: float, among: list[int] | None = None) -> int | None:
        """An adaptive slot to reuse: a free one first, else the resident adaptive slot with the
        lowest score (of the slots ``among``, when given), provided that score is below ``below``.
        COPYING slots are never picked."""
        free = self.free_slots(static=False)
        if free:
            return free[0]
        allowed = self._adaptive & (self._state == SlotState.RESIDENT)
        if among is not None:
            allowed &= np.isin(np.arange(self.n_slots), among)
        cand = np.flatnonzero(allowed)
        if cand.size == 0:
            return None
        sc = scores[self._layer[cand], self._expert[cand]]
        i = int(np.argmin(sc))  # the first of equal scores: the lowest slot index
        return int(cand[i]) if float(sc[i]) < below else None

    def begin_copy(self, slot: int, key: Key) -> Key | None:
        """Start filling ``slot`` with ``key``; returns the evicted key, if any."""
        s = self.slots[slot]
        if s.state == SlotState.COPYING:
            raise RuntimeError(f"slot {slot} has a copy in flight; it cannot be reused")
        if key in self.where:
            raise RuntimeError(f"expert {key} is already resident or on its way")
        evicted = None
        if s.state == SlotState.RESIDENT and s.key is not None:
            evicted = s.key
            self.table[evicted] = -1  # readers stop choosing this slot from now on
            del self.where[evicted]
        self._set(s, SlotState.COPYING, key)
        self.where[key] = slot
        return evicted

    def finish_copy(self, slot: int) -> Key:
        """The bytes have landed: make the slot readable."""
        s = self.slots[slot]
        if s.state != SlotState.COPYING or s.key is None:
            raise RuntimeError(f"slot {slot} has no copy in flight")
        self._set(s, SlotState.RESIDENT, s.key)
        self.table[s.key] = slot
        return s.key

    def cancel_copy(self, slot: int) -> None:
        s = self.slots[slot]
        if s.state != SlotState.COPYING or s.key is None:
            raise RuntimeError(f"slot {slot} has no copy in flight")
        del self.where[s.key]
        self._set(s, SlotState.FREE, None)

    def clear(self) -> None:
        """Forget every resident expert (copies in flight must have finished)."""
        if self.copying():
            raise RuntimeError("cannot clear the pool while copies are in flight")
        for s in self.slots:
            self._set(s, SlotState.FREE, None)
        self.where.clear()
        self.table[:] = -1

    def check(self) -> None:
        """Invariants (used by tests): the table points only at RESIDENT slots holding that key."""
        layers, experts = self.table.shape
        for layer in range(layers):
            for e in range(experts):
                slot = int(self.table[layer, e])
                if slot >= 0:
                    s = self.slots[slot]
                    assert s.state == SlotState.RESIDENT and s.key == (layer, e), (layer, e, s)
        for key, slot in self.where.items():
            assert self.slots[slot].key == key
        for s in self.slots:  # the numpy mirrors
            assert self._state[s.index] == s.state and self._adaptive[s.index] == (not s.static), s
            if s.key is not None:
                assert (self._layer[s.index], self._expert[s.index]) == s.key, s

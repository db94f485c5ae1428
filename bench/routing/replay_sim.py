"""Cache replay of an expert-routing trace: LRU admitting every miss and Belady's optimal offline
policy (MIN, with bypass), for a pool of expert slots shared by all layers or split per layer.

A trace is ``choices`` int [tokens, layers, k] (expert ids); it is replayed token by token,
layer by layer, each key being (layer, expert). The hit rate is hits / uses. Every figure this
module produces is SIMULATED: copies land at once and there are no capacity limits but the
slot count.

The loops are compiled with numba when it is installed (about 50 M accesses/s; 100k tokens of a
36-layer top-4 trace are 14.4 M accesses), else they run as plain Python (the same code, ~100x
slower: fine for tests on small traces).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])

try:  # numba compiles the two loops; without it they run as Python
    from numba import njit as _njit

    def _jit(fn: F) -> F:
        return cast(F, _njit(cache=True, nogil=True)(fn))

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - the test extra installs numba
    def _jit(fn: F) -> F:
        return fn

    HAVE_NUMBA = False


def flat_keys(choices: np.ndarray, experts: int) -> np.ndarray:
    """int64 [tokens * layers * k]: layer * experts + expert, in replay order."""
    c = np.asarray(choices, dtype=np.int64)
    if c.ndim != 3:
        raise ValueError(f"choices must be [tokens, layers, k] (got shape {c.shape})")
    layers = c.shape[1]
    return (c + (np.arange(layers, dtype=np.int64) * experts)[None, :, None]).reshape(-1)


@_jit
def _next_use(keys: np.ndarray, n_keys: int) -> np.ndarray:
    n = len(keys)
    nxt = np.empty(n, dtype=np.int64)
    seen = np.full(n_keys, n, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        nxt[i] = seen[keys[i]]
        seen[keys[i]] = i
    return nxt


def next_use(keys: np.ndarray) -> np.ndarray:
    """For every access, the index of the next access to the same key (len(keys) if none)."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    return np.asarray(_next_use(keys, int(keys.max(initial=-1)) + 1))


@_jit
def _lru_hits(keys: np.ndarray, n_keys: int, capacity: int, count_from: int) -> int:
    # doubly linked list of resident keys, most recent at head; -1 = none
    prev = np.full(n_keys, -1, dtype=np.int64)
    nxt = np.full(n_keys, -1, dtype=np.int64)
    resident = np.zeros(n_keys, dtype=np.bool_)
    head = -1
    tail = -1
    size = 0
    hits = 0
    for i in range(len(keys)):
        k = keys[i]
        if resident[k]:
            hits += i >= count_from
            if k == head:
                continue
            p, q = prev[k], nxt[k]  # unlink (k is not head, so p >= 0)
            nxt[p] = q
            if q >= 0:
                prev[q] = p
            else:
                tail = p
        else:
            if capacity == 0:
                continue
            if size == capacity:  # evict the least recent
                t = tail
                tail = prev[t]
                if tail >= 0:
                    nxt[tail] = -1
                else:
                    head = -1
                resident[t] = False
                size -= 1
            resident[k] = True
            size += 1
        prev[k] = -1
        nxt[k] = head
        if head >= 0:
            prev[head] = k
        head = k
        if tail < 0:
            tail = k
    return hits


@_jit
def _sift_down(heap_t: np.ndarray, heap_k: np.ndarray, j: int, hn: int) -> None:
    # restore the max-heap order below entry j of the first hn entries (by next use)
    while True:
        c = 2 * j + 1
        if c >= hn:
            break
        if c + 1 < hn and heap_t[c + 1] > heap_t[c]:
            c += 1
        if heap_t[c] <= heap_t[j]:
            break
        heap_t[j], heap_t[c] = heap_t[c], heap_t[j]
        heap_k[j], heap_k[c] = heap_k[c], heap_k[j]
        j = c


@_jit
def _belady_hits(keys: np.ndarray, nxt: np.ndarray, n_keys: int, capacity: int, count_from: int) -> int:
    # MIN with bypass: on a miss with a full pool, drop whichever of (the pool + the new key) is
    # used farthest in the future. A binary max-heap of (next use, key) with lazy deletion: an
    # entry is live while it equals the key's current next use.
    n = len(keys)
    cur = np.full(n_keys, -1, dtype=np.int64)  # next use of a resident key, -1 = not resident
    heap_t = np.empty(n + 1, dtype=np.int64)
    heap_k = np.empty(n + 1, dtype=np.int64)
    hn = 0
    size = 0
    hits = 0
    for i in range(n):
        k = keys[i]
        t = nxt[i]
        if cur[k] >= 0:
            hits += i >= count_from
        elif capacity == 0:
            continue
        elif size < capacity:
            size += 1
        else:
            # pop stale entries until the top is live
            while True:
                top_t, top_k = heap_t[0], heap_k[0]
                if cur[top_k] == top_t:
                    break
                hn -= 1
                heap_t[0], heap_k[0] = heap_t[hn], heap_k[hn]
                _sift_down(heap_t, heap_k, 0, hn)
            if top_t <= t:  # the new key is needed last: bypass it
                continue
            cur[top_k] = -1  # evict the top (its heap entry is now stale)
        cur[k] = t
        heap_t[hn], heap_k[hn] = t, k  # push
        j = hn
        hn += 1
        while j > 0:
            p = (j - 1) // 2
            if heap_t[p] >= heap_t[j]:
                break
            heap_t[j], heap_t[p] = heap_t[p], heap_t[j]
            heap_k[j], heap_k[p] = heap_k[p], heap_k[j]
            j = p
        if hn > 4 * capacity + 64:  # compact: keep only live entries (one per resident key)
            m = 0
            for q in range(hn):
                if cur[heap_k[q]] == heap_t[q]:
                    heap_t[m], heap_k[m] = heap_t[q], heap_k[q]
                    m += 1
            hn = m
            for s in range(hn // 2 - 1, -1, -1):  # heapify
                _sift_down(heap_t, heap_k, s, hn)
    return hits


def lru_hits(keys: np.ndarray, capacity: int, count_from: int = 0) -> int:
    """Hits of an LRU pool of ``capacity`` admitting every miss, counted from access
    ``count_from`` on (the earlier accesses warm the pool)."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0 (got {capacity})")
    return int(_lru_hits(keys, int(keys.max(initial=-1)) + 1, int(capacity), int(count_from)))


def belady_hits(keys: np.ndarray, capacity: int, count_from: int = 0) -> int:
    """Hits of Belady's MIN (with bypass) over the whole sequence, counted from ``count_from`` on."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0 (got {capacity})")
    return int(_belady_hits(keys, next_use(keys), int(keys.max(initial=-1)) + 1, int(capacity), int(count_from)))


def split_per_layer(slots: int, layers: int) -> list[int]:
    """``slots`` dealt to ``layers`` as evenly as possible (the first layers get the remainder)."""
    base, extra = divmod(slots, layers)
    return [base + (i < extra) for i in range(layers)]


@dataclass(frozen=True)
class CacheRates:
    """Hit rates of one trace at one slot count (SIMULATED)."""

    slots: int
    uses: int
    lru: float
    belady: float
    split: str  # "global" (one pool for all layers) or "per-layer" (split_per_layer)


def cache_rates(choices: np.ndarray, experts: int, slots: int, per_layer: bool = False) -> CacheRates:
    """LRU and Belady hit rates of ``choices`` [tokens, layers, k] with ``slots`` slots: one pool
    shared by all layers (the engine's SlotPool), or ``per_layer`` quotas from split_per_layer."""
    c = np.asarray(choices)
    uses = c.size
    if not per_layer:
        keys = flat_keys(c, experts)
        return CacheRates(slots, uses, lru_hits(keys, slots) / uses, belady_hits(keys, slots) / uses, "global")
    lru = bel = 0
    for layer, cap in enumerate(split_per_layer(slots, c.shape[1])):
        keys = np.ascontiguousarray(c[:, layer].reshape(-1), dtype=np.int64)
        lru += lru_hits(keys, cap)
        bel += belady_hits(keys, cap)
    return CacheRates(slots, uses, lru / uses, bel / uses, "per-layer")

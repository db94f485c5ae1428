"""bench.routing.replay_sim: LRU and Belady (MIN with bypass) against brute force on tiny traces."""

from __future__ import annotations

from collections import OrderedDict
from functools import cache

import numpy as np
import pytest

from bench.routing.replay_sim import (
    belady_hits,
    cache_rates,
    flat_keys,
    lru_hits,
    next_use,
    split_per_layer,
)


def lru_reference(keys: list[int], cap: int, count_from: int = 0) -> int:
    pool: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for i, k in enumerate(keys):
        if k in pool:
            hits += i >= count_from
            pool.move_to_end(k)
        elif cap:
            if len(pool) == cap:
                pool.popitem(last=False)
            pool[k] = None
    return hits


def optimal_hits(keys: list[int], cap: int) -> int:
    """Brute force: the most hits any policy reaches, trying every choice on every miss (keep the
    pool, or admit into a free slot or in place of any resident key)."""

    @cache
    def best(i: int, pool: frozenset[int]) -> int:
        if i == len(keys):
            return 0
        k = keys[i]
        if k in pool:
            return 1 + best(i + 1, pool)
        options = [best(i + 1, pool)]  # bypass
        if len(pool) < cap:
            options.append(best(i + 1, pool | {k}))
        else:
            options += [best(i + 1, (pool - {v}) | {k}) for v in pool]
        return max(options)

    return best(0, frozenset())


def test_belady_equals_brute_force_on_tiny_traces():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(150):
        n_keys = int(rng.integers(2, 7))
        length = int(rng.integers(1, 13))
        cap = int(rng.integers(0, 4))
        # skewed draws make reuse (and so the choice of victim) matter
        p = rng.dirichlet(np.full(n_keys, 0.7))
        keys = rng.choice(n_keys, length, p=p).tolist()
        want = optimal_hits(keys, cap)
        assert belady_hits(np.array(keys), cap) == want, (keys, cap)
        checked += want > lru_reference(keys, cap)
    assert checked > 15  # many traces where the optimum beats LRU, so the check has teeth


def test_belady_is_not_lru():
    # LRU with 2 slots thrashes on a cyclic pattern over 3 keys; MIN keeps one key for good
    keys = np.array([0, 1, 2] * 5)
    assert lru_hits(keys, 2) == 0
    assert belady_hits(keys, 2) == optimal_hits(keys.tolist(), 2) == 8


def test_lru_equals_reference_on_random_traces():
    rng = np.random.default_rng(1)
    for _ in range(50):
        keys = rng.integers(0, 40, 400)
        cap = int(rng.integers(0, 30))
        start = int(rng.integers(0, 400))
        assert lru_hits(keys, cap, start) == lru_reference(keys.tolist(), cap, start)


def test_heap_compaction_keeps_belady_exact():
    """Long traces with a small pool go through the heap's compaction many times; hits are
    counted from access 5000 on (the run is the whole trace's)."""
    rng = np.random.default_rng(2)
    keys = (rng.zipf(1.3, 20000) % 50).astype(np.int64)
    hits = belady_hits(keys, 3, 5000)
    # exact reference: MIN simulated with a linear scan for the farthest next use
    nxt = next_use(keys)
    pool: dict[int, int] = {}
    want = 0
    for i, k in enumerate(keys.tolist()):
        if k in pool:
            want += i >= 5000
        elif len(pool) == 3:
            far = max(pool, key=pool.__getitem__)
            if pool[far] <= nxt[i]:
                continue
            del pool[far]
        pool[k] = int(nxt[i])
    assert hits == want


def test_next_use_and_flat_keys():
    assert next_use(np.array([3, 1, 3, 3, 1])).tolist() == [2, 4, 3, 5, 5]
    c = np.array([[[0, 1], [1, 2]], [[1, 3], [0, 2]]])  # [tokens, layers, k]
    assert flat_keys(c, 4).tolist() == [0, 1, 5, 6, 1, 3, 4, 6]
    with pytest.raises(ValueError, match="tokens, layers, k"):
        flat_keys(np.zeros((2, 3)), 4)
    with pytest.raises(ValueError, match="capacity"):
        lru_hits(np.array([1]), -1)


def test_split_per_layer_and_cache_rates():
    assert split_per_layer(430, 36) == [12] * 34 + [11] * 2
    assert sum(split_per_layer(548, 36)) == 548
    rng = np.random.default_rng(3)
    c = rng.integers(0, 8, (300, 3, 2))
    g, p = cache_rates(c, 8, 6), cache_rates(c, 8, 6, per_layer=True)
    keys = flat_keys(c, 8)
    assert g.lru == lru_hits(keys, 6) / c.size and g.belady == belady_hits(keys, 6) / c.size
    per_layer = sum(lru_hits(c[:, i].reshape(-1), 2) for i in range(3))
    assert p.lru == per_layer / c.size and p.split == "per-layer"
    assert 0 < g.lru <= g.belady <= 1

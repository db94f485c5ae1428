"""The CPU engine's K/V cache: appends in place, truncation by views, copies where they must be."""

from __future__ import annotations

import torch

from engine.reference import KVCache


def _kv(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, n, 8, generator=g).to(torch.bfloat16), torch.randn(2, n, 8, generator=g).to(torch.bfloat16))


def test_appends_equal_concatenation_and_reuse_the_buffer() -> None:
    empty = torch.zeros(2, 0, 8, dtype=torch.bfloat16)
    cache = KVCache([empty], [empty])
    ks, vs = [], []
    ptrs = set()
    for step, n in enumerate((5, 1, 1, 30, 1, 100)):
        k, v = _kv(n, step)
        ks.append(k), vs.append(v)
        k_all, v_all = cache.append(0, k, v)
        assert torch.equal(k_all, torch.cat(ks, dim=1)) and torch.equal(v_all, torch.cat(vs, dim=1))
        assert cache.keys[0] is k_all and cache.length == sum(t.shape[1] for t in ks)
        ptrs.add(k_all.data_ptr())
    assert len(ptrs) < 6  # grown by doubling, not copied at every append


def test_truncate_then_append_overwrites_only_the_cut_part() -> None:
    empty = torch.zeros(2, 0, 8, dtype=torch.bfloat16)
    cache = KVCache([empty], [empty])
    a, b, c = _kv(40, 1), _kv(10, 2), _kv(7, 3)
    cache.append(0, *a)
    cache.append(0, *b)
    kept = cache.clone()
    cache.truncate(40)
    k_all, v_all = cache.append(0, *c)
    assert torch.equal(k_all, torch.cat((a[0], c[0]), dim=1)) and torch.equal(v_all, torch.cat((a[1], c[1]), dim=1))
    # the clone taken before is a copy: the in-place append did not reach it
    assert torch.equal(kept.keys[0], torch.cat((a[0], b[0]), dim=1))


def test_a_replaced_tensor_starts_a_new_buffer() -> None:
    empty = torch.zeros(2, 0, 8, dtype=torch.bfloat16)
    cache = KVCache([empty], [empty])
    cache.append(0, *_kv(4, 1))
    loaded = _kv(6, 2)
    cache.keys[0], cache.values[0] = loaded[0].clone(), loaded[1].clone()  # as load_state_tensors does
    k_all, _ = cache.append(0, *_kv(1, 3))
    assert torch.equal(k_all[:, :6], loaded[0]) and k_all.shape[1] == 7

"""neural_expert_groups: several experts' token groups in one call (the prompt path's per-expert
loop without a Python round trip each) give the bits of one neural_expert_tokens call per group,
on every ISA path, groups of 0, 1, 2-16, more than 16 and more than NEURAL_MAX_TOKENS (256)."""

from __future__ import annotations

from typing import Any

import native_refimpl as R
import numpy as np
import pytest
from native_helpers import ALPHA, ISAS, LIMIT, MODES, isa_or_skip, make_experts

from native.kernel import NativeKernel

NEURAL_MAX_TOKENS = 256  # neural_experts.h


def f32p(k: NativeKernel, a: np.ndarray) -> Any:
    return k.ffi.cast("float *", k.ffi.from_buffer(a))


def groups(k: NativeKernel, ex: Any, counts: list[int], x: np.ndarray, w: np.ndarray) -> tuple[int, np.ndarray]:
    out = np.full(x.shape, np.nan, np.float32)
    refs = k.ffi.new("neural_expert *[]", [r.cdata for r in ex.refs])
    c = np.asarray(counts, np.int32)
    rc = k.lib.neural_expert_groups(ex.shape, refs, k.ffi.cast("int32_t *", k.ffi.from_buffer(c)), len(counts),
                                    f32p(k, x), f32p(k, w), f32p(k, out))
    return int(rc), out


def one_by_one(k: NativeKernel, ex: Any, counts: list[int], x: np.ndarray, w: np.ndarray) -> np.ndarray:
    out = np.full(x.shape, np.nan, np.float32)
    row = 0
    for ref, n in zip(ex.refs, counts, strict=True):
        for s in range(0, n, NEURAL_MAX_TOKENS):
            m = min(NEURAL_MAX_TOKENS, n - s)
            a, b = row + s, row + s + m
            assert k.lib.neural_expert_tokens(ex.shape, ref.cdata, m, f32p(k, x[a:b]), f32p(k, w[a:b]),
                                              f32p(k, out[a:b])) == 0
        row += n
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("isa", ISAS)
def test_groups_equal_one_call_per_group(kernel: NativeKernel, isa: str, mode: str) -> None:
    isa_or_skip(kernel, isa)
    rng = np.random.default_rng(51)
    counts = [5, 0, 1, 19, 300]
    parts = [R.random_expert(rng, 96, 64) for _ in counts]
    ex = make_experts(kernel, parts, "packed", bf16=MODES[mode])
    x = rng.standard_normal((sum(counts), 96)).astype(np.float32)
    w = rng.random(sum(counts)).astype(np.float32)
    kernel.set_threads(2)
    rc, got = groups(kernel, ex, counts, x, w)
    assert rc == 0
    assert R.bits_equal(got, one_by_one(kernel, ex, counts, x, w))
    # and the first group against the same-order fp32 reference
    want = np.stack([R.moe32([parts[0]], w[t : t + 1], x[t], LIMIT, ALPHA, MODES[mode]) for t in range(5)])
    assert R.bits_equal(got[:5], want)


def test_groups_bad_input(kernel: NativeKernel) -> None:
    rng = np.random.default_rng(52)
    ex = make_experts(kernel, [R.random_expert(rng, 64, 64)], "raw")
    x = rng.standard_normal((3, 64)).astype(np.float32)
    w = np.ones(3, np.float32)
    assert groups(kernel, ex, [-1], x, w)[0] == -1  # NEURAL_EINVAL: a negative count
    assert groups(kernel, ex, [3], x, w)[0] == 0

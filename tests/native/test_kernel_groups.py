"""native/kernel.py's faces of the multi-token calls: MAX_TOKENS is the header's NEURAL_MAX_TOKENS,
expert_tokens takes up to that many tokens in one call, and expert_groups gives the bits of one
expert_tokens call per group (in pieces of MAX_TOKENS) and rejects bad input with a clear error."""

from __future__ import annotations

import re
from pathlib import Path

import native_refimpl as R
import numpy as np
import pytest
from native_helpers import Experts, make_experts

from native.kernel import MAX_TOKENS, NativeKernel

HEADER = Path(__file__).resolve().parents[2] / "native" / "neural_experts.h"


def test_max_tokens_is_the_headers() -> None:
    m = re.search(r"^#define NEURAL_MAX_TOKENS (\d+)$", HEADER.read_text(), re.M)
    assert m is not None, "NEURAL_MAX_TOKENS not found in neural_experts.h"
    assert int(m.group(1)) == MAX_TOKENS


def one_call_per_group(k: NativeKernel, ex: Experts, counts: list[int], x: np.ndarray,
                       w: np.ndarray) -> np.ndarray:
    out = np.full(x.shape, np.nan, np.float32)
    row = 0
    for ref, n in zip(ex.refs, counts, strict=True):
        for s in range(row, row + n, MAX_TOKENS):
            e = min(s + MAX_TOKENS, row + n)
            k.expert_tokens(ex.shape, ref, x[s:e], w[s:e], out[s:e])
        row += n
    return out


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_expert_groups_equal_expert_tokens_per_group(kernel: NativeKernel, threads: int) -> None:
    rng = np.random.default_rng(61)
    counts = [3, 0, 17, 1, MAX_TOKENS + 5]  # empty, one, more than 16, more than one kernel call
    parts = [R.random_expert(rng, 96, 64) for _ in counts]
    ex = make_experts(kernel, parts, "packed", bf16=True)
    x = rng.standard_normal((sum(counts), 96)).astype(np.float32)
    w = rng.random(sum(counts)).astype(np.float32)
    kernel.set_threads(threads)
    got = np.full_like(x, np.nan)
    kernel.expert_groups(ex.shape, ex.refs, np.asarray(counts, np.int32), x, w, got)
    want = one_call_per_group(kernel, ex, counts, x, w)
    assert R.bits_equal(got, want)
    one = np.full_like(x, np.nan)  # and a whole 256-token group through expert_tokens in one call
    kernel.expert_tokens(ex.shape, ex.refs[4], x[21 : 21 + MAX_TOKENS], w[21 : 21 + MAX_TOKENS],
                         one[21 : 21 + MAX_TOKENS])
    assert R.bits_equal(one[21 : 21 + MAX_TOKENS], got[21 : 21 + MAX_TOKENS])


def test_expert_groups_of_nothing(kernel: NativeKernel) -> None:
    ex = make_experts(kernel, [R.random_expert(np.random.default_rng(62), 64, 64)], "raw")
    empty = np.zeros((0, 64), np.float32)
    kernel.expert_groups(ex.shape, [], np.zeros(0, np.int32), empty, np.zeros(0, np.float32), empty.copy())
    kernel.expert_groups(ex.shape, ex.refs, np.zeros(1, np.int32), empty, np.zeros(0, np.float32), empty.copy())


def test_expert_groups_bad_input(kernel: NativeKernel) -> None:
    rng = np.random.default_rng(63)
    ex = make_experts(kernel, [R.random_expert(rng, 64, 64) for _ in range(2)], "raw")
    x = rng.standard_normal((5, 64)).astype(np.float32)
    w, out = np.ones(5, np.float32), np.empty((5, 64), np.float32)
    c = np.array([2, 3], np.int32)
    bad: list[tuple[dict[str, object], str]] = [
        ({"counts": [2, 3]}, "1-D int32 array"),
        ({"counts": c.astype(np.int64)}, "1-D int32 array"),
        ({"counts": c[:1]}, "2 experts but 1 counts"),
        ({"counts": np.array([6, -1], np.int32)}, "counts must be >= 0"),
        ({"counts": np.array([2, 2], np.int32)}, r"x must be \[4 \(sum of counts\), 64\]"),
        ({"x": x[:, :32].copy()}, "x must be a C-contiguous float32 array of shape \\(5, 64\\)"),
        ({"x": x.astype(np.float64)}, "x must be a C-contiguous float32"),
        ({"weights": w[:4]}, "weights must be a C-contiguous float32 array of shape \\(5,\\)"),
        ({"out": out[:, ::2]}, "out must be a C-contiguous"),
    ]
    for change, msg in bad:
        args: dict[str, object] = {"counts": c, "x": x, "weights": w, "out": out, **change}
        with pytest.raises(ValueError, match=msg):
            kernel.expert_groups(ex.shape, ex.refs, **args)  # type: ignore[arg-type]
    ro = out.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out must be writable"):
        kernel.expert_groups(ex.shape, ex.refs, c, x, w, ro)
    with pytest.raises(ValueError, match=r"tokens<= 256"):
        kernel.expert_tokens(ex.shape, ex.refs[0], np.zeros((MAX_TOKENS + 1, 64), np.float32),
                             np.zeros(MAX_TOKENS + 1, np.float32), np.zeros((MAX_TOKENS + 1, 64), np.float32))

"""Groups of more than 16 tokens in one multi-token call (every token routed to an expert in one
pass over its bytes): bit for bit the same-order fp32 reference on every ISA path and several
thread counts, rows longer than one decode segment (NEURAL_TOK_SEG = 128 blocks), and the limit.

The C entry point is called through cffi directly, below native/kernel.py's wrapper (whose
MAX_TOKENS matches NEURAL_MAX_TOKENS = 256: tests/native/test_kernel_groups.py checks it)."""

from __future__ import annotations

from functools import cache
from typing import Any

import native_refimpl as R
import numpy as np
import pytest
from native_helpers import ALPHA, ISAS, LIMIT, MODES, isa_or_skip, make_experts

from native.kernel import NativeKernel

NEURAL_MAX_TOKENS = 256  # neural_experts.h
NEURAL_EINVAL = -1


def call(k: NativeKernel, ex: Any, x: np.ndarray, w: np.ndarray) -> tuple[int, np.ndarray]:
    out = np.full(x.shape, np.nan, np.float32)
    f = k.ffi.cast
    rc = k.lib.neural_expert_tokens(ex.shape, ex.refs[0].cdata, int(x.shape[0]), f("float *", k.ffi.from_buffer(x)),
                                    f("float *", k.ffi.from_buffer(w)), f("float *", k.ffi.from_buffer(out)))
    return int(rc), out


def reference(parts: dict[str, np.ndarray], x: np.ndarray, w: np.ndarray, bf16: bool) -> np.ndarray:
    return np.stack([R.moe32([parts], w[t : t + 1], x[t], LIMIT, ALPHA, bf16) for t in range(x.shape[0])])


@cache
def case(bf16: bool) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """4160-wide rows: 130 blocks, two decode segments; 40 tokens; the reference once per mode."""
    rng = np.random.default_rng(41)
    parts = R.random_expert(rng, 4160, 64)
    x = rng.standard_normal((40, 4160)).astype(np.float32)
    w = rng.random(40).astype(np.float32)
    return parts, x, w, reference(parts, x, w, bf16)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("isa", ISAS)
def test_large_groups_match_reference(kernel: NativeKernel, isa: str, mode: str) -> None:
    """17 (tiles of 4,4,3,3,3), 33 and 40 tokens, packed records."""
    isa_or_skip(kernel, isa)
    bf16 = MODES[mode]
    parts, x, w, want = case(bf16)
    ex = make_experts(kernel, [parts], "packed", bf16=bf16)
    for ntok, threads in ((17, 1), (33, 3), (40, 2)):
        kernel.set_threads(threads)
        rc, got = call(kernel, ex, x[:ntok], w[:ntok])
        assert rc == 0
        assert R.bits_equal(got, want[:ntok]), (ntok, threads)


def test_large_group_equals_groups_of_16(kernel: NativeKernel) -> None:
    """One call of 150 tokens gives the bits of calls of 16 (the grouping never changes a result)."""
    rng = np.random.default_rng(42)
    parts = R.random_expert(rng, 2880, 64)
    for bf16 in MODES.values():
        ex = make_experts(kernel, [parts], "raw", bf16=bf16)
        x = rng.standard_normal((150, 2880)).astype(np.float32)
        w = rng.random(150).astype(np.float32)
        rc, whole = call(kernel, ex, x, w)
        assert rc == 0
        parts16 = [call(kernel, ex, x[s : s + 16], w[s : s + 16]) for s in range(0, 150, 16)]
        assert all(r == 0 for r, _ in parts16)
        assert R.bits_equal(whole, np.concatenate([o for _, o in parts16]))


def test_token_limit(kernel: NativeKernel) -> None:
    rng = np.random.default_rng(43)
    ex = make_experts(kernel, [R.random_expert(rng, 64, 64)], "raw")
    x = rng.standard_normal((NEURAL_MAX_TOKENS + 1, 64)).astype(np.float32)
    w = np.ones(NEURAL_MAX_TOKENS + 1, np.float32)
    assert call(kernel, ex, x[:NEURAL_MAX_TOKENS], w[:NEURAL_MAX_TOKENS])[0] == 0
    assert call(kernel, ex, x, w)[0] == NEURAL_EINVAL

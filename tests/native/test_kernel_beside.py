"""moe_token_beside (neural_moe_token_begin / _end): the worker threads compute a token while the caller does its own
work, and the caller joins them after. The same bits as moe_token whenever the caller joins, on every ISA and
thread count; an exception in the caller's block still releases the kernel."""

from __future__ import annotations

import time

import native_refimpl as R
import numpy as np
import pytest
from native_helpers import ALPHA, ISAS, LIMIT, MODES, isa_or_skip, make_experts

from native.kernel import NativeKernel

H, INTER = 512, 512  # 1 to 4 chunks per expert at these thread counts (as test_native_threads.py)


@pytest.fixture(scope="module")
def parts() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(31)
    return [R.random_expert(rng, H, INTER, scale_lo=118, scale_hi=127) for _ in range(3)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("isa", ISAS)
def test_same_bits_as_moe_token_whenever_the_caller_joins(kernel: NativeKernel, parts, isa: str, mode: str) -> None:
    isa_or_skip(kernel, isa)
    bf16 = MODES[mode]
    ex = make_experts(kernel, parts, "raw", bf16=bf16)
    rng = np.random.default_rng(5)
    x0 = rng.standard_normal(H).astype(np.float32)
    x = x0.copy()
    w = np.array([0.5, 0.3, 0.2], np.float32)
    for threads in (1, 2, 3, 5):
        kernel.set_threads(threads)
        want = np.full(H, np.nan, np.float32)
        kernel.moe_token(ex.shape, ex.refs, w, x, want)
        # a pause far longer than the work (scalar ~8 ms, the vector paths < 0.5 ms on the 2-core VM, MEASURED): the
        # workers take every unit before the caller joins
        for pause in (0.0, 0.2 if isa == "scalar" else 0.02):
            got = np.full(H, np.nan, np.float32)
            t0 = time.perf_counter()
            with kernel.moe_token_beside(ex.shape, ex.refs, w, x, got) as span:
                x[:] = 0  # x was read at the start: the caller may reuse its buffer
                time.sleep(pause)
            elapsed = time.perf_counter() - t0
            x[:] = x0
            assert R.bits_equal(got, want), (threads, pause)
            # the span is the work's, not the block's: the pause is not in it
            assert 0 < span.seconds <= elapsed
            if pause:
                assert span.seconds < pause / 2, (threads, span.seconds)
    if isa == "scalar":
        assert R.bits_equal(want, R.moe32(parts, w, x, LIMIT, ALPHA, bf16))


def test_an_exception_in_the_block_releases_the_kernel(kernel: NativeKernel, parts) -> None:
    kernel.set_threads(3)
    ex = make_experts(kernel, parts, "raw", bf16=True)
    x = np.random.default_rng(1).standard_normal(H).astype(np.float32)
    w = np.array([0.6, 0.3, 0.1], np.float32)
    want = np.empty(H, np.float32)
    kernel.moe_token(ex.shape, ex.refs, w, x, want)
    got = np.full(H, np.nan, np.float32)
    with pytest.raises(RuntimeError, match="in the block"), kernel.moe_token_beside(ex.shape, ex.refs, w, x, got):
        raise RuntimeError("in the block")
    assert R.bits_equal(got, want)  # joined on the way out
    again = np.empty(H, np.float32)
    kernel.moe_token(ex.shape, ex.refs, w, x, again)  # would wait forever if the lock were still held
    assert R.bits_equal(again, want)


def test_bad_arguments_and_an_end_without_a_begin(kernel: NativeKernel, parts) -> None:
    ex = make_experts(kernel, parts, "raw", bf16=True)
    x = np.zeros(H, np.float32)
    bad_out = kernel.moe_token_beside(ex.shape, ex.refs, np.ones(3, np.float32), x, np.zeros(H, np.float64))
    with pytest.raises(ValueError, match="out must be a C-contiguous float32"), bad_out:
        pass
    no_experts = kernel.moe_token_beside(ex.shape, [], np.ones(0, np.float32), x, np.zeros(H, np.float32))
    with pytest.raises(ValueError, match="experts per call"), no_experts:
        pass
    assert kernel.lib.neural_moe_token_end(kernel.ffi.NULL) != 0  # nothing begun: refused, and no lock released
    out = np.empty(H, np.float32)
    kernel.moe_token(ex.shape, ex.refs, np.ones(3, np.float32), x, out)  # the kernel still works
    assert np.isfinite(out).all()

"""neural_linear_bf16 (the CPU engine's one-token bf16 projections) against the same-order fp32
reference, bit for bit, on every ISA path and thread count, with and without a bias; neural_linear_bf16_n
(several matrices over one x in one pass of the team) against the reference too."""

from __future__ import annotations

import native_refimpl as R
import numpy as np
import pytest
from native_helpers import ISAS, isa_or_skip

from native.kernel import KernelError, NativeKernel


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bits, nearest even (the model's weights as stored)."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)


def reference(w: np.ndarray, x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """4 accumulators of 16 lanes, column j in accumulator (j // 16) % 4, lane j % 16, one fma each from +0; then
    (a0 + a1) + (a2 + a3) per lane, the tree, + bias."""
    wf = R.bf16_to_f32(w)
    acc = np.zeros((4, w.shape[0], 16), np.float32)
    for c in range(0, w.shape[1], 16):
        k = (c // 16) % 4
        acc[k] = R.fma32(wf[:, c : c + 16], np.broadcast_to(x[c : c + 16], acc[k].shape), acc[k])
    out = R.reduce16(((acc[0] + acc[1]) + (acc[2] + acc[3])).astype(np.float32))
    return out if bias is None else (out + R.bf16_to_f32(bias)).astype(np.float32)


def case(rows: int, cols: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = bf16_bits(rng.standard_normal((rows, cols)) * 0.05)
    bias = bf16_bits(rng.standard_normal(rows))
    x = R.bf16_to_f32(bf16_bits(rng.standard_normal(cols)))  # an activation, bf16-exact as in the model
    return w, bias, x


@pytest.mark.parametrize("isa", ISAS)
def test_linear_matches_reference_bit_for_bit(kernel: NativeKernel, isa: str) -> None:
    isa_or_skip(kernel, isa)
    # tails of 1-3 rows; a last chunk shorter than 64 rows; rows ending 16, 32 or 48 columns past 64; up to 8 threads
    for rows, cols, threads in ((131, 2880, 2), (7, 64, 1), (3, 16, 3), (64, 4096, 2), (128, 2880, 8), (301, 64, 5),
                                (5, 32, 1), (9, 112, 2), (6, 176, 1)):
        kernel.set_threads(threads)
        w, bias, x = case(rows, cols, rows)
        for b in (bias, None):
            got = kernel.linear_bf16(w, rows, cols, x, b)
            assert np.array_equal(got.view(np.uint32), reference(w, x, b).view(np.uint32)), (rows, cols, b is None)


def test_isa_paths_agree(kernel: NativeKernel) -> None:
    w, bias, x = case(200, 2880, 7)
    outs = {}
    for isa in kernel.available_isas():
        kernel.set_isa(isa)
        outs[isa] = kernel.linear_bf16(w, 200, 2880, x, bias)
    first = next(iter(outs.values()))
    assert all(np.array_equal(o.view(np.uint32), first.view(np.uint32)) for o in outs.values()), list(outs)


def test_bad_arguments_are_refused(kernel: NativeKernel) -> None:
    w, bias, x = case(8, 48, 1)
    with pytest.raises(KernelError):
        kernel.linear_bf16(w.reshape(-1)[: 8 * 40].copy(), 8, 40, x[:40])  # columns not a multiple of 16
    with pytest.raises(ValueError, match="w must hold"):
        kernel.linear_bf16(w, 9, 48, x)
    with pytest.raises(ValueError, match="bias must hold"):
        kernel.linear_bf16(w, 8, 48, x, bias[:4].copy())
    with pytest.raises(ValueError, match="x has shape"):
        kernel.linear_bf16(w, 8, 48, x[:32])


@pytest.mark.parametrize("isa", ISAS)
def test_several_matrices_in_one_call_match_the_reference_bit_for_bit(kernel: NativeKernel, isa: str) -> None:
    """q, k and v of a decode token in one call: each matrix gets the reference's bits, whatever its chunk count
    (1 row, a partial 64-row chunk, several chunks), with and without biases, at 1 to 8 threads."""
    isa_or_skip(kernel, isa)
    rng = np.random.default_rng(5)
    x = R.bf16_to_f32(bf16_bits(rng.standard_normal(2880)))
    mats = [bf16_bits(rng.standard_normal((rows, 2880)) * 0.05) for rows in (300, 1, 64, 7)]
    biases = [bf16_bits(rng.standard_normal(m.shape[0])) for m in mats]
    biases[2] = None  # type: ignore[call-overload]
    for threads in (1, 2, 3, 8):
        kernel.set_threads(threads)
        got = kernel.linear_bf16_n(mats, biases, [m.shape[0] for m in mats], 2880, x)
        for m, b, g in zip(mats, biases, got, strict=True):
            assert np.array_equal(g.view(np.uint32), reference(m, x, b).view(np.uint32)), (m.shape, threads)


def test_several_matrices_bad_arguments_are_refused(kernel: NativeKernel) -> None:
    w, bias, x = case(8, 48, 1)
    with pytest.raises(ValueError, match="1 to 8 matrices"):
        kernel.linear_bf16_n([], [], [], 48, x)
    with pytest.raises(ValueError, match="1 to 8 matrices"):
        kernel.linear_bf16_n([w] * 9, [None] * 9, [8] * 9, 48, x)
    with pytest.raises(ValueError, match="1 to 8 matrices"):
        kernel.linear_bf16_n([w, w], [None], [8, 8], 48, x)
    with pytest.raises(ValueError, match=r"w\[1\] must hold"):
        kernel.linear_bf16_n([w, w], [None, None], [8, 9], 48, x)
    with pytest.raises(ValueError, match=r"bias\[0\] must hold"):
        kernel.linear_bf16_n([w], [bias[:4].copy()], [8], 48, x)
    with pytest.raises(KernelError):
        kernel.linear_bf16_n([w.reshape(-1)[: 8 * 40].copy()], [None], [8], 40, x[:40])  # columns not a multiple of 16


@pytest.mark.parametrize("isa", ISAS)
def test_bf16_in_and_out_is_the_fp32_call_rounded_once(kernel: NativeKernel, isa: str) -> None:
    """neural_linear_bf16_nb: x given as bf16 bits, outputs as bf16 bits, each the fp32 call's output rounded to
    nearest even with no flush to zero (as PyTorch's .to(bfloat16) rounds it), at 1 to 3 threads."""
    isa_or_skip(kernel, isa)
    rng = np.random.default_rng(9)
    xb = bf16_bits(rng.standard_normal(2880))
    mats = [bf16_bits(rng.standard_normal((rows, 2880)) * 0.05) for rows in (300, 1, 64)]
    biases = [bf16_bits(rng.standard_normal(m.shape[0])) for m in mats]
    biases[1] = None  # type: ignore[call-overload]
    want = [bf16_bits(o) for o in kernel.linear_bf16_n(mats, biases, [m.shape[0] for m in mats], 2880,
                                                          R.bf16_to_f32(xb))]
    for threads in (1, 2, 3):
        kernel.set_threads(threads)
        outs = [np.full(m.shape[0], 0xFFFF, np.uint16) for m in mats]
        kernel.linear_bf16_nb(mats, biases, [m.shape[0] for m in mats], 2880, xb.ctypes.data,
                              [o.ctypes.data for o in outs])
        for o, w_ in zip(outs, want, strict=True):
            assert np.array_equal(o, w_), threads
    tiny = np.zeros((1, 16), np.uint16)
    tiny[0, 0] = bf16_bits(np.float32(2.0**-120))[()]  # 2^-120 * 1: kept, where the experts' input rounding flushes
    one = bf16_bits(np.ones(16, np.float32))
    out = np.zeros(1, np.uint16)
    kernel.linear_bf16_nb([tiny], [None], [1], 16, one.ctypes.data, [out.ctypes.data])
    assert out[0] == tiny[0, 0]


def test_bf16_in_and_out_bad_arguments_are_refused(kernel: NativeKernel) -> None:
    w, _, _ = case(8, 48, 1)
    x = np.zeros(48, np.uint16)
    out = np.zeros(8, np.uint16)
    with pytest.raises(ValueError, match="an output"):
        kernel.linear_bf16_nb([w], [None], [8], 48, x.ctypes.data, [])
    with pytest.raises(KernelError, match="linear_bf16_nb"):
        kernel.linear_bf16_nb([w], [None], [8], 48, 0, [out.ctypes.data])  # no x
    with pytest.raises(KernelError, match="linear_bf16_nb"):
        kernel.linear_bf16_nb([w], [None], [8], 48, x.ctypes.data, [0])  # no output


def test_a_plan_runs_again_with_the_calls_bits(kernel: NativeKernel) -> None:
    """linear_bf16_nb_plan + _run (the pointer arrays built once, as a decode token reuses them every layer): the
    one-shot call's bits on every run, new x each time; a run with the wrong number of outputs is refused."""
    rng = np.random.default_rng(4)
    mats = [bf16_bits(rng.standard_normal((rows, 96)) * 0.1) for rows in (24, 8)]
    biases = [bf16_bits(rng.standard_normal(24)), None]
    plan = kernel.linear_bf16_nb_plan(mats, biases, [24, 8], 96)
    for _ in range(3):
        xb = bf16_bits(rng.standard_normal(96))
        want = [np.zeros(m.shape[0], np.uint16) for m in mats]
        kernel.linear_bf16_nb(mats, biases, [24, 8], 96, xb.ctypes.data, [o.ctypes.data for o in want])
        got = [np.full(m.shape[0], 0xFFFF, np.uint16) for m in mats]
        kernel.linear_bf16_nb_run(plan, xb.ctypes.data, [o.ctypes.data for o in got])
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    with pytest.raises(ValueError, match="an output"):
        kernel.linear_bf16_nb_run(plan, xb.ctypes.data, [got[0].ctypes.data])

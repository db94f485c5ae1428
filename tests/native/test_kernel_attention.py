"""neural_attn_decode_bf16 (one decode token's attention of the CPU engine over bf16 K/V) against the
same-order fp32 reference of neural_experts.h, bit for bit, on every ISA path and thread count."""

from __future__ import annotations

import native_refimpl as R
import numpy as np
import pytest
from native_helpers import ISAS, isa_or_skip

from native.kernel import KernelError, NativeKernel


def bf16_bits(a: np.ndarray) -> np.ndarray:
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)


def scores16(k: np.ndarray, q: np.ndarray) -> np.ndarray:
    """dot(q, K[i]) per key in the 16-lane order: lane l = fma(K[i][16c + l], q[16c + l], lane l), the tree."""
    kf = R.bf16_to_f32(k)
    acc = np.zeros((k.shape[0], 16), np.float32)
    for c in range(0, k.shape[1], 16):
        acc = R.fma32(kf[:, c : c + 16], np.broadcast_to(q[c : c + 16], acc.shape), acc)
    return R.reduce16(acc)


def reference(k: np.ndarray, v: np.ndarray, q: np.ndarray, sinks: np.ndarray, scale: float,
              round_p: bool) -> np.ndarray:
    """k, v bf16 bits [kvh, t, d]; q fp32 [kvh * g, d]: the formula of neural_experts.h in fp32, in its order."""
    kvh, t, d = k.shape
    g = q.shape[0] // kvh
    out = np.empty_like(q)
    for r in range(q.shape[0]):
        h = r // g
        s = (scores16(k[h], q[r]) * np.float32(scale)).astype(np.float32)
        m = np.float32(max(sinks[r], s.max()))
        e = R.expf32((s - m).astype(np.float32))
        total = np.float32(0)
        for x in e:  # key order
            total = np.float32(total + x)
        denom = np.float32(total + R.expf32(np.array([sinks[r] - m], np.float32))[0])
        p = R.bf16_input(e) if round_p else e
        vf = R.bf16_to_f32(v[h])
        acc = np.zeros(d, np.float32)
        for i in range(t):
            acc = (acc + (p[i] * vf[i]).astype(np.float32)).astype(np.float32)
        out[r] = (acc / denom).astype(np.float32)
    return out


def case(kvh: int, g: int, t: int, d: int, cap: int, seed: int):
    rng = np.random.default_rng(seed)
    kb = bf16_bits(rng.standard_normal((kvh, cap, d)) * 2.0)  # wide scores: the softmax is not flat
    vb = bf16_bits(rng.standard_normal((kvh, cap, d)))
    q = R.bf16_to_f32(bf16_bits(rng.standard_normal((kvh * g, d))))
    sinks = R.bf16_to_f32(bf16_bits(rng.standard_normal(kvh * g)))
    return kb, vb, q, sinks


def run(kernel: NativeKernel, kb: np.ndarray, vb: np.ndarray, t: int, q: np.ndarray, sinks: np.ndarray,
        scale: float, round_p: bool, base: int = 0) -> np.ndarray:
    """The call on the rows [base, base + t) of each head of a [kvh, cap, d] buffer (a cache's view)."""
    kvh, cap, d = kb.shape
    kp = kb.ctypes.data + 2 * base * d
    vp = vb.ctypes.data + 2 * base * d
    return kernel.attn_decode_bf16(kp, vp, cap * d, kvh, t, q, sinks, scale, round_p)


@pytest.mark.parametrize("isa", ISAS)
def test_attention_matches_reference_bit_for_bit(kernel: NativeKernel, isa: str) -> None:
    isa_or_skip(kernel, isa)
    # g * t not a multiple of 16 (the scores' last partial batch of sums), d = 16 / 32 / 64 / 128 (1-8 vectors a row)
    for kvh, g, t, d, threads, base, round_p in ((2, 4, 37, 64, 2, 5, True), (3, 2, 130, 32, 3, 0, True),
                                                 (1, 1, 1, 16, 1, 0, True), (2, 8, 67, 64, 2, 11, False),
                                                 (2, 3, 45, 128, 2, 1, True), (1, 16, 5, 256, 1, 0, True)):
        kernel.set_threads(threads)
        kb, vb, q, sinks = case(kvh, g, t, d, base + t + 3, t)
        got = run(kernel, kb, vb, t, q, sinks, d ** -0.5, round_p, base)
        want = reference(kb[:, base : base + t], vb[:, base : base + t], q, sinks, d ** -0.5, round_p)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (kvh, g, t, d, base, round_p)


@pytest.mark.parametrize("isa", ISAS)
def test_steep_softmax_matches_reference_bit_for_bit(kernel: NativeKernel, isa: str) -> None:
    """A large scale spreads the scores over hundreds: probabilities below 2^-118 (which the bf16 rounding flushes
    to zero) and exact zeros, a sink above every score, and 8 heads of a group over 16 * k keys and a tail."""
    isa_or_skip(kernel, isa)
    kernel.set_threads(2)
    # (40, 0.01, 90): every probability near e^-90, below 2^-118: the rounding flushes them all and the output is 0
    for t, scale, sink_shift in ((64, 6.0, 0.0), (83, 6.0, 0.0), (48, 0.5, 400.0), (40, 0.01, 90.0)):
        kb, vb, q, sinks = case(2, 8, t, 64, t, t + 1)
        sinks = (sinks + np.float32(sink_shift)).astype(np.float32)
        got = run(kernel, kb, vb, t, q, sinks, scale, True)
        want = reference(kb, vb, q, sinks, scale, True)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (t, scale, sink_shift)


def test_isa_paths_and_thread_counts_agree(kernel: NativeKernel) -> None:
    kb, vb, q, sinks = case(8, 8, 700, 64, 800, 3)
    outs = {}
    for isa in kernel.available_isas():
        kernel.set_isa(isa)
        for threads in (1, 2, 5):
            kernel.set_threads(threads)
            outs[(isa, threads)] = run(kernel, kb, vb, 700, q, sinks, 0.125, True, 50)
    first = next(iter(outs.values()))
    assert all(np.array_equal(o.view(np.uint32), first.view(np.uint32)) for o in outs.values()), list(outs)


def test_close_to_float64(kernel: NativeKernel) -> None:
    """The formula itself: within the bf16 rounding of the probabilities of a float64 evaluation."""
    kb, vb, q, sinks = case(2, 4, 300, 64, 300, 9)
    got = run(kernel, kb, vb, 300, q, sinks, 0.125, False)
    kf, vf = R.bf16_to_f32(kb).astype(np.float64), R.bf16_to_f32(vb).astype(np.float64)
    want = np.empty_like(got, dtype=np.float64)
    for r in range(q.shape[0]):
        s = kf[r // 4] @ q[r].astype(np.float64) * 0.125
        m = max(s.max(), sinks[r])
        e = np.exp(s - m)
        want[r] = e @ vf[r // 4] / (e.sum() + np.exp(sinks[r] - m))
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5


def test_bad_arguments_are_refused(kernel: NativeKernel) -> None:
    kb, vb, q, sinks = case(2, 2, 8, 64, 8, 1)
    with pytest.raises(KernelError):  # head stride shorter than a head's rows
        kernel.attn_decode_bf16(kb.ctypes.data, vb.ctypes.data, 4 * 64, 2, 8, q, sinks, 0.125, True)
    with pytest.raises(KernelError):  # head_dim not a multiple of 16
        kernel.attn_decode_bf16(kb.ctypes.data, vb.ctypes.data, 8 * 64, 2, 8, q[:, :40].copy(), sinks, 0.125, True)
    with pytest.raises(ValueError, match="q must be"):
        kernel.attn_decode_bf16(kb.ctypes.data, vb.ctypes.data, 8 * 64, 3, 8, q, sinks, 0.125, True)
    with pytest.raises(ValueError, match="sinks must be"):
        kernel.attn_decode_bf16(kb.ctypes.data, vb.ctypes.data, 8 * 64, 2, 8, q, sinks[:2].copy(), 0.125, True)

"""Determinism: the same bits for every thread count, every repeat, every ISA and both formats;
multi-token calls equal repeated one-token calls; copy-on-compute captures the record bytes."""

from __future__ import annotations

import native_refimpl as R
import numpy as np
import pytest
from native_helpers import ALPHA, ISAS, LIMIT, MODES, isa_or_skip, make_experts

from native.kernel import NativeKernel

# Wide enough that the thread counts cut different chunk boundaries (2I = 1024 gate_up rows and
# H = 512 down rows per expert: 1 to 4 chunks per expert, partial last chunks).
H, INTER = 512, 512


@pytest.fixture(scope="module")
def parts() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(21)
    ps = [R.random_expert(rng, H, INTER, scale_lo=118, scale_hi=127) for _ in range(4)]
    ps[2]["gu_scales"][7, :3] = (90, 120, 140)  # a fallback row for the packed format
    ps[3]["dn_scales"][100, :2] = (0, 200)
    return ps


def run_token(k: NativeKernel, ex, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    out = np.full(H, np.nan, np.float32)
    k.moe_token(ex.shape, ex.refs, w, x, out)
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("isa", ISAS)
def test_bit_identical_across_threads_repeats_and_formats(kernel: NativeKernel, parts, isa: str, mode: str) -> None:
    isa_or_skip(kernel, isa)
    bf16 = MODES[mode]
    rng = np.random.default_rng(4)
    x = rng.standard_normal(H).astype(np.float32)
    w = np.array([0.4, 0.3, 0.2, 0.1], np.float32)
    raw, packed = make_experts(kernel, parts, "raw", bf16=bf16), make_experts(kernel, parts, "packed", bf16=bf16)
    assert sum(packed.n_exc) == 2
    results = []
    for threads in (1, 2, 3, 4, 16):  # 16: oversubscribed, down chunks wait on gate_up ones
        kernel.set_threads(threads)
        assert kernel.threads == threads
        for _ in range(3):
            results.append(run_token(kernel, raw, x, w))
            results.append(run_token(kernel, packed, x, w))
    first = results[0]
    assert np.isfinite(first).all()
    for r in results[1:]:
        assert R.bits_equal(r, first)
    if isa == "scalar":  # one exact anchor per test module; the numerics tests cover the rest
        assert R.bits_equal(first, R.moe32(parts, w, x, LIMIT, ALPHA, bf16))


def test_isas_bit_identical_to_each_other(kernel: NativeKernel, parts) -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal(H).astype(np.float32)
    w = np.array([0.25, 0.25, 0.25, 0.25], np.float32)
    for bf16 in MODES.values():
        ex = make_experts(kernel, parts, "packed", bf16=bf16)
        outs = {}
        for isa in kernel.available_isas():
            kernel.set_isa(isa)
            outs[isa] = run_token(kernel, ex, x, w)
        for isa, out in outs.items():
            assert R.bits_equal(out, outs["scalar"]), (isa, bf16)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("ntok", [1, 2, 3, 4, 5, 8, 16])  # the 1-token path, rows4tok (2-4), tiles (5+)
def test_multi_token_equals_repeated_single_token(kernel: NativeKernel, parts, isa: str, ntok: int, mode: str) -> None:
    isa_or_skip(kernel, isa)
    rng = np.random.default_rng(ntok)
    x = rng.standard_normal((ntok, H)).astype(np.float32)
    w = rng.random(ntok).astype(np.float32)
    for fmt in ("raw", "packed"):
        ex = make_experts(kernel, parts[2:3], fmt, bf16=MODES[mode])
        for threads in (1, 3):
            kernel.set_threads(threads)
            out = np.full((ntok, H), np.nan, np.float32)
            kernel.expert_tokens(ex.shape, ex.refs[0], x, w, out)
            for t in range(ntok):
                one = np.full(H, np.nan, np.float32)
                kernel.moe_token(ex.shape, ex.refs, w[t : t + 1], x[t], one)
                assert R.bits_equal(out[t], one), (fmt, threads, t)


@pytest.mark.parametrize("fmt", ["raw", "packed"])
def test_copy_on_compute_captures_record_bytes(kernel: NativeKernel, parts, fmt: str) -> None:
    rng = np.random.default_rng(8)
    plain = make_experts(kernel, parts, fmt)
    caps = [np.full(r.size, 0xAA, np.uint8) for r in plain.records]
    ex = make_experts(kernel, parts, fmt, capture=caps)
    x = rng.standard_normal(H).astype(np.float32)
    w = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    kernel.set_threads(3)
    out = run_token(kernel, ex, x, w)
    assert R.bits_equal(out, run_token(kernel, plain, x, w)), "capturing must not change the result"
    for cap, rec in zip(caps, ex.records, strict=True):
        assert np.array_equal(cap, rec)
    # the multi-token call captures too
    cap1 = np.full(ex.records[0].size, 0x55, np.uint8)
    one = make_experts(kernel, parts[:1], fmt, capture=[cap1])
    kernel.expert_tokens(one.shape, one.refs[0], x[None], np.ones(1, np.float32), np.empty((1, H), np.float32))
    assert np.array_equal(cap1, one.records[0])


def test_outputs_are_fully_written(kernel: NativeKernel, parts) -> None:
    """Every output element is overwritten (no read of the poisoned buffer), whatever its old value."""
    ex = make_experts(kernel, parts, "raw")
    x = np.random.default_rng(9).standard_normal(H).astype(np.float32)
    w = np.array([0.4, 0.3, 0.2, 0.1], np.float32)
    a = np.full(H, np.nan, np.float32)
    b = np.full(H, 1e30, np.float32)
    kernel.moe_token(ex.shape, ex.refs, w, x, a)
    kernel.moe_token(ex.shape, ex.refs, w, x, b)
    assert R.bits_equal(a, b) and np.isfinite(a).all()

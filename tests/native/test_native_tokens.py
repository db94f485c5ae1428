"""The multi-token call (prompt groups of up to 16 tokens through one expert) against the
same-order fp32 reference, bit for bit, on every ISA path, both input modes and several thread
counts: full 120b-width rows (90 blocks: five whole decode segments of 16 and a partial one),
every token count from the 2-4 token path to the tiled one, and extreme scale bytes."""

from __future__ import annotations

import native_refimpl as R
import numpy as np
import pytest
from native_helpers import ALPHA, ISAS, LIMIT, MODES, isa_or_skip, make_experts

from native.kernel import NativeKernel

# (hidden, intermediate): 90-block gate_up rows, then 90-block down rows (intermediate 2880)
SHAPES = [(2880, 64), (96, 2880)]


def reference(parts: dict[str, np.ndarray], x: np.ndarray, w: np.ndarray, bf16: bool) -> np.ndarray:
    return np.stack([R.moe32([parts], w[t : t + 1], x[t], LIMIT, ALPHA, bf16) for t in range(x.shape[0])])


def run(k: NativeKernel, ex, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    out = np.full(x.shape, np.nan, np.float32)
    k.expert_tokens(ex.shape, ex.refs[0], x, w, out)
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("hidden,inter", SHAPES)
def test_tokens_match_reference_at_120b_width(kernel: NativeKernel, isa: str, mode: str, hidden: int,
                                              inter: int) -> None:
    isa_or_skip(kernel, isa)
    bf16 = MODES[mode]
    rng = np.random.default_rng(hidden + inter)
    parts = R.random_expert(rng, hidden, inter)
    ex = make_experts(kernel, [parts], "raw", bf16=bf16)
    x = rng.standard_normal((16, hidden)).astype(np.float32)
    w = rng.random(16).astype(np.float32)
    want = reference(parts, x, w, bf16)
    for ntok, threads in ((2, 1), (4, 3), (5, 2), (13, 3), (16, 2)):  # groups of 2..4 and, on AVX-512, tiles
        kernel.set_threads(threads)
        got = run(kernel, ex, x[:ntok], w[:ntok])
        assert R.bits_equal(got, want[:ntok]), (ntok, threads)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("isa", ISAS)
def test_tokens_extreme_scales_match_reference(kernel: NativeKernel, isa: str, mode: str) -> None:
    """Scale bytes 0, 1, 254, 255 (denormal products, overflow to inf and NaN), packed fallback rows."""
    isa_or_skip(kernel, isa)
    bf16 = MODES[mode]
    rng = np.random.default_rng(31)
    parts = R.random_expert(rng, 64, 96)
    for key in ("gu_scales", "dn_scales"):
        s = parts[key]
        mask = rng.random(s.shape) < 0.25
        s[mask] = rng.choice(np.array([0, 1, 254, 255], np.uint8), int(mask.sum()))
    x = rng.standard_normal((7, 64)).astype(np.float32)
    w = rng.random(7).astype(np.float32)
    want = reference(parts, x, w, bf16)
    assert not np.isfinite(want).all(), "the extreme scales should overflow somewhere"
    for fmt in ("raw", "packed"):
        ex = make_experts(kernel, [parts], fmt, bf16=bf16)
        for ntok in (2, 4, 7):
            assert R.bits_equal(run(kernel, ex, x[:ntok], w[:ntok]), want[:ntok]), (fmt, ntok)


def test_tokens_isa_paths_agree(kernel: NativeKernel) -> None:
    rng = np.random.default_rng(32)
    parts = R.random_expert(rng, 160, 224)
    x = rng.standard_normal((11, 160)).astype(np.float32)
    w = rng.random(11).astype(np.float32)
    for bf16 in MODES.values():
        ex = make_experts(kernel, [parts], "packed", bf16=bf16)
        outs = {}
        for isa in kernel.available_isas():
            kernel.set_isa(isa)
            outs[isa] = [run(kernel, ex, x[:n], w[:n]) for n in (2, 4, 11)]
        for isa, res in outs.items():
            for a, b in zip(res, outs["scalar"], strict=True):
                assert R.bits_equal(a, b), (isa, bf16)

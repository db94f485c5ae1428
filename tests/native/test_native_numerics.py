"""The native expert kernel against NumPy references, on every ISA path this CPU has.

Tolerance against the float64 oracle (moe64): max |kernel - ref| <= 1e-5 * max |ref| (relative, no
absolute floor: small outputs are held to the same bound) for scales in the normal range. Observed
errors are ~1e-7 relative; fp32 accumulation over <= 160 inputs per row with 16 lanes cannot
exceed ~1e-6. Against the same-order fp32 reference (moe32)
the results must be bit-identical. Both input modes are tested: fp32 inputs as given, and bf16
inputs (x and the SwiGLU activation rounded to bf16; the oracle rounds them the same way).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import native_refimpl as R
import numpy as np
import pytest
from native_helpers import ALPHA, ISAS, LIMIT, MODES, isa_or_skip, make_experts

from native.kernel import KernelError, NativeKernel

SHAPES = [(64, 64), (96, 160), (160, 96)]
TOL64 = 1e-5


def poisoned(n: int) -> np.ndarray:
    return np.full(n, np.nan, np.float32)


def test_cpu_features_agree_with_proc_cpuinfo(kernel: NativeKernel) -> None:
    info = Path("/proc/cpuinfo")
    if not sys.platform.startswith("linux") or not info.is_file():
        pytest.skip("needs /proc/cpuinfo")
    flags = set(next(ln for ln in info.read_text().splitlines() if ln.startswith("flags")).split(":")[1].split())
    f = kernel.features()
    assert ("avx2" in f) == ({"avx2", "fma"} <= flags)
    assert ("avx512" in f) == ({"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx2", "fma"} <= flags)
    assert ("avx512bf16" in f) == ("avx512" in f and "avx512_bf16" in flags)
    vendor = next((ln for ln in info.read_text().splitlines() if ln.startswith("vendor_id")), "")
    assert ("amd" in f) == ("AuthenticAMD" in vendor)
    # the vdpbf16ps loop is chosen where it was measured faster (AMD), else the widest fp32 one
    want = "avx512bf16" if {"avx512bf16", "amd"} <= f else [i for i in kernel.available_isas() if i != "avx512bf16"][-1]
    assert kernel.best_isa() == want


def test_unknown_isa_rejected(kernel: NativeKernel) -> None:
    with pytest.raises(ValueError):
        kernel.set_isa("sse9")


def test_expf_matches_reference_and_libm(kernel: NativeKernel) -> None:
    rng = np.random.default_rng(1)
    xs = np.concatenate([rng.uniform(-110, 90, 4000), rng.uniform(-2, 2, 2000),
                         [0.0, -0.0, 1e-30, -1e-30, 88.72, 88.7229, 88.73, -103.97, -103.98, -87.3, -87.4,
                          np.inf, -np.inf, np.nan]]).astype(np.float32)
    got = np.array([kernel.expf(float(v)) for v in xs], np.float32)
    assert R.bits_equal(got, R.expf32(xs))
    normal = np.isfinite(xs) & (xs > -87) & (xs < 88)
    want = np.exp(xs[normal].astype(np.float64))
    rel = np.abs(got[normal] - want) / want
    assert rel.max() < 4 * 2.0**-23, f"exp error {rel.max():.3g} exceeds 4 ulp"
    assert math.isinf(kernel.expf(89.0)) and kernel.expf(-104.0) == 0.0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("fmt", ["raw", "packed"])
@pytest.mark.parametrize("hidden,inter", SHAPES)
def test_moe_token_matches_references(kernel: NativeKernel, isa: str, fmt: str, hidden: int, inter: int,
                                      mode: str) -> None:
    isa_or_skip(kernel, isa)
    bf16 = MODES[mode]
    rng = np.random.default_rng(hidden * 7 + inter)
    for k in (1, 4):
        parts = [R.random_expert(rng, hidden, inter) for _ in range(k)]
        ex = make_experts(kernel, parts, fmt, bf16=bf16)
        for trial in range(3):
            x = (rng.standard_normal(hidden) * (1 + trial)).astype(np.float32)
            w = rng.random(k).astype(np.float32)
            out = poisoned(hidden)
            kernel.moe_token(ex.shape, ex.refs, w, x, out)
            assert R.bits_equal(out, R.moe32(parts, w, x, LIMIT, ALPHA, bf16)), f"{isa}/{fmt}: differs from order ref"
            ref = R.moe64(parts, w, x, LIMIT, ALPHA, bf16)
            err = np.abs(out - ref).max() / np.abs(ref).max()
            assert err <= TOL64, f"{isa}/{fmt}: error {err:.3g} vs float64 reference"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("isa", ISAS)
def test_isa_paths_agree_at_120b_rows(kernel: NativeKernel, isa: str, mode: str) -> None:
    """Full-width rows (90 blocks) with a small intermediate keep this fast; scalar is the yardstick."""
    isa_or_skip(kernel, isa)
    rng = np.random.default_rng(5)
    parts = [R.random_expert(rng, 2880, 64) for _ in range(2)]
    ex = make_experts(kernel, parts, "raw", bf16=MODES[mode])
    x = rng.standard_normal(2880).astype(np.float32)
    w = np.array([0.7, 0.3], np.float32)
    out = poisoned(2880)
    kernel.moe_token(ex.shape, ex.refs, w, x, out)
    kernel.set_isa("scalar")
    ref = poisoned(2880)
    kernel.moe_token(ex.shape, ex.refs, w, x, ref)
    assert R.bits_equal(out, ref)
    want = R.moe64(parts, w, x, LIMIT, ALPHA, MODES[mode])
    assert np.abs(out - want).max() / np.abs(want).max() <= TOL64


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("fmt", ["raw", "packed"])
def test_extreme_scale_exponents(kernel: NativeKernel, isa: str, fmt: str, mode: str) -> None:
    """Scale bytes 0, 1, 254, 255 next to normal ones.

    Documented behaviour: the kernel multiplies q = 2v by S = 2^(s-128), so s = 0 gives exact
    denormal products and s = 255 the finite 2^127 (the reference's ldexp(v, 128) is inf for
    any v, and 0 * inf NaN). Large scales overflow to inf and inf - inf to NaN inside sums; the
    same-order reference reproduces all of that bit for bit, NaN positions included.
    """
    isa_or_skip(kernel, isa)
    rng = np.random.default_rng(11)
    hidden, inter = 64, 96
    parts = [R.random_expert(rng, hidden, inter) for _ in range(3)]
    for p in parts:
        for key in ("gu_scales", "dn_scales"):
            s = p[key]
            mask = rng.random(s.shape) < 0.25
            s[mask] = rng.choice(np.array([0, 1, 254, 255], np.uint8), int(mask.sum()))
    ex = make_experts(kernel, parts, fmt, bf16=MODES[mode])
    if fmt == "packed":
        assert sum(ex.n_exc) > 0, "wide-range rows must take the fallback path"
    w = np.array([0.5, 0.3, 0.2], np.float32)
    saw_nonfinite = False
    for _ in range(3):
        x = rng.standard_normal(hidden).astype(np.float32)
        out = poisoned(hidden)
        kernel.moe_token(ex.shape, ex.refs, w, x, out)
        assert R.bits_equal(out, R.moe32(parts, w, x, LIMIT, ALPHA, MODES[mode]))
        saw_nonfinite |= not np.isfinite(out).all()
    assert saw_nonfinite, "scale 254/255 rows should overflow somewhere (documented behaviour)"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("isa", ISAS)
def test_tiny_scales_stay_exact(kernel: NativeKernel, isa: str, mode: str) -> None:
    """All scales 0/1 (weights ~2^-127): denormal products, still matching both references."""
    isa_or_skip(kernel, isa)
    rng = np.random.default_rng(12)
    parts = [R.random_expert(rng, 64, 64, scale_lo=0, scale_hi=1)]
    ex = make_experts(kernel, parts, "raw", bf16=MODES[mode])
    x = (rng.standard_normal(64) * 1e30).astype(np.float32)
    out = poisoned(64)
    kernel.moe_token(ex.shape, ex.refs, np.ones(1, np.float32), x, out)
    assert R.bits_equal(out, R.moe32(parts, np.ones(1), x, LIMIT, ALPHA, MODES[mode]))
    assert np.isfinite(out).all()


def test_bad_arguments_raise(kernel: NativeKernel) -> None:
    rng = np.random.default_rng(0)
    ex = make_experts(kernel, [R.random_expert(rng, 64, 64)], "raw")
    with pytest.raises(ValueError):
        kernel.moe_token(ex.shape, ex.refs, np.ones(1, np.float32), np.ones(32, np.float32), poisoned(64))
    with pytest.raises(ValueError):
        kernel.moe_token(ex.shape, [], np.ones(0, np.float32), np.ones(64, np.float32), poisoned(64))
    bad = kernel.shape(64, 64, "raw", LIMIT, ALPHA, [0] * 7)  # overlapping parts
    with pytest.raises(KernelError, match="invalid"):
        kernel.moe_token(bad, ex.refs, np.ones(1, np.float32), np.ones(64, np.float32), poisoned(64))


def test_missing_exception_row_is_reported(kernel: NativeKernel) -> None:
    rng = np.random.default_rng(3)
    p = R.random_expert(rng, 64, 64)
    p["gu_scales"][5, 0], p["gu_scales"][5, 1] = 100, 140  # range 40: fallback row
    ex = make_experts(kernel, [p], "packed")
    assert ex.n_exc == [1]
    broken = kernel.expert([ex.records[0][off:off + n] for off, n in zip(ex.layout.offsets, ex.layout.sizes,
                                                                         strict=False)])
    with pytest.raises(KernelError, match="corrupt"):
        kernel.moe_token(ex.shape, [broken], np.ones(1, np.float32), np.ones(64, np.float32), poisoned(64))


@pytest.mark.parametrize("isa", ISAS)
def test_inputs_are_rounded_to_bf16_and_tiny_ones_flushed(kernel: NativeKernel, isa: str) -> None:
    """bf16 mode: inputs are bf16 (nearest even) with |z| < 2^-118 flushed to 0: x and x + (below half a bf16
    ulp) give the same bits; pairs of tiny inputs whose difference would be denormal in the
    vdpbf16ps sum (DAZ/FTZ) agree on every path because they are flushed first."""
    isa_or_skip(kernel, isa)
    rng = np.random.default_rng(21)
    hidden, inter = 64, 64
    parts = [R.random_expert(rng, hidden, inter)]
    ex = make_experts(kernel, parts, "raw", bf16=True)
    one = np.ones(1, np.float32)
    x = R.bf16_input(rng.standard_normal(hidden).astype(np.float32))
    nudged = (x.view(np.uint32) + np.uint32(0x7FFF)).view(np.float32)  # below half a bf16 ulp
    a, b = poisoned(hidden), poisoned(hidden)
    kernel.moe_token(ex.shape, ex.refs, one, x, a)
    kernel.moe_token(ex.shape, ex.refs, one, nudged, b)
    assert R.bits_equal(a, b)
    tiny = np.ldexp(np.float32(1.0078125), -118 + rng.integers(-3, 3, hidden)).astype(np.float32)
    tiny *= np.where(rng.random(hidden) < 0.5, -1, 1).astype(np.float32)
    out = poisoned(hidden)
    kernel.moe_token(ex.shape, ex.refs, one, tiny, out)
    assert R.bits_equal(out, R.moe32(parts, one, tiny, LIMIT, ALPHA, True))
    assert R.bf16_input(np.ldexp(np.float32(1.0), -119)) == 0 and R.bf16_input(np.ldexp(np.float32(1.0), -118)) > 0


def test_fp32_mode_keeps_inputs_and_bf16_isa_falls_back(kernel: NativeKernel) -> None:
    """fp32 mode uses x as given (a nudge below bf16 precision changes the result), and the
    AVX-512 BF16 path, which needs bf16 inputs, then gives the fp32 loop's bits."""
    rng = np.random.default_rng(22)
    parts = [R.random_expert(rng, 64, 64)]
    ex = make_experts(kernel, parts, "raw")
    one = np.ones(1, np.float32)
    x = R.bf16_input(rng.standard_normal(64).astype(np.float32))
    nudged = (x.view(np.uint32) + np.uint32(0x7FFF)).view(np.float32)
    a, b = poisoned(64), poisoned(64)
    kernel.moe_token(ex.shape, ex.refs, one, x, a)
    kernel.moe_token(ex.shape, ex.refs, one, nudged, b)
    assert not R.bits_equal(a, b)
    assert R.bits_equal(b, R.moe32(parts, one, nudged, LIMIT, ALPHA))
    if "avx512bf16" in kernel.available_isas():
        kernel.set_isa("avx512bf16")
        c = poisoned(64)
        kernel.moe_token(ex.shape, ex.refs, one, nudged, c)
        assert R.bits_equal(c, b)


@pytest.mark.parametrize("isa", ISAS)
def test_swiglu_paths_match_reference_bit_for_bit(kernel: NativeKernel, isa: str) -> None:
    """The vector SwiGLU (AVX-512 paths) against the same-operation reference over wide and
    special values: exp's thresholds, clamp edges, +-inf, NaN, denormals; odd tails included."""
    isa_or_skip(kernel, isa)
    rng = np.random.default_rng(31)
    wide = (rng.standard_normal(4000) * np.exp2(rng.integers(-20, 20, 4000))).astype(np.float32)
    edges = np.array([88.72283935546875 / -ALPHA, -103.972084045410156 / -ALPHA, 60.0, -60.0, LIMIT, -LIMIT,
                      np.nextafter(np.float32(LIMIT), np.float32(9)), np.inf, -np.inf, np.nan, 0.0, -0.0,
                      1e-40, -1e-40, 3.4e38, -3.4e38], np.float32)
    h = np.concatenate([wide, np.repeat(edges, 3), rng.permutation(np.repeat(edges, 3))]).astype(np.float32)
    h = h[: h.size - h.size % 2][:-2]  # an odd number of pairs: a scalar tail after the 16-wide blocks
    got = kernel.swiglu(h, LIMIT, ALPHA)
    assert R.bits_equal(got, R.swiglu32(h[0::2], h[1::2], LIMIT, ALPHA))
    assert np.isnan(got).any()  # g = -inf or NaN; the clamps keep every other output finite


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("fmt", ["raw", "packed"])
def test_an_experts_head_units_equal_the_expert_with_its_tail_zeroed(kernel: NativeKernel, isa: str, fmt: str,
                                                                     mode: str) -> None:
    """neural_expert.units (the copy lane's split of one expert): the CPU computes gate_up units [0, f), the down dot
    over their blocks and the down bias. That is bit for bit the whole expert with the units past f zeroed (codes and
    gate_up bias 0 give an activation of exactly 0, whose products add +-0), beside whole experts in one call."""
    isa_or_skip(kernel, isa)
    bf16 = MODES[mode]
    hidden, inter = 96, 160
    rng = np.random.default_rng(11)
    for f in (32, 96, 128):
        parts = [R.random_expert(rng, hidden, inter) for _ in range(3)]
        zeroed = [dict(p) for p in parts]
        z = zeroed[1]
        z["gu_codes"], z["gu_bias"] = z["gu_codes"].copy(), z["gu_bias"].copy()
        z["gu_codes"][2 * f:] = 0
        z["gu_bias"][2 * f:] = 0
        ex = make_experts(kernel, parts, fmt, bf16=bf16)
        ref = make_experts(kernel, zeroed, fmt, bf16=bf16)
        refs = [ex.refs[0], kernel.head(ex.refs[1], f), ex.refs[2]]
        x = rng.standard_normal(hidden).astype(np.float32)
        w = rng.random(3).astype(np.float32)
        out, want = poisoned(hidden), poisoned(hidden)
        kernel.moe_token(ex.shape, refs, w, x, out)
        kernel.moe_token(ref.shape, ref.refs, w, x, want)
        assert np.array_equal(out, want), f"{isa}/{fmt}/{mode}, f={f}"  # +0 == -0: a zero's sign may differ
        assert R.bits_equal(out, R.moe32(zeroed, w, x, LIMIT, ALPHA, bf16))
        whole = poisoned(hidden)
        kernel.moe_token(ex.shape, ex.refs, w, x, whole)
        assert not np.array_equal(out, whole)  # the units past f do count in the whole expert
        n = kernel.threads
        try:
            for t in (1, 3):
                kernel.set_threads(t)
                again = poisoned(hidden)
                kernel.moe_token(ex.shape, refs, w, x, again)
                assert R.bits_equal(again, out), f"{t} threads"
        finally:
            kernel.set_threads(n)


def test_head_units_are_checked(kernel: NativeKernel) -> None:
    rng = np.random.default_rng(12)
    ex = make_experts(kernel, [R.random_expert(rng, 64, 64)], "raw")
    x, out = rng.standard_normal(64).astype(np.float32), poisoned(64)
    for bad in (0, 48, -32):
        with pytest.raises(ValueError):
            kernel.head(ex.refs[0], bad)
    too_many = kernel.head(ex.refs[0], 96)  # more units than the expert has: the kernel refuses
    with pytest.raises(KernelError):
        kernel.moe_token(ex.shape, [too_many], np.ones(1, np.float32), x, out)
    head = kernel.head(ex.refs[0], 32)
    with pytest.raises(KernelError):  # multi-token calls compute whole experts only
        kernel.expert_tokens(ex.shape, head, x[None], np.ones(1, np.float32), out[None].copy())
    full = kernel.head(ex.refs[0], 64)  # all the units: the whole expert
    a, b = poisoned(64), poisoned(64)
    kernel.moe_token(ex.shape, [full], np.ones(1, np.float32), x, a)
    kernel.moe_token(ex.shape, ex.refs, np.ones(1, np.float32), x, b)
    assert R.bits_equal(a, b)

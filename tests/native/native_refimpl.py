"""NumPy references for the native expert kernel.

* ``*32`` functions: the kernel's canonical fp32 arithmetic (neural_experts.h) operation by
  operation — same order, same roundings, FMA emulated exactly — so results must match bit
  for bit on every ISA path.
* ``*64`` functions: the mathematical expert (dequantize v * 2^(s-127), exact exp) in float64,
  the oracle the fp32 kernel is compared to with a stated tolerance.
* ``bf16=True`` (all of them): the kernel's bf16-input mode, x and the SwiGLU output rounded to
  bf16 as ``bf16_input`` says (the model's activation precision).
"""

from __future__ import annotations

import numpy as np

f32 = np.float32
FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
LUT2 = (2 * FP4).astype(np.float32)
SCALE2 = np.ldexp(np.float32(1.0), np.arange(256) - 128).astype(np.float32)


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Correctly rounded fp32 fma(a, b, c): exact product in float64, sum rounded to odd, then to fp32."""
    a64, b64, c64 = (np.asarray(v, dtype=np.float32).astype(np.float64) for v in (a, b, c))
    with np.errstate(invalid="ignore", over="ignore"):
        p = a64 * b64  # exact: 24 + 24 bits
        s = p + c64
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)  # two-sum: p + c == s + err exactly
        even = (s.view(np.int64) & 1) == 0
        fix = np.isfinite(s) & (err != 0) & even
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return s.astype(np.float32)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_input(z: np.ndarray) -> np.ndarray:
    """The kernel's input rounding: bf16 nearest even, NaN stays NaN, |z| < 2^-118 -> signed 0."""
    u = np.asarray(z, np.float32).view(np.uint32).astype(np.uint64)
    mag = u & 0x7FFFFFFF
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    out = np.where(mag > 0x7F800000, u | 0x00400000, np.where(mag < 0x04800000, u & 0x80000000, rounded))
    return (out & 0xFFFF0000).astype(np.uint32).view(np.float32)


def permute(z: np.ndarray) -> np.ndarray:
    """[..., K] -> [..., K/32, 2, 16]: per block the even elements, then the odd ones."""
    b = z.reshape(*z.shape[:-1], -1, 16, 2)
    return np.stack([b[..., 0], b[..., 1]], axis=-2)


def reduce16(acc: np.ndarray) -> np.ndarray:
    a = acc.copy()
    for i in (8, 4, 2, 1):
        a[..., :i] = a[..., :i] + a[..., i : 2 * i]
    return a[..., 0]


def dot32(codes: np.ndarray, scales: np.ndarray, z: np.ndarray, bf16: bool = False) -> np.ndarray:
    """rows [R, G, 16] codes / [R, G] scales . z [G*32] -> [R] in the kernel's order."""
    zp = permute(bf16_input(z) if bf16 else np.asarray(z, np.float32))
    lo, hi = LUT2[codes & 15], LUT2[codes >> 4]
    acc = np.zeros((codes.shape[0], 16), np.float32)
    for g in range(codes.shape[1]):
        with np.errstate(invalid="ignore", over="ignore"):
            d = lo[:, g] * zp[g, 0]
        d = fma32(hi[:, g], zp[g, 1], d)
        acc = fma32(d, SCALE2[scales[:, g]][:, None], acc)
    with np.errstate(invalid="ignore", over="ignore"):
        return reduce16(acc)


def expf32(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    nan, over, under = np.isnan(x), x > f32(88.72283935546875), x < f32(-103.972084045410156)
    xs = np.where(nan | over | under, f32(0), x).astype(np.float32)
    t = xs * f32(1.44269502162933349609375)
    n = (t + f32(12582912.0)) - f32(12582912.0)
    r = xs - n * f32(0.693145751953125)
    r = r - n * f32(1.428606765330187045e-06)
    p = np.full_like(r, f32(1.98412698e-4))
    for c in (1.38888889e-3, 8.33333333e-3, 4.16666667e-2, 1.66666667e-1, 0.5, 1.0, 1.0):
        p = p * r + f32(c)
    ni = n.astype(np.int32)
    n1 = np.sign(ni) * (np.abs(ni) // 2)
    n2 = ni - n1

    def pow2(k: np.ndarray) -> np.ndarray:
        return ((k + 127).astype(np.uint32) << 23).view(np.float32)

    out = (p * pow2(n1)) * pow2(n2)
    out = np.where(over, f32(np.inf), out)
    out = np.where(under, f32(0), out)
    return np.where(nan, x, out).astype(np.float32)


def swiglu32(g: np.ndarray, u: np.ndarray, limit: float, alpha: float) -> np.ndarray:
    lim, al = f32(limit), f32(alpha)
    with np.errstate(invalid="ignore", over="ignore"):
        g = np.where(g > lim, lim, g).astype(np.float32)
        u = np.where(u > lim, lim, np.where(u < -lim, -lim, u)).astype(np.float32)
        sig = f32(1) / (f32(1) + expf32(-(al * g)))
        return ((g * sig) * (u + f32(1))).astype(np.float32)


def expert32(p: dict[str, np.ndarray], x: np.ndarray, limit: float, alpha: float, bf16: bool = False) -> np.ndarray:
    """y = down(swiglu(gate_up(x))) with both biases, fp32 canonical order. p: checkpoint parts."""
    with np.errstate(invalid="ignore", over="ignore"):
        h = dot32(p["gu_codes"], p["gu_scales"], x, bf16) + bf16_to_f32(p["gu_bias"])
        a = swiglu32(h[0::2], h[1::2], limit, alpha)
        return dot32(p["dn_codes"], p["dn_scales"], a, bf16) + bf16_to_f32(p["dn_bias"])


def moe32(experts: list[dict[str, np.ndarray]], w: np.ndarray, x: np.ndarray, limit: float,
          alpha: float, bf16: bool = False) -> np.ndarray:
    w = np.asarray(w, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        acc = w[0] * expert32(experts[0], x, limit, alpha, bf16)
        for e in range(1, len(experts)):
            acc = acc + w[e] * expert32(experts[e], x, limit, alpha, bf16)
    return acc


def dequant64(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    v = np.empty((*codes.shape[:2], 32))
    v[..., 0::2] = FP4[codes & 15]
    v[..., 1::2] = FP4[codes >> 4]
    v = v * np.ldexp(1.0, scales.astype(np.int64) - 127)[..., None]
    return v.reshape(codes.shape[0], -1)


def expert64(p: dict[str, np.ndarray], x: np.ndarray, limit: float, alpha: float, bf16: bool = False) -> np.ndarray:
    def act(v: np.ndarray) -> np.ndarray:
        return bf16_input(v).astype(np.float64) if bf16 else np.asarray(v, np.float64)

    x = act(x)
    h = dequant64(p["gu_codes"], p["gu_scales"]) @ x + bf16_to_f32(p["gu_bias"])
    g, u = np.minimum(h[0::2], limit), np.clip(h[1::2], -limit, limit)
    a = act(g / (1.0 + np.exp(-alpha * g)) * (u + 1.0))
    return dequant64(p["dn_codes"], p["dn_scales"]) @ a + bf16_to_f32(p["dn_bias"])


def moe64(experts: list[dict[str, np.ndarray]], w: np.ndarray, x: np.ndarray, limit: float,
          alpha: float, bf16: bool = False) -> np.ndarray:
    out = np.zeros(x.shape, np.float64)
    for wi, p in zip(w, experts, strict=True):
        out = out + float(wi) * expert64(p, x, limit, alpha, bf16)
    return out


def random_expert(rng: np.random.Generator, hidden: int, inter: int, scale_lo: int = 122,
                  scale_hi: int = 127) -> dict[str, np.ndarray]:
    """Random checkpoint-form parts (scales in [scale_lo, scale_hi])."""
    g1, g2 = hidden // 32, inter // 32

    def bias(n: int) -> np.ndarray:
        return (rng.standard_normal(n).astype(np.float32) * 0.05).view(np.uint32).__rshift__(16).astype(np.uint16)

    return {
        "gu_codes": rng.integers(0, 256, (2 * inter, g1, 16), dtype=np.uint8),
        "gu_scales": rng.integers(scale_lo, scale_hi + 1, (2 * inter, g1), dtype=np.uint8),
        "dn_codes": rng.integers(0, 256, (hidden, g2, 16), dtype=np.uint8),
        "dn_scales": rng.integers(scale_lo, scale_hi + 1, (hidden, g2), dtype=np.uint8),
        "gu_bias": bias(2 * inter),
        "dn_bias": bias(hidden),
    }


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical, except that any NaN matches any NaN (payloads are not part of the contract)."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if a.shape != b.shape:
        return False
    na, nb = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(na, nb) and np.array_equal(a[~na].view(np.uint32), b[~nb].view(np.uint32)))

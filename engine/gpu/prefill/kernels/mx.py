"""Element helpers of the prompt kernels: MXFP4 decoding (bf16 rounding on the bits is shared with
the decode kernels, engine/gpu/kernels/common.py).

Rounding is done on the bits (round to nearest, ties to even) rather than by a cast, because
Triton's interpreter truncates on a plain fp32 -> bf16 cast; with these helpers the CI
interpreter runs and the GPU compute the same values.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def fp4_e2m1(c):
    """E2M1 code (int32, 0..15) -> fp32: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0."""
    e = (c >> 1) & 3
    m = c & 1
    normal = ((e + 126) << 23) | (m << 22)  # (1 + m/2) * 2^(e-1)
    sub = m * (126 << 23)  # e == 0: 0.5 * m
    bits = tl.where(e > 0, normal, sub) | ((c >> 3) << 31)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def e8m0(s):
    """E8M0 scale byte (int32) -> 2^(s - 127) as fp32 (s == 0 is the denormal 2^-127)."""
    return tl.where(s == 0, 0x00400000, s << 23).to(tl.float32, bitcast=True)

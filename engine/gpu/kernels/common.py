"""Rounding helpers shared by the kernels.

fp32 -> bf16 rounding is done on the bits (round to nearest, ties to even) instead of by a
cast: Triton's interpreter truncates on a plain cast, so with this helper the interpreter
tests and the GPU compute the same values. Results stay exact for finite inputs.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def round_bf16(x):
    """fp32 rounded to the nearest bf16 value, returned as fp32."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def to_bf16(x):
    """fp32 -> bf16 tensor with round-to-nearest-even (the cast itself is then exact)."""
    return round_bf16(x).to(tl.bfloat16)

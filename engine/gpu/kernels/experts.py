"""MXFP4 expert GEMVs that read resident experts straight from their VRAM slots.

A slot is one flat byte range (layout in engine/gpu/layout.py): gate_up codes [2I, GH, 16],
gate_up scales [2I, GH], gate_up bias bf16 [2I], down codes [H, GI, 16], down scales
[H, GI], down bias bf16 [H]. The byte offsets arrive as constexprs. Codes are E2M1 nibbles
(low nibble = even element), scales E8M0; instead of interleaving nibbles we dot the low
nibbles with the even inputs and the high nibbles with the odd ones.

The routing (from router_topk_kernel) says per selected expert its slot or -1; experts
with -1 are misses that the CPU computes, and these kernels skip them.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import round_bf16


@triton.jit
def fp4_lo_hi(b):
    """Both E2M1 codes of a byte (int32 0..255) as fp32, each scaled by 2^-14.

    An E2M1 code s|e1 e0|m placed in an fp16 as sign bit 15 and bits 11..9 reads as exactly
    2^-14 times its E2M1 value (normal and subnormal alike), so decoding is a few bit operations
    and one fp16 -> fp32 conversion; callers fold the 2^14 into the block scale."""
    lo = ((b & 0x8) << 12) | ((b & 0x7) << 9)
    hi = ((b & 0x80) << 8) | ((b & 0x70) << 5)
    lo_f = lo.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    hi_f = hi.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    return lo_f, hi_f


@triton.jit
def e8m0_value(s):
    """E8M0 scale byte (int32) -> 2^(s-127) as fp32 (s == 0 gives the denormal 2^-127)."""
    return tl.where(s == 0, 0x00400000, s << 23).to(tl.float32, bitcast=True)


@triton.jit
def _mx_rows_dot(codes_ptr, scales_ptr, rows, mrow, xe_ptr, xo_ptr, NG: tl.constexpr, BLOCK_G: tl.constexpr):
    """sum_k W[row, k] * x[k] for MXFP4 rows; x given as even/odd halves (fp32, length NG*16)."""
    acc = tl.zeros([rows.shape[0]], tl.float32)
    j = tl.arange(0, 16)
    r64 = rows.to(tl.int64)
    for g0 in range(0, NG, BLOCK_G):
        gi = g0 + tl.arange(0, BLOCK_G)
        mg = gi < NG
        xi = gi[:, None] * 16 + j[None, :]  # [BG, 16]
        xe = tl.load(xe_ptr + xi, mask=mg[:, None], other=0.0)
        xo = tl.load(xo_ptr + xi, mask=mg[:, None], other=0.0)
        m3 = mrow[:, None, None] & mg[None, :, None]
        cptr = codes_ptr + (r64[:, None, None] * NG + gi[None, :, None]) * 16 + j[None, None, :]
        b = tl.load(cptr, mask=m3, other=0).to(tl.int32)  # [R, BG, 16]
        lo, hi = fp4_lo_hi(b)
        part = tl.sum(lo * xe[None, :, :] + hi * xo[None, :, :], 2)  # [R, BG], x 2^-14
        s = tl.load(scales_ptr + r64[:, None] * NG + gi[None, :], mask=mrow[:, None] & mg[None, :], other=127)
        acc += tl.sum(part * (e8m0_value(s.to(tl.int32)) * 16384.0), 1)
    return acc


@triton.jit
def expert_gate_up_kernel(pool_ptr, route_ptr, te_ptr, to_ptr, act_e_ptr, act_o_ptr, slot_bytes, limit, alpha,
                          INTER: tl.constexpr, GH: tl.constexpr, OFF_GS: tl.constexpr, OFF_GB: tl.constexpr,
                          BLOCK_T: tl.constexpr, PAIRS: tl.constexpr, BLOCK_G: tl.constexpr):
    """act[k, j] = swiglu(gate_j, up_j) for selected expert k (grid: experts x pair blocks).

    Rows 2j (gate) and 2j+1 (up) of gate_up are computed together so SwiGLU needs no other
    program. The activation is stored split into even/odd halves for the down GEMV."""
    k = tl.program_id(0)
    pb = tl.program_id(1)
    slot = tl.load(route_ptr + 2 * BLOCK_T + k)
    if slot >= 0:
        base = pool_ptr + slot.to(tl.int64) * slot_bytes
        p = pb * PAIRS + tl.arange(0, PAIRS)
        mp = p < INTER
        g = _mx_rows_dot(base, base + OFF_GS, 2 * p, mp, te_ptr, to_ptr, GH, BLOCK_G)
        u = _mx_rows_dot(base, base + OFF_GS, 2 * p + 1, mp, te_ptr, to_ptr, GH, BLOCK_G)
        bias = (base + OFF_GB).to(tl.pointer_type(tl.bfloat16))
        g = round_bf16(g + tl.load(bias + 2 * p, mask=mp, other=0.0).to(tl.float32))
        u = round_bf16(u + tl.load(bias + 2 * p + 1, mask=mp, other=0.0).to(tl.float32))
        g = tl.minimum(g, limit)
        u = tl.minimum(tl.maximum(u, -limit), limit)
        a = round_bf16(g * tl.sigmoid(g * alpha) * (u + 1.0))
        # act index j -> even/odd half (j // 2), split for the down projection's nibble layout
        half = p // 2
        odd = (p % 2) == 1
        tl.store(act_e_ptr + k * (INTER // 2) + half, a, mask=mp & ~odd)
        tl.store(act_o_ptr + k * (INTER // 2) + half, a, mask=mp & odd)


@triton.jit
def expert_down_kernel(pool_ptr, route_ptr, act_e_ptr, act_o_ptr, out_ptr, slot_bytes,
                       H: tl.constexpr, INTER: tl.constexpr, GI: tl.constexpr, OFF_DB: tl.constexpr,
                       OFF_DS: tl.constexpr, OFF_DBIAS: tl.constexpr, TOPK: tl.constexpr, BLOCK_T: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr):
    """out[rows] = sum over resident selected experts of w_k * bf16(W2 act_k + b2) (fp32)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mr = rows < H
    total = tl.zeros([BLOCK_N], tl.float32)
    for k in tl.static_range(TOPK):
        slot = tl.load(route_ptr + 2 * BLOCK_T + k)
        if slot >= 0:
            base = pool_ptr + slot.to(tl.int64) * slot_bytes
            y = _mx_rows_dot(base + OFF_DB, base + OFF_DS, rows, mr, act_e_ptr + k * (INTER // 2),
                             act_o_ptr + k * (INTER // 2), GI, BLOCK_G)
            bias = (base + OFF_DBIAS).to(tl.pointer_type(tl.bfloat16))
            y = round_bf16(y + tl.load(bias + rows, mask=mr, other=0.0).to(tl.float32))
            w = tl.load(route_ptr + BLOCK_T + k).to(tl.float32, bitcast=True)
            total += round_bf16(y * w)
    tl.store(out_ptr + rows, total, mask=mr)

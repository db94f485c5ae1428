"""Grouped MXFP4 expert GEMMs for prompts, reading each expert from its VRAM slot.

The prompt's (token, k) pairs are sorted by expert id; ``order[i]`` is the flat index
(token * TOPK + j) of sorted row i. Work comes as *tiles*: int32 rows (slot, first sorted
row, rows <= BLOCK_M, first workspace row), each one expert's consecutive sorted rows, so one
launch covers many experts (resident slots and staged scratch slots alike).

``moe_gate_up_kernel``: act = SwiGLU(W1 t + b1) for a tile's rows into a bf16 workspace;
gate row 2j and up row 2j+1 are computed by the same program so SwiGLU needs no exchange.
``moe_down_kernel``: contrib[flat] = bf16(w_flat * bf16(W2 act + b2)), scattered back to
the pair's flat index so the caller sums each token's k contributions in routing order.

MXFP4 in the tile: a code byte holds elements 2i (low nibble) and 2i+1 (high nibble), so the
weight tile is dequantized as two [K/2, N] operands and dotted with the even and the odd
input columns. Rounding follows the decode GEMVs (engine/gpu/kernels/experts.py): bias
added in fp32 then rounded to bf16, SwiGLU in fp32 rounded to bf16, contribution rounded.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...kernels.common import round_bf16, to_bf16
from .mx import e8m0, fp4_e2m1


@triton.jit
def _mx_operands(codes_ptr, scales_ptr, rows, mrow, kb, mk, ROWB: tl.constexpr, NG: tl.constexpr,
                 BF16_DOT: tl.constexpr):
    """Weight rows ``rows`` over code bytes ``kb`` as dot operands [KH, R]: (even, odd) elements."""
    r64 = rows.to(tl.int64)
    m2 = mk[:, None] & mrow[None, :]
    c = tl.load(codes_ptr + r64[None, :] * ROWB + kb[:, None], mask=m2, other=0).to(tl.int32)
    s = tl.load(scales_ptr + r64[None, :] * NG + (kb // 16)[:, None], mask=m2, other=127).to(tl.int32)
    sc = e8m0(s)
    lo = fp4_e2m1(c & 15) * sc
    hi = fp4_e2m1(c >> 4) * sc
    if BF16_DOT:  # fp4 x 2^k is exact in bf16
        lo = lo.to(tl.bfloat16)
        hi = hi.to(tl.bfloat16)
    return lo, hi


@triton.jit
def _load_pairs(x_ptr, rows64, mrow, kb, mk, STRIDE: tl.constexpr, BF16_DOT: tl.constexpr):
    """Even and odd input columns (2 kb, 2 kb + 1) of the given rows: two [M, KH] operands."""
    m2 = mrow[:, None] & mk[None, :]
    ptr = x_ptr + rows64[:, None] * STRIDE + 2 * kb[None, :]
    xe = tl.load(ptr, mask=m2, other=0.0)
    xo = tl.load(ptr + 1, mask=m2, other=0.0)
    if not BF16_DOT:
        xe = xe.to(tl.float32)
        xo = xo.to(tl.float32)
    return xe, xo


@triton.jit
def _tile_rows(tiles_ptr, order_ptr, pool_ptr, slot_bytes, tile, BLOCK_M: tl.constexpr):
    """A tile's rows: (slot base pointer, row offsets m, row mask, flat indices, first workspace
    row), from its int32 record (slot, first sorted row, rows, first workspace row)."""
    slot = tl.load(tiles_ptr + tile * 4)
    r0 = tl.load(tiles_ptr + tile * 4 + 1)
    n = tl.load(tiles_ptr + tile * 4 + 2)
    a0 = tl.load(tiles_ptr + tile * 4 + 3)
    m = tl.arange(0, BLOCK_M)
    mm = m < n
    flat = tl.load(order_ptr + r0 + m, mask=mm, other=0)
    base = pool_ptr + slot.to(tl.int64) * slot_bytes
    return base, m, mm, flat, a0


@triton.jit
def moe_gate_up_kernel(pool_ptr, x_ptr, order_ptr, tiles_ptr, act_ptr, slot_bytes, limit, alpha, tile0,
                       H: tl.constexpr, INTER: tl.constexpr, TOPK: tl.constexpr, OFF_GS: tl.constexpr,
                       OFF_GB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_K: tl.constexpr,
                       BF16_DOT: tl.constexpr):
    """Grid: (tiles in this wave, cdiv(INTER, BLOCK_P)). x: normalized hidden [tokens, H] bf16;
    act: workspace [rows, INTER] bf16."""
    KH: tl.constexpr = BLOCK_K // 2
    ROWB: tl.constexpr = H // 2
    NG: tl.constexpr = H // 32
    pb = tl.program_id(1)
    base, m, mm, flat, a0 = _tile_rows(tiles_ptr, order_ptr, pool_ptr, slot_bytes, tile0 + tl.program_id(0), BLOCK_M)
    tok = (flat // TOPK).to(tl.int64)
    p = pb * BLOCK_P + tl.arange(0, BLOCK_P)
    mp = p < INTER
    j = tl.arange(0, KH)
    acc_g = tl.zeros([BLOCK_M, BLOCK_P], tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_P], tl.float32)
    for k0 in range(0, H, BLOCK_K):
        kb = k0 // 2 + j
        mk = kb < ROWB
        xe, xo = _load_pairs(x_ptr, tok, mm, kb, mk, H, BF16_DOT)
        gl, gh = _mx_operands(base, base + OFF_GS, 2 * p, mp, kb, mk, ROWB, NG, BF16_DOT)
        acc_g = tl.dot(xe, gl, acc_g)
        acc_g = tl.dot(xo, gh, acc_g)
        ul, uh = _mx_operands(base, base + OFF_GS, 2 * p + 1, mp, kb, mk, ROWB, NG, BF16_DOT)
        acc_u = tl.dot(xe, ul, acc_u)
        acc_u = tl.dot(xo, uh, acc_u)
    bias = (base + OFF_GB).to(tl.pointer_type(tl.bfloat16))
    gt = round_bf16(acc_g + tl.load(bias + 2 * p, mask=mp, other=0.0).to(tl.float32)[None, :])
    up = round_bf16(acc_u + tl.load(bias + 2 * p + 1, mask=mp, other=0.0).to(tl.float32)[None, :])
    gt = tl.minimum(gt, limit)
    up = tl.minimum(tl.maximum(up, -limit), limit)
    a = gt * tl.sigmoid(gt * alpha) * (up + 1.0)
    arow = (a0 + m).to(tl.int64)
    tl.store(act_ptr + arow[:, None] * INTER + p[None, :], to_bf16(a), mask=mm[:, None] & mp[None, :])


@triton.jit
def moe_down_kernel(pool_ptr, act_ptr, order_ptr, w_ptr, tiles_ptr, out_ptr, slot_bytes, tile0,
                    H: tl.constexpr, INTER: tl.constexpr, OFF_DB: tl.constexpr, OFF_DS: tl.constexpr,
                    OFF_DBIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    BF16_DOT: tl.constexpr):
    """Grid: (tiles in this wave, cdiv(H, BLOCK_N)). w: routing weights by flat index (bf16);
    out: contributions [tokens * TOPK, H] bf16 by flat index."""
    KH: tl.constexpr = BLOCK_K // 2
    ROWB: tl.constexpr = INTER // 2
    NG: tl.constexpr = INTER // 32
    nb = tl.program_id(1)
    base, m, mm, flat32, a0 = _tile_rows(tiles_ptr, order_ptr, pool_ptr, slot_bytes, tile0 + tl.program_id(0),
                                         BLOCK_M)
    flat = flat32.to(tl.int64)
    cols = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    mc = cols < H
    arow = (a0 + m).to(tl.int64)
    j = tl.arange(0, KH)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, INTER, BLOCK_K):
        kb = k0 // 2 + j
        mk = kb < ROWB
        ae, ao = _load_pairs(act_ptr, arow, mm, kb, mk, INTER, BF16_DOT)
        dl, dh = _mx_operands(base + OFF_DB, base + OFF_DS, cols, mc, kb, mk, ROWB, NG, BF16_DOT)
        acc = tl.dot(ae, dl, acc)
        acc = tl.dot(ao, dh, acc)
    bias = (base + OFF_DBIAS).to(tl.pointer_type(tl.bfloat16))
    y = round_bf16(acc + tl.load(bias + cols, mask=mc, other=0.0).to(tl.float32)[None, :])
    w = tl.load(w_ptr + flat, mask=mm, other=0.0).to(tl.float32)
    tl.store(out_ptr + flat[:, None] * H + cols[None, :], to_bf16(y * w[:, None]), mask=mm[:, None] & mc[None, :])

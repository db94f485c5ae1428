"""Decode attention over the K/V cache: split-K partials, then a combine with the sink logit.

The cache of a layer is [RING, NKV, D] bf16; logical position p lives in row p % RING, so
full-attention layers (RING = context) and sliding layers (RING = kv_ring >= window) share
one kernel. Keys attended: [max(0, pos - WINDOW + 1), pos] (WINDOW = 0 means no window).
Each program takes one K/V head (all GQA query heads of it, padded to 16 rows for tl.dot)
and one contiguous share of the positions; its running max / sum / weighted values go to
scratch, and ``attn_combine_kernel`` merges the shares and the sink: p_j = e^{s_j} /
(e^{sink} + sum_k e^{s_k}).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import round_bf16, to_bf16

NEG: tl.constexpr = tl.constexpr(-1.0e30)  # finite "minus infinity": exp(m_a - m_b) stays finite


@triton.jit
def attn_split_kernel(q_ptr, k_ptr, v_ptr, ctrl_ptr, m_ptr, l_ptr, acc_ptr, scale,
                      NKV: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                      RING: tl.constexpr, WINDOW: tl.constexpr, NSPLIT: tl.constexpr, BLOCK_S: tl.constexpr):
    kvh = tl.program_id(0)
    sp = tl.program_id(1)
    pos = tl.load(ctrl_ptr + 0)
    if WINDOW > 0:
        lo = tl.maximum(pos - WINDOW + 1, 0)
    else:
        lo = pos * 0
    n = pos - lo + 1
    chunk = tl.cdiv(tl.cdiv(n, NSPLIT), BLOCK_S) * BLOCK_S
    start = lo + sp * chunk
    end = tl.minimum(start + chunk, pos + 1)
    g = tl.arange(0, GP)
    d = tl.arange(0, D)
    mg = g < G
    heads = kvh * G + g
    # bf16 values held in fp32: a tf32 tl.dot multiplies them exactly (and the interpreter's
    # bf16 dot is unreliable), so the scores are exact products with fp32 sums
    q = tl.load(q_ptr + heads[:, None] * D + d[None, :], mask=mg[:, None], other=0.0).to(tl.float32)
    m = tl.full([GP], NEG, tl.float32)
    lsum = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, D], tl.float32)
    for s0 in range(start, end, BLOCK_S):
        p = s0 + tl.arange(0, BLOCK_S)
        mp = p < end
        row = (p % RING).to(tl.int64) * NKV + kvh
        k = tl.load(k_ptr + row[:, None] * D + d[None, :], mask=mp[:, None], other=0.0).to(tl.float32)
        sc = tl.dot(q, tl.trans(k)) * scale  # [GP, S] fp32
        sc = tl.where(mp[None, :], sc, NEG)
        m_new = tl.maximum(m, tl.max(sc, 1))
        alpha = tl.exp(m - m_new)
        pr = tl.exp(sc - m_new[:, None])
        pr = tl.where(mp[None, :], pr, 0.0)
        lsum = lsum * alpha + tl.sum(pr, 1)
        v = tl.load(v_ptr + row[:, None] * D + d[None, :], mask=mp[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(round_bf16(pr), v)
        m = m_new
    out = heads * NSPLIT + sp
    tl.store(m_ptr + out, m, mask=mg)
    tl.store(l_ptr + out, lsum, mask=mg)
    tl.store(acc_ptr + out[:, None] * D + d[None, :], acc, mask=mg[:, None])


@triton.jit
def attn_combine_kernel(m_ptr, l_ptr, acc_ptr, sinks_ptr, o_ptr, D: tl.constexpr, NSPLIT: tl.constexpr):
    h = tl.program_id(0)
    s = tl.arange(0, NSPLIT)
    d = tl.arange(0, D)
    m = tl.load(m_ptr + h * NSPLIT + s)
    lsum = tl.load(l_ptr + h * NSPLIT + s)
    acc = tl.load(acc_ptr + (h * NSPLIT + s)[:, None] * D + d[None, :])
    sink = tl.load(sinks_ptr + h).to(tl.float32)
    top = tl.maximum(tl.max(m, 0), sink)
    w = tl.exp(m - top)
    denom = tl.sum(lsum * w, 0) + tl.exp(sink - top)
    o = tl.sum(acc * w[:, None], 0) / denom
    tl.store(o_ptr + h * D + d, to_bf16(o))

"""Prompt attention: a block of T new tokens attends causally to the cache and to itself.

Flash-style (online softmax, nothing of size T x S is materialized), with the per-head sink
logit, the sliding window and GQA. A program owns BLOCK_M consecutive query tokens of one
K/V head and all GP (padded) query heads of that head's group, so each K/V row it loads
serves BLOCK_M x G query rows: row r is token r // GP, head kvh * G + r % GP.

Keys come from two places: positions before ``start`` from the layer's cache ([RING, NKV,
D], position p in row p % RING: the full-context cache or the sliding ring), positions of
the block from the block's own K/V ([T, NKV, D]). The block is written into the cache only
after its attention (by the caller), because a block longer than ``ring - window`` would
otherwise overwrite ring rows that its own first queries still need.

The sink enters as the softmax's starting state (running max = sink, sum = 1, acc = 0), so
p_j = e^{s_j} / (e^{sink} + sum_k e^{s_k}) exactly as in the reference. Probabilities are
rounded to bf16 before the P.V product (as the bf16 reference and the decode kernel do).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .mx import round_bf16, to_bf16

NEG: tl.constexpr = tl.constexpr(-1.0e30)  # finite "minus infinity": exp(m_a - m_b) stays finite


@triton.jit
def _attend(q, k, v, kpos, kvalid, qpos, m_i, l_i, acc, scale, WINDOW: tl.constexpr, BF16_DOT: tl.constexpr):
    """One key tile of the online softmax; returns the updated (max, sum, acc)."""
    s = tl.dot(q, tl.trans(k)) * scale  # [R, N] fp32 (exact products of bf16 values)
    ok = kvalid[None, :] & (kpos[None, :] <= qpos[:, None])
    if WINDOW > 0:
        ok = ok & (kpos[None, :] > qpos[:, None] - WINDOW)
    s = tl.where(ok, s, NEG)
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp(m_i - m_new)
    p = tl.where(ok, tl.exp(s - m_new[:, None]), 0.0)
    l_i = l_i * alpha + tl.sum(p, 1)
    if BF16_DOT:
        pv = tl.dot(to_bf16(p), v)
    else:
        pv = tl.dot(round_bf16(p), v)
    acc = acc * alpha[:, None] + pv
    return m_new, l_i, acc


@triton.jit
def prompt_attn_kernel(q_ptr, kb_ptr, vb_ptr, kc_ptr, vc_ptr, sinks_ptr, o_ptr, start, T, scale,
                       NH: tl.constexpr, NKV: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                       RING: tl.constexpr, WINDOW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BF16_DOT: tl.constexpr):
    """q/o: [T, NH, D] bf16; kb/vb: the block's [T, NKV, D]; kc/vc: the cache [RING, NKV, D].
    Grid: (cdiv(T, BLOCK_M), NKV)."""
    R: tl.constexpr = BLOCK_M * GP
    mt = tl.program_id(0)
    kvh = tl.program_id(1)
    r = tl.arange(0, R)
    tok = mt * BLOCK_M + r // GP
    g = r % GP
    valid = (tok < T) & (g < G)
    head = kvh * G + g
    qpos = start + tok
    d = tl.arange(0, D)
    q_off = (tok.to(tl.int64) * NH + head)[:, None] * D + d[None, :]
    q = tl.load(q_ptr + q_off, mask=valid[:, None], other=0.0)
    if not BF16_DOT:
        q = q.to(tl.float32)
    m_i = tl.load(sinks_ptr + head, mask=valid, other=0.0).to(tl.float32)
    l_i = tl.full([R], 1.0, tl.float32)
    acc = tl.zeros([R, D], tl.float32)

    q_lo = start + mt * BLOCK_M
    q_hi = tl.minimum(q_lo + BLOCK_M, start + T) - 1
    if WINDOW > 0:
        lo = tl.maximum(q_lo - WINDOW + 1, 0)
    else:
        lo = q_lo * 0
    n = tl.arange(0, BLOCK_N)
    # Key tiles start at multiples of BLOCK_N (absolute positions), whatever the block split:
    # a tile that is masked out for a row leaves that row's state exactly unchanged, so every
    # row sees the same sequence of tiles and the result does not depend on the block size.
    for s0 in range((lo // BLOCK_N) * BLOCK_N, q_hi + 1, BLOCK_N):
        kpos = s0 + n
        kvalid = (kpos >= lo) & (kpos <= q_hi)
        in_cache = kvalid & (kpos < start)
        in_block = kvalid & (kpos >= start)
        crow = ((kpos % RING).to(tl.int64) * NKV + kvh)[:, None] * D + d[None, :]
        brow = ((kpos - start).to(tl.int64) * NKV + kvh)[:, None] * D + d[None, :]
        k = tl.where(in_cache[:, None], tl.load(kc_ptr + crow, mask=in_cache[:, None], other=0.0),
                     tl.load(kb_ptr + brow, mask=in_block[:, None], other=0.0))
        v = tl.where(in_cache[:, None], tl.load(vc_ptr + crow, mask=in_cache[:, None], other=0.0),
                     tl.load(vb_ptr + brow, mask=in_block[:, None], other=0.0))
        if not BF16_DOT:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        m_i, l_i, acc = _attend(q, k, v, kpos, kvalid, qpos, m_i, l_i, acc, scale, WINDOW, BF16_DOT)
    o = acc / l_i[:, None]
    tl.store(o_ptr + q_off, to_bf16(o), mask=valid[:, None])

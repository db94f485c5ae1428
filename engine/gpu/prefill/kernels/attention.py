"""Prompt attention: a block of T new tokens attends causally to the cache and to itself.

Flash-style (online softmax, nothing of size T x S is materialized), with the per-head sink
logit, the sliding window and GQA. A program owns BLOCK_M consecutive query tokens of one
K/V head and all GP (padded) query heads of that head's group, so each K/V row it loads
serves BLOCK_M x G query rows: row r is token r // GP, head kvh * G + r % GP.

Keys come from two places: positions before ``base`` (``start`` rounded down to BLOCK_N)
from the layer's cache ([RING, NKV, D], position p in row p % RING: the full-context cache
or the sliding ring), later ones from the block's own K/V, which the caller extends at the
front by the < BLOCK_N cached rows [base, start) so that every key tile has one source. The
block is written into the cache only after its attention (by the caller), because a block
longer than ``ring - window`` would otherwise overwrite ring rows that its own first queries
still need. Offsets are int32: a layer's cache and a block stay far below 2^31 elements.

The sink enters as the softmax's starting state (running max = sink, sum = 1, acc = 0), so
p_j = e^{s_j} / (e^{sink} + sum_k e^{s_k}) exactly as in the reference. Probabilities are
rounded to bf16 before the P.V product (as the bf16 reference and the decode kernel do).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...kernels.common import round_bf16, to_bf16

NEG: tl.constexpr = tl.constexpr(-1.0e30)  # finite "minus infinity": exp(m_a - m_b) stays finite


@triton.jit
def _attend(q, k, v, kpos, kvalid, qpos, m_i, l_i, acc, scale, WINDOW: tl.constexpr, MASK: tl.constexpr,
            BF16_DOT: tl.constexpr):
    """One key tile of the online softmax; returns the updated (max, sum, acc). MASK=False for
    tiles whose keys are all visible to every row (the result is the same, the registers fewer)."""
    s = tl.dot(q, tl.trans(k)) * scale  # [R, N] fp32 (exact products of bf16 values)
    if MASK:
        ok = kvalid[None, :] & (kpos[None, :] <= qpos[:, None])
        if WINDOW > 0:
            ok = ok & (kpos[None, :] > qpos[:, None] - WINDOW)
        s = tl.where(ok, s, NEG)
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    if MASK:
        p = tl.where(ok, p, 0.0)
    l_i = l_i * alpha + tl.sum(p, 1)
    if BF16_DOT:
        pv = tl.dot(to_bf16(p), v)
    else:
        pv = tl.dot(round_bf16(p), v)
    acc = acc * alpha[:, None] + pv
    return m_new, l_i, acc


@triton.jit
def _load_kv(k_ptr, v_ptr, row0, kvh, d, kvalid, NKV: tl.constexpr, D: tl.constexpr, MASK: tl.constexpr,
             BF16_DOT: tl.constexpr):
    """K and V rows ``row0`` ([N] row indices of a [rows, NKV, D] buffer) of head ``kvh``."""
    off = (row0 * NKV + kvh)[:, None] * D + d[None, :]
    if MASK:
        k = tl.load(k_ptr + off, mask=kvalid[:, None], other=0.0)
        v = tl.load(v_ptr + off, mask=kvalid[:, None], other=0.0)
    else:
        k = tl.load(k_ptr + off)
        v = tl.load(v_ptr + off)
    if not BF16_DOT:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    return k, v


@triton.jit
def prompt_attn_kernel(q_ptr, kb_ptr, vb_ptr, kc_ptr, vc_ptr, sinks_ptr, o_ptr, start, base, T, scale,
                       NH: tl.constexpr, NKV: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                       RING: tl.constexpr, WINDOW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BF16_DOT: tl.constexpr):
    """q/o: [T, NH, D] bf16 for positions start ..; kb/vb: K/V [*, NKV, D] of positions
    ``base`` .. start + T - 1 (base = start rounded down to BLOCK_N, the rows before start
    copied from the cache by the caller); kc/vc: the cache [RING, NKV, D].
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
    q_off = (tok * NH + head)[:, None] * D + d[None, :]
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
    # Tiles below ``base`` come from the cache, the others from the (extended) block.
    # (The base-aligned start keeps full tiles in bounds: base..start+T covers every tile
    # below the diagonal, and the cache covers [0, base).)
    first = (lo // BLOCK_N) * BLOCK_N
    if WINDOW > 0:  # a sliding window spans few tiles: mask them all
        for s0 in range(first, base, BLOCK_N):
            kpos = s0 + n
            kvalid = kpos >= lo
            k, v = _load_kv(kc_ptr, vc_ptr, kpos % RING, kvh, d, kvalid, NKV, D, True, BF16_DOT)
            m_i, l_i, acc = _attend(q, k, v, kpos, kvalid, qpos, m_i, l_i, acc, scale, WINDOW, True, BF16_DOT)
        for s0 in range(tl.maximum(first, base), q_hi + 1, BLOCK_N):
            kpos = s0 + n
            kvalid = (kpos >= lo) & (kpos <= q_hi)
            k, v = _load_kv(kb_ptr, vb_ptr, kpos - base, kvh, d, kvalid, NKV, D, True, BF16_DOT)
            m_i, l_i, acc = _attend(q, k, v, kpos, kvalid, qpos, m_i, l_i, acc, scale, WINDOW, True, BF16_DOT)
    else:
        # full attention: cached tiles and block tiles wholly at or before the first query
        # need no mask; only the few tiles on the diagonal do
        for s0 in range(0, base, BLOCK_N):
            kpos = s0 + n
            k, v = _load_kv(kc_ptr, vc_ptr, kpos % RING, kvh, d, kpos >= 0, NKV, D, False, BF16_DOT)
            m_i, l_i, acc = _attend(q, k, v, kpos, kpos >= 0, qpos, m_i, l_i, acc, scale, 0, False, BF16_DOT)
        diag = tl.maximum(((q_lo + 1) // BLOCK_N) * BLOCK_N, base)
        for s0 in range(base, diag, BLOCK_N):
            kpos = s0 + n
            k, v = _load_kv(kb_ptr, vb_ptr, kpos - base, kvh, d, kpos >= 0, NKV, D, False, BF16_DOT)
            m_i, l_i, acc = _attend(q, k, v, kpos, kpos >= 0, qpos, m_i, l_i, acc, scale, 0, False, BF16_DOT)
        for s0 in range(diag, q_hi + 1, BLOCK_N):
            kpos = s0 + n
            kvalid = kpos <= q_hi
            k, v = _load_kv(kb_ptr, vb_ptr, kpos - base, kvh, d, kvalid, NKV, D, True, BF16_DOT)
            m_i, l_i, acc = _attend(q, k, v, kpos, kvalid, qpos, m_i, l_i, acc, scale, 0, True, BF16_DOT)
    o = acc / l_i[:, None]
    tl.store(o_ptr + q_off, to_bf16(o), mask=valid[:, None])

"""Dense per-layer decode kernels: token start, MoE combine, RMSNorm+QKV+RoPE, o_proj, router.

Each kernel works on one token (decode) and reads every varying scalar (position, step)
from the device control block, so the launches can be captured once into a CUDA graph and
replayed for every token. Arithmetic is fp32; values are rounded to bf16 exactly where the
bf16 reference (engine/reference.py) rounds them, so the two agree to bf16 noise.

Control block (int32, device): see ``CTRL_*`` below; the host writes a pinned copy each
token and ``start_kernel`` copies it to the device.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import round_bf16, to_bf16

# control block layout (int32 slots)
CTRL_POS = 0  # position of the token being decoded
CTRL_STEP = 1  # monotonically increasing sequence number; flags echo it back
CTRL_TOKEN = 2
CTRL_SEED = 3
CTRL_TEMP_BITS = 4  # fp32 temperature bits; 0.0 = greedy
CTRL_SIZE = 8


@triton.jit
def start_kernel(ctrl_host_ptr, ctrl_dev_ptr, embed_host_ptr, resid_ptr, H: tl.constexpr,
                 CTRL_N: tl.constexpr, BLOCK: tl.constexpr):
    """Copy the control block and the embedding row (both in pinned host memory) to the device."""
    pid = tl.program_id(0)
    if pid == 0:
        c = tl.arange(0, CTRL_N)
        tl.store(ctrl_dev_ptr + c, tl.load(ctrl_host_ptr + c))
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < H
    tl.store(resid_ptr + offs, tl.load(embed_host_ptr + offs, mask=m), mask=m)


@triton.jit
def _combine(resid_ptr, gpu_moe_ptr, cpu_moe_ptr, start, H: tl.constexpr, BLOCK: tl.constexpr):
    offs = start + tl.arange(0, BLOCK)
    m = offs < H
    x = tl.load(resid_ptr + offs, mask=m, other=0.0).to(tl.float32)
    moe = tl.load(gpu_moe_ptr + offs, mask=m, other=0.0) + tl.load(cpu_moe_ptr + offs, mask=m, other=0.0)
    tl.store(resid_ptr + offs, to_bf16(x + round_bf16(moe)), mask=m)


@triton.jit
def combine_kernel(resid_ptr, gpu_moe_ptr, cpu_moe_ptr, H: tl.constexpr, BLOCK: tl.constexpr):
    """x = bf16(x + bf16(gpu experts + cpu experts)): the previous layer's MoE residual add.

    ``cpu_moe_ptr`` points at pinned host memory (read zero-copy, once per element)."""
    _combine(resid_ptr, gpu_moe_ptr, cpu_moe_ptr, tl.program_id(0) * BLOCK, H, BLOCK)


@triton.jit
def _nap(ns: tl.constexpr):
    """Sleep about ``ns`` nanoseconds (PTX nanosleep, sm_70+): fewer PCIe reads while a flag is polled."""
    tl.inline_asm_elementwise("nanosleep.u32 $1;\n\tmov.u32 $0, 0;", "=r,r", [tl.full((1,), ns, tl.int32)],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def combine_wait_kernel(resid_ptr, gpu_moe_ptr, cpu_moe_ptr, done_ptr, ctrl_ptr, late_ptr, H: tl.constexpr,
                        BLOCK: tl.constexpr, MAX_POLLS: tl.constexpr, ONE: tl.constexpr = False,
                        NAP_NS: tl.constexpr = 0):
    """``combine_kernel`` launched before the host has the CPU experts' result: it waits until
    the host's flag ``done_ptr`` (pinned) holds this step, then combines. The wait is an acquire
    at system scope (the host writes the result, then the flag) followed by a CTA barrier, so no
    thread's loads of the result move before it; the polls before it are plain volatile loads
    (one PCIe read each). The wait is bounded (a kernel that runs for seconds is reset by the
    driver on Windows): after MAX_POLLS polls it writes the step to ``late_ptr`` (pinned) and goes
    on, and the host decodes that token again the plain way.

    ``ONE``: a single program polls and combines all of H, and ``NAP_NS`` > 0 sleeps that long
    between its polls (``EngineSettings.early_poll_ns``): far fewer reads over PCIe while the copy
    lane's copies and kernels use it (beside back-to-back polls from every program they ran at
    half speed, engine/gpu/copy_lane.py). The combine's arithmetic is the same either way."""
    step = tl.load(ctrl_ptr + 1)
    seen = tl.load(done_ptr, volatile=True)
    polls = 0
    while (seen != step) & (polls < MAX_POLLS):
        if NAP_NS > 0:
            _nap(NAP_NS)
        seen = tl.load(done_ptr, volatile=True)
        polls += 1
    if seen != step:
        tl.store(late_ptr, step)
    tl.atomic_add(done_ptr, 0, sem="acquire", scope="sys")  # one thread's acquire load ...
    tl.debug_barrier()  # ... ordered before every thread's loads below
    if ONE:
        for i in tl.static_range(0, (H + BLOCK - 1) // BLOCK):
            _combine(resid_ptr, gpu_moe_ptr, cpu_moe_ptr, i * BLOCK, H, BLOCK)
    else:
        _combine(resid_ptr, gpu_moe_ptr, cpu_moe_ptr, tl.program_id(0) * BLOCK, H, BLOCK)


@triton.jit
def _rstd(x_ptr, H: tl.constexpr, eps, BLOCK_H: tl.constexpr):
    offs = tl.arange(0, BLOCK_H)
    x = tl.load(x_ptr + offs, mask=offs < H, other=0.0).to(tl.float32)
    return 1.0 / tl.sqrt(tl.sum(x * x, 0) / H + eps)


@triton.jit
def _normed_chunk(x_ptr, gain_ptr, offs, m, rstd):
    """bf16(gain * (x * rstd)) for one chunk, as fp32."""
    x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
    g = tl.load(gain_ptr + offs, mask=m, other=0.0).to(tl.float32)
    return round_bf16(g * (x * rstd))


@triton.jit
def qkv_rope_kernel(x_ptr, gain_ptr, w_ptr, b_ptr, cos_ptr, sin_ptr, ctrl_ptr,
                    q_ptr, k_cache_ptr, v_cache_ptr, eps,
                    H: tl.constexpr, NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr,
                    RING: tl.constexpr, PAIRS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    """RMSNorm -> [q; k; v] = W t + b -> RoPE (q, k) -> q to ``q_ptr``, k/v into the cache.

    ``w_ptr`` is the row-concatenated [NQ + 2 NKV, H] weight. A program owns PAIRS RoPE pairs
    (rows i and i + D/2 of a head) so the rotation needs no other program's output."""
    HALF: tl.constexpr = D // 2
    ROWS: tl.constexpr = NQ + 2 * NKV
    pid = tl.program_id(0)
    pos = tl.load(ctrl_ptr + 0)
    rstd = _rstd(x_ptr, H, eps, BLOCK_H)
    g = pid * PAIRS + tl.arange(0, PAIRS)
    head = g // HALF
    i = g % HALF
    row1 = head * D + i
    row2 = row1 + HALF
    valid = row1 < ROWS
    acc1 = tl.zeros([PAIRS], tl.float32)
    acc2 = tl.zeros([PAIRS], tl.float32)
    for k0 in range(0, H, BLOCK_K):
        ok = k0 + tl.arange(0, BLOCK_K)
        mk = ok < H
        t = _normed_chunk(x_ptr, gain_ptr, ok, mk, rstd)
        wm = valid[:, None] & mk[None, :]
        w1 = tl.load(w_ptr + row1[:, None] * H + ok[None, :], mask=wm, other=0.0).to(tl.float32)
        w2 = tl.load(w_ptr + row2[:, None] * H + ok[None, :], mask=wm, other=0.0).to(tl.float32)
        acc1 += tl.sum(w1 * t[None, :], 1)
        acc2 += tl.sum(w2 * t[None, :], 1)
    h1 = round_bf16(acc1 + tl.load(b_ptr + row1, mask=valid, other=0.0).to(tl.float32))
    h2 = round_bf16(acc2 + tl.load(b_ptr + row2, mask=valid, other=0.0).to(tl.float32))
    # RoPE exactly as the bf16 reference: each product and the sum rounded to bf16
    c = tl.load(cos_ptr + pos * HALF + i)
    s = tl.load(sin_ptr + pos * HALF + i)
    r1 = round_bf16(round_bf16(h1 * c) - round_bf16(h2 * s))
    r2 = round_bf16(round_bf16(h2 * c) + round_bf16(h1 * s))
    rot = row1 < NQ + NKV
    o1 = tl.where(rot, r1, h1)
    o2 = tl.where(rot, r2, h2)
    is_q = row1 < NQ
    tl.store(q_ptr + row1, o1.to(tl.bfloat16), mask=valid & is_q)
    tl.store(q_ptr + row2, o2.to(tl.bfloat16), mask=valid & is_q)
    slot_base = (pos % RING).to(tl.int64) * NKV
    is_k = (row1 >= NQ) & (row1 < NQ + NKV)
    tl.store(k_cache_ptr + slot_base + (row1 - NQ), o1.to(tl.bfloat16), mask=valid & is_k)
    tl.store(k_cache_ptr + slot_base + (row2 - NQ), o2.to(tl.bfloat16), mask=valid & is_k)
    is_v = row1 >= NQ + NKV
    tl.store(v_cache_ptr + slot_base + (row1 - NQ - NKV), o1.to(tl.bfloat16), mask=valid & is_v)
    tl.store(v_cache_ptr + slot_base + (row2 - NQ - NKV), o2.to(tl.bfloat16), mask=valid & is_v)


@triton.jit
def oproj_residual_kernel(o_ptr, w_ptr, b_ptr, resid_ptr, H: tl.constexpr, K: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """x = bf16(x + bf16(W_o o + b_o)) for BLOCK_N rows of the residual (in place)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mr = rows < H
    acc = tl.zeros([BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ok = k0 + tl.arange(0, BLOCK_K)
        mk = ok < K
        o = tl.load(o_ptr + ok, mask=mk, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + rows[:, None] * K + ok[None, :], mask=mr[:, None] & mk[None, :], other=0.0)
        acc += tl.sum(w.to(tl.float32) * o[None, :], 1)
    a = round_bf16(acc + tl.load(b_ptr + rows, mask=mr, other=0.0).to(tl.float32))
    x = tl.load(resid_ptr + rows, mask=mr, other=0.0).to(tl.float32)
    tl.store(resid_ptr + rows, to_bf16(x + a), mask=mr)


@triton.jit
def router_logits_kernel(x_ptr, gain_ptr, w_ptr, b_ptr, logits_ptr, te_ptr, to_ptr, t_host_ptr, eps,
                         H: tl.constexpr, E: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_H: tl.constexpr,
                         BLOCK_K: tl.constexpr):
    """t = RMSNorm(x); router logits for BLOCK_E experts (bf16-rounded, stored fp32).

    Program 0 also publishes t: split into even/odd elements on the device (the layout the
    MXFP4 GEMVs read) and fp32 in pinned host memory (the CPU experts read it without a copy)."""
    pid = tl.program_id(0)
    rstd = _rstd(x_ptr, H, eps, BLOCK_H)
    rows = pid * BLOCK_E + tl.arange(0, BLOCK_E)
    mr = rows < E
    acc = tl.zeros([BLOCK_E], tl.float32)
    for k0 in range(0, H, BLOCK_K):
        ok = k0 + tl.arange(0, BLOCK_K)
        mk = ok < H
        t = _normed_chunk(x_ptr, gain_ptr, ok, mk, rstd)
        if pid == 0:
            even = (ok % 2) == 0
            tl.store(te_ptr + ok // 2, t, mask=mk & even)
            tl.store(to_ptr + ok // 2, t, mask=mk & ~even)
            tl.store(t_host_ptr + ok, t, mask=mk)
        w = tl.load(w_ptr + rows[:, None] * H + ok[None, :], mask=mr[:, None] & mk[None, :], other=0.0)
        acc += tl.sum(w.to(tl.float32) * t[None, :], 1)
    logit = round_bf16(acc + tl.load(b_ptr + rows, mask=mr, other=0.0).to(tl.float32))
    tl.store(logits_ptr + rows, logit, mask=mr)


@triton.jit
def router_topk_kernel(logits_ptr, table_ptr, ctrl_ptr, route_dev_ptr, route_host_ptr, flag_ptr, layer,
                       E: tl.constexpr, TOPK: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_T: tl.constexpr):
    """Top-k of the router logits, softmax over the k, slot lookup, publish the routing.

    route (int32 x 4*BLOCK_T, device and pinned host): [ids | weight bits | slot | hit].
    The slot table (``table_ptr`` = row of this layer, pinned host memory) maps expert -> VRAM
    slot or -1. The flag (pinned) is set to the control step last, with release semantics, so
    a host thread that sees the flag also sees the routing and the normalized hidden state."""
    offs = tl.arange(0, BLOCK_E)
    v = tl.load(logits_ptr + offs, mask=offs < E, other=float("-inf"))
    kk = tl.arange(0, BLOCK_T)
    ids = tl.zeros([BLOCK_T], tl.int32)
    vals = tl.full([BLOCK_T], float("-inf"), tl.float32)
    for k in tl.static_range(TOPK):
        best = tl.max(v, 0)
        idx = tl.min(tl.where(v == best, offs, BLOCK_E), 0)  # lowest index among ties
        ids = tl.where(kk == k, idx, ids)
        vals = tl.where(kk == k, best, vals)
        v = tl.where(offs == idx, float("-inf"), v)
    mk = kk < TOPK
    top = tl.max(vals, 0)
    p = tl.where(mk, tl.exp(vals - top), 0.0)
    w = round_bf16(p / tl.sum(p, 0))
    slot = tl.load(table_ptr + ids, mask=mk, other=-1)
    hit = (slot >= 0).to(tl.int32)
    wbits = w.to(tl.int32, bitcast=True)
    tl.store(route_dev_ptr + kk, ids, mask=mk)
    tl.store(route_dev_ptr + BLOCK_T + kk, wbits, mask=mk)
    tl.store(route_dev_ptr + 2 * BLOCK_T + kk, slot, mask=mk)
    tl.store(route_host_ptr + kk, ids, mask=mk)
    tl.store(route_host_ptr + BLOCK_T + kk, wbits, mask=mk)
    tl.store(route_host_ptr + 2 * BLOCK_T + kk, slot, mask=mk)
    tl.store(route_host_ptr + 3 * BLOCK_T + kk, hit, mask=mk)
    step = tl.load(ctrl_ptr + 1)
    tl.atomic_xchg(flag_ptr + layer, step, sem="release", scope="sys")

"""Tail of a decode step: final RMSNorm, lm_head, and greedy or Gumbel-max sampling.

``lm_head_kernel`` writes bf16-rounded fp32 logits and, per program, the best (score,
index) of its rows; ``pick_kernel`` reduces those partials to the token id, writes it to
the device and to pinned host memory, then raises the tail flag (release). Score = logit
when the temperature is 0, else logit / T + Gumbel noise from a counter-based hash of
(seed, position, token id), so sampling is reproducible and needs no RNG state in the graph.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import round_bf16


@triton.jit
def uniform_hash(seed, pos, idx):
    """Uniform (0, 1) from three int32 values (murmur3-style finalizer on uint32)."""
    x = idx.to(tl.uint32) * 0x9E3779B1 + seed.to(tl.uint32) * 0x85EBCA77 + pos.to(tl.uint32) * 0xC2B2AE3D
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    x = x ^ (x >> 16)
    return ((x >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)


@triton.jit
def lm_head_kernel(x_ptr, gain_ptr, w_ptr, ctrl_ptr, logits_ptr, part_val_ptr, part_idx_ptr, eps,
                   H: tl.constexpr, V: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr,
                   BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    offs_h = tl.arange(0, BLOCK_H)
    xf = tl.load(x_ptr + offs_h, mask=offs_h < H, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, 0) / H + eps)
    rows = pid * BLOCK_V + tl.arange(0, BLOCK_V)
    mr = rows < V
    r64 = rows.to(tl.int64)
    acc = tl.zeros([BLOCK_V], tl.float32)
    for k0 in range(0, H, BLOCK_K):
        ok = k0 + tl.arange(0, BLOCK_K)
        mk = ok < H
        x = tl.load(x_ptr + ok, mask=mk, other=0.0).to(tl.float32)
        g = tl.load(gain_ptr + ok, mask=mk, other=0.0).to(tl.float32)
        t = round_bf16(g * (x * rstd))
        w = tl.load(w_ptr + r64[:, None] * H + ok[None, :], mask=mr[:, None] & mk[None, :], other=0.0)
        acc += tl.sum(w.to(tl.float32) * t[None, :], 1)
    logit = round_bf16(acc)
    tl.store(logits_ptr + rows, logit, mask=mr)
    temp = tl.load(ctrl_ptr + 4).to(tl.float32, bitcast=True)
    score = logit
    if temp > 0:
        u = uniform_hash(tl.load(ctrl_ptr + 3), tl.load(ctrl_ptr + 0), rows)
        score = logit / temp - tl.log(-tl.log(u))
    score = tl.where(mr, score, float("-inf"))
    best = tl.max(score, 0)
    idx = tl.min(tl.where(score == best, rows, V), 0)
    tl.store(part_val_ptr + pid, best)
    tl.store(part_idx_ptr + pid, idx)


@triton.jit
def pick_kernel(part_val_ptr, part_idx_ptr, ctrl_ptr, out_dev_ptr, out_host_ptr, flag_ptr,
                NPART: tl.constexpr, BLOCK: tl.constexpr):
    """argmax over the partials; ties go to the lowest token id (like torch.argmax)."""
    offs = tl.arange(0, BLOCK)
    best_v = tl.full([BLOCK], float("-inf"), tl.float32)
    best_i = tl.full([BLOCK], 2147483647, tl.int32)
    for p0 in range(0, NPART, BLOCK):
        o = p0 + offs
        m = o < NPART
        v = tl.load(part_val_ptr + o, mask=m, other=float("-inf"))
        i = tl.load(part_idx_ptr + o, mask=m, other=2147483647)
        better = (v > best_v) | ((v == best_v) & (i < best_i))
        best_v = tl.where(better, v, best_v)
        best_i = tl.where(better, i, best_i)
    top = tl.max(best_v, 0)
    tok = tl.min(tl.where(best_v == top, best_i, 2147483647), 0)
    tl.store(out_dev_ptr, tok)
    tl.store(out_host_ptr, tok)
    tl.atomic_xchg(flag_ptr, tl.load(ctrl_ptr + 1), sem="release", scope="sys")

"""Prompt attention under TRITON_INTERPRET=1: cache + block keys, sinks, window, GQA, ring."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest
import torch

pytest.importorskip("triton")

from engine.config import ModelConfig
from engine.gpu.layout import ExpertLayout
from engine.gpu.prefill.launch import PrefillKernels
from engine.gpu.prefill.tiles import PrefillTiles
from engine.synth import PRESETS, shape_with

BF = torch.bfloat16
TINY = ModelConfig.from_dict(PRESETS["tiny"].config_dict())
# GQA group of 3 (padded to 4 rows per token) and head_dim 32
GQA3 = ModelConfig.from_dict(shape_with("tiny", num_attention_heads=6, num_key_value_heads=2,
                                        head_dim=32).config_dict())


def kernels(cfg: ModelConfig, attn_m: int = 16, attn_n: int = 16) -> PrefillKernels:
    tiles = PrefillTiles.for_config(cfg, interpret=True)
    from dataclasses import replace

    return PrefillKernels(cfg, replace(tiles, attn_m=attn_m, attn_n=attn_n), ExpertLayout.for_config(cfg))


def expected(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, sinks: torch.Tensor, start: int,
             window: int, group: int) -> torch.Tensor:
    """float64 attention of block queries q [T, NH, D] over keys/vals [start + T, NKV, D]."""
    t, nh, d = q.shape
    out = torch.empty(t, nh, d, dtype=torch.float64)
    for i in range(t):
        pos = start + i
        lo = max(0, pos - window + 1) if window else 0
        for h in range(nh):
            k = keys[lo : pos + 1, h // group].double()
            s = k @ q[i, h].double() * d ** -0.5
            p = torch.softmax(torch.cat([s, sinks[h : h + 1].double()]), 0)[:-1]
            out[i, h] = p @ vals[lo : pos + 1, h // group].double()
    return out


@pytest.mark.parametrize("cfg,start,t,window,ring,attn_m", [
    (TINY, 0, 40, 0, 64, 16),     # fresh prompt, full attention, ragged last tile
    (TINY, 23, 30, 0, 64, 16),    # continuation: keys from the cache and the block
    (TINY, 37, 45, 8, 16, 16),    # sliding window over a ring shorter than the block
    (TINY, 5, 9, 8, 8, 8),        # ring == window, start inside the first window
    (GQA3, 13, 21, 8, 16, 8),     # GQA group 3 padded to 4, head_dim 32
])
def test_prompt_attention_matches_reference(cfg: ModelConfig, start: int, t: int, window: int, ring: int,
                                            attn_m: int) -> None:
    g = torch.Generator().manual_seed(start * 100 + t)
    nkv, d, nh = cfg.num_key_value_heads, cfg.head_dim, cfg.num_attention_heads
    allk = torch.randn(start + t, nkv, d, generator=g).to(BF)
    allv = torch.randn(start + t, nkv, d, generator=g).to(BF)
    q = torch.randn(t, nh, d, generator=g).to(BF)
    sinks = torch.randn(nh, generator=g).to(BF)
    kc = torch.full((ring, nkv, d), float("nan"), dtype=BF)
    vc = kc.clone()
    for p in range(max(0, start - ring), start):  # what the ring holds before the block
        kc[p % ring], vc[p % ring] = allk[p], allv[p]
    out = torch.full((t, nh, d), float("nan"), dtype=BF)
    kernels(cfg, attn_m=attn_m).attention(q, allk[start:].contiguous(), allv[start:].contiguous(), kc, vc, sinks,
                                          start, window, out)
    exp = expected(q, allk, allv, sinks.float(), start, window, cfg.gqa_group)
    err = (out.double() - exp).norm() / exp.norm()
    assert err < 1e-2, float(err)
    # per token too: no row may be far off (a wrong mask shows up as one bad row)
    row_err = (out.double() - exp).flatten(1).norm(dim=1) / exp.flatten(1).norm(dim=1)
    assert float(row_err.max()) < 3e-2


def test_sink_only_softmax_is_exact_for_single_token() -> None:
    """One token, no cache: p = e^s / (e^s + e^sink); output = p * v exactly (to bf16)."""
    cfg = TINY
    nkv, d, nh = cfg.num_key_value_heads, cfg.head_dim, cfg.num_attention_heads
    g = torch.Generator().manual_seed(9)
    q = torch.randn(1, nh, d, generator=g).to(BF)
    k = torch.randn(1, nkv, d, generator=g).to(BF)
    v = torch.randn(1, nkv, d, generator=g).to(BF)
    sinks = torch.randn(nh, generator=g).to(BF)
    kc = torch.zeros(8, nkv, d, dtype=BF)
    out = torch.zeros(1, nh, d, dtype=BF)
    kernels(cfg).attention(q, k, v, kc, kc.clone(), sinks, 0, 0, out)
    exp = expected(q, k, v, sinks.float(), 0, 0, cfg.gqa_group)
    assert torch.allclose(out.double(), exp, rtol=1e-2, atol=1e-2)

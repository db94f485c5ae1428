"""Grouped MXFP4 expert GEMMs (TRITON_INTERPRET=1) against per-expert reference math."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from engine.config import ModelConfig
from engine.gpu.layout import ExpertLayout
from engine.gpu.prefill.grouping import plan_layer
from engine.gpu.prefill.launch import PrefillKernels
from engine.gpu.prefill.tiles import PrefillTiles
from engine.mxfp4 import dequantize
from engine.reference import expert_forward
from engine.synth import PRESETS

BF = torch.bfloat16
CFG = ModelConfig.from_dict(PRESETS["tiny"].config_dict())


def random_expert(cfg: ModelConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    h, i = cfg.hidden_size, cfg.intermediate_size

    def scales(rows: int, groups: int, fan_in: int) -> np.ndarray:
        s0 = 127 + round(math.log2(1.0 / (2.9 * math.sqrt(fan_in))))
        return (s0 + rng.integers(-1, 2, (rows, groups))).astype(np.uint8)

    def bias(n: int) -> np.ndarray:
        return torch.from_numpy(rng.normal(0, 0.1, n).astype(np.float32)).to(BF).view(torch.uint16).numpy()

    return {
        "gate_up_proj_blocks": rng.integers(0, 256, (2 * i, h // 32, 16), dtype=np.uint8),
        "gate_up_proj_scales": scales(2 * i, h // 32, h),
        "gate_up_proj_bias": bias(2 * i),
        "down_proj_blocks": rng.integers(0, 256, (h, i // 32, 16), dtype=np.uint8),
        "down_proj_scales": scales(h, i // 32, i),
        "down_proj_bias": bias(h),
    }


def expert_ref(parts: dict[str, np.ndarray], t: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    w1 = dequantize(parts["gate_up_proj_blocks"], parts["gate_up_proj_scales"]).double()
    w2 = dequantize(parts["down_proj_blocks"], parts["down_proj_scales"]).double()
    b1 = torch.from_numpy(parts["gate_up_proj_bias"].copy()).view(BF).double()
    b2 = torch.from_numpy(parts["down_proj_bias"].copy()).view(BF).double()
    return expert_forward(t.double(), w1, b1, w2, b2, cfg.swiglu_limit, cfg.swiglu_alpha)


def setup(n_tokens: int, n_experts: int, seed: int):  # type: ignore[no-untyped-def]
    cfg = CFG
    lay = ExpertLayout.for_config(cfg)
    rng = np.random.default_rng(seed)
    experts = [random_expert(cfg, rng) for _ in range(n_experts)]
    pool = np.zeros(n_experts * lay.slot_bytes, dtype=np.uint8)
    for s, parts in enumerate(experts):  # expert e lives in slot n_experts - 1 - e (slot != id)
        slot = n_experts - 1 - s
        lay.pack_into(pool[slot * lay.slot_bytes : (slot + 1) * lay.slot_bytes], parts)
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(n_tokens, cfg.hidden_size, generator=g).to(BF)
    k = cfg.num_experts_per_tok
    # skewed routing: expert 0 gets many tokens (several tiles), the last ones few
    p = np.exp(-0.5 * np.arange(n_experts))
    ids = np.stack([rng.choice(n_experts, k, replace=False, p=p / p.sum()) for _ in range(n_tokens)])
    w = torch.softmax(torch.randn(n_tokens, k, generator=g), 1).to(BF)
    return cfg, lay, experts, torch.from_numpy(pool), t, torch.from_numpy(ids), w


@pytest.mark.parametrize("n_tokens,max_rows,gemm_m", [(40, 1 << 20, 32), (70, 48, 16)])
def test_grouped_gemm_matches_per_expert_reference(n_tokens: int, max_rows: int, gemm_m: int) -> None:
    n_experts = 8
    cfg, lay, experts, pool, t, ids, w = setup(n_tokens, n_experts, seed=n_tokens)
    tiles = replace(PrefillTiles.for_config(cfg, interpret=True), gemm_m=gemm_m)
    kern = PrefillKernels(cfg, tiles, lay)
    flat = ids.reshape(-1)
    order = torch.sort(flat, stable=True).indices.to(torch.int32)
    counts = np.bincount(flat.numpy(), minlength=n_experts)
    table = np.arange(n_experts - 1, -1, -1, dtype=np.int32)
    table[n_experts - 1] = -1  # the rarest expert is not resident: left to the CPU
    plan = plan_layer(counts, table, n_experts, 0, cpu_max=1 << 30, block_m=gemm_m, max_rows=max_rows)
    assert plan.cpu == [n_experts - 1] and counts[n_experts - 1] > 0
    if max_rows < 1 << 20:
        assert len(plan.waves) > 1
    assert max(int(n) for n in plan.tiles[:, 2]) <= gemm_m
    k = cfg.num_experts_per_tok
    contrib = torch.full((n_tokens * k, cfg.hidden_size), float("nan"), dtype=BF)
    act = torch.full((min(max_rows, n_tokens * k), cfg.intermediate_size), float("nan"), dtype=BF)
    tiles_t = torch.from_numpy(plan.tiles)
    for wave in plan.waves:
        kern.experts(pool, t, order, w.reshape(-1), tiles_t, wave.tile0, wave.n_tiles, act, contrib)
    errs = []
    for e in range(n_experts):
        rows = torch.nonzero(flat == e).flatten()
        if e in plan.cpu:  # never written by the GPU path
            assert torch.isnan(contrib[rows].float()).all()
            continue
        tok = rows // k
        exp = expert_ref(experts[e], t[tok], cfg) * w.reshape(-1)[rows].double()[:, None]
        got = contrib[rows].double()
        errs.append(float((got - exp).norm() / exp.norm()))
        row_err = (got - exp).norm(dim=1) / exp.norm(dim=1)
        assert float(row_err.max()) < 3e-2, (e, row_err)
    assert max(errs) < 1e-2, errs


def test_gemm_decodes_mxfp4_exactly() -> None:
    """One-hot inputs pick single weight columns: gate_up must reproduce the dequantized column
    (+ bias, SwiGLU) up to the bf16 roundings the kernel applies, i.e. exactly in those terms."""
    cfg = CFG
    lay = ExpertLayout.for_config(cfg)
    rng = np.random.default_rng(5)
    parts = random_expert(cfg, rng)
    pool = np.zeros(lay.slot_bytes, dtype=np.uint8)
    lay.pack_into(pool, parts)
    h = cfg.hidden_size
    cols = [0, 1, 31, 32, h - 1]
    t = torch.zeros(len(cols), h, dtype=BF)
    for r, c in enumerate(cols):
        t[r, c] = 1.0
    k = cfg.num_experts_per_tok
    ids = torch.zeros(len(cols), k, dtype=torch.int64)
    ids[:, 1:] = torch.arange(1, k)  # only column 0 goes to expert 0 (slot 0)
    order = torch.sort(ids.reshape(-1), stable=True).indices.to(torch.int32)
    tiles = torch.tensor([[0, 0, len(cols), 0]], dtype=torch.int32)
    kern = PrefillKernels(cfg, PrefillTiles.for_config(cfg, interpret=True), lay)
    act = torch.zeros(len(cols), cfg.intermediate_size, dtype=BF)
    kern.gate_up(torch.from_numpy(pool), t, order, tiles, 0, 1, act)
    w1 = dequantize(parts["gate_up_proj_blocks"], parts["gate_up_proj_scales"])
    b1 = torch.from_numpy(parts["gate_up_proj_bias"].copy()).view(BF).float()
    from engine.reference import swiglu

    for r, c in enumerate(cols):
        hcol = (w1[:, c] + b1).to(BF).float()
        exp = swiglu(hcol, cfg.swiglu_limit, cfg.swiglu_alpha).to(BF)
        assert torch.equal(act[r], exp), (c, (act[r].float() - exp.float()).abs().max())

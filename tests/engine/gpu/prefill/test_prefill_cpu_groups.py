"""Small non-resident groups on the CPU (native multi-token kernel, PyTorch fallback) vs reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.checkpoint import Checkpoint, bf16_bits_to_tensor
from engine.gpu.prefill.cpu_groups import NativeGroups, TorchGroups
from engine.mxfp4 import dequantize
from engine.reference import expert_forward


def reference(ck: Checkpoint, layer: int, e: int, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    a = ck.expert_arrays(layer, e)
    w1 = dequantize(a["gate_up_proj_blocks"], a["gate_up_proj_scales"]).double()
    w2 = dequantize(a["down_proj_blocks"], a["down_proj_scales"]).double()
    b1 = bf16_bits_to_tensor(a["gate_up_proj_bias"]).double()
    b2 = bf16_bits_to_tensor(a["down_proj_bias"]).double()
    cfg = ck.config
    y = expert_forward(torch.from_numpy(x).double(), w1, b1, w2, b2, cfg.swiglu_limit, cfg.swiglu_alpha)
    return (y * torch.from_numpy(w).double()[:, None]).numpy()


def groups(kind: str, ck: Checkpoint):  # type: ignore[no-untyped-def]
    if kind == "torch":
        return TorchGroups(ck)
    try:
        return NativeGroups(ck, threads=2)
    except Exception as exc:  # extension not built here
        pytest.skip(f"native kernel unavailable: {exc}")


@pytest.mark.parametrize("kind", ["native", "torch"])
@pytest.mark.parametrize("n", [1, 5, 16, 37])  # 37: several native calls of <= 16 tokens
def test_cpu_group_matches_reference(tiny_model, kind: str, n: int) -> None:
    ck = Checkpoint.open(tiny_model)
    cg = groups(kind, ck)
    rng = np.random.default_rng(n)
    x = torch.from_numpy(rng.normal(size=(n, ck.config.hidden_size)).astype(np.float32)).to(torch.bfloat16)
    x = x.float().numpy()  # bf16 values, as the GPU hands them over
    w = rng.uniform(0.1, 0.6, n).astype(np.float32)
    out = np.full_like(x, np.nan)
    cg.compute(2, 5, x, w, out)
    exp = reference(ck, 2, 5, x, w)
    assert np.isfinite(out).all()
    err = np.linalg.norm(out - exp) / np.linalg.norm(exp)
    # torch: fp32 throughout, only summation-order noise. native: the prompt path's bf16 input mode
    # rounds the SwiGLU activation to bf16 as the model does (x is bf16 already): one bf16 rounding
    # (unit roundoff 2^-9) of the down projection's input, so at most a few 1e-3 in relative L2
    assert err < (4e-3 if kind == "native" else 1e-5), err


@pytest.mark.parametrize("kind", ["native", "torch"])
def test_groups_in_one_call_give_the_bits_of_one_call_per_expert(tiny_model, kind: str) -> None:
    """The prompt's CPU job hands all its experts over at once (compute_groups); each group's rows
    are bit for bit what a call for that expert alone gives."""
    ck = Checkpoint.open(tiny_model)
    cg = groups(kind, ck)
    experts, counts = [0, 3, 5, 6], np.array([4, 1, 17, 9])
    n = int(counts.sum())
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.normal(size=(n, ck.config.hidden_size)).astype(np.float32)).to(torch.bfloat16)
    x = x.float().numpy()
    w = rng.uniform(0.1, 0.6, n).astype(np.float32)
    out = np.full_like(x, np.nan)
    cg.compute_groups(1, experts, counts, x, w, out)
    at = 0
    for e, c in zip(experts, counts.tolist(), strict=True):
        one = np.full((c, x.shape[1]), np.nan, np.float32)
        cg.compute(1, e, x[at : at + c], w[at : at + c], one)
        assert np.array_equal(out[at : at + c], one), e
        at += c

"""The CPU engine's bf16 projections as PyTorch's bf16 GEMM (ReferenceModel(bf16_gemm=True), used by
ReferenceBackend where cpu_has_bf16_gemm()): prompt logits stay in the bf16 envelope of the fp32
reference, as close as the fp32-GEMM bf16 path, and one-token steps are unchanged."""

from __future__ import annotations

import torch

from engine.backend import ReferenceBackend
from engine.checkpoint import Checkpoint
from engine.reference import ReferenceModel, cpu_has_bf16_gemm


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_bf16_gemm_prompt_within_bf16_envelope(tiny_model):
    ck = Checkpoint.open(tiny_model)
    ids = list(range(3, 43))
    want = ReferenceModel(ck, torch.float32).forward(ids)
    plain = ReferenceModel(ck, torch.bfloat16).forward(ids)
    gemm = ReferenceModel(ck, torch.bfloat16, bf16_gemm=True).forward(ids)
    env = rel_l2(plain, want)
    assert 0 < env < 0.05  # the bf16 model is not the fp32 one, but close
    assert rel_l2(gemm, want) <= 1.5 * env
    assert float((gemm.argmax(-1) == want.argmax(-1)).float().mean()) >= float(
        (plain.argmax(-1) == want.argmax(-1)).float().mean()) - 0.1


def test_bf16_gemm_only_in_bf16_and_backend_follows_the_cpu(tiny_model):
    ck = Checkpoint.open(tiny_model)
    assert not ReferenceModel(ck, torch.float32, bf16_gemm=True).bf16_gemm  # fp32 stays the oracle
    assert ReferenceBackend(ck, torch.bfloat16).model.bf16_gemm == cpu_has_bf16_gemm()
    one = ReferenceModel(ck, torch.bfloat16)
    x = torch.randn(1, ck.config.hidden_size).to(torch.bfloat16)
    w = one.w("model.layers.0.self_attn.q_proj.weight")
    b = one.w("model.layers.0.self_attn.q_proj.bias")
    fast = ReferenceModel(ck, torch.bfloat16, bf16_gemm=True)
    assert torch.equal(fast.linear(x, w, b), one.linear(x, w, b))  # a decode step's GEMV: same call

"""The CPU prompt path is layer-major: attention in blocks, the MoE once per layer over all tokens."""

from __future__ import annotations

import torch

from engine.backend import ReferenceBackend
from engine.checkpoint import Checkpoint
from engine.reference import ReferenceModel


def test_blocked_attention_equals_one_pass(tiny_model):
    ck = Checkpoint.open(tiny_model)
    ids = list(range(3, 43))  # 40 tokens, window 8
    model = ReferenceModel(ck, torch.float32)
    one = model.forward(ids)
    blocked = model.forward(ids, attn_block=7)
    assert float((one - blocked).abs().max() / one.abs().max()) <= 1e-5
    assert torch.equal(one.argmax(-1), blocked.argmax(-1))


def test_experts_called_once_per_layer_and_progress_reported(tiny_model):
    ck = Checkpoint.open(tiny_model)
    calls: list[tuple[int, int]] = []
    ref = ReferenceModel(ck, torch.float32)

    def experts(layer, t, idx, w, check=None):
        calls.append((layer, t.shape[0]))
        return ref.experts(layer, t, idx, w, check)

    be = ReferenceBackend(ck, torch.float32, block=8, experts_fn=experts)
    seen: list[tuple[int, int]] = []
    logits = be.forward(list(range(3, 43)), lambda d, n: seen.append((d, n)))
    layers = ck.config.num_hidden_layers
    assert calls == [(i, 40) for i in range(layers)]  # not once per 8-token block
    assert seen[-1] == (40, 40) and len(seen) == layers
    assert torch.allclose(logits, ref.forward(list(range(3, 43)))[-1], rtol=0, atol=1e-4)

"""The GPU core's dense weights (engine/gpu/core.py::dense, dense_cat): the checkpoint's bits, q/k/v in that order,
and off a GPU a copy the core owns (the mapping is read-only and goes away at close)."""

from __future__ import annotations

import numpy as np
import torch

from engine.checkpoint import Checkpoint
from engine.gpu.core import LayerWeights, dense, dense_cat


def test_dense_cat_is_the_concatenation_bit_for_bit(tiny_ck: Checkpoint) -> None:
    a = "model.layers.0.self_attn."
    names = [a + f"{n}_proj.weight" for n in "qkv"]
    got = dense_cat(tiny_ck, names, torch.device("cpu"))
    want = torch.cat([tiny_ck.bf16(n) for n in names])
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_layer_weights_hold_the_checkpoint_bits(tiny_ck: Checkpoint) -> None:
    lw = LayerWeights(tiny_ck, 1, torch.device("cpu"))
    p = "model.layers.1."
    for got, name in ((lw.w_o, p + "self_attn.o_proj.weight"), (lw.w_router, p + "mlp.router.weight"),
                      (lw.sinks, p + "self_attn.sinks"), (lw.in_gain, p + "input_layernorm.weight")):
        assert torch.equal(got.view(torch.int16), tiny_ck.bf16(name).view(torch.int16)), name
    bias = torch.cat([tiny_ck.bf16(p + f"self_attn.{n}_proj.bias") for n in "qkv"])
    assert torch.equal(lw.b_qkv.view(torch.int16), bias.view(torch.int16))


def test_off_a_gpu_the_core_owns_a_writable_copy(tiny_ck: Checkpoint) -> None:
    name = "model.norm.weight"
    w = dense(tiny_ck, name, torch.device("cpu"))
    mapped = tiny_ck.bf16_view(name)
    assert w.data_ptr() != mapped.data_ptr()
    w.view(torch.int16).numpy()[0] ^= np.int16(1)  # writable, and the checkpoint is untouched
    assert not torch.equal(w.view(torch.int16), mapped.view(torch.int16))

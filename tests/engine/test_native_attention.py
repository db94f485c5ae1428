"""The CPU engine's one-token attention on the native kernel (engine/native_attention.py)."""

from __future__ import annotations

import torch

from engine.backend import ReferenceBackend
from engine.checkpoint import Checkpoint
from engine.native_attention import NativeAttention
from native.kernel import load_kernel


def _bf16(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def torch_path(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor, scale: float) -> torch.Tensor:
    """What ReferenceModel.attention computes for one row (fp32 scores, the sink, bf16-rounded weights)."""
    heads, _, d = q.shape
    kvh, g = k.shape[0], heads // k.shape[0]
    sc = torch.matmul(q.reshape(kvh, g, d), k.float().transpose(1, 2)) * scale
    s = sinks.view(kvh, g)
    m = torch.maximum(sc.amax(-1), s)
    e = (sc - m[..., None]).exp()
    denom = e.sum(-1) + torch.exp(s - m)
    o = torch.matmul(e.to(torch.bfloat16).float(), v.float()) / denom[..., None]
    return o.reshape(1, heads * d)


def test_one_row_agrees_with_the_pytorch_path():
    att = NativeAttention(load_kernel())
    buf_k, buf_v = _bf16(8, 900, 64, seed=1) * 3, _bf16(8, 900, 64, seed=2)
    k, v = buf_k[:, 40:840], buf_v[:, 40:840]  # a cache's view: rows inside a larger buffer
    q, sinks = _bf16(64, 1, 64, seed=3).float(), _bf16(64, seed=4).float()
    got = att(q, k, v, sinks, 0.125)
    assert got is not None and got.shape == (1, 4096) and got.dtype == torch.float32
    want = torch_path(q, k, v, sinks, 0.125)
    # other summation orders and exp; a weight may round to the neighbouring bf16 value
    assert float((got - want).norm() / want.norm()) < 2e-5  # measured 9e-7
    assert float((got - want).abs().max()) < 2e-4 * float(want.abs().max())


def test_other_inputs_are_left_to_the_pytorch_path():
    att = NativeAttention(load_kernel())
    k, v = _bf16(8, 100, 64, seed=1), _bf16(8, 100, 64, seed=2)
    q, sinks = _bf16(64, 1, 64, seed=3).float(), _bf16(64, seed=4).float()
    assert att(_bf16(64, 2, 64, seed=3).float(), k, v, sinks, 0.125) is None  # a prompt's rows
    assert att(q, k.float(), v.float(), sinks, 0.125) is None  # fp32 K/V (the oracle)
    assert att(q, k.transpose(1, 2).contiguous().transpose(1, 2), v, sinks, 0.125) is None  # strides differ


def test_cpu_engine_decode_uses_it_and_agrees(tiny_model):
    ck = Checkpoint.open(tiny_model)
    calls = [0]
    att = NativeAttention(load_kernel())

    def counting(q, k, v, sinks, scale):
        y = att(q, k, v, sinks, scale)
        calls[0] += y is not None
        return y

    fast = ReferenceBackend(ck, torch.bfloat16, native_attention=counting)
    plain = ReferenceBackend(ck, torch.bfloat16)
    ids = list(range(3, 40))
    a, b = fast.forward(ids), plain.forward(ids)
    assert calls[0] == 0  # the prompt's rows stay with PyTorch
    for tok in (5, 9, 11):
        a, b = fast.forward([tok]), plain.forward([tok])
        assert float((a - b).abs().max() / b.abs().max()) <= 0.02  # bf16 rounding of another order
        assert int(a.argmax()) == int(b.argmax())
    assert calls[0] == 3 * ck.config.num_hidden_layers  # every layer, sliding and full, per decoded token

"""The CPU engine's one-token bf16 projections on the native kernel (engine/native_linear.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.backend import ReferenceBackend
from engine.checkpoint import Checkpoint
from engine.native_linear import NativeLinear
from native.kernel import load_kernel


def _bf16(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def test_one_row_equals_a_bf16_gemm_rounded_once():
    lin = NativeLinear(load_kernel())
    w, b, x = _bf16(300, 2880, seed=1) * 0.05, _bf16(300, seed=2), _bf16(1, 2880, seed=3)
    y = lin(x, w, b)
    assert y is not None and y.dtype == torch.bfloat16 and y.shape == (1, 300)
    exact = (w.double() @ x.double()[0] + b.double())[None]  # what fp32 accumulation approximates
    ulp = exact.abs().float().to(torch.bfloat16).float() * 2.0**-7  # one bf16 ulp, at most
    assert bool(((y.double() - exact).abs() <= ulp.double() + 1e-6).all())
    ref = F.linear(x.float(), w.float(), b.float()).to(torch.bfloat16)  # PyTorch's own, another order
    assert float((y.float() - ref.float()).abs().max()) <= float(ulp.max())


def test_other_inputs_are_left_to_the_gemm_paths():
    lin = NativeLinear(load_kernel())
    w = _bf16(32, 64, seed=1)
    assert lin(_bf16(2, 64, seed=2), w) is None  # a prompt's rows: GEMM
    assert lin(_bf16(1, 64, seed=2).float(), w) is None  # fp32 activations (the oracle)
    assert lin(_bf16(1, 40, seed=2), _bf16(32, 40, seed=1)) is None  # columns not a multiple of 16


def test_cpu_engine_decode_uses_it_and_agrees(tiny_model):
    ck = Checkpoint.open(tiny_model)
    calls = [0]
    lin = NativeLinear(load_kernel())

    def counting(x, w, b=None):
        y = lin(x, w, b)
        calls[0] += y is not None
        return y

    fast = ReferenceBackend(ck, torch.bfloat16, native_linear=counting)
    plain = ReferenceBackend(ck, torch.bfloat16)
    ids = list(range(3, 23))
    a, b = fast.forward(ids), plain.forward(ids)
    assert calls[0] == 1  # the prompt's layers run as GEMMs; only the head's last row is one row
    for tok in (5, 9, 11):
        a, b = fast.forward([tok]), plain.forward([tok])
        assert float((a - b).abs().max() / b.abs().max()) <= 0.02  # bf16 rounding of another order
        assert int(a.argmax()) == int(b.argmax())
    layers = ck.config.num_hidden_layers
    assert calls[0] == 1 + 3 * (layers * 5 + 1)  # q, k, v, o, router per layer and the head, per token

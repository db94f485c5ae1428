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


def test_many_gives_each_projections_bits():
    lin = NativeLinear(load_kernel())
    x = _bf16(1, 2880, seed=3)
    pairs = [(_bf16(r, 2880, seed=r) * 0.05, _bf16(r, seed=r + 1) if r != 512 else None) for r in (4096, 512, 300)]
    got = lin.many(x, pairs)
    assert got is not None and [g.shape for g in got] == [(1, 4096), (1, 512), (1, 300)]
    for g, (w, b) in zip(got, pairs, strict=True):
        one = lin(x, w, b)
        assert one is not None and torch.equal(g.view(torch.int16), one.view(torch.int16))
    assert lin.many(_bf16(2, 2880, seed=1), pairs) is None  # a prompt's rows: GEMMs
    assert lin.many(x, [(_bf16(8, 2880, seed=1), None), (_bf16(8, 64, seed=2), None)]) is None  # widths differ


def test_cpu_engine_decode_with_qkv_in_one_call_is_bit_identical(tiny_model):
    """The decode's q, k and v in one native call (NativeLinear.many) against one call each: the same logits, bit for
    bit, token after token (the K/V they append feed every later token)."""
    ck = Checkpoint.open(tiny_model)
    lin = NativeLinear(load_kernel())
    fused = [0]

    class Counting:  # NativeLinear, counting the fused calls
        def __call__(self, x, w, b=None):
            return lin(x, w, b)

        def many(self, x, pairs):
            fused[0] += 1
            return lin.many(x, pairs)

    one_call = ReferenceBackend(ck, torch.bfloat16, native_linear=Counting())
    each = ReferenceBackend(ck, torch.bfloat16, native_linear=lambda x, w, b=None: lin(x, w, b))
    ids = list(range(3, 23))
    one_call.forward(ids), each.forward(ids)
    for tok in (5, 9, 11, 40):
        a, b = one_call.forward([tok]), each.forward([tok])
        assert a.dtype == b.dtype and a.float().numpy().tobytes() == b.float().numpy().tobytes()
    assert fused[0] == 4 * ck.config.num_hidden_layers  # every decode layer, never the prompt


def test_a_projection_is_planned_once_and_rerun_with_new_rows():
    """The pointer arrays of a set of projections are built on its first call and reused (a decode token calls the
    same ones every layer); each new row still gets its own product, the bits of a fresh NativeLinear's."""
    lin = NativeLinear(load_kernel())
    pairs = [(_bf16(48, 64, seed=1), _bf16(48, seed=2)), (_bf16(16, 64, seed=3), None)]
    for seed in (4, 5, 6):
        x = _bf16(1, 64, seed=seed)
        got = lin.many(x, pairs)
        fresh = NativeLinear(load_kernel()).many(x, pairs)
        assert got is not None and fresh is not None
        assert all(torch.equal(g, f) for g, f in zip(got, fresh, strict=True))
    assert len(lin._plans) == 1
    lin(_bf16(1, 64, seed=7), *pairs[0])
    assert len(lin._plans) == 2  # another set of matrices, another plan

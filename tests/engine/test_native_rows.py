"""The CPU engine's one-row norms and RoPE on the native kernel (engine/native_rows.py)."""

from __future__ import annotations

import torch

from engine.backend import ReferenceBackend
from engine.checkpoint import Checkpoint
from engine.native_rows import NativeRows
from engine.reference import apply_rope, rms_norm
from native.kernel import load_kernel


def _bf16(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def test_one_row_and_what_is_left_to_pytorch():
    rows = NativeRows(load_kernel())
    x, g = _bf16(1, 64, seed=1), _bf16(64, seed=2)
    y = rows.rms_norm(x, g, 1e-5)
    assert y is not None and y.shape == x.shape and y.dtype == torch.bfloat16
    assert float((y.float() - rms_norm(x, g, 1e-5).float()).abs().max()) <= float(y.float().abs().max()) * 2**-7
    assert rows.rms_norm(_bf16(2, 64, seed=1), g, 1e-5) is None  # a prompt's rows
    assert rows.rms_norm(x.float(), g, 1e-5) is None  # fp32 activations (the oracle)
    assert rows.rms_norm(_bf16(1, 40, seed=1), _bf16(40, seed=2), 1e-5) is None  # not a multiple of 16
    q, c, s = _bf16(1, 4, 16, seed=3), _bf16(1, 8, seed=4), _bf16(1, 8, seed=5)
    want = apply_rope(q, c, s)
    assert rows.rope(q, c, s) and torch.equal(q, want)  # in place, apply_rope's bits
    two = _bf16(2, 4, 16, seed=3)
    assert not rows.rope(two, c, s) and torch.equal(two, _bf16(2, 4, 16, seed=3))  # untouched


def test_cpu_engine_decode_uses_them_and_agrees(tiny_model):
    ck = Checkpoint.open(tiny_model)
    calls = {"norm": 0, "rope": 0}
    native = NativeRows(load_kernel())

    class Counting:
        def rms_norm(self, x, g, eps):
            y = native.rms_norm(x, g, eps)
            calls["norm"] += y is not None
            return y

        def rope(self, x, c, s):
            done = native.rope(x, c, s)
            calls["rope"] += done
            return done

    fast = ReferenceBackend(ck, torch.bfloat16, native_rows=Counting())
    plain = ReferenceBackend(ck, torch.bfloat16)
    ids = list(range(3, 23))
    fast.forward(ids), plain.forward(ids)
    assert calls == {"norm": 0, "rope": 0}  # the prompt's rows stay with PyTorch
    for tok in (5, 9, 11):
        a, b = fast.forward([tok]), plain.forward([tok])
        assert float((a - b).abs().max() / b.abs().max()) <= 0.02  # the norms' last bits, carried through
        assert int(a.argmax()) == int(b.argmax())
    layers = ck.config.num_hidden_layers
    assert calls == {"norm": 3 * (2 * layers + 1), "rope": 3 * 2 * layers}  # two norms a layer and the last; q, k

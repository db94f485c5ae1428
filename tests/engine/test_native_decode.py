"""A CPU decode row's whole layer in two native calls (engine/native_decode.py): the per-piece path's bits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from engine.native_decode import NativeDecode
from engine.session import Engine
from engine.settings import EngineSettings


@pytest.fixture
def cpu_engine(tiny_model: Path) -> Any:
    eng = Engine.load(str(tiny_model), EngineSettings(backend="cpu", cpu_threads=2))
    yield eng
    eng.close()


def _decode(be: Any, ids: list[int], steps: list[int]) -> list[torch.Tensor]:
    be.truncate(0)
    out = [be.forward(ids)]
    out += [be.forward([t]) for t in steps]
    return out


def test_the_shipped_cpu_engine_decodes_fused_with_the_per_piece_bits(cpu_engine: Any) -> None:
    """Past the sliding window (8 on the tiny model: the attention's first row moves), with the K/V the fused calls
    write read back by later tokens of both paths; every logit bit for bit."""
    be = cpu_engine.backend
    m = be.model
    assert isinstance(m._decode, NativeDecode)
    calls = [0]
    inner = m._decode.layer

    def counting(*a: Any) -> Any:
        y = inner(*a)
        calls[0] += y is not None
        return y

    m._decode.layer = counting
    steps = [(7 * i + 3) % 500 for i in range(20)]
    fused = _decode(be, [5, 9, 11], steps)
    assert calls[0] == len(steps) * m.cfg.num_hidden_layers  # every decode layer went the fused way, no prompt row
    m._decode.enabled = False
    pieces = _decode(be, [5, 9, 11], steps)
    assert calls[0] == len(steps) * m.cfg.num_hidden_layers
    for a, b in zip(fused, pieces, strict=True):
        assert torch.equal(a, b)
    # and the K/V each path left behind: the same bits
    m._decode.enabled = True
    _decode(be, [5, 9, 11], steps)
    k_fused = [k.clone() for k in be.cache.keys]
    m._decode.enabled = False
    _decode(be, [5, 9, 11], steps)
    assert all(torch.equal(a, b) for a, b in zip(k_fused, be.cache.keys, strict=True))


def test_a_wrapped_piece_sends_the_layer_the_per_piece_way(cpu_engine: Any) -> None:
    """A wrapper around the experts (as bench.kernel.cpu_decode_split installs to time them) is called: the fused
    layer does not go around it."""
    m = cpu_engine.backend.model
    inner = m.experts_fn
    seen = [0]

    def wrapped(*a: Any, **kw: Any) -> Any:
        seen[0] += 1
        return inner(*a, **kw)

    m.experts_fn = wrapped
    _decode(cpu_engine.backend, [5, 9], [3, 4])
    assert seen[0] == 3 * m.cfg.num_hidden_layers  # the prompt and both decode tokens, every layer


def test_a_failing_native_call_falls_back_with_the_cache_intact(cpu_engine: Any, caplog: Any) -> None:
    """The experts' call fails after the attention half wrote its K/V row: the layer is redone the per-piece way from
    a cache without that row, the result has the per-piece bits, and the fused path stays off (said once)."""
    be = cpu_engine.backend
    m = be.model
    steps = [3, 4, 6]
    want = _decode(be, [5, 9], steps)
    be.truncate(0)
    kernel = m._decode.kernel

    class Failing:
        def __getattr__(self, name: str) -> Any:
            return getattr(kernel, name)

        def decode_moe(self, *a: Any) -> None:
            raise RuntimeError("simulated")

    m._decode.kernel = Failing()
    got = _decode(be, [5, 9], steps)
    assert not m._decode.enabled
    assert "native decode layer unavailable (simulated)" in caplog.text
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert be.length == 2 + len(steps)


def test_an_expert_id_outside_the_layers_table_is_refused(cpu_engine: Any) -> None:
    from native.kernel import KernelError

    be = cpu_engine.backend
    m = be.model
    _decode(be, [5, 9], [3])  # the fused path built layer 0's table
    d = m._decode
    table = next(iter(d._tables.values()))
    ex = d._experts(m)
    n = m.cfg.num_local_experts
    t = torch.zeros(1, m.cfg.hidden_size, dtype=torch.bfloat16)
    x = torch.zeros_like(t)
    w = torch.ones(1, 2, dtype=torch.bfloat16)
    for bad in ([0, n], [-1, 0]):
        idx = torch.tensor([bad], dtype=torch.int64)
        with pytest.raises(KernelError, match="decode_moe"):
            d.kernel.decode_moe(ex.shape, table, idx.data_ptr(), w.data_ptr(), 2, t.data_ptr(), x.data_ptr())
    idx = torch.tensor([[0, n - 1]], dtype=torch.int64)
    d.kernel.decode_moe(ex.shape, table, idx.data_ptr(), w.data_ptr(), 2, t.data_ptr(), x.data_ptr())
    assert bool(torch.isfinite(x.float()).all())

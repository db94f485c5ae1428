"""CpuExperts: the engine's per-layer MoE through the native kernel, from a store or the checkpoint."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.checkpoint import Checkpoint
from engine.reference import ReferenceModel
from engine.store.experts_cpu import CpuExperts, native_experts_fn, open_matching_store
from engine.store.reader import ExpertStore, StoreMismatch, default_store_path
from engine.store.writer import build_store
from native.kernel import NativeUnavailable


@pytest.fixture
def odd_ck(synth_dir):
    ck = Checkpoint.open(synth_dir("odd", 2))
    yield ck
    ck.close()


def routing(ck: Checkpoint, tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    cfg = ck.config
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(tokens, cfg.hidden_size, generator=g)
    idx = torch.stack([torch.randperm(cfg.num_local_experts, generator=g)[: cfg.num_experts_per_tok]
                       for _ in range(tokens)])
    w = torch.softmax(torch.randn(tokens, cfg.num_experts_per_tok, generator=g), dim=-1)
    return t, idx, w


def test_store_and_checkpoint_sources_agree_bitwise(tmp_path: Path, odd_ck: Checkpoint) -> None:
    cfg = odd_ck.config
    outs = []
    sources: list[CpuExperts] = [CpuExperts(cfg, ck=odd_ck, threads=2)]
    for fmt in ("raw", "packed"):
        build_store(odd_ck, tmp_path / f"{fmt}.nstore", fmt)
        sources.append(CpuExperts(cfg, store=ExpertStore.open(tmp_path / f"{fmt}.nstore"), threads=3))
    t, idx, w = routing(odd_ck, 5, 0)
    for src in sources:
        for layer in range(cfg.num_hidden_layers):
            outs.append((src.source, layer, src.forward(layer, t, idx, w)))
    n = cfg.num_hidden_layers
    for i in range(n, len(outs)):
        assert torch.equal(outs[i][2].view(torch.int32), outs[i % n][2].view(torch.int32)), outs[i][0]


def test_batched_forward_equals_token_by_token(odd_ck: Checkpoint) -> None:
    ex = CpuExperts(odd_ck.config, ck=odd_ck, threads=2)
    t, idx, w = routing(odd_ck, 40, 1)  # 40 tokens x 3 experts over 6 experts: groups above 16 tokens
    batched = ex.forward(1, t, idx, w)
    for i in range(t.shape[0]):
        one = ex.forward(1, t[i : i + 1], idx[i : i + 1], w[i : i + 1])
        assert torch.equal(one[0].view(torch.int32), batched[i].view(torch.int32)), i


def test_matches_reference_experts(odd_ck: Checkpoint) -> None:
    """Against the PyTorch reference (fp32, dequantize-then-matmul): close, not bitwise."""
    ref = ReferenceModel(odd_ck, torch.float32)
    ex = CpuExperts(odd_ck.config, ck=odd_ck, threads=2)
    t, idx, w = routing(odd_ck, 6, 2)
    for layer in range(odd_ck.config.num_hidden_layers):
        want = ref.experts(layer, t, idx, w)
        got = ex.forward(layer, t, idx, w)
        err = (got - want).abs().max().item() / max(1.0, want.abs().max().item())
        assert err < 1e-5, (layer, err)


def test_reference_model_with_native_experts(synth_dir) -> None:
    ck = Checkpoint.open(synth_dir("tiny", 0))
    ids = [5, 17, 99, 3, 250, 7]
    want = ReferenceModel(ck, torch.float32).forward(ids)
    got = ReferenceModel(ck, torch.float32, experts_fn=native_experts_fn(ck, threads=2)).forward(ids)
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    ck.close()


def test_engine_hook_prefers_matching_store_and_refuses_stale(tmp_path: Path, synth_dir,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    import shutil

    d = tmp_path / "model"
    shutil.copytree(synth_dir("tiny", 0), d)
    ck = Checkpoint.open(d)
    assert open_matching_store(ck) is None
    build_store(ck, default_store_path(d, "packed"), "packed")
    st = open_matching_store(ck)
    assert st is not None and st.fmt == "packed"
    st.close()
    other = Checkpoint.open(synth_dir("odd", 0))
    stale = default_store_path(d, "packed")
    with pytest.raises(StoreMismatch):
        open_matching_store(other, stale)
    with caplog.at_level(logging.WARNING, logger="engine.store.experts_cpu"):
        fn = native_experts_fn(other, store_path=stale)  # refused with a warning; the kernel still runs
    assert "store refused" in caplog.text and "store shapes" in caplog.text
    t, idx, w = routing(other, 2, 3)
    want = CpuExperts(other.config, ck=other).forward(0, t, idx, w)
    assert torch.equal(fn(0, t, idx, w), want)
    other.close()
    ck.close()


def test_missing_extension_raises_clear_error(monkeypatch: pytest.MonkeyPatch, synth_dir) -> None:
    import native.kernel as nk

    monkeypatch.setattr(nk, "_kernel", None)
    monkeypatch.setattr(nk, "_error", None)
    monkeypatch.setitem(sys.modules, "native._neural_native", None)  # import now fails
    ck = Checkpoint.open(synth_dir("tiny", 0))
    with pytest.raises(NativeUnavailable, match="pip install"):
        native_experts_fn(ck)
    ck.close()


def test_forward_token_numpy_api(odd_ck: Checkpoint) -> None:
    ex = CpuExperts(odd_ck.config, ck=odd_ck, threads=1)
    x = np.random.default_rng(0).standard_normal(odd_ck.config.hidden_size).astype(np.float32)
    a = ex.forward_token(0, [1, 4, 2], np.array([0.5, 0.3, 0.2], np.float32), x)
    b = ex.forward_token(0, [1, 4, 2], np.array([0.5, 0.3, 0.2], np.float32), x)
    assert a.dtype == np.float32 and np.array_equal(a, b) and np.isfinite(a).all()

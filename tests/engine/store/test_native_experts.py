"""NativeExperts: the one adapter around the native kernel (sources, 1..N tokens, capture, threads)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from store_helpers import routing

from engine.checkpoint import Checkpoint
from engine.gpu.layout import ExpertLayout
from engine.reference import ReferenceModel
from engine.settings import EngineSettings, SettingsError
from engine.store.native_experts import NativeExperts, share_cores
from engine.store.reader import ExpertStore
from engine.store.writer import build_store
from native.kernel import load_kernel


@pytest.fixture(autouse=True)
def restore_torch_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def odd_ck(synth_dir) -> Iterator[Checkpoint]:
    ck = Checkpoint.open(synth_dir("odd", 2))
    yield ck
    ck.close()




def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


def test_store_and_checkpoint_sources_agree_bitwise(tmp_path: Path, odd_ck: Checkpoint) -> None:
    cfg = odd_ck.config
    outs = []
    sources = [NativeExperts(cfg, odd_ck, threads=2)]
    for fmt in ("raw", "packed"):
        build_store(odd_ck, tmp_path / f"{fmt}.nstore", fmt)
        sources.append(NativeExperts(cfg, ExpertStore.open(tmp_path / f"{fmt}.nstore"), threads=1))
    t, idx, w = routing(odd_ck, 5, 0)
    for src in sources:
        for layer in range(cfg.num_hidden_layers):
            outs.append((src.source, layer, src.forward(layer, t, idx, w)))
    n = cfg.num_hidden_layers
    for i in range(n, len(outs)):
        assert torch.equal(bits(outs[i][2]), bits(outs[i % n][2])), outs[i][0]


@pytest.mark.parametrize("bf16", [False, True])
def test_n_tokens_equal_token_by_token(odd_ck: Checkpoint, bf16: bool) -> None:
    ex = NativeExperts(odd_ck.config, odd_ck, threads=2, bf16_inputs=bf16)
    t, idx, w = routing(odd_ck, 40, 1)  # 40 tokens x 3 experts over 6 experts: groups above 16 tokens
    batched = ex.forward(1, t, idx, w)
    for i in range(t.shape[0]):
        one = ex.forward(1, t[i : i + 1], idx[i : i + 1], w[i : i + 1])
        assert torch.equal(bits(one[0]), bits(batched[i])), i


def test_one_expert_over_n_tokens_equals_single_calls(odd_ck: Checkpoint) -> None:
    """expert_tokens cuts 300 tokens into kernel calls of 256 and 44; each row as if alone."""
    ex = NativeExperts(odd_ck.config, odd_ck, threads=2, bf16_inputs=True)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, odd_ck.config.hidden_size)).astype(np.float32)
    w = rng.uniform(0.1, 0.9, 300).astype(np.float32)
    out = np.full_like(x, np.nan)
    ex.expert_tokens(1, 4, x, w, out)
    for i in range(300):
        one = np.empty((1, x.shape[1]), np.float32)
        ex.expert_tokens(1, 4, x[i : i + 1], w[i : i + 1], one)
        assert np.array_equal(one[0].view(np.int32), out[i].view(np.int32)), i


def per_expert_path(ex: NativeExperts, layer: int, ids: np.ndarray, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """moe_tokens as it was before expert_groups: one expert_tokens call per expert from Python."""
    t_count, k = ids.shape
    contrib = np.full((t_count * k, x.shape[1]), np.nan, np.float32)
    flat, wf = ids.reshape(-1), w.reshape(-1)
    for e in np.unique(flat).tolist():
        rows = np.flatnonzero(flat == e)
        out = np.empty((rows.size, x.shape[1]), np.float32)
        ex.expert_tokens(layer, e, np.ascontiguousarray(x[rows // k]), np.ascontiguousarray(wf[rows]), out)
        contrib[rows] = out
    c = contrib.reshape(t_count, k, -1)
    acc = c[:, 0].copy()
    for j in range(1, k):
        acc = acc + c[:, j]
    return acc


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("preset", ["tiny", "odd"])
def test_grouped_calls_equal_per_expert_path_and_token_by_token(synth_dir, monkeypatch: pytest.MonkeyPatch,
                                                                 preset: str, threads: int) -> None:
    """moe_tokens through expert_groups, in chunks of 1, 3 and 16 experts per call, with groups of
    about 300 tokens (two kernel pieces): the bits of the per-expert path and of N one-token calls."""
    ck = Checkpoint.open(synth_dir(preset, 0))
    try:
        ex = NativeExperts(ck.config, ck, threads=threads, bf16_inputs=True)
        n = 300 * ck.config.num_local_experts // ck.config.num_experts_per_tok
        t, idx, w = routing(ck, n, threads)
        x, ids, wn = t.numpy(), idx.numpy(), w.numpy()
        one = np.stack([ex.moe_token(1, ids[i].tolist(), wn[i], x[i]) for i in range(n)])
        path = per_expert_path(ex, 1, ids, wn, x)
        assert np.array_equal(path.view(np.int32), one.view(np.int32))
        checks: list[int] = []
        for chunk in (1, 3, 16):
            monkeypatch.setattr("engine.store.native_experts.GROUP_CHUNK", chunk)
            checks.clear()
            got = ex.moe_tokens(1, ids, wn, x, check=lambda: checks.append(1))
            assert np.array_equal(got.view(np.int32), one.view(np.int32)), chunk
            assert len(checks) == -(-ck.config.num_local_experts // chunk)  # one stop point per call
    finally:
        ck.close()


class Stop(BaseException):
    pass


def test_a_stop_between_chunks_runs_no_further_call(odd_ck: Checkpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    ex = NativeExperts(odd_ck.config, odd_ck, threads=2)
    monkeypatch.setattr("engine.store.native_experts.GROUP_CHUNK", 2)
    calls: list[int] = []
    real = ex.kernel.expert_groups

    def counted(*a: Any) -> None:
        calls.append(len(a[1]))
        real(*a)

    monkeypatch.setattr(ex.kernel, "expert_groups", counted)
    seen: list[int] = []

    def check() -> None:
        seen.append(1)
        if len(seen) == 2:
            raise Stop

    t, idx, w = routing(odd_ck, 40, 4)
    with pytest.raises(Stop):
        ex.moe_tokens(0, idx.numpy(), w.numpy(), t.numpy(), check)
    assert calls == [2]  # the first chunk's two experts, nothing after the stop


def test_matches_reference_experts(odd_ck: Checkpoint) -> None:
    """Against the PyTorch reference (fp32, dequantize-then-matmul): close, not bitwise."""
    ref = ReferenceModel(odd_ck, torch.float32)
    ex = NativeExperts(odd_ck.config, odd_ck, threads=2)
    t, idx, w = routing(odd_ck, 6, 2)
    for layer in range(odd_ck.config.num_hidden_layers):
        want = ref.experts(layer, t, idx, w)
        got = ex.forward(layer, t, idx, w)
        err = (got - want).abs().max().item() / max(1.0, want.abs().max().item())
        assert err < 1e-5, (layer, err)


def test_one_token_numpy_api_and_no_experts(odd_ck: Checkpoint) -> None:
    ex = NativeExperts(odd_ck.config, odd_ck, threads=1)
    x = np.random.default_rng(0).standard_normal(odd_ck.config.hidden_size).astype(np.float32)
    a = ex.moe_token(0, [1, 4, 2], np.array([0.5, 0.3, 0.2], np.float32), x)
    b = ex.moe_token(0, [1, 4, 2], [0.5, 0.3, 0.2], x, out=np.empty_like(x))
    assert a.dtype == np.float32 and np.array_equal(a, b) and np.isfinite(a).all()
    assert not ex.moe_token(0, [], [], x, out=np.full_like(x, 7.0)).any()


def test_capture_writes_the_slot_layout_and_changes_nothing(tiny_model: Path) -> None:
    ck = Checkpoint.open(tiny_model)
    lay = ExpertLayout.for_config(ck.config)
    ex = NativeExperts(ck.config, ck, threads=2, bf16_inputs=True, capture_offsets=lay.native_offsets())
    x = torch.from_numpy(np.random.default_rng(1).standard_normal(ck.config.hidden_size).astype(np.float32))
    x_np = x.bfloat16().float().numpy()
    w = np.array([0.5, 0.3, 0.2], np.float32)
    plain = ex.moe_token(2, [1, 4, 6], w, x_np)
    cap = np.full(lay.slot_bytes, 0xAB, np.uint8)
    captured = ex.moe_token(2, [1, 4, 6], w, x_np, captures={4: cap})
    assert np.array_equal(plain.view(np.int32), captured.view(np.int32))
    assert np.array_equal(cap, lay.pack_expert(ck, 2, 4))
    with pytest.raises(ValueError, match="capture buffer of 16 bytes"):
        ex.moe_token(2, [1], w[:1], x_np, captures={1: np.zeros(16, np.uint8)})
    ck.close()


def test_a_store_keeps_its_own_capture_layout(tmp_path: Path, odd_ck: Checkpoint) -> None:
    build_store(odd_ck, tmp_path / "raw.nstore", "raw")
    with pytest.raises(ValueError, match="capture_offsets apply to a checkpoint"):
        NativeExperts(odd_ck.config, ExpertStore.open(tmp_path / "raw.nstore"), capture_offsets=[0] * 7)


def test_team_and_torch_threads_are_sized_together_once(monkeypatch: pytest.MonkeyPatch, odd_ck: Checkpoint) -> None:
    monkeypatch.setattr("engine.settings.physical_cores", lambda: 4)
    k = load_kernel()
    ex = NativeExperts(odd_ck.config, odd_ck, threads=1)  # torch beside the team: the cores it leaves
    assert (ex.threads, k.threads, torch.get_num_threads(), ex.name.endswith("-1t")) == (1, 1, 3, True)
    calls: list[int] = []
    real = k.set_threads

    def counted(n: int) -> int:
        calls.append(n)
        return real(n)

    monkeypatch.setattr(k, "set_threads", counted)
    NativeExperts(odd_ck.config, odd_ck, threads=1)  # a second adapter of the same engine: nothing to do
    assert calls == []
    # the CPU engine: torch and the team take turns on one thread, so torch gets the team's size
    assert share_cores(2, torch_beside=False) == 2 and (k.threads, torch.get_num_threads()) == (2, 2)
    share_cores(2, torch_beside=False)
    assert calls == [2]
    real(1)  # resized behind the adapter's back (the kernel tests do): sized again
    assert share_cores(2, torch_beside=False) == 2 and k.threads == 2 and calls == [2, 2]
    assert share_cores(4) == 4 and torch.get_num_threads() == 1  # nothing left: one torch thread
    share_cores(2)


def test_default_threads_are_the_settings_physical_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("engine.settings.physical_cores", lambda: 1)  # not the logical count
    assert share_cores(0, torch_beside=False) == 1 == EngineSettings().threads() == load_kernel().threads
    assert torch.get_num_threads() == 1
    monkeypatch.setattr("engine.settings.physical_cores", lambda: 32)
    assert EngineSettings().threads() == 8  # the settings' cap
    with pytest.raises(SettingsError, match="cpu_threads"):
        share_cores(-1)
    assert load_kernel().threads == 1  # a refused count changes nothing

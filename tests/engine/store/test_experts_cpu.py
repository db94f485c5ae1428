"""The CPU engine's experts hook: the native adapter over a matching store, else the checkpoint."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from store_helpers import routing

from engine.checkpoint import Checkpoint
from engine.reference import ReferenceModel
from engine.store.experts_cpu import native_experts_fn, open_matching_store
from engine.store.native_experts import NativeExperts
from engine.store.reader import StoreMismatch, default_store_path
from engine.store.writer import build_store
from native.kernel import NativeUnavailable


@pytest.fixture(autouse=True)
def restore_torch_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)




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
    hooked = native_experts_fn(ck, threads=2)  # the session's RAM residency reads the adapter's store
    adapter = getattr(hooked, "__self__", None)
    assert isinstance(adapter, NativeExperts) and adapter.store is not None and adapter.store.fmt == "packed"
    assert torch.get_num_threads() == adapter.threads == 2  # the CPU engine: torch takes turns with the team
    other = Checkpoint.open(synth_dir("odd", 0))
    stale = default_store_path(d, "packed")
    with pytest.raises(StoreMismatch):
        open_matching_store(other, stale)
    with caplog.at_level(logging.WARNING, logger="engine.store.experts_cpu"):
        fn = native_experts_fn(other, threads=2, store_path=stale)  # refused with a warning; the kernel still runs
    assert "store refused" in caplog.text and "store shapes" in caplog.text
    t, idx, w = routing(other, 2, 3)
    want = NativeExperts(other.config, other, threads=2).forward(0, t, idx, w)
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

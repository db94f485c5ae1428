"""Store safety: atomic writes, refusing a store of another checkpoint, detecting corruption."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from engine.checkpoint import Checkpoint
from engine.safetensors_io import SafetensorsFile
from engine.store.format import PREFIX_BYTES, StoreError
from engine.store.reader import ExpertStore, StoreCorrupt, StoreMismatch
from engine.store.writer import build_store


@pytest.fixture
def tiny_ck(synth_dir):
    ck = Checkpoint.open(synth_dir("tiny", 0))
    yield ck
    ck.close()


def test_exception_mid_build_leaves_nothing(tmp_path: Path, tiny_ck: Checkpoint) -> None:
    out = tmp_path / "s.nstore"

    def boom(done: int, total: int) -> None:
        if done == total // 2:
            raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        build_store(tiny_ck, out, "raw", progress=boom)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_killed_build_never_leaves_a_loadable_store(tmp_path: Path, tiny_ck: Checkpoint) -> None:
    """A process killed mid-build (no cleanup at all) leaves only a partial file that does not open."""
    out = tmp_path / "s.nstore"
    code = textwrap.dedent(f"""
        import os
        from engine.checkpoint import Checkpoint
        from engine.store.writer import build_store
        ck = Checkpoint.open({str(tiny_ck.model_dir)!r})
        def die(done, total):
            if done == total - 1:
                os._exit(9)  # like a power cut: no finally blocks, no flush
        build_store(ck, {str(out)!r}, "packed", progress=die)
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3], timeout=120)
    assert r.returncode == 9
    assert not out.exists()
    partial = list(tmp_path.glob("s.nstore.partial-*"))
    assert len(partial) == 1
    with pytest.raises(StoreError, match="unfinished build"):
        ExpertStore.open(partial[0])


def test_store_of_other_shape_is_refused(tmp_path: Path, tiny_ck: Checkpoint, synth_dir) -> None:
    out = tmp_path / "s.nstore"
    build_store(tiny_ck, out, "raw")
    other = Checkpoint.open(synth_dir("odd", 0))
    with ExpertStore.open(out) as st, pytest.raises(StoreMismatch, match="store shapes"):
        st.check_matches(other)
    other.close()


def test_store_of_other_weights_is_refused(tmp_path: Path, synth_dir) -> None:
    """Same shapes, different expert bytes where the checkpoint fingerprint does not sample them
    (it hashes 4 KiB windows): the store's own sample checksums catch it."""
    src = Checkpoint.open(synth_dir("small", 0))
    out = tmp_path / "s.nstore"
    build_store(src, out, "raw")
    d = tmp_path / "model"
    shutil.copytree(src.model_dir, d)
    name = "model.layers.0.mlp.experts.gate_up_proj_blocks"
    path = d / src.file_of(name).name
    info = SafetensorsFile(path).tensors[name]
    assert info.nbytes // src.config.num_local_experts > 12 * 1024
    _flip(path, info.start + 10 * 1024)  # inside expert 0, outside the fingerprint's windows
    other = Checkpoint.open(d)
    assert other.fingerprint() == src.fingerprint()
    with ExpertStore.open(out) as st, pytest.raises(StoreMismatch, match="different expert weights"):
        st.check_matches(other)
    other.close()
    src.close()


def test_store_of_other_config_is_refused(tmp_path: Path, tiny_ck: Checkpoint) -> None:
    d = tmp_path / "model"
    shutil.copytree(tiny_ck.model_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["rms_norm_eps"] = 1e-6
    (d / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "s.nstore"
    build_store(tiny_ck, out, "raw")
    ck2 = Checkpoint.open(d)
    with ExpertStore.open(out) as st, pytest.raises(StoreMismatch, match="different checkpoint"):
        st.check_matches(ck2)
    ck2.close()


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


@pytest.mark.parametrize("fmt", ["raw", "packed"])
def test_corrupt_record_detected_by_checksum(tmp_path: Path, tiny_ck: Checkpoint, fmt: str) -> None:
    out = tmp_path / "s.nstore"
    build_store(tiny_ck, out, fmt)
    with ExpertStore.open(out) as st:
        off = st.offset(2, 5) + 100
    _flip(out, off)
    with ExpertStore.open(out) as st:
        assert st.verify() == [(2, 5)]
        assert st.verify_against_checkpoint(tiny_ck) == [(2, 5)]


def test_corrupt_header_and_truncation_refused(tmp_path: Path, tiny_ck: Checkpoint) -> None:
    out = tmp_path / "s.nstore"
    build_store(tiny_ck, out, "raw")
    bad = tmp_path / "bad.nstore"
    shutil.copy(out, bad)
    _flip(bad, PREFIX_BYTES + 10)  # inside the JSON metadata
    with pytest.raises(StoreCorrupt, match="header checksum"):
        ExpertStore.open(bad)
    shutil.copy(out, bad)
    with open(bad, "r+b") as f:
        f.truncate(os.path.getsize(out) - 64)
    with pytest.raises(StoreCorrupt, match="truncated"):
        ExpertStore.open(bad)
    bad.write_bytes(b"not a store at all, just text" * 4)
    with pytest.raises(StoreError, match="not an expert store"):
        ExpertStore.open(bad)
    with pytest.raises(StoreError, match="cannot open"):
        ExpertStore.open(tmp_path / "missing.nstore")


def test_records_are_zero_copy_views(tmp_path: Path, tiny_ck: Checkpoint) -> None:
    out = tmp_path / "s.nstore"
    build_store(tiny_ck, out, "raw")
    with ExpertStore.open(out) as st:
        rec = st.record(0, 0)
        assert not rec.flags.owndata and not rec.flags.writeable
        assert np.shares_memory(rec, st.buf)

"""The 2 MiB-aligned checkpoint mapping: same bytes, read-only, alive while a view is, and collapsible on tmpfs."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.checkpoint import Checkpoint
from engine.residency import os_memory
from engine.residency.huge_map import HUGE, collapse, map_aligned, pmd_mapped_bytes
from engine.session import Engine
from engine.settings import EngineSettings, SettingsError
from engine.types import Conversation, GenerationParams, Message, TextDelta

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="aligned mappings are Linux only")


def _file(path: Path, n: int) -> bytes:
    data = np.random.default_rng(3).integers(0, 256, n, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    return data


@linux
def test_aligned_mapping_holds_the_files_bytes_read_only(tmp_path):
    data = _file(tmp_path / "a.bin", 3 * HUGE + 12345)  # not a whole number of pages
    v = map_aligned(tmp_path / "a.bin")
    assert v is not None
    assert int(v.ctypes.data) % HUGE == 0
    assert v.nbytes == len(data) and v.tobytes() == data
    with pytest.raises(ValueError):
        v[0] = 1


@linux
def test_a_slice_keeps_the_mapping_alive(tmp_path):
    data = _file(tmp_path / "a.bin", HUGE + 4096)
    v = map_aligned(tmp_path / "a.bin")
    assert v is not None
    tail = v[HUGE:]
    del v
    gc.collect()
    assert tail.tobytes() == data[HUGE:]  # a use-after-unmap would crash or differ here


def test_elsewhere_the_caller_keeps_its_ordinary_mapping(tmp_path, monkeypatch):
    import engine.residency.huge_map as hm

    monkeypatch.setattr(hm, "_libc", None)
    _file(tmp_path / "a.bin", 4096)
    assert hm.map_aligned(tmp_path / "a.bin") is None
    with pytest.raises(os_memory.OsCallError):
        hm.collapse(np.zeros(HUGE, np.uint8))


@linux
@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs tmpfs at /dev/shm")
def test_collapse_maps_a_tmpfs_file_with_2mib_entries():
    path = Path("/dev/shm") / f"neural-test-huge-{os.getpid()}.bin"
    try:
        data = _file(path, 4 * HUGE)
        v = map_aligned(path)
        assert v is not None
        assert v.tobytes() == data
        assert pmd_mapped_bytes(v) == 0  # tmpfs caches it in 4 KiB pages unless its huge pages are on
        try:
            collapse(v, threads=2)
        except os_memory.OsCallError as exc:
            pytest.skip(f"this kernel does not collapse tmpfs pages: {exc}")
        assert v.tobytes() == data
        assert pmd_mapped_bytes(v) == 4 * HUGE
    finally:
        path.unlink(missing_ok=True)


def test_checkpoint_reads_the_same_tensors_either_way(tiny_model):
    plain, huge = Checkpoint.open(tiny_model), Checkpoint.open(tiny_model, huge_pages=True)
    try:
        assert huge.fingerprint() == plain.fingerprint()
        for name in ("model.layers.0.mlp.experts.gate_up_proj_blocks", "model.embed_tokens.weight"):
            assert np.array_equal(huge.array(name), plain.array(name))
        if sys.platform.startswith("linux"):
            shard = next(iter(huge._files))
            assert int(huge.shard_mapping(shard).ctypes.data) % HUGE == 0
    finally:
        plain.close()
        huge.close()


def test_engine_generates_the_same_tokens_with_huge_pages(tiny_model):
    conv = Conversation((Message("user", "hello"),), current_date="2026-12-03")
    texts = []
    for huge in (False, True):
        eng = Engine.load(tiny_model, EngineSettings(backend="cpu", dtype="float32", huge_pages=huge))
        try:
            texts.append("".join(e.text for e in eng.generate(conv, GenerationParams(temperature=0, max_tokens=8))
                                 if isinstance(e, TextDelta)))
        finally:
            eng.close()
    assert texts[0] == texts[1] and texts[0]


def test_huge_pages_must_be_a_bool():
    with pytest.raises(SettingsError, match="huge_pages"):
        EngineSettings(huge_pages="yes")  # type: ignore[arg-type]

"""Building expert stores: byte-exact raw repack, lossless packed repack, sizes, verification."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.checkpoint import Checkpoint
from engine.safetensors_io import SafetensorsFile
from engine.store.format import (
    PART_NAMES,
    RecordLayout,
    StoreError,
    decode_record,
    encode_record,
    pack_scales,
    unpack_scales,
)
from engine.store.reader import ExpertStore, default_store_path, find_store
from engine.store.writer import build_store, expert_parts


def test_sizes_at_120b_shape_match_the_design() -> None:
    raw, packed = RecordLayout.build(2880, 2880, "raw"), RecordLayout.build(2880, 2880, "packed")
    assert raw.payload_bytes == 13_219_200
    assert packed.payload_bytes == 12_839_040
    assert raw.fixed_bytes == 13_219_200 + 17_280  # + bf16 biases; every part is already 64-B aligned
    assert packed.fixed_bytes == 12_839_040 + 17_280
    assert all(off % 64 == 0 for off in raw.offsets + packed.offsets)


def test_pack_scales_round_trip_with_fallback_rows() -> None:
    rng = np.random.default_rng(0)
    s = rng.integers(110, 126, (50, 7), dtype=np.uint8)
    s[3] = (0, 255, 1, 2, 3, 4, 5)  # range 255: fallback
    s[9] = 255  # min 255 collides with the fallback marker: fallback too
    s[11] = (240, 255, 241, 250, 247, 245, 240)  # range 15 near the top: fits
    packed, ids, raw = pack_scales(s, first_row_id=1000)
    assert packed.shape == (50, 1 + 4)
    assert ids.tolist() == [1003, 1009]
    fb = {int(i): r for i, r in zip(ids, raw, strict=True)}
    assert np.array_equal(unpack_scales(packed, 7, fb, 1000), s)
    with pytest.raises(StoreError):
        unpack_scales(packed, 7, {}, 1000)


@pytest.mark.parametrize("fmt", ["raw", "packed"])
def test_build_store_repacks_every_expert(tmp_path: Path, synth_dir, fmt: str) -> None:
    ck = Checkpoint.open(synth_dir("odd", 3))  # hidden 96, intermediate 160: odd block counts
    ticks: list[tuple[int, int]] = []
    out = tmp_path / f"s.{fmt}"
    summary = build_store(ck, out, fmt, progress=lambda d, t: ticks.append((d, t)))
    cfg = ck.config
    n = cfg.num_hidden_layers * cfg.num_local_experts
    assert summary.records == n and ticks[-1] == (n, n)
    with ExpertStore.open(out) as st:
        st.check_matches(ck)
        assert st.verify() == []
        assert st.verify_against_checkpoint(ck) == []
        for layer in range(cfg.num_hidden_layers):
            for e in range(cfg.num_local_experts):
                assert st.offset(layer, e) % 64 == 0
                want = expert_parts(ck, layer, e)
                if fmt == "raw":  # byte-exact: the stored parts are the checkpoint's bytes
                    got = st.parts(layer, e)
                else:
                    got = decode_record(st.record(layer, e), st.layout, st.n_exc(layer, e))
                for p in PART_NAMES:
                    assert np.array_equal(got[p], want[p]), (layer, e, p)
    ck.close()


def test_packed_store_with_wide_scale_rows(tmp_path: Path, synth_dir) -> None:
    """Patch a copy of a checkpoint so some scale rows need the fallback; the repack stays lossless."""
    import shutil

    src = synth_dir("tiny", 5)
    d = tmp_path / "model"
    shutil.copytree(src, d)
    ck = Checkpoint.open(d)
    name = "model.layers.1.mlp.experts.down_proj_scales"
    path = ck.file_of(name)
    ck.close()
    info = SafetensorsFile(path).tensors[name]
    mm = np.memmap(path, dtype=np.uint8, mode="r+", offset=info.start, shape=info.shape)
    mm[2, 7, :] = (3, 250)  # range > 15
    mm[4, 0, :] = 255  # all-255 row
    mm.flush()
    del mm
    ck = Checkpoint.open(d)
    summary = build_store(ck, tmp_path / "p.nstore", "packed")
    assert summary.fallback_rows == 2
    with ExpertStore.open(tmp_path / "p.nstore") as st:
        assert st.n_exc(1, 2) == 1 and st.n_exc(1, 4) == 1
        assert st.verify_against_checkpoint(ck) == []
    ck.close()


def test_default_store_paths(tmp_path: Path) -> None:
    assert find_store(tmp_path) is None
    default_store_path(tmp_path, "raw").write_bytes(b"x")
    assert find_store(tmp_path) == tmp_path / "experts-raw.nstore"
    default_store_path(tmp_path, "packed").write_bytes(b"x")
    assert find_store(tmp_path) == tmp_path / "experts-packed.nstore"


def test_encode_rejects_wrong_part_size() -> None:
    lay = RecordLayout.build(64, 64, "raw")
    rng = np.random.default_rng(0)
    parts = {p: rng.integers(0, 255, lay.part_shape(p), dtype=np.uint8 if "bias" not in p else np.uint16)
             for p in PART_NAMES}
    encode_record(parts, lay)
    parts["dn_bias"] = parts["dn_bias"][:-1]
    with pytest.raises(StoreError):
        encode_record(parts, lay)

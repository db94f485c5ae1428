"""The chunked, threaded writer: the same bytes however tensors are chunked or shards are
scheduled."""

from __future__ import annotations

import numpy as np

from engine.checkpoint import Checkpoint
from engine.synth import PRESETS, write_synthetic_checkpoint
from engine.synth import tensors as T


def test_thread_count_does_not_change_bytes(tmp_path):
    kw = {"seed": 7, "max_shard_bytes": 64 << 10, "routing": "drift"}
    a = write_synthetic_checkpoint(tmp_path / "a", PRESETS["tiny"], jobs=1, **kw)
    b = write_synthetic_checkpoint(tmp_path / "b", PRESETS["tiny"], jobs=4, **kw)
    names = sorted(p.name for p in a.glob("model*"))
    assert len(names) > 3 and names == sorted(p.name for p in b.glob("model*"))
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes()
    assert not list(a.glob("*.partial"))
    Checkpoint.open(a)


def test_chunked_normals_equal_one_draw(monkeypatch):
    monkeypatch.setattr(T, "CHUNK_ELEMS", 1000)
    shape = (37, 64)
    chunks = list(T._normal(3, "w", shape, 0.5, 1.0))
    assert len(chunks) > 2
    whole = T._bf16_bits(1.0 + 0.5 * T._rng(3, "w").standard_normal(37 * 64, dtype=np.float32))
    assert np.array_equal(np.concatenate(chunks), whole)


def test_fast_bf16_conversion_rounds_like_numpy():
    x = np.random.default_rng(0).standard_normal(1 << 16).astype(np.float32) * 100
    ties = np.array([1.00390625, 1.01171875, -3.0078125, 0.0, -0.0, 1e-40, 3e38], dtype=np.float32)
    for v in (x, ties):
        assert np.array_equal(T.bf16_bits_fast(v), T._bf16_bits(v))


def test_fast_blocks_are_the_tiled_pool():
    fast = T._Fast(2, pool_bytes=1000)
    n, salt = 2500, 17
    got = np.concatenate(list(fast.bytes(n, salt)))
    off = (salt * 7919) % 1000
    assert np.array_equal(got, np.tile(fast.pool, 4)[off : off + n])
    s = np.concatenate(list(fast.scales(5000, 120, 3)))
    assert set(np.unique(s).tolist()) == {119, 120, 121}


def test_old_per_tensor_producer_gives_the_written_bytes(tmp_path):
    from engine.synth import _producer

    d = write_synthetic_checkpoint(tmp_path / "s", PRESETS["tiny"], seed=7, skew=1.5)
    ck = Checkpoint.open(d)
    for name in ("model.embed_tokens.weight", "model.layers.1.mlp.router.bias",
                 "model.layers.2.mlp.experts.down_proj_blocks"):
        info = ck._files[ck.file_of(name).name].tensors[name]
        got = _producer(name, info.dtype, info.shape, ck.config, 7, 1.5, None)()
        assert got.shape == info.shape and np.array_equal(got, ck.array(name)), name

"""Routing variants (``neural synth --like``): the same expert bytes, shared on disk."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from engine.checkpoint import INDEX_NAME, Checkpoint, expected_tensors
from engine.safetensors_io import CheckpointError
from engine.synth import PRESETS, RoutingSpec, is_routing_tensor, write_routing_variant, write_synthetic_checkpoint

SHARD = 400_000  # the small preset in ~26 shards


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_synthetic_checkpoint(tmp_path_factory.mktemp("src"), PRESETS["small"], seed=5, fast=True,
                                      max_shard_bytes=SHARD)


def _expert_names(ck: Checkpoint) -> list[str]:
    return [n for n in expected_tensors(ck.config) if n.endswith(("_blocks", "_scales"))]


def test_routing_tensors_never_share_a_shard_with_experts(source):
    wm = json.loads((source / INDEX_NAME).read_text())["weight_map"]
    routing_files = {f for n, f in wm.items() if is_routing_tensor(n)}
    other_files = {f for n, f in wm.items() if not is_routing_tensor(n)}
    assert len(routing_files) == 1 and not routing_files & other_files


def test_variant_shares_expert_bytes(tmp_path, source):
    out = tmp_path / "drift"
    rep = write_routing_variant(source, out, RoutingSpec("drift", 1.5), jobs=2)
    src, var = Checkpoint.open(source), Checkpoint.open(out)
    for name in _expert_names(src):
        assert np.array_equal(src.array(name), var.array(name)), name
    # shards without routing tensors are the very same files on disk
    shards = sorted(p.name for p in source.glob("model-*.safetensors"))
    assert rep.rewritten == [src.file_of("model.embed_tokens.weight").name] == shards[:1] and not rep.copied
    assert rep.linked == shards[1:] and len(shards) > 10
    for fname in rep.linked:
        assert os.path.samefile(source / fname, out / fname)
    assert not os.path.samefile(source / rep.rewritten[0], out / rep.rewritten[0])
    assert src.fingerprint() != var.fingerprint()
    assert not np.array_equal(src.array("model.embed_tokens.weight"), var.array("model.embed_tokens.weight"))
    meta = json.loads((out / "SYNTHETIC.json").read_text())
    assert meta["routing"]["mode"] == "drift" and meta["skew"] == 1.5 and meta["fast"] is True
    assert meta["variant_of"]["routing"] == "uniform" and meta["variant_of"]["fingerprint"] == src.fingerprint()


@pytest.mark.parametrize(("mode", "skew"), [("static", 2.0), ("drift", 1.0)])
def test_variant_equals_a_fresh_checkpoint_with_that_routing(tmp_path, source, mode, skew):
    """The variant is byte for byte what writing the routing from scratch gives."""
    var = write_routing_variant(source, tmp_path / "v", RoutingSpec(mode, skew)).out
    fresh = write_synthetic_checkpoint(tmp_path / "f", PRESETS["small"], seed=5, fast=True, max_shard_bytes=SHARD,
                                       routing=mode, skew=skew)
    for fname in sorted(p.name for p in fresh.glob("model*.safetensors")):
        assert (var / fname).read_bytes() == (fresh / fname).read_bytes(), fname
    assert Checkpoint.open(var).fingerprint() == Checkpoint.open(fresh).fingerprint()


def test_variant_copies_when_links_fail(tmp_path, source, monkeypatch):
    def no_link(src, dst):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    out = tmp_path / "copied"
    rep = write_routing_variant(source, out, RoutingSpec("drift", 1.0))
    assert not rep.linked and len(rep.copied) == len(list(source.glob("model-*.safetensors"))) - 1
    src, var = Checkpoint.open(source), Checkpoint.open(out)
    for name in _expert_names(src):
        assert np.array_equal(src.array(name), var.array(name))
    assert not os.path.samefile(source / rep.copied[0], out / rep.copied[0])


def test_single_file_variant_keeps_expert_bytes(tmp_path):
    src = write_synthetic_checkpoint(tmp_path / "s", PRESETS["tiny"], seed=1, skew=1.0)
    rep = write_routing_variant(src, tmp_path / "u", RoutingSpec())
    assert rep.rewritten == ["model.safetensors"]
    a, b = Checkpoint.open(src), Checkpoint.open(rep.out)
    for name in expected_tensors(a.config):
        same = np.array_equal(a.array(name), b.array(name))
        assert same == (not name.endswith("router.bias")), name  # uniform vs static: only the biases differ
    assert a.fingerprint() != b.fingerprint()


def test_variant_refusals(tmp_path, source):
    with pytest.raises(ValueError, match="already has routing uniform"):
        write_routing_variant(source, tmp_path / "x", RoutingSpec())
    with pytest.raises(ValueError, match="another folder"):
        write_routing_variant(source, source, RoutingSpec("drift", 1.0))
    (tmp_path / "real").mkdir()
    with pytest.raises(CheckpointError, match="not a synthetic checkpoint"):
        write_routing_variant(tmp_path / "real", tmp_path / "y", RoutingSpec("drift", 1.0))

"""Bad checkpoints give a clear error naming the file and the tensor."""

from __future__ import annotations

import json
import shutil
import struct

import pytest

from engine.checkpoint import Checkpoint
from engine.safetensors_io import CheckpointError
from engine.session import Engine
from engine.tokenizer import TokenizerError


@pytest.fixture
def model(tmp_path, tiny_model):
    dst = tmp_path / "m"
    shutil.copytree(tiny_model, dst)
    return dst


def test_truncated_file(model):
    f = model / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 1000])
    msg = r"model\.safetensors: truncated — tensor 'lm_head\.weight' ends at byte"
    with pytest.raises(CheckpointError, match=msg):
        Checkpoint.open(model)


def test_corrupt_header(model):
    f = model / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[8:20] = b"\x00garbage!!!!"
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: corrupt safetensors header"):
        Checkpoint.open(model)


def _rewrite_header(path, edit):
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    edit(header)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (n - len(hb)) if len(hb) <= n else b""
    assert len(hb) == n
    path.write_bytes(data[:8] + hb + data[8 + n :])


def test_missing_tensor(model):
    def rename(h):
        h["model.layers.1.self_attn.zzzzzzz"] = h.pop("model.layers.1.self_attn.sinks")

    _rewrite_header(model / "model.safetensors", rename)
    with pytest.raises(CheckpointError, match=r"'model\.layers\.1\.self_attn\.sinks' is missing"):
        Checkpoint.open(model)


def test_wrong_shape(model):
    def edit(h):
        t = h["model.layers.0.mlp.router.bias"]
        t["dtype"] = "U8"
        t["shape"] = [t["shape"][0] * 2]

    _rewrite_header(model / "model.safetensors", edit)
    msg = r"model\.safetensors: tensor 'model\.layers\.0\.mlp\.router\.bias' is U8"
    with pytest.raises(CheckpointError, match=msg):
        Checkpoint.open(model)


def test_missing_shard_in_index(tmp_path, synth_dir):
    src = synth_dir("odd", 1, max_shard_bytes=100_000)
    dst = tmp_path / "m"
    shutil.copytree(src, dst)
    (dst / "model-00003-of-00010.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model-00003-of-00010\.safetensors: shard listed"):
        Checkpoint.open(dst)


def test_missing_tokenizer(model):
    (model / "tokenizer.json").unlink()
    with pytest.raises(TokenizerError, match=r"tokenizer\.json: not found"):
        Engine.load(model)


def test_not_a_model_folder(tmp_path):
    with pytest.raises(CheckpointError, match=r"config\.json"):
        Checkpoint.open(tmp_path)
    with pytest.raises(CheckpointError, match="model folder not found"):
        Checkpoint.open(tmp_path / "absent")
    with pytest.raises(CheckpointError, match="model folder not found"):
        Checkpoint.open(tmp_path / "absent.gguf")  # a name alone is no GGUF file


def test_a_gguf_file_or_folder_says_which_format_neural_reads(tmp_path):
    """A user of llama.cpp, Ollama or LM Studio points Neural at the GGUF they have: the error names the format and
    the checkpoint Neural needs, for the file and for a folder holding it (not "config.json: not found")."""
    gguf = tmp_path / "gpt-oss-120b-mxfp4.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00")
    with pytest.raises(CheckpointError, match=r"gpt-oss-120b-mxfp4\.gguf is a GGUF file: .*llama\.cpp.*config\.json"):
        Checkpoint.open(gguf)
    (tmp_path / "b.gguf").write_bytes(b"GGUF")
    with pytest.raises(CheckpointError, match=r"holds b\.gguf \(and 1 more GGUF files\) and no config\.json: GGUF"):
        Checkpoint.open(tmp_path)
    with pytest.raises(CheckpointError, match=r"notes\.txt is a file: choose the model's folder"):
        (tmp_path / "notes.txt").write_text("x")
        Checkpoint.open(tmp_path / "notes.txt")


def test_a_hugging_face_cache_folder_points_at_its_snapshot(model, tmp_path):
    """`huggingface-cli download` leaves models--owner--name/snapshots/<revision>/: choosing the top folder names the
    one to choose; `original/` (the reference weights' config) is not offered."""
    top = tmp_path / "models--openai--gpt-oss-120b"
    snap = top / "snapshots" / "0123abc"
    shutil.copytree(model, snap)
    (snap / "original").mkdir()
    (snap / "original" / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"the model folder is probably .*snapshots[/\\]0123abc$"):
        Checkpoint.open(top)
    assert Checkpoint.open(snap).config.num_hidden_layers > 0


def test_non_mxfp4_checkpoint_refused(model):
    cfg = json.loads((model / "config.json").read_text())
    cfg.pop("quantization_config")
    (model / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="mxfp4"):
        Checkpoint.open(model)

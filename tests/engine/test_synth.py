from __future__ import annotations

import json

import numpy as np

from engine.checkpoint import Checkpoint
from engine.synth import PRESETS, write_synthetic_checkpoint
from engine.tokenizer import load_tokenizer


def test_same_seed_same_bytes(tmp_path):
    a = write_synthetic_checkpoint(tmp_path / "a", PRESETS["tiny"], seed=3)
    b = write_synthetic_checkpoint(tmp_path / "b", PRESETS["tiny"], seed=3)
    c = write_synthetic_checkpoint(tmp_path / "c", PRESETS["tiny"], seed=4)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()


def test_fast_mode_is_seeded_and_loadable(tmp_path):
    a = write_synthetic_checkpoint(tmp_path / "a", PRESETS["tiny"], seed=3, fast=True)
    b = write_synthetic_checkpoint(tmp_path / "b", PRESETS["tiny"], seed=3, fast=True)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    Checkpoint.open(a)


def test_skew_makes_router_bias_uneven(tmp_path):
    ck = Checkpoint.open(write_synthetic_checkpoint(tmp_path / "s", PRESETS["tiny"], seed=0, skew=2.0))
    bias = ck.bf16("model.layers.0.mlp.router.bias").float().numpy()
    assert bias.max() - bias.min() > 2.0
    assert len(set(np.argsort(bias).tolist())) == len(bias)


def test_tokenizer_special_ids_are_read_not_hard_coded(tiny_model):
    tok, sp = load_tokenizer(tiny_model)
    assert sp.return_ == tok.token_to_id("<|return|>") != 200002
    assert sp.stop_ids == {sp.return_, sp.call}


def test_real_id_layout_for_full_vocab():
    from engine.tokenizer import SpecialTokens, build_synthetic_tokenizer

    tok = build_synthetic_tokenizer(201088)
    sp = SpecialTokens.from_tokenizer(tok)
    assert (sp.return_, sp.start, sp.channel, sp.message, sp.call) == (200002, 200006, 200005, 200008, 200012)
    # o200k_harmony's names (tiktoken, openai-harmony): 200018 is reserved, not <|endofprompt|>
    assert tok.id_to_token(200018) == "<|reserved_200018|>" and tok.token_to_id("<|endofprompt|>") is None


def test_real_shapes_use_the_real_vocabulary(tmp_path):
    """The 20b/120b-shape presets write the o200k_harmony tokenizer.json (built once into the cache
    folder from quicktok-v1, see engine/synth/o200k.py); a checkpoint of that vocabulary (hidden
    size cut to keep it small) loads, renders and generates."""
    import pytest

    from engine.session import Engine
    from engine.settings import EngineSettings
    from engine.synth import shape_with
    from engine.synth.o200k import O200kError, ensure_o200k
    from engine.synth.writer import uses_o200k
    from engine.types import Conversation, Done, GenerationParams, Message

    assert uses_o200k(PRESETS["120b-shape"]) and uses_o200k(PRESETS["20b-shape"])
    assert not uses_o200k(PRESETS["tiny"]) and not uses_o200k(shape_with("120b-shape", vocab_size=1024))
    try:
        ensure_o200k()
    except O200kError as exc:  # quicktok-v1 / transformers are in the test extra
        pytest.skip(str(exc))
    shape = shape_with("120b-shape", hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_local_experts=4,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    d = write_synthetic_checkpoint(tmp_path / "m", shape, seed=1, fast=True)
    assert json.loads((d / "generation_config.json").read_text())["eos_token_id"] == [200002, 199999, 200012]
    assert json.loads((d / "SYNTHETIC.json").read_text())["shape"]["tokenizer"] == "o200k"
    eng = Engine.load(d, EngineSettings(backend="reference", dtype="float32", context=256))
    tok, sp = eng.tokenizer, eng.special
    assert tok.get_vocab_size(with_added_tokens=True) == 201088 and sp.return_ == 200002
    assert tok.encode("Hello world", add_special_tokens=False).ids == [13225, 2375]
    conv = Conversation((Message("user", "What is the capital of France?"),), current_date="2025-06-28")
    ids = eng.render(conv)
    assert len(ids) < 80 and ids[-2:] == [200006, 173781]  # <|start|>assistant
    done = list(eng.generate(conv, GenerationParams(temperature=0, max_tokens=4)))[-1]
    assert isinstance(done, Done) and done.error is None and done.usage.prompt_tokens == len(ids)
    assert done.usage.completion_tokens >= 1


def test_without_the_real_vocabulary_the_synthetic_one_is_written_and_recorded(monkeypatch):
    from engine.synth import o200k, writer

    def unavailable(out_dir=None):
        raise o200k.O200kError("quicktok-v1 not installed")

    monkeypatch.setattr(o200k, "ensure_o200k", unavailable)
    assert writer._resolve_tokenizer(PRESETS["120b-shape"]).tokenizer == "synthetic"
    assert writer._resolve_tokenizer(PRESETS["tiny"]) == PRESETS["tiny"]

from __future__ import annotations

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

    sp = SpecialTokens.from_tokenizer(build_synthetic_tokenizer(201088))
    assert (sp.return_, sp.start, sp.channel, sp.message, sp.call) == (200002, 200006, 200005, 200008, 200012)

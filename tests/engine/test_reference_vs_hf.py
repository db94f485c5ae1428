"""The reference engine against Hugging Face transformers' GptOssForCausalLM (independent oracle).

Tolerances (issue 2): fp32 logits max abs diff <= 1e-4 of the max abs logit; bf16 argmax
agreement with the fp32 reference no worse than transformers' own bf16 agreement minus 0.05;
32-step greedy continuation identical to transformers' greedy generate in fp32.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.checkpoint import Checkpoint
from engine.reference import ReferenceModel
from engine.session import Engine
from engine.settings import EngineSettings

transformers = pytest.importorskip("transformers")

# name, preset, seed, shard size: three shapes, one with odd sizes (hidden 96, head_dim 24,
# top-k 3, window 5) and one sharded through model.safetensors.index.json.
CASES = [("tiny", "tiny", 0, 2 << 30), ("odd", "odd", 1, 2 << 30), ("small-sharded", "small", 2, 400_000)]


def hf_model(path, dtype):
    from transformers import GptOssForCausalLM, Mxfp4Config

    m = GptOssForCausalLM.from_pretrained(str(path), quantization_config=Mxfp4Config(dequantize=True), dtype=dtype)
    return m.eval()


def prompt_ids(vocab: int, n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, vocab - 30, n).tolist()


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def case(request, synth_dir):
    _name, preset, seed, shard = request.param
    path = synth_dir(preset, seed, max_shard_bytes=shard)
    ck = Checkpoint.open(path)
    ids = prompt_ids(ck.config.vocab_size, 40, seed)
    assert len(ids) > ck.config.sliding_window  # the window must bite
    return path, ck, ids


def test_fp32_logits_match_transformers(case):
    path, ck, ids = case
    ours = ReferenceModel(ck, torch.float32).forward(ids)
    with torch.no_grad():
        theirs = hf_model(path, torch.float32)(torch.tensor([ids])).logits[0].float()
    rel = float((ours - theirs).abs().max() / theirs.abs().max())
    assert rel <= 1e-4, rel


def test_bf16_argmax_agreement_not_worse_than_transformers(case):
    path, ck, ids = case
    ref32 = ReferenceModel(ck, torch.float32).forward(ids).argmax(-1)
    ours16 = ReferenceModel(ck, torch.bfloat16).forward(ids).argmax(-1)
    with torch.no_grad():
        hf32 = hf_model(path, torch.float32)(torch.tensor([ids])).logits[0].argmax(-1)
        hf16 = hf_model(path, torch.bfloat16)(torch.tensor([ids])).logits[0].argmax(-1)
    # in whole tokens: as float32 means, 37/40 >= 39/40 - 0.05 failed by a rounding (on a CPU whose
    # bf16 GEMMs, AVX512-BF16/AMX, round differently from the CI machine's)
    ours = int((ours16 == ref32).sum())
    theirs = int((hf16 == hf32).sum())
    assert ours >= theirs - round(0.05 * len(ids)), (ours, theirs, len(ids))


def test_greedy_continuation_matches_transformers_generate(case):
    path, _ck, ids = case
    eng = Engine.load(path, EngineSettings(backend="reference", dtype="float32"))
    logits = eng.backend.forward(ids)
    ours = []
    for _ in range(32):
        tok = int(torch.argmax(logits))
        ours.append(tok)
        logits = eng.backend.forward([tok])
    with torch.no_grad():
        out = hf_model(path, torch.float32).generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False,
                                                      eos_token_id=None, pad_token_id=0, min_new_tokens=32)
    assert ours == out[0, len(ids):].tolist()


def test_kv_cache_decode_equals_full_forward(case):
    _, ck, ids = case
    model = ReferenceModel(ck, torch.float32)
    full = model.forward(ids)
    cache = model.new_cache()
    parts = [model.forward(ids[:17], cache)] + [model.forward([t], cache) for t in ids[17:]]
    stepwise = torch.cat(parts)
    assert float((stepwise - full).abs().max() / full.abs().max()) <= 1e-5
    assert torch.equal(stepwise.argmax(-1), full.argmax(-1))


# The 120b's rope parameters (theta 150000, YaRN factor 32 over 4,096, beta 32/1, no truncation,
# head_dim 64) and its window of 128, on a small model: prompts past the original 4,096 positions.
LONG_SHAPE = dict(hidden_size=128, num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=64, vocab_size=512,
                  sliding_window=128)


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    from engine.synth import shape_with, write_synthetic_checkpoint

    shape = shape_with("tiny", **LONG_SHAPE)
    assert (shape.rope_factor, shape.original_context) == (32.0, 4096)
    path = write_synthetic_checkpoint(tmp_path_factory.mktemp("long"), shape, seed=5)
    return path, Checkpoint.open(path)


def test_fp32_logits_match_transformers_on_5000_tokens(long_model):
    """Issue 18: within 5e-6 relative on a 5,000-token prompt (window 128, the 120b rope parameters),
    over the last 256 positions (past the original 4,096). Measured 6.1e-7; with the YaRN inverse
    frequencies computed in float64 and rounded (before issue 18) 5.6e-6."""
    path, ck = long_model
    cfg = ck.config
    assert cfg.rope_scaling.factor == 32 and cfg.rope_theta == 150000 and cfg.head_dim == 64
    assert cfg.sliding_window == 128 and not cfg.rope_scaling.truncate
    ids = prompt_ids(cfg.vocab_size, 5000, 7)
    ours = ReferenceModel(ck, torch.float32).forward(ids, attn_block=512)[-256:]
    with torch.no_grad():
        theirs = hf_model(path, torch.float32)(torch.tensor([ids]), logits_to_keep=256).logits[0].float()
    gap = float((ours - theirs).abs().max() / theirs.abs().max())
    assert gap <= 5e-6, gap

from __future__ import annotations

import json
import math

import pytest
import torch

from engine.config import ConfigError, ModelConfig
from engine.reference import yarn_inv_freq
from engine.synth import PRESETS


def real_120b() -> dict:
    d = PRESETS["120b-shape"].config_dict()
    d["eos_token_id"] = 200002
    return d


def test_parses_120b_and_20b_shapes():
    c = ModelConfig.from_dict(real_120b())
    assert (c.num_hidden_layers, c.num_local_experts, c.num_experts_per_tok) == (36, 128, 4)
    assert c.q_width == 4096 and c.kv_width == 512 and c.gqa_group == 8
    assert c.is_sliding(0) and not c.is_sliding(1)
    assert c.rope_scaling.truncate is False and c.rope_scaling.factor == 32.0
    assert c.expert_mxfp4_bytes() == 13_219_200  # design doc: one expert raw (codes + scales)
    assert c.expert_bytes() == 13_219_200 + 2 * (5760 + 2880)  # plus the bf16 biases
    c20 = ModelConfig.from_dict(PRESETS["20b-shape"].config_dict())
    assert c20.num_hidden_layers == 24 and c20.num_local_experts == 32


def _hf_inv_freq(d: dict) -> tuple[torch.Tensor, float]:
    pytest.importorskip("transformers")
    from transformers import GptOssConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hc = GptOssConfig(**{k: v for k, v in d.items() if k != "quantization_config"})
    return ROPE_INIT_FUNCTIONS["yarn"](hc, "cpu")


def _openai_reference_inv_freq(head_dim: int, base: float, factor: float, orig: int, alpha: float = 1.0,
                               beta: float = 32.0) -> tuple[torch.Tensor, float]:
    """gpt_oss/torch/model.py RotaryEmbedding._compute_concentration_and_inv_freq, transcribed."""
    freq = base ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim)
    concentration = 0.1 * math.log(factor) + 1.0
    d_half = head_dim / 2
    low = d_half * math.log(orig / (beta * 2 * math.pi)) / math.log(base)
    high = d_half * math.log(orig / (alpha * 2 * math.pi)) / math.log(base)
    interpolation = 1.0 / (factor * freq)
    extrapolation = 1.0 / freq
    ramp = (torch.arange(d_half, dtype=torch.float32) - low) / (high - low)
    mask = 1 - ramp.clamp(0, 1)
    return interpolation * (1 - mask) + extrapolation * mask, concentration


def test_yarn_frequencies_are_the_references_float32_values():
    """Bit for bit what transformers and the openai reference compute (in float32). The float64
    arithmetic rounded once differs from them by 1 ulp in 7 of the 32 values."""
    d = real_120b()
    inv, conc = yarn_inv_freq(ModelConfig.from_dict(d))
    ours = torch.tensor(inv, dtype=torch.float32)
    assert ours.tolist() == inv  # each value is exactly a float32
    ref, ref_conc = _openai_reference_inv_freq(64, 150000.0, 32.0, 4096)
    assert torch.equal(ours, ref) and conc == ref_conc
    hf, hf_conc = _hf_inv_freq(d)
    assert torch.equal(ours, hf) and conc == pytest.approx(hf_conc, rel=1e-15)
    dt = dict(d, rope_scaling=dict(d["rope_scaling"], truncate=True))  # transformers' default when left out
    hf_t, _ = _hf_inv_freq(dt)
    assert torch.equal(torch.tensor(yarn_inv_freq(ModelConfig.from_dict(dt))[0], dtype=torch.float32), hf_t)
    # sanity against gpt-oss-facts: extrapolated at the top, interpolated by 32 at the bottom
    assert inv[0] == 1.0 and inv[31] == pytest.approx(150000 ** (-62 / 64) / 32, rel=1e-6)


def test_rope_angles_match_transformers_at_long_positions():
    """cos/sin at positions up to 131,071 (the full context) equal transformers' rotary embedding."""
    pytest.importorskip("transformers")
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding

    from engine.reference import rope_cos_sin

    d = real_120b()
    cfg = ModelConfig.from_dict(d)
    hc = GptOssConfig(**{k: v for k, v in d.items() if k != "quantization_config"})
    pos = torch.tensor([0, 1, 4095, 4096, 65_537, 131_071])
    cos, sin = rope_cos_sin(cfg, pos, torch.float32)
    hcos, hsin = GptOssRotaryEmbedding(hc)(torch.zeros(1, len(pos), 8), pos[None])
    assert torch.equal(cos, hcos[0, :, :32].float()) and torch.equal(sin, hsin[0, :, :32].float())


def test_truncate_true_changes_blend_band():
    d = real_120b()
    d["rope_scaling"] = dict(d["rope_scaling"], truncate=True)
    inv_t, _ = yarn_inv_freq(ModelConfig.from_dict(d))
    inv_f, _ = yarn_inv_freq(ModelConfig.from_dict(real_120b()))
    assert inv_t[9] != pytest.approx(inv_f[9], rel=1e-3)


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"hidden_size": None}, "hidden_size"),
        ({"num_experts_per_tok": 200, "experts_per_token": 200}, "exceeds"),
        ({"num_key_value_heads": 7}, "multiple of num_key_value_heads"),
        ({"hidden_size": 2881}, "MXFP4 block"),
        ({"layer_types": ["full_attention"]}, "layer_types"),
        ({"layer_types": ["sliding_attention"] * 36, "sliding_window": 0}, "sliding_window"),
        ({"model_type": "llama"}, "model_type"),
        ({"rope_scaling": {"rope_type": "longrope"}}, "not supported"),
        ({"num_hidden_layers": -1}, "positive integer"),
    ],
)
def test_clear_errors_for_bad_configs(patch, needle):
    d = real_120b()
    for k, v in patch.items():
        if v is None:
            d.pop(k)
        else:
            d[k] = v
    with pytest.raises(ConfigError, match=needle):
        ModelConfig.from_dict(d)


def test_load_names_the_file(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"config\.json"):
        ModelConfig.load(tmp_path)
    with pytest.raises(ConfigError, match="not found"):
        ModelConfig.load(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text(json.dumps(real_120b()))
    assert ModelConfig.load(tmp_path).hidden_size == 2880

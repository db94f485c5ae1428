from __future__ import annotations

import json

import pytest

from engine.config import ConfigError, ModelConfig, yarn_inv_freq
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


def test_yarn_frequencies_match_the_fact_sheet():
    inv, conc = yarn_inv_freq(ModelConfig.from_dict(real_120b()))
    expect = {0: 1.0, 8: 0.0508133, 9: 0.0317057, 12: 0.00679496, 17: 1.29319e-4, 18: 3.83088e-5, 31: 3.02351e-7}
    for i, v in expect.items():
        assert inv[i] == pytest.approx(v, rel=2e-5), i
    assert conc == pytest.approx(1.3465736, rel=1e-7)


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

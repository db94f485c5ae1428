"""bench.kernel.cpu_decode_split on the tiny synthetic checkpoint: every native entry point is
timed and its bytes counted as the shapes give them; plumbing, not speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.kernel import cpu_decode_split


def test_split_counts_each_part(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.checkpoint import Checkpoint

    cfg = Checkpoint.open(tiny_model).config
    rc = cpu_decode_split.main([str(tiny_model), "--threads", "1", "--tokens", "3", "--depth", "5", "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out.strip())
    assert d["depth"] == 5
    parts = d["parts"]
    assert {"qkv_proj", "o_proj", "router", "head", "experts", "attention"} <= set(parts)
    h, layers = cfg.hidden_size, cfg.num_hidden_layers
    qkv_rows = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * cfg.head_dim
    assert parts["qkv_proj"]["MB_per_token"] * 1e6 == pytest.approx(layers * qkv_rows * (h + 1) * 2)  # weights, bias
    assert parts["head"]["MB_per_token"] * 1e6 == pytest.approx(cfg.vocab_size * h * 2)
    assert parts["experts"]["MB_per_token"] > 0
    assert d["floor_ms_CALCULATED"] == pytest.approx(d["MB_per_token"] / d["probe_GB_s_MEASURED"], rel=1e-6)
    from native.kernel import load_kernel

    k = load_kernel()  # every read loop probed, the floor from the best, the engine's own ISA left in place
    assert set(d["probe_GB_s_by_isa"]) == set(k.available_isas())
    assert d["probe_GB_s_MEASURED"] == max(d["probe_GB_s_by_isa"].values())
    assert k.isa == d["isa"]
    assert d["tok_s_MEASURED"] > 0 and d["ms_per_token_split"] > 0
    f = d["fused"]  # the shipped fused layer's pass: every layer fused, its parts adding up to its time
    assert f["fused_layers_per_token"] == layers
    assert f["glue_us_per_layer"] > 0 and f["outside_layers_ms_per_token"] > 0
    assert f["native_ms_per_token"] + f["glue_us_per_layer"] * layers / 1e3 + f["outside_layers_ms_per_token"] \
        == pytest.approx(f["ms_per_token"])


def test_separate_qkv_times_each_projection(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cpu_decode_split.main([str(tiny_model), "--threads", "1", "--tokens", "2", "--separate-qkv", "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out.strip())
    assert d["separate_qkv"] and {"q_proj", "k_proj", "v_proj"} <= set(d["parts"]) and "qkv_proj" not in d["parts"]


@pytest.mark.parametrize("flag", ["--tokens", "--depth"])
def test_bad_counts_are_named(tiny_model: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    with pytest.raises(SystemExit):
        cpu_decode_split.main([str(tiny_model), flag, "0"])
    assert flag in capsys.readouterr().err


def test_the_generation_loop_is_timed_apart_from_its_forwards(tiny_model: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc = cpu_decode_split.main([str(tiny_model), "--threads", "1", "--tokens", "4", "--depth", "1", "--json"])
    assert rc == 0
    g = json.loads(capsys.readouterr().out.strip())["generate"]
    assert g["forward_ms"] > 0 and g["outside_ms"] >= g["sampler_ms"] > 0
    assert g["ms_per_token"] == pytest.approx(g["forward_ms"] + g["outside_ms"])

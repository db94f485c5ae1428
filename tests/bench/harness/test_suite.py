"""The GPU-machine suite's arithmetic and table (its runs themselves happen on the device)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.harness.suite import FULL_LAYERS, scaled_pool_gib
from bench.harness.suite_table import suite_table
from engine.config import ModelConfig
from engine.plan import plan_vram
from engine.settings import EngineSettings
from engine.synth import shape_with


def test_scaled_pool_gives_the_36_layer_slots_per_layer() -> None:
    for layers in (2, 12, 18):
        pool, why = scaled_pool_gib(layers, 12.0, 16384, {})
        cfg = ModelConfig.from_dict(shape_with("120b-shape", num_hidden_layers=layers).config_dict())
        full_cfg = ModelConfig.from_dict(shape_with("120b-shape").config_dict())
        full = plan_vram(full_cfg, EngineSettings(context=16384, kv_ring=256, vram_budget_gib=12.0))
        # the pool as the engine plans it from the printed setting
        plan = plan_vram(cfg, EngineSettings(context=16384, kv_ring=256, vram_budget_gib=12.0,
                                             pool_gib=float(f"{pool:.6f}")))
        assert plan.n_slots == full.n_slots * layers // FULL_LAYERS > 0
        assert f"scaled to {layers} layers" in why


def _report(layers: int, results: list[dict], bench: str) -> dict:
    return {"model": {"layers": layers}, "bench": bench, "results": results}


def test_table_scales_to_36_layers_and_names_failures(tmp_path: Path) -> None:
    spread = {"median": 100.0, "min": 90.0, "max": 110.0}
    dec = _report(18, [{"depth": 0, "depth_requested": 0, "tokens_per_s": spread,
                        "vram_hit_rate": {"median": 0.75}, "phases_ms": {"cpu": 7.0, "token": 9.0}}], "decode")
    prm = _report(18, [{"prompt_tokens": 13000, "ttft_s": {"median": 3.0}, "tokens_per_s": {"median": 4333.0},
                        "prompt_split": {"gpu_gemm": 1.5, "gpu_copies": 0.8, "cpu_jobs": 0.01,
                                         "routing_sync": 0.02}}], "prompt")
    results = {"stages": {"decode-skewed": {"ok": True, "report": dec},
                          "decode-uniform": {"ok": False, "error": "RuntimeError: boom"},
                          "prompt-uniform": {"ok": True, "report": prm}}}
    table = suite_table(json.loads(json.dumps(results)), 36)
    rows = table.splitlines()
    skewed = next(r for r in rows if r.startswith("| skewed"))
    assert "| 50.0 |" in skewed and "| 18.3 |" in skewed and "2.73x" in skewed and "0.750" in skewed
    assert "cpu 7.00" in skewed and "token" not in skewed  # the token total is the tok/s column
    assert any(r.startswith("| uniform") and "FAILED: RuntimeError: boom" in r for r in rows)
    prompt = next(r for r in rows if r.startswith("| 13000"))
    assert "| 6.00 |" in prompt and "4.91x" in prompt  # 3 s x 36/18; (13000/441 s) / 6 s = 4.913
    assert "failed stages: decode-uniform" in table

"""The demo-vs-random hit-rate run (bench/demo_training/hitrate.py, device_hitrate.sh) on the CPU:
the random twin has exactly the demo's config and tokenizer, pool_gib plans exact slot counts
through the bench's own --set parsing, and the summary reads bench JSONs and engine plan lines."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.demo_training.hitrate import (
    bench_row,
    pool_gib_for,
    shape_of,
    summarize,
    write_twin,
)
from engine.checkpoint import Checkpoint
from engine.config import ModelConfig
from engine.synth import PRESETS

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "resources" / "demo-model"


def demo_config() -> ModelConfig:
    return ModelConfig.from_dict(json.loads((DEMO / "config.json").read_text()))


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_twin(DEMO, tmp_path_factory.mktemp("twin") / "random-demo-shape", seed=0)


def test_twin_has_the_demo_config_and_tokenizer_and_other_weights(twin: Path):
    assert json.loads((twin / "config.json").read_text()) == json.loads((DEMO / "config.json").read_text())
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (twin / name).read_bytes() == (DEMO / name).read_bytes()
    assert json.loads((twin / "SYNTHETIC.json").read_text())["skew"] == 0.0  # bench reports it as random
    a, b = Checkpoint.open(DEMO), Checkpoint.open(twin)
    assert a.config == b.config
    name = "model.layers.0.mlp.router.weight"
    assert a.array(name).shape == b.array(name).shape and not np.array_equal(a.array(name), b.array(name))


def test_shape_of_refuses_what_synth_would_write_differently():
    config = json.loads((DEMO / "config.json").read_text())
    assert shape_of(config).config_dict()["hidden_size"] == 256
    with pytest.raises(ValueError, match="rope_theta"):
        shape_of({**config, "rope_theta": 10000})
    with pytest.raises(ValueError, match="attention_bias"):
        shape_of({**config, "attention_bias": False})


@pytest.mark.parametrize("static", [-1, 0])
def test_pool_gib_plans_exact_slot_counts_through_the_bench_settings(static: int):
    from app.cli.cmd_bench import engine_settings
    from bench.demo_training.hitrate import planned_slots

    for cfg in (demo_config(), ModelConfig.from_dict(PRESETS["tiny"].config_dict())):
        total = cfg.num_hidden_layers * cfg.num_local_experts
        for n in range(cfg.num_experts_per_tok, total + 1):
            text = pool_gib_for(cfg, n, static)
            args = argparse.Namespace(backend="gpu", dtype="bfloat16", threads=8, context=16384, budget_gib=12.0,
                                      set=[f"pool_gib={text}", f"static_slots={static}"])
            slots, n_static = planned_slots(cfg, engine_settings(args))
            assert slots == n and n_static == (n // 2 if static < 0 else 0)
        with pytest.raises(ValueError):
            pool_gib_for(cfg, total + 1)
        with pytest.raises(ValueError):
            pool_gib_for(cfg, cfg.num_experts_per_tok - 1)


def fake_report(model_dir: Path, pool_gib: str, static: int, backend: str = "gpu-hybrid") -> dict:
    from bench.demo_training.hitrate import bench_settings

    eng = bench_settings(pool_gib=float(pool_gib), static_slots=static).to_dict()
    return {"model": {"dir": str(model_dir), "layers": 4, "experts": 16}, "backend": backend,
            "settings": {"engine": eng},
            "results": [{"depth": 256, "tokens": 8, "repeats_identical": True,
                         "tokens_per_s": {"median": 123.4},
                         "vram_hit_rate": {"median": 0.6, "runs": [0.5, 0.6, 0.7]},
                         "token_ids": [5, 6, 5, 6, 7, 8, 9, 9, 10]}]}


def test_bench_row_prefers_the_engine_plan_line(tmp_path: Path):
    from engine.plan import plan_vram
    from engine.settings import EngineSettings

    cfg = demo_config()
    pool = pool_gib_for(cfg, 16, -1)
    path = tmp_path / "demo--slots16--static-1.json"
    path.write_text(json.dumps(fake_report(DEMO, pool, -1)))
    row = bench_row(path, json.loads(path.read_text()))
    assert (row.model, row.slots, row.static, row.plan_source) == ("demo", 16, 8, "settings")
    # distinct among the processed tokens: the last picked id (10) was never fed back
    assert (row.hit_first, row.hit_median, row.tok_s, row.distinct_tokens) == (0.5, 0.6, 123.4, 5)
    # the GPU backend's own log line (NEURAL_LOG=INFO) wins over the computation here
    plan = plan_vram(cfg, EngineSettings(context=16384, kv_ring=256, vram_budget_gib=12.0, pool_gib=float(pool),
                                         static_slots=5, scratch_slots=6))
    path.with_suffix(".log").write_text(f"INFO:engine.gpu.backend:GPU backend: {plan.describe()}; CPU misses: x\n")
    row = bench_row(path, json.loads(path.read_text()))
    assert (row.slots, row.static, row.plan_source) == (16, 5, "engine log")
    wrong = tmp_path / "demo--slots32--static-1.json"
    shutil.copyfile(path, wrong)
    with pytest.raises(ValueError, match="planned 16 slots"):
        bench_row(wrong, json.loads(wrong.read_text()))


def test_summarize_flags_broken_runs(tmp_path: Path):
    (tmp_path / "demo--slots16--static0.json").write_text("")  # a bench that crashed before printing
    out = summarize(tmp_path, routing=False)
    assert not out["bench"] and "demo--slots16--static0.json" in out["errors"][0]


def run_bench(model_dir: Path, out: Path, pool_gib: str, static: int) -> None:
    env = {**os.environ, "NEURAL_CACHE_DIR": str(out.parent / f"cache-{out.stem}"), "NEURAL_LOG": "INFO"}
    cmd = [sys.executable, "-m", "app.cli.main", "bench", "decode", str(model_dir), "--backend", "cpu", "--json",
           "--ids", "--depth", "40", "--tokens", "6", "--warmup", "0", "--repeats", "1", "--threads", "2",
           "--set", f"pool_gib={pool_gib}", "--set", f"static_slots={static}"]
    with out.open("w") as f, out.with_suffix(".log").open("w") as err:
        subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=err, check=True, timeout=300)


def test_cpu_bench_runs_summarize_with_routing_and_replay(tmp_path: Path, twin: Path):
    cfg = demo_config()
    bench = tmp_path / "bench"
    bench.mkdir()
    for label, model_dir in (("demo", DEMO), ("random", twin)):
        run_bench(model_dir, bench / f"{label}--slots16--static-1.json", pool_gib_for(cfg, 16, -1), -1)
    out = summarize(bench, routing=True, held_out=False)
    assert not out["errors"]
    rows = {r["model"]: r for r in out["bench"]}
    assert set(rows) == {"demo", "random"}
    for r in rows.values():
        assert r["backend"] == "cpu-native" and r["hit_first"] is None  # no VRAM slots on the CPU engine
        assert r["slots"] == 16 and r["static"] == 8 and r["depth"] == 40 and r["tokens"] == 6
        assert 0.0 <= r["replay_hit"] <= 1.0
    routing = {r["model"]: r for r in out["routing"]}
    assert routing["demo"]["tokens"] == routing["random"]["tokens"] == 40 + 6
    assert "| demo | 16 (25%) | 8 + 8 | 40 + 6 |" in out["table"]


@pytest.mark.slow
def test_device_script_cpu_mode(tmp_path: Path):
    """The whole device script with --cpu (minutes on a small machine)."""
    env = {**os.environ, "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work"), "PYTHON": sys.executable}
    r = subprocess.run(["bash", "bench/device/demo_hitrate.sh", "--cpu", "--slots", "16", "--static", "0",
                        "--depth", "24", "--tokens", "4", "--repeats", "1", "--no-held-out"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {b["model"] for b in summary["bench"]} == {"demo", "random"}
    assert (tmp_path / "out" / "summary.md").read_text().startswith("| model |")
    # few files in OUT (the device tool brings back at most 8), the rest packed
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["results.tar.gz", "run.log", "summary.json",
                                                                    "summary.md"]
    import tarfile

    with tarfile.open(tmp_path / "out" / "results.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"bench/demo--slots16--static0.json", "bench/random--slots16--static0.log", "machine.txt"} <= names

"""The one-call device suite (bench/residency/suite.py) and the bench pieces it relies on,
run on the CPU: the numbers mean nothing here; this checks placement, the probe, layer choice,
timeouts, partial results, the output files and the GPU-only code paths under the interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.residency import residency_bench as br
from bench.residency import suite as bs
from engine.synth import PRESETS, write_synthetic_checkpoint

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux memory calls")

pytestmark = linux_only


def test_scenario_names():
    assert br.parse_scenario("cold-warm") == ("cold-warm", False)
    assert br.parse_scenario("cold-warm-now+trim") == ("cold-warm-now", True)
    with pytest.raises(ValueError, match="unknown scenario"):
        br.parse_scenario("hot")
    for sc in bs.DEFAULT_SCENARIOS.split(","):
        br.parse_scenario(sc)


def _cold_possible(path: Path) -> bool:
    return bs.mount_of(path)[1] not in bs.NO_DROP_FS


def test_drop_experts_leaves_dense_weights_cached(tmp_path):
    from engine.checkpoint import Checkpoint

    write_synthetic_checkpoint(tmp_path, PRESETS["small"], seed=1)
    if not _cold_possible(tmp_path):
        pytest.skip("tmp is on a file system that keeps pages in RAM")
    spans = br._expert_spans(tmp_path)
    assert spans and all(n > 0 for s in spans.values() for _o, n in s)
    d = br._drop(tmp_path, "experts")
    assert d["expert_bytes"] == sum(n for s in spans.values() for _o, n in s)
    assert d["resident_after"] <= 0.05 * d["expert_bytes"]  # partial first/last pages may stay
    ck = Checkpoint.open(tmp_path)
    f = next(f for f in ck._files.values() if "model.embed_tokens.weight" in f.tensors)
    emb = f.tensors["model.embed_tokens.weight"]
    ck.close()
    dense = br._span_residency({Path(f.path): [(emb.start, emb.end - emb.start)]})
    assert dense > 0  # written moments ago and not dropped


def test_disk_probe_and_mount(tmp_path):
    mnt, fs = bs.mount_of(tmp_path)
    assert str(tmp_path).startswith(mnt) and fs
    r = bs.disk_probe(tmp_path, 16)
    assert r["bytes"] == 16 << 20 and r["write_GBps"] > 0 and r["read_GBps"] > 0
    if fs not in bs.NO_DROP_FS:
        assert r["resident_after_drop"] < 0.5
    assert not list(tmp_path.glob(".probe-*"))


def test_layer_estimate_grows_with_layers_and_slow_disks():
    fast = {"write_GBps": 2.0, "read_GBps": 3.0}
    slow = {"write_GBps": 0.2, "read_GBps": 0.3}
    sc = bs.DEFAULT_SCENARIOS.split(",")
    e = [bs.estimate_s("120b-shape", n, fast, sc, True) for n in (2, 4, 6)]
    assert e[0] < e[1] < e[2]
    assert bs.estimate_s("120b-shape", 4, slow, sc, False) > bs.estimate_s("120b-shape", 4, fast, sc, False)
    total, experts = bs.checkpoint_sizes("120b-shape", 4)
    assert experts == 4 * 128 * 13_236_480 and total > experts + 2 * 201088 * 2880 * 2


def assert_gone(pid: int, why: str) -> None:
    """Fail with ``why`` unless process ``pid`` exits within 5 s."""
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(why)


def test_run_child_kills_the_whole_group_on_timeout(tmp_path):
    marker = tmp_path / "grandchild.pid"
    code = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
            f"time.sleep(60)']); open({str(marker)!r}, 'w').write(str(p.pid)); print('{{\"a\": 1}}', flush=True); "
            f"time.sleep(60)")
    t0 = time.monotonic()
    rc, out, _secs = br.run_child([sys.executable, "-c", code], 3.0)
    assert rc is None and time.monotonic() - t0 < 20
    assert br.last_json(out) == {"a": 1}  # what it printed before the kill comes back
    assert_gone(int(marker.read_text()), "the grandchild survived the timeout")


def test_render_md_with_failures_and_skips():
    rep = {"started": "x", "budget_s": 10, "steps": {}, "error": "prepare failed",
           "scenarios": [{"scenario": "warm", "status": "timeout", "turns": [{"turn": 0, "prompt_tokens": 5}]},
                         {"scenario": "cold-warm", "status": "skipped", "reason": "3 s left"}]}
    md = bs.render_md(rep)
    assert "prepare failed" in md and "| cold-warm | skipped 3 s left" in md


def _suite(tmp_path: Path, *extra: str) -> tuple[int, dict, str, Path]:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "bench.residency.cli", "suite", "--out", str(out),
                           "--dir", str(tmp_path / "disk"), "--preset", "tiny", "--layers", "2",
                           "--prompt-tokens", "8", "--followup-tokens", "4", "--answer-tokens", "3",
                           "--followups", "1", "--context", "1024", "--probe-mib", "8", *extra],
                          capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2])
    rep = json.loads((out / "residency.json").read_text())
    return proc.returncode, rep, proc.stdout, out


@pytest.mark.slow  # a study's end-to-end run: 20-40 s on 2 cores
def test_suite_end_to_end_on_the_cpu_engine(tmp_path):
    rc, rep, stdout, out = _suite(tmp_path, "--backend", "cpu", "--scenarios", "warm,cold-warm+trim")
    assert rc == 0, (out / "suite.log").read_text()[-3000:]
    assert [r["scenario"] for r in rep["scenarios"]] == ["warm", "cold-warm+trim"]
    assert all(r["status"] == "ok" and len(r["turns"]) == 2 for r in rep["scenarios"])
    assert rep["steps"]["layers"]["chosen"] == 2 and "canary" not in rep["steps"]  # no canary for the CPU
    cold = rep["scenarios"][1]
    assert cold["drop"]["mode"] == "experts" and cold["source"] == "checkpoint" and "warm_s" in cold
    assert "resident_after_trim" in cold["turns"][0] and "drop" not in rep["scenarios"][0]
    assert cold["engine_owned_residency"] and cold["warmup"]["state"] == "done"  # the CPU engine's manager
    assert cold["plan_bytes"] <= cold["store_bytes"] // 2 + 1
    assert stdout.rstrip().endswith("Raw data: residency.json.")  # the table is printed last
    assert "| cold-warm+trim | 1 |" in stdout
    files = sorted(p.name for p in out.iterdir())
    assert files == ["residency.json", "residency.md", "suite.log"] and len(files) <= 8
    assert not (tmp_path / "disk" / "tiny-L2-skew1.5").exists()  # deleted without --keep


@pytest.mark.slow  # a study's end-to-end run: 20-40 s on 2 cores
def test_suite_skips_what_the_budget_cannot_hold(tmp_path):
    rc, rep, stdout, _out = _suite(tmp_path, "--backend", "cpu", "--scenarios", "warm,cold-nowarm",
                                   "--budget-s", "30", "--min-scenario-s", "29")
    assert rc == 1
    assert [r["status"] for r in rep["scenarios"]] == ["skipped", "skipped"]
    assert "skipped" in stdout


@pytest.mark.slow
def test_suite_gpu_paths_under_the_interpreter(tmp_path):
    """The GPU backend's code paths (canary, hot set shared between processes, static experts left
    out of the RAM plan, the prompt runner's own release turned off) on the CPU."""
    pytest.importorskip("triton")
    rc, rep, _stdout, out = _suite(tmp_path, "--backend", "gpu-interpret", "--pool-slots", "6",
                                   "--scenarios", "warm,cold-warm-now+trim", "--canary-dir",
                                   str(tmp_path / "shm"), "--canary-layers", "2")
    assert rc == 0, (out / "suite.log").read_text()[-3000:]
    can = rep["steps"]["canary"]["run"]
    assert can["status"] == "ok" and can["backend"] == "gpu-hybrid"
    assert [t["prefill_path"] for t in can["turns"]] == ["layer-major", "layer-major"]
    warm, cold = rep["scenarios"]
    assert not warm["hot_set_loaded"] and cold["hot_set_loaded"]  # saved by the warm process
    assert cold["static_vram_experts"] == 3 and cold["ranked_experts"] > 0
    assert warm["engine_owned_residency"] and cold["engine_owned_residency"]  # the GPU backend's manager
    assert cold["plan_bytes"] <= cold["store_bytes"] // 2 + 1
    assert "NEURAL_GPU_PREFILL" not in rep["scenario_env"]
    assert not (tmp_path / "shm").exists()


@pytest.mark.slow  # a study's end-to-end run: 20-40 s on 2 cores
def test_sigterm_kills_the_running_scenario_and_keeps_the_report(tmp_path):
    import signal

    out, disk = tmp_path / "out", tmp_path / "disk"
    proc = subprocess.Popen([sys.executable, "-m", "bench.residency.cli", "suite", "--out", str(out),
                             "--dir", str(disk), "--preset", "tiny", "--layers", "2", "--backend", "cpu",
                             "--scenarios", "warm", "--prompt-tokens", "8", "--answer-tokens", "16000",
                             "--followups", "0", "--probe-mib", "8"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    partial = disk / "one-warm.json"
    end = time.monotonic() + 120
    while time.monotonic() < end and "resident_before_first_prompt" not in (
            json.loads(partial.read_text()) if partial.exists() else {}):
        time.sleep(0.2)  # the scenario is in its (long) answer now
    child = json.loads(partial.read_text())["pid"]
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    rep = json.loads((out / "residency.json").read_text())
    assert "signal" in rep["error"] and "signal" in stdout
    assert_gone(child, "the scenario process outlived the suite")


def test_canary_verdicts():
    ok = {"status": "ok", "rc": 0, "load_s": 9.0, "turns": [{"prefill_path": "layer-major"}]}
    assert bs.canary_verdict(ok) == (True, False)
    fell_back = {**ok, "turns": [{"prefill_path": "token-by-token"}, {"prefill_path": "layer-major"}]}
    assert bs.canary_verdict(fell_back) == (True, True)
    hung = {"status": "timeout", "rc": None, "load_s": 9.0, "turns": []}  # loaded, never finished a turn
    assert bs.canary_verdict(hung) == (False, True)
    crashed = {"status": "exit 1", "rc": 1, "load_s": 9.0}
    assert bs.canary_verdict(crashed) == (False, True)
    slow_jit = {"status": "timeout", "rc": None}  # still compiling at load: no reason to avoid the path
    assert bs.canary_verdict(slow_jit) == (False, False)
    assert bs.canary_verdict({}) == (False, False)  # never ran (its prepare failed)

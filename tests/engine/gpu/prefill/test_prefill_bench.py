"""The device script's dry run (tiny checkpoint, interpreter): its stages run and the check passes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[4]


def dry_run(tmp_path: Path, stages: str) -> dict:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "bench.gpu.prompt_device", "run", "--device", "cpu", "--out", str(out),
           "--ckpt-dir", str(tmp_path / "ck"), "--threads", "2", "--stages", stages]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())["stages"]
    for name, stage in res.items():
        assert "error" not in stage, (name, stage.get("traceback"))
    return res


@pytest.mark.slow  # the interpreter makes it 15-30 s on 2 cores: CI's slow job runs it
def test_device_script_check_stage_dry_run(tmp_path: Path) -> None:
    res = dry_run(tmp_path, "synth,check")
    check = res["check"]
    assert check["pass"], check
    assert check["one_block"]["bit_identical"]  # block size changes nothing on the CPU
    st = check["stats_block"]
    assert st["staged_experts"] > 0 and st["cpu_experts"] > 0


@pytest.mark.slow
def test_device_script_full_dry_run(tmp_path: Path) -> None:
    res = dry_run(tmp_path, "env,synth,check,tiles,ttft")
    assert res["ttft"]["summary"] and res["tiles"]["gemm"]

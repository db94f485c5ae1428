"""bench.routing.ab_table: cal_ab.sh's table — runs in the order they ran, each configuration's mean and its ratio
to A's; a run that did not finish is a row saying so."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.routing.ab_table import main, table


def run(d: Path, name: str, tok_s: float, t: int) -> None:
    f = d / f"{name}.json"
    f.write_text(json.dumps({"tok_s_MEASURED": tok_s, "vram_hit_rate_MEASURED": 0.4,
                             "phases_ms": {"wall": 1000 / tok_s, "cpu": 6.0, "gpu_wait": 1.0, "launch": 0.2},
                             "lane_split": {"cpu_ms": 0.3, "lane_ms": 0.35}, "native_layers_per_token": 18}))
    os.utime(f, (t, t))


def test_four_configurations_mirrored(tmp_path: Path) -> None:
    for i, (name, v) in enumerate([("a-1", 80.0), ("b-1", 84.0), ("c-1", 88.0), ("d-1", 90.0), ("d-2", 92.0),
                                   ("c-2", 86.0), ("b-2", 86.0), ("a-2", 82.0)]):
        run(tmp_path, name, v, 1_000_000 + i)
    (tmp_path / "warm.json").write_text("{}")  # the untimed process is not a run
    out = table(str(tmp_path), ["", "x=1", "y=2", "x=1 y=2"])
    rows = [ln.split(" | ")[0][2:] for ln in out.splitlines() if ln.startswith("| ") and "-" in ln[:6]]
    assert rows == ["a-1", "b-1", "c-1", "d-1", "d-2", "c-2", "b-2", "a-2"]
    assert "A: (defaults); B: x=1; C: y=2; D: x=1 y=2" in out
    assert "A: mean 81.00 tok/s over 2 runs" in out and "D: mean 91.00" in out
    assert "B / A: 1.049" in out and "C / A: 1.074" in out and "D / A: 1.123" in out


def test_a_broken_run_is_a_row_and_counts_for_nothing(tmp_path: Path) -> None:
    run(tmp_path, "a-1", 80.0, 1_000_000)
    (tmp_path / "b-1.json").write_text("{not json")
    out = table(str(tmp_path), ["", "x=1"])
    assert "| b-1 | failed:" in out and "B: mean" not in out and "B / A" not in out


def test_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="2 to 4 configurations"):
        table(str(tmp_path), ["only one"])
    assert main([str(tmp_path), "a"]) == 2 and "usage" in capsys.readouterr().err

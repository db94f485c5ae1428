"""bench.kernel.native_layer_host on the tiny synthetic checkpoint: both paths run every layer of every token and
leave the same bytes; plumbing, not speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.kernel import native_layer_host


def test_both_paths_compute_the_same_layers(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = native_layer_host.main([str(tiny_model), "--threads", "1", "--tokens", "4", "--misses", "2"])
    d = json.loads(capsys.readouterr().out.strip())
    assert rc == 0 and d["same_results"] is True
    assert set(d["median_us_per_layer_MEASURED"]) == {"python", "native"}
    assert all(v > 0 for v in d["mean_us_per_layer_MEASURED"].values())

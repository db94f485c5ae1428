"""bench/kernel/torch_threads.py: one short run on the tiny model reports both torch settings."""

from __future__ import annotations

import json

import pytest
import torch

from bench.kernel.torch_threads import main
from native.kernel import NativeUnavailable


def test_reports_each_torch_thread_count_with_the_experts_share(tiny_model, capsys) -> None:
    before = torch.get_num_threads()
    try:
        main(["--model", str(tiny_model), "--team", "1", "--torch", "1,2", "--rounds", "2", "--tokens", "2"])
    except NativeUnavailable as exc:  # the extension is not built here
        pytest.skip(f"native kernel unavailable: {exc}")
    finally:
        torch.set_num_threads(before)
    rep = json.loads(capsys.readouterr().out)
    assert rep["team"] == 1 and set(rep["torch_threads"]) == {"1", "2"}
    for v in rep["torch_threads"].values():
        assert len(v["runs_ms"]) == 2 and 0 < v["median_experts_ms"] < v["median_ms"]

"""The H200 benchmark script runs end to end on the CPU engine with the tiny synthetic model
(the numbers mean nothing here; this checks the plumbing and the output format)."""

from __future__ import annotations

import json
import sys

import pytest

from bench.residency import cli, residency_bench
from engine.synth import PRESETS, write_synthetic_checkpoint

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux memory calls")

pytestmark = linux_only


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    write_synthetic_checkpoint(d, PRESETS["tiny"], seed=5)
    return d


def test_one_cold_scenario_with_trim(tiny, capsys):
    rc = cli.main(["one", "--scenario", "cold-warm-now", "--model", str(tiny), "--backend", "cpu",
                               "--prompt-tokens", "8", "--followup-tokens", "4", "--answer-tokens", "3",
                               "--followups", "1", "--trim", "--context", "1024"])
    assert rc == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert r["scenario"] == "cold-warm-now+trim" and r["source"] == "checkpoint"
    assert r["resident_after_drop"] >= 0 and r["store_bytes"] > 0
    assert r["plan_bytes"] <= r["store_bytes"] // 2 + 1  # budget fraction 0.5
    assert [t["turn"] for t in r["turns"]] == [0, 1]
    t0, t1 = r["turns"]
    assert t0["completion_tokens"] >= 1 and t0["major_per_token"] >= 0 and "resident_after_trim" in t0
    assert t1["cached_tokens"] > 0  # the follow-up reuses the first turn's K/V
    assert t0["vram_boundary"]["reserved_before"] >= t0["vram_boundary"]["reserved_after"]
    md = residency_bench._fmt_md([r])
    assert md.count("\n") == 4 and "| cold-warm-now+trim | 1 |" in md

"""bench.kernel.capture_cost on a tiny store: plumbing, the capture's bytes checked, bad input named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.kernel import capture_cost


def test_capture_cost_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = capture_cost.main(["--threads", "1", "--store-gib", "0.05", "--rounds", "1", "--calls", "2",
                            "--path", str(tmp_path / "s.nstore"), "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out.strip())
    assert d["threads"] == 1 and d["experts_per_call"] == 2 and d["calls"] == 8
    assert d["ms_per_call"] > 0 and d["ms_per_call_captured"] > 0
    assert d["extra_ms"] == pytest.approx(d["ms_per_call_captured"] - d["ms_per_call"], abs=2e-4)
    assert d["record_bytes"] >= 13_000_000  # a 120b-shape expert record


def test_a_capture_that_writes_nothing_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    real = capture_cost.expert_ref_from_record
    monkeypatch.setattr(capture_cost, "expert_ref_from_record",
                        lambda k, rec, layout, n_exc, capture=None: real(k, rec, layout, n_exc))
    rc = capture_cost.main(["--threads", "1", "--store-gib", "0.05", "--rounds", "1", "--calls", "1",
                            "--path", str(tmp_path / "s.nstore")])
    assert rc == 2 and "capture buffer does not hold" in capsys.readouterr().err


@pytest.mark.parametrize("args, word", [(["--rounds", "0"], "--rounds"), (["--experts", "99"], "--experts")])
def test_bad_arguments_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                 word: str) -> None:
    rc = capture_cost.main([*args, "--store-gib", "0.05", "--path", str(tmp_path / "s.nstore")])
    assert rc == 2 and word in capsys.readouterr().err

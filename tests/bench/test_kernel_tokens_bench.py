"""``neural bench kernel --tokens`` (the multi-token kernel at prompt group sizes) and ``--advise``
through the real CLI entry point: plumbing and JSON keys on a tiny store, not speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli.main import main


def test_bench_kernel_tokens_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "kernel", "--tokens", "1,3", "--threads", "2", "--store-gib", "0.05", "--seconds", "0.1",
               "--rounds", "1", "--advise", "populate", "--path", str(tmp_path / "b.nstore"), "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out.strip())
    assert [r["tokens"] for r in d["rows"]] == [1, 3]
    for r in d["rows"]:
        assert r["ms_per_group"] > 0 and r["gbps"] > 0
        assert abs(r["gbps"] - d["expert_bytes"] / (r["ms_per_group"] * 1e6)) < 0.02 * r["gbps"] + 0.002
    assert d["one_token_gbps"] > 0 and d["threads"] == 2 and d["advise"] == "populate"


def test_bench_kernel_advise_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "kernel", "--threads", "1", "--store-gib", "0.05", "--seconds", "0.1", "--rounds", "1",
               "--advise", "huge", "--path", str(tmp_path / "b.nstore"), "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out.strip())["advise"] == "huge"


@pytest.mark.parametrize("tokens", ["0,2", "257", "two"])  # 257: one past the kernel's 256
def test_bench_kernel_bad_tokens_name_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 tokens: str) -> None:
    rc = main(["bench", "kernel", "--tokens", tokens, "--store-gib", "0.05", "--path", str(tmp_path / "b.nstore")])
    assert rc == 2
    assert "--tokens" in capsys.readouterr().err

"""``neural build-store`` and ``neural bench kernel`` through the real CLI entry point."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.cli.main import main
from engine.store.reader import ExpertStore


@pytest.fixture
def model(tmp_path: Path, synth_dir) -> Path:
    d = tmp_path / "model"
    shutil.copytree(synth_dir("tiny", 0), d)
    return d


def test_build_store_default_path_reports_sizes(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build-store", str(model)]) == 0
    out, err = capsys.readouterr()
    assert "13,219,200 B codes+scales" in out and "12,839,040 B codes+scales" in out
    assert "verified" in out and "[####" in err  # progress bar on stderr
    with ExpertStore.open(model / "experts-packed.nstore") as st:
        assert st.fmt == "packed"


def test_build_store_raw_out_and_verify_only(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.nstore"
    assert main(["build-store", str(model), "--format", "raw", "--out", str(out), "--no-verify"]) == 0
    assert main(["build-store", str(model), "--out", str(out), "--verify-only"]) == 0
    assert "checksums match" in capsys.readouterr().out
    with open(out, "r+b") as f:  # damage one record byte
        with ExpertStore.open(out) as st:
            off = st.offset(1, 1) + 3
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0xFF]))
    assert main(["build-store", str(model), "--out", str(out), "--verify-only"]) == 2
    assert "corrupt record" in capsys.readouterr().err


def test_build_store_refuses_store_of_other_checkpoint(model: Path, tmp_path: Path, synth_dir,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.nstore"
    assert main(["build-store", str(synth_dir("odd", 0)), "--format", "raw", "--out", str(out), "--no-verify"]) == 0
    assert main(["build-store", str(model), "--out", str(out), "--verify-only"]) == 2
    err = capsys.readouterr().err
    assert "rebuild" in err and "store shapes" in err


def test_build_store_bad_model_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build-store", str(tmp_path / "nope")]) == 2
    assert "not found" in capsys.readouterr().err


def test_bench_kernel_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tiny run (5 experts, not LLC-sized): checks the plumbing and the JSON keys, not speed."""
    rc = main(["bench", "kernel", "--threads", "2", "--store-gib", "0.05", "--seconds", "0.2", "--rounds", "1",
               "--path", str(tmp_path / "b.nstore"), "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out.strip())
    for key in ("probe_gbps", "kernel_gbps", "ratio", "ms_per_token_88", "threads", "isa"):
        assert key in d
    assert d["probe_gbps"] > 0 and d["kernel_gbps"] > 0 and d["threads"] == 2
    assert d["expert_bytes"] == 13_236_480 and d["experts_in_store"] == 5  # ceil(0.05 GiB / 13.2 MB)
    assert abs(d["ratio"] - d["kernel_gbps"] / d["probe_gbps"]) < 0.01
    from native.kernel import load_kernel

    assert d["best_probe_isa"] in load_kernel().available_isas()  # every read loop tried, the kernel's ISA kept
    assert abs(d["ratio_best"] - d["kernel_gbps"] / d["best_probe_gbps"]) < 0.01
    assert d["inputs"] == "bf16"  # the engine's default dtype
    rc = main(["bench", "kernel", "--threads", "1", "--seconds", "0.1", "--rounds", "1", "--inputs", "fp32",
               "--path", str(tmp_path / "b.nstore"), "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out.strip())["inputs"] == "fp32"

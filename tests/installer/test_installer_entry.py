"""installer/entry.py: the bundle's entry point maps --self-test, survives a windowed start."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ENTRY = Path(__file__).resolve().parents[2] / "installer" / "entry.py"


@pytest.fixture(scope="module")
def entry():
    spec = importlib.util.spec_from_file_location("neural_bundle_entry", ENTRY)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_self_test_flag_becomes_the_selftest_command(entry):
    assert entry.translate_argv(["--self-test"]) == ["selftest"]
    assert entry.translate_argv(["--self-test", "--backend", "cpu"]) == ["selftest", "--backend", "cpu"]
    assert entry.translate_argv([]) == []  # no arguments: the desktop app
    assert entry.translate_argv(["doctor", "--json"]) == ["doctor", "--json"]


def test_no_arguments_reach_the_gui_and_flags_reach_the_cli(entry, monkeypatch):
    seen: list[list[str]] = []
    import app.cli.main as cli

    monkeypatch.setattr(cli, "main", lambda argv: seen.append(argv) or 0)
    for argv in (["neural"], ["neural", "--self-test"]):
        monkeypatch.setattr(sys, "argv", argv)
        assert entry.main() == 0
    assert seen == [[], ["selftest"]]


def test_windowed_start_without_streams_gets_a_log_file(entry, monkeypatch, tmp_path):
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path))
    monkeypatch.setattr(sys, "stdout", None)
    monkeypatch.setattr(sys, "stderr", None)
    entry._give_windowed_exe_streams()
    try:
        print("hello from a windowed exe")
        sys.stderr.write("and its warnings\n")
    finally:
        sys.stdout.close()
    text = (tmp_path / "Neural" / "Logs" / "console.log").read_text()
    assert "hello from a windowed exe" in text and "and its warnings" in text


def test_check_kernels_lists_every_triton_kernel_with_its_source(entry, capsys):
    pytest.importorskip("triton")
    assert entry.check_kernels() == 0
    out = capsys.readouterr().out
    for name in ("engine.gpu.kernels.dense.qkv_rope_kernel", "engine.gpu.prefill.kernels.moe_gemm.moe_gate_up_kernel",
                 "engine.gpu.prefill.kernels.attention.prompt_attn_kernel", "engine.gpu.kernels.tail.pick_kernel"):
        assert f"ok  {name}:" in out
    assert "0 without source" in out


def test_check_kernels_fails_when_a_source_is_unreadable(entry, capsys, monkeypatch):
    pytest.importorskip("triton")
    import inspect

    def no_source(obj):  # what a frozen app without the .py files gives
        raise OSError("could not get source code")

    monkeypatch.setattr(inspect, "getsource", no_source)
    assert entry.check_kernels() == 1
    assert "BAD engine.gpu.prefill.kernels.moe_gemm.moe_down_kernel" in capsys.readouterr().out


def test_frozen_windows_app_points_triton_at_its_bundled_compiler(entry, tmp_path, monkeypatch):
    nv = tmp_path / "triton" / "backends" / "nvidia" / "include"
    tcc = tmp_path / "triton" / "runtime" / "tcc"
    nv.mkdir(parents=True)
    tcc.mkdir(parents=True)
    (nv / "cuda.h").write_text("")
    (tcc / "tcc.exe").write_text("")
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("CUDA_PATH", "C:/Program Files/NVIDIA GPU Computing Toolkit/CUDA/v11.8")
    entry._point_triton_at_the_bundle()
    import os

    assert os.environ["CC"] == str(tcc / "tcc.exe")
    assert os.environ["CUDA_PATH"] == str(tmp_path / "triton" / "backends" / "nvidia")

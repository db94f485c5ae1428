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

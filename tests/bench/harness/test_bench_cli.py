"""``neural bench`` argument parsing, engine settings from flags, the kernel delegation."""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import pytest

from app.cli import cmd_bench
from app.cli.main import build_parser, main


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


def test_decode_defaults_follow_the_issue():
    a = parse("decode", "MODEL")
    assert a.bench_command == "decode" and a.model_dir == "MODEL"
    assert (a.budget_gib, a.threads, a.tokens, a.depth) == (12.0, 8, 128, [0, 8192])
    assert (a.backend, a.routing, a.repeats, a.warmup, a.json) == ("auto", None, 3, 1, False)
    assert a._bench_run is cmd_bench.run_decode


def test_decode_flags():
    a = parse("decode", "M", "--budget-gib", "10", "--threads", "4", "--tokens", "16", "--depth", "0, 512,8192",
              "--routing", "uniform", "--repeats", "5", "--warmup", "0", "--backend", "cpu", "--json",
              "--set", "refresh_every=0")
    assert (a.budget_gib, a.threads, a.tokens, a.depth, a.routing) == (10.0, 4, 16, [0, 512, 8192], "uniform")
    assert (a.repeats, a.warmup, a.backend, a.json, a.set) == (5, 0, "cpu", True, ["refresh_every=0"])


def test_prompt_defaults():
    a = parse("prompt", "M")
    assert a.tokens == [3000, 13000] and a.repeats == 2 and a.check_tokens == 8
    assert parse("prompt", "M", "--tokens", "100").tokens == [100]
    assert a._bench_run is cmd_bench.run_prompt


@pytest.mark.parametrize("argv", [["decode", "M", "--depth", "a,b"], ["decode", "M", "--depth", "-1"],
                                  ["decode", "M", "--routing", "zipf"], ["prompt", "M", "--tokens", ""],
                                  ["replay", "--requests", "x.jsonl"], []])
def test_bad_arguments_exit(argv, capsys):
    with pytest.raises(SystemExit):
        parse(*argv)


def test_replay_flags():
    a = parse("replay", "--endpoint", "A=http://127.0.0.1:1", "--endpoint", "B=http://127.0.0.1:2/v1",
              "--requests", "r.jsonl", "--out", "o", "--rounds", "3", "--json")
    assert a.endpoint == ["A=http://127.0.0.1:1", "B=http://127.0.0.1:2/v1"]
    assert (a.requests, a.out, a.rounds, a.json, a.session_nonce) == (Path("r.jsonl"), Path("o"), 3, True, False)
    assert a._bench_run is cmd_bench.run_replay


def test_engine_settings_from_flags():
    a = parse("decode", "M", "--threads", "3", "--budget-gib", "9", "--context", "4096",
              "--set", "refresh_every=0", "--set", "pool-gib=4.5", "--set", "kv_ring=512")
    s = cmd_bench.engine_settings(a)
    assert (s.cpu_threads, s.vram_budget_gib, s.context) == (3, 9.0, 4096)
    assert (s.refresh_every, s.pool_gib, s.kv_ring) == (0, 4.5, 512)
    for bad in ("nosuch=1", "refresh_every", "refresh_every=fast"):
        with pytest.raises(ValueError):
            cmd_bench.engine_settings(parse("decode", "M", "--set", bad))


def _fake_kernel_module(monkeypatch, name: str, add_arguments, run) -> None:
    mod = types.ModuleType(name)
    mod.HELP = "fake kernel bench"  # type: ignore[attr-defined]
    mod.add_arguments = add_arguments  # type: ignore[attr-defined]
    mod.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(cmd_bench, "KERNEL_MODULE", name)


def test_kernel_delegates_to_a_module_with_its_own_kernel_subcommand(monkeypatch):
    seen = {}

    def add_arguments(p):  # the shape of app/cli/cmd_bench_kernel.py: its own sub-command layer
        k = p.add_subparsers(dest="bench", required=True).add_parser("kernel")
        k.add_argument("--threads", type=int, default=0)
        k.set_defaults(_bench=lambda a: seen.setdefault("threads", a.threads) and 0)

    _fake_kernel_module(monkeypatch, "fake_kernel_a", add_arguments, lambda a: a._bench(a))
    assert main(["bench", "kernel", "--threads", "6"]) == 0
    assert seen == {"threads": 6}


def test_kernel_delegates_to_a_module_with_plain_arguments(monkeypatch):
    seen = {}

    def add_arguments(p):
        p.add_argument("--seconds", type=float, default=1.0)

    def run(a):
        seen["seconds"] = a.seconds
        return 0

    _fake_kernel_module(monkeypatch, "fake_kernel_b", add_arguments, run)
    assert main(["bench", "kernel", "--seconds", "2.5"]) == 0
    assert seen == {"seconds": 2.5}


def test_kernel_missing_module_gives_a_clear_message(monkeypatch, capsys):
    monkeypatch.setattr(cmd_bench, "KERNEL_MODULE", "app.cli.no_such_kernel_module")
    assert main(["bench", "kernel", "--threads", "4"]) == 2
    err = capsys.readouterr().err
    assert "kernel benchmark is not available" in err and "no_such_kernel_module" in err

"""``neural synth``: routing flags, what the output states, and ``--like`` variants."""

from __future__ import annotations

import json
import os

import pytest

from app.cli.main import main


def synth(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["synth", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize(("flags", "mode", "skew", "said"), [
    ((), "uniform", 0.0, "routing: uniform"),
    (("--skew", "1.5"), "static", 1.5, "routing: static (router bias -1.5·log(1+rank)"),
    (("--routing", "static"), "static", 1.5, "routing: static"),
    (("--routing", "drift"), "drift", 1.5, "routing: drift (skew 1.5: 8 token topics"),
    (("--routing", "drift", "--skew", "0.8"), "drift", 0.8, "boosted by ~2 logits"),
])
def test_routing_is_stated_and_recorded(tmp_path, capsys, flags, mode, skew, said):
    rc, out, _ = synth(capsys, "--out", str(tmp_path / "m"), *flags)
    assert rc == 0 and said in out
    meta = json.loads((tmp_path / "m" / "SYNTHETIC.json").read_text())
    assert meta["routing"]["mode"] == mode and meta["skew"] == skew == meta["routing"]["skew"]


def test_contradictory_flags_fail(tmp_path, capsys):
    rc, _, err = synth(capsys, "--out", str(tmp_path / "m"), "--routing", "uniform", "--skew", "1")
    assert rc != 0 and "uniform routing takes no skew" in err


def test_like_writes_a_linked_variant(tmp_path, capsys):
    src, dst = tmp_path / "uniform", tmp_path / "drift"
    assert synth(capsys, "--preset", "small", "--fast", "--shard-gib", "0.001", "--out", str(src))[0] == 0
    rc, out, _ = synth(capsys, "--like", str(src), "--routing", "drift", "--out", str(dst))
    assert rc == 0, out
    assert "hard-linked" in out and "routing: drift" in out
    linked = [p.name for p in src.glob("model-*.safetensors") if os.path.samefile(p, dst / p.name)]
    assert len(linked) == len(list(src.glob("model-*.safetensors"))) - 1
    meta = json.loads((dst / "SYNTHETIC.json").read_text())
    assert meta["routing"]["mode"] == "drift" and meta["fast"] is True and meta["shape"]["hidden_size"] == 256


def test_like_refuses_shape_flags_and_needs_a_routing(tmp_path, capsys):
    src = tmp_path / "s"
    assert synth(capsys, "--out", str(src))[0] == 0
    rc, _, err = synth(capsys, "--like", str(src), "--layers", "2", "--routing", "drift", "--out", str(tmp_path / "x"))
    assert rc != 0 and "drop --layers" in err
    rc, _, err = synth(capsys, "--like", str(src), "--out", str(tmp_path / "x"))
    assert rc != 0 and "--like needs --routing" in err


def test_routing_stats_measure_a_checkpoint(tmp_path, capsys):
    d = tmp_path / "d"
    assert synth(capsys, "--out", str(d), "--routing", "drift")[0] == 0
    rc, out, _ = synth(capsys, "--routing-stats", str(d), "--segments", "2", "--segment-tokens", "64")
    assert rc == 0, out
    assert "routing stats of" in out and "drift (skew 1.5" in out
    assert "top-25% share of uses in 64-token windows" in out
    assert "coding conversation" in out and "experts shared with the previous token" in out

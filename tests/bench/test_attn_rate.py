"""bench.kernel.attn_rate: times each ISA and thread count and checks they agree bit for bit."""

from __future__ import annotations

import pytest

from bench.kernel import attn_rate


def test_times_each_isa_and_checks_the_bits(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("native._neural_native")
    assert attn_rate.main(["--isas", "scalar", "--keys", "37", "--threads", "1,2", "--reps", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("scalar 37 keys, 1 threads: ") and out[1].startswith("scalar 37 keys, 2 threads: ")
    assert out[-1].startswith("same bits on every ISA and thread count: True (sha256 ")


def test_an_unknown_isa_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("native._neural_native")
    assert attn_rate.main(["--isas", "sse9", "--keys", "8", "--reps", "1"]) == 2
    assert "attn_rate:" in capsys.readouterr().err

"""bench.kernel.attention_bench: times each ISA and thread count and checks they agree bit for bit."""

from __future__ import annotations

import pytest

from bench.kernel import attention_bench


def test_times_each_isa_and_checks_the_bits(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("native._neural_native")
    assert attention_bench.main(["--isas", "scalar", "--keys", "37", "--threads", "1,2", "--calls", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("scalar 1 threads, 37 keys: ") and out[1].startswith("scalar 2 threads, 37 keys: ")
    assert out[-1].startswith("same bits on every ISA and thread count: True (sha256 ")


def test_an_unknown_isa_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("native._neural_native")
    assert attention_bench.main(["--isas", "sse9", "--keys", "8", "--calls", "1"]) == 2
    assert "attention_bench:" in capsys.readouterr().err

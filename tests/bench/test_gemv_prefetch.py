"""bench.kernel.gemv_prefetch: the A/B runs, prints both settings and checks the bits agree."""

from __future__ import annotations

import pytest

from bench.kernel import gemv_prefetch


def test_prints_both_settings_for_each_isa(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("native._neural_native")
    assert gemv_prefetch.main(["--isas", "scalar", "--rows", "8", "--mats", "2", "--threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[:4] for ln in lines] == [["scalar", "1", "threads", "off"],
                                                ["scalar", "1", "threads", "prefetch"]]
    assert all(ln.endswith("GB/s MEASURED") and len(ln.split()) == 10 for ln in lines)

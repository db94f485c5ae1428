"""bench.kernel.gemv_isa on small matrices: both tables run, the same bits, bad arguments refused."""

from __future__ import annotations

import re

import pytest

from bench.kernel import gemv_isa


def test_two_tables_same_bits(capsys):
    pytest.importorskip("native._neural_native")
    from native.kernel import load_kernel

    isas = load_kernel().available_isas()
    pair = ["scalar", isas[-1]]
    assert gemv_isa.main(["--isas", ",".join(pair), "--rows", "64", "--cols", "96", "--mats", "2",
                          "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "same bits: True" in out
    assert len(re.findall(r"^  \S+ +(?:[\d.]+ ){4}GB/s", out, re.M)) == 2


def test_prefetch_off_against_on_same_bits(capsys):
    pytest.importorskip("native._neural_native")
    assert gemv_isa.main(["--prefetch-ab", "scalar", "--rows", "8", "--cols", "96", "--mats", "2",
                          "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "isa table scalar, prefetch off / " in out and "same bits: True" in out
    rows = re.findall(r"^  (\S+) +(?:[\d.]+ ){4}GB/s MEASURED$", out, re.M)
    assert rows == ["off", "prefetch"]


@pytest.mark.parametrize("args", [["--isas", "avx2"], ["--cols", "100"], ["--mats", "0"]])
def test_bad_arguments_refused(args):
    with pytest.raises(SystemExit):
        gemv_isa.main(args)

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


@pytest.mark.parametrize("args", [["--isas", "avx2"], ["--cols", "100"], ["--mats", "0"]])
def test_bad_arguments_refused(args):
    with pytest.raises(SystemExit):
        gemv_isa.main(args)

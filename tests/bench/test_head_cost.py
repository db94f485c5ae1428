"""bench.kernel.head_cost: plumbing on three 120b-shape experts, bad input named."""

from __future__ import annotations

import pytest

from bench.kernel import head_cost


def test_head_cost_prints_a_row_per_part(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("native._neural_native")
    assert head_cost.main(["--threads", "1", "--rounds", "1", "--calls", "1", "--experts", "3"]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == [256, 704, 1440, 2176, 2624]
    assert "a third expert costs" in out


def test_too_few_experts_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        head_cost.main(["--experts", "2"])
    assert "--experts must be at least 3" in capsys.readouterr().err

"""bench.kernel.torch_ops on the tiny synthetic checkpoint: it counts the aten operations of CPU decode tokens."""

from __future__ import annotations

import re

import pytest

from bench.kernel import torch_ops


def test_counts_operations_a_token(tiny_model, capsys):
    assert torch_ops.main([str(tiny_model), "--threads", "1", "--tokens", "2", "--top", "2"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"cpu-native, 1 threads: (\d+) aten operations a token, ([\d.]+) ms", out)
    assert m and 0 < int(m.group(1)) < 2000 and float(m.group(2)) > 0
    assert len(re.findall(r"^  aten::", out, re.M)) == 2


def test_bad_token_count_is_refused():
    with pytest.raises(SystemExit):
        torch_ops.main(["x", "--tokens", "0"])

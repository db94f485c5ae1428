"""bench.gpu.batch_copy_probe: without a CUDA device it says so and exits 2 (CI has none); bad arguments are named;
the layer layout it copies is the copy lane's (parts_array) and the bytes it checks are each expert's parts."""

from __future__ import annotations

import numpy as np
import pytest

from bench.gpu import batch_copy_probe as probe


def test_without_cuda_it_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the probe would run")
    assert probe.main(["--rounds", "4"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_bad_arguments_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        probe.main(["--rounds", "1"])
    assert "--rounds must be >= 2" in capsys.readouterr().err


def test_the_layout_and_the_expected_slot() -> None:
    sizes = (5, 3, 2)
    host = np.arange(4 * sum(sizes), dtype=np.uint8)
    parts = probe.layer_parts(1000, experts=4, sizes=sizes)
    assert parts.tolist() == [[1000, 5, 0], [1020, 3, 5], [1032, 2, 8]] and probe.slot_bytes(sizes) == 10
    # expert 2: bytes 10..14 of part 0's region, 26..28 of part 1's (20 + 2 x 3), 36..37 of part 2's (32 + 2 x 2)
    assert probe.expected_slot(host, parts, 1000, 2).tolist() == [10, 11, 12, 13, 14, 26, 27, 28, 36, 37]

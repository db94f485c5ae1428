"""bench.gpu.wait_value_probe: without a CUDA device it says so and exits 2 (CI has none); bad arguments are named."""

from __future__ import annotations

import pytest

from bench.gpu import wait_value_probe


def test_without_cuda_it_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the probe would run")
    assert wait_value_probe.main(["--rounds", "2"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_bad_arguments_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        wait_value_probe.main(["--rounds", "0"])
    assert "--rounds and --copy-mib must be >= 1" in capsys.readouterr().err


def test_stats_are_median_and_p90() -> None:
    assert wait_value_probe._stats([float(i) for i in range(1, 11)]) == {"median_us": 5.5, "p90_us": 9.0}

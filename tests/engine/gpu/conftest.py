"""The GPU kernels run under Triton's interpreter in CI (no GPU): set it before any import."""

import os

os.environ["TRITON_INTERPRET"] = "1"


import pytest  # after the interpreter switch above

from engine.checkpoint import Checkpoint
from engine.synth import PRESETS, write_synthetic_checkpoint


@pytest.fixture(scope="module")
def tiny_ck(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    """The tiny synthetic checkpoint the decode tests share (a module may define its own)."""
    d = write_synthetic_checkpoint(tmp_path_factory.mktemp("gpu-tiny"), PRESETS["tiny"], seed=3, skew=1.0)
    return Checkpoint.open(d)

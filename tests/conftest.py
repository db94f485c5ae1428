"""Shared fixtures: synthetic checkpoints written once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# No GPU in CI: Triton picks its driver when it is first imported, so whichever test imports a
# kernel module first decides for the whole session. Interpreter mode for everyone keeps the GPU
# tests' kernels runnable whatever the order (the sm_90 compile test clears it in its subprocess).
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory: pytest.TempPathFactory):
    """Factory: synth_dir("tiny", seed=0, **kw) -> Path, cached per argument set."""
    from engine.synth import PRESETS, write_synthetic_checkpoint

    cache: dict[tuple, Path] = {}

    def make(preset: str = "tiny", seed: int = 0, skew: float = 0.0, max_shard_bytes: int = 2 << 30) -> Path:
        key = (preset, seed, skew, max_shard_bytes)
        if key not in cache:
            out = tmp_path_factory.mktemp(f"synth-{preset}-{seed}")
            cache[key] = write_synthetic_checkpoint(out, PRESETS[preset], seed=seed, skew=skew,
                                                    max_shard_bytes=max_shard_bytes)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def tiny_model(synth_dir) -> Path:
    return synth_dir("tiny", 0)

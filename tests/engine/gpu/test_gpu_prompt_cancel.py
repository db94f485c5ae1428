"""A stop during a GPU prompt (interpreter): PromptCancelled, the held tokens and rings as before,
the next prompt exact; the split model's rates are measured and used."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest
import torch

pytest.importorskip("triton")

from engine.checkpoint import Checkpoint
from engine.gpu.backend import GpuBackend
from engine.gpu.layout import ExpertLayout
from engine.settings import EngineSettings
from engine.synth import PRESETS, write_synthetic_checkpoint
from engine.types import CancelToken, PromptCancelled

HISTORY = [5, 77, 300, 12, 9, 401, 33, 250, 8, 100, 42, 7]
PROMPT = [11, 23, 301, 44, 56, 90, 3, 17, 60, 88, 120, 6, 71, 205]


@pytest.fixture(scope="module")
def tiny_ck(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    d = write_synthetic_checkpoint(tmp_path_factory.mktemp("gpu-cancel"), PRESETS["tiny"], seed=5, skew=1.0)
    return Checkpoint.open(d)


def make(ck: Checkpoint) -> GpuBackend:
    sb = ExpertLayout.for_config(ck.config).slot_bytes
    s = EngineSettings(context=64, kv_ring=8, pool_gib=10 * sb / 2**30, scratch_slots=2, static_slots=4,
                       refresh_every=0, cpu_threads=2, prompt_block=16)
    return GpuBackend.create(ck, s, interpret=True, prefer_native=False, hot_set_file=None)


def test_a_stopped_prompt_leaves_the_held_state_exact(tiny_ck: Checkpoint) -> None:
    be = make(tiny_ck)
    be.forward(HISTORY)
    be.forward([3])  # a decoded token after the last ring checkpoint
    held = be.length
    k_before = [t.clone() for t in be.core.kv.k]
    cancel = CancelToken()
    calls: list[int] = []

    def progress(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 1:
            cancel.cancel()  # stop after the first layer

    with pytest.raises(PromptCancelled):
        be.forward(PROMPT, progress, cancel)
    assert calls and calls[-1] < len(PROMPT)  # it stopped before the end
    assert be.length == held
    for i in be.core.kv.sliding:  # the ring rows the prompt overwrote are back
        assert torch.equal(be.core.kv.k[i], k_before[i])
    got = be.forward(PROMPT)
    fresh = make(tiny_ck)
    fresh.forward(HISTORY)
    fresh.forward([3])
    want = fresh.forward(PROMPT)
    assert torch.equal(got, want)
    be.close()
    fresh.close()


def test_the_split_uses_the_model_and_records_its_lanes(tiny_ck: Checkpoint) -> None:
    be = make(tiny_ck)
    got = be.prefill.calibrate(tokens=4, reps=1)
    assert got["cpu_1_token_s"] > 0 and be.prefill.split.rates.stage > 0
    be.forward(HISTORY + PROMPT)
    split = be.prefill.last.stats.split if be.prefill.last else {}
    assert set(split) == {"cpu_observed_s", "cpu_predicted_s", "stage_observed_s", "stage_predicted_s"}
    be.close()

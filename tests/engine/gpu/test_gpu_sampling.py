"""The decode loop samples the GPU backend's logits where they are (no host copy per token),
with the same tokens as the host sampler given the same logits and seed. Under
TRITON_INTERPRET=1 the "device" is the CPU; tests/engine/test_sampling.py runs the device
candidate path (torch.topk + one transfer) against the host one."""

from __future__ import annotations

import inspect
import os
from typing import Any, cast

os.environ["TRITON_INTERPRET"] = "1"

import pytest
import torch

pytest.importorskip("triton")

from engine.checkpoint import Checkpoint
from engine.gpu.backend import GpuBackend
from engine.gpu.layout import ExpertLayout
from engine.sampling import Sampler
from engine.session import Engine
from engine.settings import EngineSettings
from engine.types import Done, GenerationParams

PROMPT = [5, 77, 300, 12]


def make(ck: Checkpoint) -> GpuBackend:
    sb = ExpertLayout.for_config(ck.config).slot_bytes
    s = EngineSettings(context=64, kv_ring=8, pool_gib=10 * sb / 2**30, scratch_slots=2, static_slots=4,
                       refresh_every=0, cpu_threads=2)
    return GpuBackend.create(ck, s, interpret=True, prefer_native=False, hot_set_file=None)


def test_forward_device_hands_over_the_core_buffer(tiny_ck: Checkpoint) -> None:
    a, b = make(tiny_ck), make(tiny_ck)
    a.forward(PROMPT)
    b.forward(PROMPT)
    dev = a.forward_device([9])
    assert dev.data_ptr() == a.core.logits.data_ptr()  # no copy
    assert torch.equal(dev, b.forward([9]))  # the same logits forward() copies out


def test_engine_samples_device_logits_like_the_host_sampler(tiny_ck: Checkpoint) -> None:
    params = GenerationParams(max_tokens=5, temperature=1.0, top_p=0.9, seed=11, top_k=40,
                              repetition_penalty=1.2, presence_penalty=0.5)
    be = make(tiny_ck)
    calls: list[int] = []
    orig = be.forward_device

    def spy(ids: list[int]) -> torch.Tensor:
        calls.append(len(ids))
        return orig(ids)

    be.forward_device = spy  # type: ignore[method-assign]
    if "cancel" not in inspect.signature(be.forward).parameters:  # the GPU prompt path has no stop yet
        fwd = be.forward

        def forward(ids: list[int], progress: Any = None, cancel: Any = None) -> torch.Tensor:
            return fwd(ids, progress)

        be.forward = forward  # type: ignore[method-assign]
    eng = Engine(tiny_ck, EngineSettings(context=64), cast(Any, be), "")
    done = list(eng.complete(list(PROMPT), params))[-1]
    assert isinstance(done, Done)
    assert done.finish_reason in ("length", "stop") and done.error is None
    assert calls and all(n == 1 for n in calls)  # every decode step went through the device path
    # the same seed over host copies of the same logits gives the same tokens
    ref = make(tiny_ck)
    sampler = Sampler.from_params(params, prompt=PROMPT)
    logits = ref.forward(PROMPT)
    want = []
    for _ in range(len(done.token_ids)):
        want.append(sampler(logits))
        logits = ref.forward([want[-1]])
    assert list(done.token_ids) == want
    assert eng.last_sampler.calls == len(want)

"""What the GPU backend allocates is the plan (engine/plan.py) the dialog and doctor show:
the pool, K/V and slot layout tensors measured on the CPU under TRITON_INTERPRET=1."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest

pytest.importorskip("triton")

from engine.checkpoint import Checkpoint
from engine.gpu.backend import GpuBackend
from engine.plan import estimate, kv_bytes, slot_bytes
from engine.settings import EngineSettings
from engine.synth import PRESETS, write_synthetic_checkpoint


def test_backend_allocates_the_planned_pool_and_kv(tmp_path):
    ck = Checkpoint.open(write_synthetic_checkpoint(tmp_path, PRESETS["tiny"], seed=3))
    cfg = ck.config
    sb = slot_bytes(cfg)
    # stage_direct off: Preferences plans the lookahead slots for a CUDA card on Linux, which the
    # interpreted backend (no CUDA copies) does not reserve
    s = EngineSettings(context=64, kv_ring=16, pool_gib=(10 + 2) * sb / 2**30, scratch_slots=2, static_slots=3,
                       refresh_every=0, cpu_threads=2, stage_direct="off")
    b = GpuBackend.create(ck, s, interpret=True, prefer_native=False, hot_set_file=None)
    try:
        e = estimate(cfg, s, True)  # what Preferences shows
        assert b.plan == e.vram
        assert b.core.pool.numel() == e.pool_bytes == 12 * sb
        assert b.core.layout.slot_bytes == sb
        kv = sum(t.numel() * t.element_size() for t in b.core.kv.k + b.core.kv.v)
        assert kv == e.kv_bytes == kv_bytes(cfg, 64, 16)
        assert b.pool.n_slots == e.slots == 10 and e.static == 3
    finally:
        b.close() if hasattr(b, "close") else None

"""The preferences' live estimate reproduces the design doc's accounting for gpt-oss-120b."""

from __future__ import annotations

import pytest

from app.gui.estimate import GIB, estimate
from engine.config import ModelConfig
from engine.settings import OPTIMIZED, EngineSettings
from engine.synth import PRESETS

CFG_120B = ModelConfig.from_dict(PRESETS["120b-shape"].config_dict())


def test_original_pool_gives_430_slots_and_4178_cpu_experts():
    # Design doc: 5.5 GiB pool -> 430 usable slots (250 static, 180 adaptive) + 16 scratch;
    # 4,178 experts on the CPU side; dense core about 2.9 GiB; K/V 1.1 GiB at 16,384 tokens.
    e = estimate(CFG_120B, EngineSettings(pool_gib=5.5, scratch_slots=16, static_slots=250, kv_ring=0), True)
    assert (e.slots, e.static, e.adaptive, e.scratch) == (430, 250, 180, 16)
    assert e.total_experts - e.slots == 4178
    assert e.dense_bytes / GIB == pytest.approx(2.9, abs=0.05)
    assert e.kv_bytes / GIB == pytest.approx(1.125, abs=0.01)
    assert not e.errors


def test_optimized_profile_frees_kv_and_adds_slots():
    base = estimate(CFG_120B, EngineSettings(pool_gib=5.5, scratch_slots=16, kv_ring=0), True)
    opt = estimate(CFG_120B, OPTIMIZED, True)
    # --kv-ring 256 frees about 0.55 GiB of K/V; the bigger pool and fewer scratch slots add slots.
    assert (base.kv_bytes - opt.kv_bytes) / GIB == pytest.approx(0.55, abs=0.02)
    assert opt.slots > base.slots + 45
    assert "expert slots" in opt.summary()


def test_errors_and_cpu_mode():
    e = estimate(CFG_120B, EngineSettings(pool_gib=11.5, vram_budget_gib=12.0), True)
    assert any("VRAM budget" in x for x in e.errors)
    e = estimate(CFG_120B, EngineSettings(pool_gib=2.0, static_slots=400), True)
    assert any("Static slots" in x for x in e.errors)
    e = estimate(CFG_120B, EngineSettings(kv_ring=64), True)
    assert any("sliding window" in x for x in e.errors)
    cpu = estimate(CFG_120B, EngineSettings(), gpu_present=False)
    assert not cpu.gpu and cpu.slots == 0 and "No CUDA GPU" in cpu.summary()
    assert cpu.ram_experts_bytes == 4608 * CFG_120B.expert_bytes()

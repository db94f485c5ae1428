"""The one VRAM plan (engine/plan.py): the design doc's accounting, the default 120b plan, refusals."""

from __future__ import annotations

import pytest

from engine.config import ModelConfig
from engine.plan import GIB, Machine, PlanError, estimate, plan_vram, slot_bytes, workspace_bytes
from engine.settings import OPTIMIZED, EngineSettings
from engine.synth import PRESETS

CFG_120B = ModelConfig.from_dict(PRESETS["120b-shape"].config_dict())


@pytest.mark.parametrize(("direct", "slots", "scratch"), [("off", 548, 6), ("on", 520, 34)])
def test_default_settings_give_the_engine_548_slots_at_12_gib(direct, slots, scratch):
    # CALCULATED: the number the GPU backend logs at the defaults (workspace and scratch included);
    # where experts are copied straight from the mapping, 28 of the scratch slots are the lookahead's
    s = EngineSettings(stage_direct=direct)
    p = plan_vram(CFG_120B, s)
    assert (p.n_slots, p.n_static, p.n_scratch, p.n_ahead) == (slots, slots // 2, scratch, scratch - 6)
    assert p.workspace == workspace_bytes(CFG_120B, 16384, 4096) > 0.8 * GIB
    assert p.total <= 12 * GIB < p.total + p.slot_bytes
    e = estimate(CFG_120B, s, True)
    assert (e.slots, e.static, e.vram_total) == (slots, slots // 2, p.total) and not e.errors
    assert f"{slots} expert slots" in e.summary()


def test_original_pool_gives_430_slots_and_4178_cpu_experts():
    # Design doc: 5.5 GiB pool -> 430 usable slots (250 static) + 16 scratch; 4,178 experts on the
    # CPU side; dense core about 2.9 GiB; K/V 1.1 GiB at 16,384 tokens without a ring.
    e = estimate(CFG_120B, EngineSettings(pool_gib=5.5, scratch_slots=16, static_slots=250, kv_ring=0,
                                          lookahead_slots=0), True)
    assert (e.slots, e.static, e.adaptive, e.vram.n_scratch) == (430, 250, 180, 16)
    assert e.total_experts - e.slots == 4178
    assert e.vram.dense / GIB == pytest.approx(2.9, abs=0.05)
    assert e.kv_bytes / GIB == pytest.approx(1.125, abs=0.01)
    assert not e.errors


def test_optimized_profile_frees_kv_and_adds_slots():
    base = estimate(CFG_120B, EngineSettings(pool_gib=5.5, scratch_slots=16, kv_ring=0, lookahead_slots=0), True)
    opt = estimate(CFG_120B, OPTIMIZED, True)
    assert (base.kv_bytes - opt.kv_bytes) / GIB == pytest.approx(0.55, abs=0.02)
    assert opt.slots > base.slots + 45


def test_pool_is_what_the_slots_need_on_a_tiny_model():
    # issue 21 point 5: the old estimate showed an 11.98 GiB pool for 64 experts of ~100 KiB
    tiny = ModelConfig.from_dict(PRESETS["tiny"].config_dict())
    e = estimate(tiny, EngineSettings(), True)
    total = tiny.num_hidden_layers * tiny.num_local_experts
    assert e.slots == total and e.pool_bytes == (total + 6) * slot_bytes(tiny) < 64 << 20


def test_refusals_name_the_numbers():
    with pytest.raises(PlanError, match="does not fit"):
        plan_vram(CFG_120B, EngineSettings(pool_gib=11.5, vram_budget_gib=12.0))
    with pytest.raises(PlanError, match="sliding window"):
        plan_vram(CFG_120B, EngineSettings(kv_ring=64))
    with pytest.raises(PlanError, match="need at least 4"):
        plan_vram(CFG_120B, EngineSettings(vram_budget_gib=4.0))
    e = estimate(CFG_120B, EngineSettings(pool_gib=2.0, static_slots=400), True)
    assert e.static == e.slots and any("Static slots" in w for w in e.errors)
    cpu = estimate(CFG_120B, EngineSettings(), gpu_present=False)
    assert not cpu.gpu and cpu.slots == 0 and "No CUDA GPU" in cpu.summary()
    assert cpu.ram_experts_bytes == 4608 * CFG_120B.expert_bytes()
    assert cpu.if_gpu is not None and cpu.if_gpu.slots == plan_vram(CFG_120B, EngineSettings()).n_slots


def test_machine_limits_refuse_what_this_machine_cannot_do():
    m = Machine(logical_cores=2, ram_bytes=24 * GIB, vram_bytes=12 * GIB)
    s = EngineSettings(cpu_threads=64, ram_budget_gib=500, mlock_gib=400, vram_budget_gib=16)
    errors = estimate(CFG_120B, s, True, m).errors
    assert any(e.startswith("CPU threads: 64") and "2 cores" in e for e in errors)
    assert any(e.startswith("RAM budget: 500") and "24.0 GiB" in e for e in errors)
    assert any(e.startswith("Lock in RAM: 400") for e in errors)
    assert any(e.startswith("VRAM budget: 16") and "12.0 GiB" in e for e in errors)
    assert not estimate(CFG_120B, EngineSettings(cpu_threads=2), True, m).errors

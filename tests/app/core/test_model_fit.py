"""Whether a model fits: the VRAM line is the engine's own plan (plan_vram), RAM as the doctor judges it."""

from __future__ import annotations

from app.core.model_fit import judge_fit
from engine.config import ModelConfig
from engine.plan import GIB, Machine, plan_vram
from engine.settings import EngineSettings
from engine.synth import PRESETS

CFG_120B = ModelConfig.from_dict(PRESETS["120b-shape"].config_dict())
CFG_20B = ModelConfig.from_dict(PRESETS["20b-shape"].config_dict())


def by_area(lines):
    return {ln.area: ln for ln in lines}


def test_a_12_gib_card_takes_the_plan_the_engine_allocates():
    s = EngineSettings()
    lines = by_area(judge_fit(CFG_120B, s, True, Machine(16, 64 * GIB, 16 * GIB), 60 * GIB, 61 * GIB, 55 * GIB,
                              500 * GIB))
    plan = plan_vram(CFG_120B, s)
    assert lines["VRAM"].status == "ok"
    assert f"{plan.n_slots} of {36 * 128} experts in GPU slots" in lines["VRAM"].text
    assert "card's 16.0 GiB" in lines["VRAM"].text
    assert lines["Disk"].status == "ok"


def test_a_card_smaller_than_the_budget_is_refused_with_the_numbers():
    lines = by_area(judge_fit(CFG_120B, EngineSettings(vram_budget_gib=12), True, Machine(16, 64 * GIB, 8 * GIB),
                              None, 0, 0, 500 * GIB))
    assert lines["VRAM"].status == "fail"
    assert "VRAM budget: 12 GiB is more than the card's 8.0 GiB" in lines["VRAM"].text


def test_ram_short_of_the_experts_warns_like_the_doctor():
    lines = by_area(judge_fit(CFG_120B, EngineSettings(), True, Machine(8, 32 * GIB, 16 * GIB), 30 * GIB, 0, 0,
                              500 * GIB))
    assert lines["RAM"].status == "warn" and "this machine has 32.00 GiB" in lines["RAM"].text
    assert "read from disk" in lines["RAM"].text
    ok = by_area(judge_fit(CFG_20B, EngineSettings(), True, Machine(8, 64 * GIB, 16 * GIB), 60 * GIB, 0, 0,
                           500 * GIB))
    assert ok["RAM"].status == "ok"


def test_no_gpu_says_the_cpu_engine_runs_it_and_disk_counts_the_store():
    lines = by_area(judge_fit(CFG_20B, EngineSettings(), False, Machine(8, 64 * GIB, None), None, 13 * GIB,
                              12 * GIB, 20 * GIB))
    assert lines["VRAM"].status == "info" and "No CUDA GPU found" in lines["VRAM"].text
    assert lines["Disk"].status == "fail"
    assert lines["Disk"].text == "Needs 25.00 GiB (13.00 GiB to download + 12.00 GiB expert store); 20.00 GiB free."

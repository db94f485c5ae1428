"""The prompt kernels compile for sm_90 (H100/H200) at the 120b shape without register spills.

The interpreter tests never run Triton's compiler; this runs the real pipeline (TTIR -> PTX ->
cubin with the ptxas that ships in the Triton wheel) in a subprocess without TRITON_INTERPRET.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")


@pytest.mark.slow  # the interpreter makes it 15-30 s on 2 cores: CI's slow job runs it
def test_kernels_compile_for_sm90_without_spills() -> None:
    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    if not (bin_dir / "ptxas").exists() or not (bin_dir / "cuobjdump").exists():
        pytest.skip("this Triton wheel carries no ptxas/cuobjdump")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # silence the 3.9 default-change warning
    out = subprocess.run([sys.executable, "-m", "bench.gpu.aot", "--json"], capture_output=True, text=True,
                         env=env, cwd=Path(__file__).resolve().parents[4], timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)[0]["kernels"]
    assert {r["kernel"] for r in report} == {"attention_full", "attention_sliding", "gate_up", "down"}
    for r in report:
        assert r["stack"] == 0, r  # spills would land on the stack
        assert r["regs"] <= 255 and r["shared"] <= 227 * 1024, r


# ---- consumer targets: the choice from the device's limits, and the compile check behind it ----

def test_sm86_limits_choose_tiles_compiled_spill_free_for_sm86_that_fit() -> None:
    from dataclasses import replace

    from engine.gpu.prefill.tiles import CANDIDATES, SM86, SM89, SM90, SM120, DeviceLimits, PrefillTiles

    for lim in (SM86, SM89, SM120, SM90):
        tiles = PrefillTiles.for_device(lim)
        [(over, spill_free, smem)] = [c for c in CANDIDATES if replace(PrefillTiles(), **c[0]) == tiles]
        assert lim.family() in spill_free and smem[lim.family()] <= lim.smem_per_block, (lim, over)
    # sm_86 never gets the sm_90 tiles (they spill there: docs/perf-gpu.md)
    assert PrefillTiles.for_device(SM86) != PrefillTiles.for_device(SM90)
    assert PrefillTiles.for_device(SM86).gemm_warps == 4
    with pytest.raises(ValueError, match="sm_86"):
        PrefillTiles.for_device(DeviceLimits(86, 1024))
    # an sm_80 card takes the sm_86 table, an sm_100 the sm_90 one
    assert PrefillTiles.for_device(DeviceLimits(80, 166912)) == PrefillTiles.for_device(SM86)
    assert PrefillTiles.for_device(DeviceLimits(100, 232448)) == PrefillTiles.for_device(SM90)


def test_a_candidate_that_does_not_fit_the_shared_memory_is_never_chosen(monkeypatch) -> None:
    from engine.gpu.prefill import tiles as t

    big = ({"gemm_m": 128}, frozenset({86}), {86: 120 * 1024})  # preferred, but over 99 KiB
    small = ({"gemm_m": 32}, frozenset({86}), {86: 40 * 1024})
    monkeypatch.setattr(t, "CANDIDATES", [big, small])
    assert t.PrefillTiles.for_device(t.SM86).gemm_m == 32
    assert t.PrefillTiles.for_device(t.DeviceLimits(86, 128 * 1024)).gemm_m == 128
    with pytest.raises(ValueError, match="no prompt tile configuration fits sm_89"):
        t.PrefillTiles.for_device(t.SM89)  # none claims sm_89: never a guess


def test_for_config_reads_the_device_limits_and_the_setting_overrides(monkeypatch, tiny_model) -> None:
    from engine.checkpoint import Checkpoint
    from engine.config import ModelConfig
    from engine.gpu.backend import GpuBackend
    from engine.gpu.layout import ExpertLayout
    from engine.gpu.prefill.tiles import SM86, PrefillTiles
    from engine.settings import EngineSettings
    from engine.synth import PRESETS

    cfg = ModelConfig.from_dict(PRESETS["120b-shape"].config_dict())
    monkeypatch.setenv("NEURAL_PREFILL_TILES", "attn_m=8")  # the retired switch: nothing reads it
    assert PrefillTiles.for_config(cfg, limits=SM86) == PrefillTiles.for_device(SM86)
    # the one override is the prefill_tiles setting, which the prompt runner applies
    ck = Checkpoint.open(tiny_model)
    sb = ExpertLayout.for_config(ck.config).slot_bytes
    s = EngineSettings(context=64, kv_ring=8, pool_gib=10 * sb / 2**30, scratch_slots=2, static_slots=4,
                       refresh_every=0, cpu_threads=2, prefill_tiles="gemm_m=16,attn_n=32")
    be = GpuBackend.create(ck, s, interpret=True, prefer_native=False, hot_set_file=None)
    assert (be.prefill.kernels.t.gemm_m, be.prefill.kernels.t.attn_n) == (16, 32)
    assert be.prefill.kernels.t.attn_m == PrefillTiles.for_config(ck.config, interpret=True).attn_m
    be.close()
    ck.close()


@pytest.mark.slow
def test_every_kernel_and_tile_choice_compiles_without_spills_for_consumer_targets() -> None:
    """sm_86/89/120 (and sm_90): decode kernels and every prompt tile candidate claimed for each
    arch; zero stack, shared memory within the opt-in limit (bench/gpu/aot_check.py)."""
    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    if not (bin_dir / "ptxas").exists() or not (bin_dir / "cuobjdump").exists():
        pytest.skip("this Triton wheel carries no ptxas/cuobjdump")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    out = subprocess.run([sys.executable, "-m", "bench.gpu.aot_check"], capture_output=True, text=True,
                         env=env, cwd=Path(__file__).resolve().parents[4], timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "0 problems" in out.stdout

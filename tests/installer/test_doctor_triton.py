"""`neural doctor` says clearly when the GPU kernels' compiler (Triton / triton-windows) is missing
(the Windows bundle ships it; a source install may not)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from app.doctor.checks import check_gpu
from app.doctor.probes import GpuDevice, GpuFacts
from engine.settings import EngineSettings


def _facts() -> GpuFacts:
    dev = GpuDevice(name="NVIDIA GeForce RTX 3080 Ti", total_bytes=12 * 2**30, capability=(8, 6))
    return GpuFacts(torch_version="2.13.0+cu130", torch_cuda="13.0", cuda_available=True, devices=[dev],
                    driver_version="580.00")


@pytest.mark.parametrize("platform, package", [("win32", "triton-windows==3.8.0.post29"), ("linux", "triton")])
def test_missing_triton_is_a_failure_with_the_package_to_install(monkeypatch, platform, package):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    monkeypatch.setattr(sys, "platform", platform)
    checks = check_gpu(_facts(), EngineSettings())
    [tri] = [c for c in checks if c.area == "GPU kernels"]
    assert tri.status == "fail" and "CPU engine" in tri.summary and package in tri.fix


def test_no_triton_check_when_triton_is_there_or_the_gpu_is_not_wanted(monkeypatch):
    pytest.importorskip("triton")
    assert not [c for c in check_gpu(_facts(), EngineSettings()) if c.area == "GPU kernels"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    cpu = EngineSettings.from_dict({"backend": "cpu"})
    assert not [c for c in check_gpu(_facts(), cpu) if c.area == "GPU kernels"]

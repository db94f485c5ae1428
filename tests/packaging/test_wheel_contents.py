"""The app's wheel ships the product only: no lab (bench/), no tests, no device scripts.

Builds the real wheel from this checkout (no build isolation: the venv already has setuptools and
cffi) and lists what is inside.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds the wheel: about a minute on 2 cores

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "TMPDIR": str(build)})
    assert r.returncode == 0, r.stderr[-2000:]
    (whl,) = out.glob("neural-*.whl")
    with zipfile.ZipFile(whl) as z:
        return z.namelist()


def test_wheel_ships_no_lab_code(wheel_names: list[str]) -> None:
    tops = {n.split("/", 1)[0] for n in wheel_names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"app", "engine", "native", "ui", "resources"}, tops
    lab = [n for n in wheel_names if "/bench/" in n or "demo_training" in n or "kernel_bench" in n
           or n.endswith(".sh") or "/results/" in n or n.startswith("tests/")]
    assert lab == []


def test_wheel_ships_the_product(wheel_names: list[str]) -> None:
    for need in ("app/cli/main.py", "app/core/settings.py", "engine/session.py", "engine/gpu/prefill/runner.py",
                 "native/neural_experts.c", "ui/main_window.py", "resources/demo-model/model.safetensors"):
        assert need in wheel_names, need
    assert any(n.startswith("native/_neural_native") for n in wheel_names), "the compiled kernel"

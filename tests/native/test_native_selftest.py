"""The standalone C self-test (native/selftest.c): a plain C build here, and the Windows build
(MinGW-w64 cross compiler) under Wine when both are installed. Both must print the same hash:
the kernel's results do not depend on the platform, compiler or threading API."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "native" / n for n in ("selftest.c", "neural_experts.c", "neural_isa.c", "neural_team.c")]
CFLAGS = ["-O2", "-ffp-contract=off", "-std=gnu11", "-Wall", "-Wextra"]
OK = re.compile(r"selftest OK: .* hash ([0-9a-f]{16})")


def _run_native(tmp: Path) -> str:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler on PATH")
    exe = tmp / "neural-selftest"
    subprocess.run([cc, *CFLAGS, "-pthread", *map(str, SOURCES), "-lm", "-o", str(exe)], check=True, timeout=300)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    m = OK.search(r.stdout)
    assert r.returncode == 0 and m, r.stdout + r.stderr
    return m.group(1)


def test_selftest_plain_c_build(tmp_path: Path) -> None:
    _run_native(tmp_path)


def _wine() -> str | None:
    for cand in ("wine64", "wine", "/usr/lib/wine/wine64"):
        path = shutil.which(cand) or (cand if os.path.isfile(cand) and os.access(cand, os.X_OK) else None)
        if path:
            return path
    return None


@pytest.mark.slow
def test_selftest_windows_build_under_wine(tmp_path: Path) -> None:
    mingw, wine = shutil.which("x86_64-w64-mingw32-gcc"), _wine()
    if mingw is None or wine is None:
        pytest.skip("needs x86_64-w64-mingw32-gcc and wine (apt: gcc-mingw-w64-x86-64 wine64)")
    want = _run_native(tmp_path)
    exe = tmp_path / "neural-selftest.exe"
    # -muse-unaligned-vector-move: GCC cannot align spilled AVX values on the Win64 stack (bug 54412)
    subprocess.run([mingw, *CFLAGS, "-Wa,-muse-unaligned-vector-move", *map(str, SOURCES), "-o", str(exe)],
                   check=True, timeout=300)
    env = dict(os.environ, WINEDEBUG="-all", WINEPREFIX=str(tmp_path / "wineprefix"), DISPLAY="")
    try:
        r = subprocess.run([wine, str(exe)], capture_output=True, text=True, timeout=420, env=env)
    except subprocess.TimeoutExpired:
        pytest.skip("wine did not finish in time (cannot start here?)")
    finally:  # the new prefix's wineserver and services would outlive the test beside the later (timed) ones
        server = shutil.which("wineserver") or "/usr/lib/wine/wineserver64"
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([server, "-k"], env=env, timeout=30, capture_output=True)
    if "selftest" not in r.stdout:
        pytest.skip(f"wine could not run the program here (rc {r.returncode}): {r.stderr[-300:]}")
    m = OK.search(r.stdout)
    assert r.returncode == 0 and m, r.stdout
    assert m.group(1) == want, "the Windows build computes different bits than the native build"

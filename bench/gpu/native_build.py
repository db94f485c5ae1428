"""Import the native kernel on the GPU machine, building it in place from carried wheels if needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def ensure_native() -> str:
    """Import the native kernel; else install the carried wheels (cffi) and build it in place."""
    try:
        import native._neural_native  # noqa: F401

        return "present"
    except ImportError:
        pass
    wheels = sorted((REPO / ".whl").glob("*.whl"))
    env = dict(os.environ)
    if wheels:
        site = "/tmp/neural-site"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", site,
                        *map(str, wheels)], check=False)
        sys.path.insert(0, site)
        env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", "from native.build_native import ffibuilder; "
                        "ffibuilder.compile(tmpdir='.', verbose=False)"], cwd=REPO, env=env, capture_output=True,
                       text=True)
    if r.returncode != 0:
        return f"build failed (CPU groups use PyTorch): {r.stderr[-500:]}"
    import importlib

    importlib.invalidate_caches()
    return "built"

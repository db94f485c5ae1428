"""Access to the lab (the top-level ``bench`` package) from the thin CLI commands.

The lab ships in neither the wheel nor the installer: ``neural bench …``, ``neural train-demo`` and
the study parts of ``neural synth`` work from a source checkout, where ``bench/`` sits beside
``app/``. An editable install maps only the product's packages, so the checkout's root is put on
``sys.path`` here, once, when such a command runs — never at import time of the product.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]


class LabUnavailable(RuntimeError):
    """This installation carries no ``bench/`` (a wheel or the bundled app)."""


def ensure_lab() -> None:
    """Make ``import bench…`` work, or raise :class:`LabUnavailable` saying why."""
    if importlib.util.find_spec("bench") is not None and _is_lab(importlib.util.find_spec("bench")):
        return
    if (CHECKOUT / "bench" / "__init__.py").is_file():
        sys.path.insert(0, str(CHECKOUT))
        sys.modules.pop("bench", None)
        return
    raise LabUnavailable("benchmarks and studies live in bench/ of a source checkout and are not part of this "
                         "installation; run this command from a clone of the repository (pip install -e .)")


def _is_lab(spec: importlib.machinery.ModuleSpec | None) -> bool:
    # another distribution's top-level "bench" must not be taken for ours
    origin = spec.origin if spec is not None else None
    return bool(origin) and Path(str(origin)).parent.joinpath("harness").is_dir()

"""``neural doctor``: checks GPU, CPU, RAM, disk, the model and its store; says what to fix.

``probes`` gathers the machine's facts, ``checks`` turns facts into report lines, ``store`` judges
the expert store; the VRAM figures come from the engine's one plan (``engine.plan``).
"""

from .check import Check, Status
from .checks import (
    GIB,
    Plan,
    Target,
    check_cpu,
    check_direct,
    check_disk,
    check_gpu,
    check_memory,
    check_model,
    check_settings,
    check_store,
    diagnose,
    main,
    make_plan,
    render,
    report_dict,
    resolve_target,
)

__all__ = ["GIB", "Check", "Plan", "Status", "Target", "check_cpu", "check_direct", "check_disk", "check_gpu",
           "check_memory", "check_model", "check_settings", "check_store", "diagnose", "main", "make_plan", "render",
           "report_dict", "resolve_target"]

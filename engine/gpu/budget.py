"""The VRAM plan lives in :mod:`engine.plan` (torch-free, shared with Preferences, doctor and
the benches); this module keeps the names the GPU backend's modules import."""

from __future__ import annotations

from ..plan import CONTEXT_OVERHEAD, GIB, PlanError, VramPlan, buffer_bytes, dense_bytes, plan_vram

__all__ = ["CONTEXT_OVERHEAD", "GIB", "PlanError", "VramPlan", "buffer_bytes", "dense_bytes", "plan_vram"]

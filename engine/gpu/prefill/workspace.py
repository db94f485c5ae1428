"""The prompt path's VRAM workspace: the formula lives in :mod:`engine.plan` (one VRAM plan)."""

from __future__ import annotations

from ...plan import MAX_ROWS, workspace_bytes

__all__ = ["MAX_ROWS", "workspace_bytes"]

"""One line of the doctor's report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "warn", "fail", "info"]


@dataclass
class Check:
    area: str
    status: Status
    summary: str
    fix: str = ""

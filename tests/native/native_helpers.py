"""Helpers shared by the native kernel tests: kernel descriptors for random experts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from engine.store.format import RecordLayout, encode_record
from engine.store.native_experts import expert_ref_from_record
from native.kernel import ExpertRef, NativeKernel

LIMIT, ALPHA = 7.0, 1.702
ISAS = ["scalar", "avx2", "avx512", "avx512bf16"]
MODES = {"fp32": False, "bf16": True}  # the kernel's input modes (shape.bf16_inputs)


@dataclass
class Experts:
    shape: Any
    refs: list[ExpertRef]
    records: list[np.ndarray]
    n_exc: list[int]
    layout: RecordLayout


def make_experts(k: NativeKernel, parts: list[dict[str, np.ndarray]], fmt: str,
                 capture: list[np.ndarray] | None = None, bf16: bool = False) -> Experts:
    h = parts[0]["dn_codes"].shape[0]
    i = parts[0]["gu_codes"].shape[0] // 2
    layout = RecordLayout.build(h, i, fmt)
    enc = [encode_record(p, layout) for p in parts]
    refs = [expert_ref_from_record(k, rec, layout, n, capture=None if capture is None else capture[j])
            for j, (rec, n) in enumerate(enc)]
    return Experts(k.shape(h, i, fmt, LIMIT, ALPHA, layout.offsets, bf16_inputs=bf16), refs, [r for r, _ in enc],
                   [n for _, n in enc], layout)


def isa_or_skip(k: NativeKernel, isa: str) -> None:
    if isa not in k.available_isas():
        pytest.skip(f"this CPU has no {isa} path (has {k.available_isas()})")
    k.set_isa(isa)

"""The copy lane's split slots: one expert of a decode layer computed partly by the CPU, partly by the GPU.

The CPU computes gate_up units [0, f) of the expert and its down bias (native ``neural_expert.units``); the lane
copies the rest of its units into a split slot (one per parity) whose first f units (codes, scales, gate_up bias)
and down bias are zero, so the unchanged expert kernels add exactly nothing for them: zero codes give zero gate and
up, SwiGLU(0, 0) = 0, and zero down columns multiply it. A slot remembers how many leading blocks are already zero,
so a use zeroes only the blocks the last one filled (the split point moves little from layer to layer).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..plan import SLOT_PARTS
from .prefill.direct import MappedExperts, plan_copies, run_copies

Parts = list[tuple[int, int, int]]  # per slot part: (address of expert 0's bytes, bytes per expert, offset in a slot)


def unit_geometry(sizes: dict[str, int], hidden: int, inter: int) -> dict[str, tuple[int, int, int]]:
    """Per slot part that scales with the gate_up units: (rows, bytes a row, bytes of 32 units in a row). gate_up's
    codes, scales and bias are one run (32 units = 64 interleaved rows); down's codes and scales are ``hidden`` rows
    with 16 and 1 bytes a 32-unit block. The down bias is not in it: it does not scale with the units."""
    g1, nb = hidden // 32, inter // 32
    geo = {"gate_up_proj_blocks": (1, 0, 64 * g1 * 16), "gate_up_proj_scales": (1, 0, 64 * g1),
           "gate_up_proj_bias": (1, 0, 64 * 2), "down_proj_blocks": (hidden, nb * 16, 16),
           "down_proj_scales": (hidden, nb, 1)}
    out = {}
    for part, (rows, pitch, per) in geo.items():
        pitch = pitch or nb * per
        if rows * pitch != sizes[part]:
            raise ValueError(f"{part}: {sizes[part]} bytes, the unit split expects {rows} x {pitch}")
        out[part] = (rows, pitch, per)
    return out


class SplitSlots:
    def __init__(self, core: Any, direct: MappedExperts, slots: Sequence[int]) -> None:
        cfg = core.cfg
        self.core = core
        self.direct = direct
        self.slots = list(slots)  # per parity
        self.inter = cfg.intermediate_size
        self.geometry = unit_geometry(core.layout.sizes, cfg.hidden_size, cfg.intermediate_size)
        self.zero_blocks = [0] * len(self.slots)  # leading 32-unit blocks known to be zero
        self.bias_zero = [False] * len(self.slots)  # the down bias known to be zero

    def forget(self) -> None:
        """Something else wrote the slots (a prompt's staged experts): nothing is known to be zero."""
        self.zero_blocks = [0] * len(self.slots)
        self.bias_zero = [False] * len(self.slots)

    def queue(self, rt: Any, stream: Any, layer: int, layer_parts: Callable[[int], Parts],
              part: tuple[int, float, int], p: int) -> None:
        """Queue the copy of expert ``part[0]``'s last ``part[2]`` units (their gate_up rows, their down columns) into
        parity ``p``'s slot, zeroing its leading units and down bias where not already zero. ``rt``: the CUDA
        runtime's 2-D copies and memsets (cudart.CudaRuntime), or None for the planned tensor copies."""
        expert, units = part[0], part[2]
        sb, slot = self.core.plan.slot_bytes, self.slots[p]
        b = (self.inter - units) // 32  # the first block the lane computes
        nb = self.inter // 32
        lay = self.core.layout
        if rt is None:  # the whole expert by the planned copies, then the CPU's part zeroed in the pool
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                run_copies(self.direct, self.core.pool, plan_copies(self.direct, layer, [expert], [slot], sb))
                view = self.core.pool[slot * sb : (slot + 1) * sb]
                for name in SLOT_PARTS:
                    off = lay.offsets[name]
                    g = self.geometry.get(name)
                    if g is None:  # the down bias: added once, by the CPU
                        view[off : off + lay.sizes[name]] = 0
                        continue
                    rows, pitch, per = g
                    view[off : off + rows * pitch].view(rows, pitch)[:, : b * per] = 0
            self.zero_blocks[p], self.bias_zero[p] = b, True
            return
        raw = stream.cuda_stream if stream is not None else 0
        dst = self.core.pool.data_ptr() + slot * sb
        z = self.zero_blocks[p]
        for (src, size, off), name in zip(layer_parts(layer), SLOT_PARTS, strict=True):
            g = self.geometry.get(name)
            if g is None:
                if not self.bias_zero[p]:
                    rt.memset_2d(dst + off, size, 0, size, 1, raw)
                    self.bias_zero[p] = True
                continue
            rows, pitch, per = g
            if b > z:  # the CPU's blocks that still hold the last use's bytes
                rt.memset_2d(dst + off + z * per, pitch, 0, (b - z) * per, rows, raw)
            rt.copy_2d(dst + off + b * per, pitch, src + expert * size + b * per, pitch, (nb - b) * per, rows, raw)
        self.zero_blocks[p] = b

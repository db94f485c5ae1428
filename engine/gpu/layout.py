"""Byte layout of one expert in a VRAM slot (and in a pinned capture/staging buffer).

The six checkpoint parts of an expert are laid end to end, each start aligned to 256
bytes, so a whole expert moves as one copy and the GEMV kernels find every part at a
fixed offset from the slot base. The part order is the native kernel's record order
(codes and scales of gate_up, of down, then the two biases), so the native kernel's
copy-on-compute capture writes a buffer in exactly this layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checkpoint import Checkpoint
from ..config import ModelConfig
from ..plan import SLOT_PARTS, slot_parts


@dataclass(frozen=True)
class ExpertLayout:
    hidden: int
    inter: int
    offsets: dict[str, int]
    sizes: dict[str, int]
    slot_bytes: int

    @classmethod
    def for_config(cls, cfg: ModelConfig) -> ExpertLayout:
        offsets, sizes, slot_bytes = slot_parts(cfg)  # the VRAM plan's formula (engine/plan.py)
        return cls(cfg.hidden_size, cfg.intermediate_size, offsets, sizes, slot_bytes)

    @property
    def payload_bytes(self) -> int:
        """Bytes that carry data (what a slot costs in PCIe traffic and RAM reads)."""
        return sum(self.sizes.values())

    def kernel_offsets(self) -> dict[str, int]:
        """Offsets in the names the expert kernels take (gate_up codes are at offset 0)."""
        o = self.offsets
        assert o["gate_up_proj_blocks"] == 0
        return {"OFF_GS": o["gate_up_proj_scales"], "OFF_GB": o["gate_up_proj_bias"],
                "OFF_DB": o["down_proj_blocks"], "OFF_DS": o["down_proj_scales"],
                "OFF_DBIAS": o["down_proj_bias"]}

    def native_offsets(self) -> list[int]:
        """record_offset[7] for the native kernel's shape: six parts, then the (empty) exception area."""
        return [self.offsets[p] for p in SLOT_PARTS] + [self.slot_bytes]

    def pack_into(self, dst: np.ndarray, parts: dict[str, np.ndarray]) -> None:
        """Copy an expert's six arrays (any dtype, C-contiguous bytes) into ``dst`` (uint8)."""
        for part in SLOT_PARTS:
            src = np.ascontiguousarray(parts[part]).reshape(-1).view(np.uint8)
            if src.size != self.sizes[part]:
                raise ValueError(f"{part}: {src.size} bytes, layout expects {self.sizes[part]}")
            off = self.offsets[part]
            dst[off : off + src.size] = src

    def pack_expert(self, ck: Checkpoint, layer: int, expert: int, dst: np.ndarray | None = None) -> np.ndarray:
        out = dst if dst is not None else np.zeros(self.slot_bytes, dtype=np.uint8)
        self.pack_into(out, ck.expert_arrays(layer, expert))
        return out

"""bf16 projections on the CPU through oneDNN's prepacked weights.

The CPU engine's one-token projections go to the native kernel first (native_linear.py); this
serves a prompt's rows, and one row where the native path does not apply.

PyTorch's ``F.linear`` on bf16 CPU tensors re-lays the weight out for oneDNN on every call: one
token's GEMV read 15-19 GB/s of weights from DRAM where the machine reads ~30 GB/s, and the
dense projections plus the head took half of a CPU-only decode token (24 of 47 ms, 4-layer
120b shape, 2 threads, MEASURED with cProfile on the 2-core Zen 4 VM). Packing each weight once
(``torch.ops.mkldnn._reorder_linear_weight``, the same prepack PyTorch's own CPU compiler uses)
reads 27 GB/s for the GEMV and is faster at every row count measured (1 to 512 rows: 3.2x to
1.2x), with the same error against an fp64 product (MEASURED there, 5120 x 2880).

Only where oneDNN's bf16 path is native (AVX512-BF16 or AMX: ``reference.cpu_has_bf16_gemm``):
on AVX512 without BF16 the packed GEMV was 2x slower than ``F.linear``, and on AVX2 oneDNN
refuses to pack bf16. Any failure turns packing off and the caller uses ``F.linear``. The
packed copies sit beside the weights, which stay on the checkpoint's mapping (1.9 GB at the 120b
shape: each layer's q, k, v, o and router, packed at load by ``ReferenceModel.prepare``; the head
only if all of a prompt's logits are asked for).
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)


class PackedLinear:
    def __init__(self) -> None:
        self.enabled = True
        self._packed: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor | None:
        """``F.linear(x, w, b)`` for bf16 CPU tensors, or None where packing does not apply."""
        if not self.enabled or x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16 or x.device.type != "cpu" \
                or (b is not None and b.dtype != torch.bfloat16):
            return None
        try:
            rows = x.reshape(-1, x.shape[-1])
            y = torch.ops.mkldnn._linear_pointwise(rows.contiguous(), self._packed_of(w), b, "none", [], "")
        except (RuntimeError, AttributeError) as exc:
            self._give_up(exc)
            return None
        return y.reshape(*x.shape[:-1], y.shape[-1])

    def pack(self, w: torch.Tensor) -> bool:
        """Pack ``w`` now (at load) rather than at its first prompt; False where packing does not apply."""
        if not self.enabled or w.dtype != torch.bfloat16 or w.device.type != "cpu":
            return False
        try:
            self._packed_of(w)
        except (RuntimeError, AttributeError) as exc:
            self._give_up(exc)
            return False
        return True

    def _packed_of(self, w: torch.Tensor) -> torch.Tensor:
        hit = self._packed.get(id(w))
        if hit is None or hit[0] is not w:
            hit = (w, torch.ops.mkldnn._reorder_linear_weight(w.contiguous()))
            self._packed[id(w)] = hit  # keeps w alive, so its id stays unique
        return hit[1]

    def _give_up(self, exc: Exception) -> None:
        log.info("prepacked bf16 projections unavailable (%s); using F.linear", exc)
        self.enabled = False
        self.forget()

    def forget(self) -> None:
        """Drop the packed copies (their model released its weights)."""
        self._packed.clear()

    def __contains__(self, w: torch.Tensor) -> bool:
        hit = self._packed.get(id(w))
        return hit is not None and hit[0] is w

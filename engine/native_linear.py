"""One-token bf16 projections of the CPU engine on the native kernel's thread team.

A CPU decode token is as much dense bf16 weights (attention, router, head: 262 MB at the 4-layer
120b shape, 3.1 GB at 36 layers) as experts. oneDNN's prepacked GEMV (packed_linear.py) read
them at ~22 GB/s on the 2-core AVX-512 VM where the machine reads ~28, and only on CPUs with
AVX512-BF16; elsewhere PyTorch's bf16 F.linear read 14-17 GB/s. ``neural_linear_bf16`` streams the
rows on the same team as the experts (no second thread pool spinning beside it) and runs on every
ISA with the same bits: fp32 products and sums in a fixed 16-lane order, the bias added in fp32,
then one rounding to bf16, as a bf16 GEMM with fp32 accumulation computes (a different summation
order from oneDNN's: last-bit differences, not the oracle's bits).

Several rows (a prompt) stay with the GEMM paths: there the arithmetic, not the bytes, is the cost.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)


class NativeLinear:
    """``F.linear(x, w, b)`` for one bf16 row on the CPU, or None where it does not apply."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.enabled = True
        self._views: dict[int, tuple[torch.Tensor, np.ndarray]] = {}
        # the projections' pointer arrays, by the ids of their tensors (which the plan keeps alive, so the ids stay
        # theirs): a decode token calls the same 3 per layer and the head
        self._plans: dict[tuple[int, ...], Any] = {}

    def _bits(self, t: torch.Tensor) -> np.ndarray:
        hit = self._views.get(id(t))
        if hit is None or hit[0] is not t:
            hit = (t, t.view(torch.int16).numpy())  # keeps t alive, so its id stays unique
            self._views[id(t)] = hit
        return hit[1]

    def _applies(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> bool:
        return self.enabled and x.device.type == "cpu" and x.dtype == torch.bfloat16 and w.dtype == torch.bfloat16 \
            and w.dim() == 2 and w.is_contiguous() and x.numel() == w.shape[1] and w.shape[1] % 16 == 0 \
            and (b is None or (b.dtype == torch.bfloat16 and b.is_contiguous()))

    def _give_up(self, exc: Exception) -> None:
        """The kernel is an optimisation: fall back to the PyTorch paths from now on, say why once."""
        log.warning("native bf16 projections unavailable (%s); using the PyTorch paths", exc)
        self.enabled = False
        self.forget()

    def forget(self) -> None:
        """Drop the weights' views and pointer arrays (their model released its weights)."""
        self._views.clear()
        self._plans.clear()

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor | None:
        got = self.many(x, [(w, b)])
        return None if got is None else got[0]

    def many(self, x: torch.Tensor, pairs: list[tuple[torch.Tensor, torch.Tensor | None]]) -> list[torch.Tensor] | None:
        """``[F.linear(x, w, b) for w, b in pairs]`` for one bf16 row in one pass of the thread team (a decode
        token's q, k and v: the same bits as three calls, without two of the team's starts and ends), or None
        where it does not apply."""
        if not 1 <= len(pairs) <= 8 or not all(self._applies(x, w, b) for w, b in pairs):
            return None  # _applies: every matrix as wide as x, so all of the same width
        xc = x.contiguous()  # bf16 in and out: no dtype copies around the call (neural_linear_bf16_nb)
        outs = [torch.empty(*x.shape[:-1], w.shape[0], dtype=torch.bfloat16) for w, _ in pairs]
        try:
            key = tuple(id(t) for pair in pairs for t in pair)
            plan = self._plans.get(key)
            if plan is None:
                plan = self.kernel.linear_bf16_nb_plan([self._bits(w) for w, _ in pairs],
                                                       [None if b is None else self._bits(b) for _, b in pairs],
                                                       [w.shape[0] for w, _ in pairs], x.numel())
                plan.keep = (plan.keep, pairs)  # the tensors too: their ids are the key
                self._plans[key] = plan
            self.kernel.linear_bf16_nb_run(plan, xc.data_ptr(), [o.data_ptr() for o in outs])
        except Exception as exc:
            self._give_up(exc)
            return None
        return outs

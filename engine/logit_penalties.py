"""Sparse logit adjustments for engine/sampling.py, in transformers' order: logit_bias, then the
repetition penalty (over prompt and output: a logit < 0 is multiplied, else divided), then
OpenAI's frequency/presence penalties (``logit -= count * frequency + (count > 0) * presence``
over the output so far). Only the ids they touch are read and written."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch


class LogitPenalties:
    """Sparse logit adjustments: bias, repetition and OpenAI penalties on the few ids they touch.
    Growing numpy arrays (id -> slot) so a token costs O(1) bookkeeping, not a rebuild."""

    def __init__(self, bias: Iterable[tuple[int, float]], repetition: float, presence: float,
                 frequency: float, prompt: Iterable[int]) -> None:
        self.repetition, self.presence, self.frequency = repetition, presence, frequency
        self.slot: dict[int, int] = {}
        cap = 64
        self.ids = np.zeros(cap, np.int64)
        self.bias = np.zeros(cap, np.float64)
        self.rep = np.zeros(cap, bool)
        self.count = np.zeros(cap, np.float64)
        self.n = 0
        for tok, b in bias:
            s = self._slot(tok)  # (may grow the arrays: index after)
            self.bias[s] = b
        if repetition != 1.0:
            for tok in prompt:
                s = self._slot(int(tok))
                self.rep[s] = True
        self._packed: torch.Tensor | None = None  # device copy of (ids, bias, flags, penalty)
        self.active = self.n > 0 or repetition != 1.0 or presence != 0.0 or frequency != 0.0

    def _slot(self, tok: int) -> int:
        s = self.slot.get(tok)
        if s is None:
            s = self.slot[tok] = self.n
            if s == len(self.ids):
                for name in ("ids", "bias", "rep", "count"):
                    a = getattr(self, name)
                    setattr(self, name, np.concatenate([a, np.zeros_like(a)]))
            self.ids[s] = tok
            self.n += 1
        return s

    def record(self, tok: int) -> None:
        if self.repetition != 1.0 or self.presence != 0.0 or self.frequency != 0.0:
            self._packed = None  # the device copy changes with the output
            s = self._slot(tok)
            self.rep[s] = self.repetition != 1.0
            self.count[s] += 1

    def apply(self, x: torch.Tensor, host: bool) -> torch.Tensor:
        """A modified copy of x (fp32, any device); x itself is left untouched."""
        n = self.n
        if n == 0:
            return x
        if int(self.ids[:n].max()) >= x.numel():
            raise ValueError(f"logit_bias: token id {int(self.ids[:n].max())} is outside the vocabulary "
                             f"of {x.numel()}")
        c = self.count[:n]
        pen = self.frequency * c + self.presence * (c > 0)
        if host:  # the same arithmetic in numpy (no torch threading for 3 small ops)
            ids = self.ids[:n]
            vn = x.numpy()[ids].astype(np.float64) + self.bias[:n]
            if self.repetition != 1.0:
                r = self.repetition
                vn = np.where(self.rep[:n], np.where(vn < 0, vn * r, vn / r), vn)
            out_np = x.numpy().copy()
            out_np[ids] = vn - pen
            return torch.from_numpy(out_np)
        # one host->device copy: ids (exact in float64), bias, repetition flag, penalty; kept while
        # nothing changes it (a logit_bias alone: no copy, so no wait on the device, per token)
        packed = self._packed
        if packed is None or packed.device != x.device:
            packed = self._packed = torch.from_numpy(np.stack([self.ids[:n].astype(np.float64), self.bias[:n],
                                                               self.rep[:n].astype(np.float64), pen])).to(x.device)
        idx = packed[0].long()
        v = x[idx].double() + packed[1]
        if self.repetition != 1.0:
            r = self.repetition
            v = torch.where(packed[2] > 0, torch.where(v < 0, v * r, v / r), v)
        out = x.clone()
        out[idx] = (v - packed[3]).float()
        return out

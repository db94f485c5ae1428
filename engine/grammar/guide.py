"""Per-generation token masking for a compiled constraint, applied to the logits on their device.

The session calls ``guide.apply(logits)`` before sampling and ``guide.advance(token)`` after.
Phases: ``grammar`` (the llguidance matcher computes a 32-bit-word bitmask on the CPU, which is
copied to the logits' device and applied there as one ``where``), ``analysis`` (free reasoning:
no matcher work, only the harmony special tokens other than ``<|end|>`` are banned, so the
reasoning can only end the way the grammar continues), ``done`` and ``off`` (no mask).
"""

from __future__ import annotations

import logging

import llguidance as llg
import numpy as np
import torch

from .compile import CompiledConstraint

log = logging.getLogger(__name__)
_NEG = float("-inf")


class DeviceMask:
    """A CPU int32 bitmask buffer and its unpacking on the logits' device."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab = vocab_size
        self.words = (vocab_size + 31) // 32
        pin = torch.cuda.is_available()
        self.cpu = torch.zeros(self.words, dtype=torch.int32, pin_memory=pin)
        self._shifts: dict[torch.device, torch.Tensor] = {}

    def fill(self, matcher: llg.LLMatcher) -> None:
        matcher.unsafe_compute_mask_ptr(self.cpu.data_ptr(), self.words * 4)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        dev = logits.device
        n = logits.shape[-1]
        if dev.type == "cpu":  # numpy's unpackbits: one pass, no [words, 32] intermediate
            bits = np.unpackbits(self.cpu.numpy().view(np.uint8), bitorder="little")[:n]
            allowed = torch.from_numpy(bits).view(torch.bool)
        else:  # 25 KB to the device, unpacked there by a few elementwise kernels
            shifts = self._shifts.get(dev)
            if shifts is None:
                shifts = self._shifts[dev] = torch.arange(32, dtype=torch.int32, device=dev)
            words = self.cpu.to(dev, non_blocking=True)
            allowed = ((words.unsqueeze(1) >> shifts) & 1).view(-1)[:n].bool()
        # allowed tokens keep a finite logit even if the backend sent -inf, so sampling never sees
        # an all -inf row (a grammar always allows at least one token)
        return torch.where(allowed, logits.clamp(min=-1e30), _NEG)


class HarmonyGuide:
    def __init__(self, compiled: CompiledConstraint) -> None:
        self.c = compiled
        self.matcher = llg.LLMatcher(compiled.ll_tok, compiled.first, log_level=0)
        self.mask = DeviceMask(compiled.vocab_size)
        self.phase = "grammar"
        self.analysis_tokens = 0
        self._ban: dict[torch.device, torch.Tensor] = {}
        end = compiled.special.end
        self._ban_ids = [i for i in compiled.special_ids if i != end]

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.shape[-1] != self.c.vocab_size:
            raise ValueError(f"logits have {logits.shape[-1]} entries, the grammar {self.c.vocab_size}")
        if self.phase == "grammar":
            self.mask.fill(self.matcher)
            return self.mask.apply(logits)
        if self.phase == "analysis":
            budget = self.c.constraint.analysis_budget
            if budget is not None and self.analysis_tokens >= budget:
                forced = torch.full_like(logits, _NEG)
                forced[self.c.special.end] = 0.0
                return forced
            ban = self._ban.get(logits.device)
            if ban is None:
                ban = self._ban[logits.device] = torch.tensor(self._ban_ids, dtype=torch.long, device=logits.device)
            return logits.index_fill(0, ban, _NEG)
        return logits

    def advance(self, token: int) -> None:
        if self.phase == "grammar":
            if not self.matcher.consume_token(token):
                log.warning("grammar rejected token %d (%s); constraint dropped", token, self.matcher.get_error())
                self.phase = "off"
            elif token == self.c.special.message and self.matcher.is_accepting():
                self.phase = "analysis"  # the analysis header is complete; its text is free
            elif self.matcher.is_stopped():
                self.phase = "done"
        elif self.phase == "analysis":
            self.analysis_tokens += 1
            if token == self.c.special.end:
                self.matcher = llg.LLMatcher(self.c.ll_tok, self.c.after_analysis, log_level=0)
                self.phase = "grammar"

"""Token sampling: greedy, temperature and top-p, reproducible with a seed."""

from __future__ import annotations

import torch


class Sampler:
    def __init__(self, temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None) -> None:
        self.temperature = temperature
        self.top_p = top_p
        self.gen = torch.Generator()
        self.gen.manual_seed(seed if seed is not None else int(torch.seed() % (2**63)))

    def __call__(self, logits: torch.Tensor) -> int:
        """logits: fp32 [vocab] -> token id."""
        if self.temperature == 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.double() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            cum = torch.cumsum(sorted_p, dim=-1)
            # keep the smallest prefix whose mass reaches top_p (always at least one token)
            keep = (cum - sorted_p) < self.top_p
            sorted_p = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
            choice = int(torch.multinomial(sorted_p / sorted_p.sum(), 1, generator=self.gen))
            return int(order[choice])
        return int(torch.multinomial(probs, 1, generator=self.gen))

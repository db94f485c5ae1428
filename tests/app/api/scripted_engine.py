"""Test double: the real Engine on a synthetic model, with scripted token choices.

A random-weight model emits noise, so tests that need a tool call or reasoning text would
be flaky. :class:`ScriptedEngine` is the real :class:`engine.session.Engine` (harmony
rendering, K/V prefix reuse, sampling, the harmony parser, events, usage) whose backend
logits are masked so that the sampler can only pick the next scripted token. The model
still runs its real forward pass on every token; only the choice is forced. Each
generation takes the next script from a FIFO (``expect``); with none queued, the model's
own logits pass through, optionally with some token ids banned (``ban``).
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import torch

from engine.session import Engine


class ScriptedLogits:
    """Wraps a backend; forward() returns logits that force the scripted token."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._scripts: collections.deque[list[int]] = collections.deque()
        self._active: list[int] = []
        self._lock = threading.Lock()
        self.banned: set[int] = set()
        self.fail_after: int | None = None  # raise after this many more forward calls (engine-failure tests)
        self.prefills: list[list[int]] = []  # token ids of each new prompt part, for assertions

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def length(self) -> int:
        return int(self.inner.length)

    def queue(self, ids: list[int]) -> None:
        with self._lock:
            self._scripts.append(list(ids))

    def clear(self) -> None:
        with self._lock:
            self._scripts.clear()
            self._active = []
            self.banned = set()
            self.fail_after = None

    def forward(self, ids: list[int], progress: Any = None, cancel: Any = None) -> torch.Tensor:
        if self.fail_after is not None:
            if self.fail_after <= 0:
                self.fail_after = None
                raise RuntimeError("simulated device failure")
            self.fail_after -= 1
        logits = self.inner.forward(ids, progress, cancel)
        with self._lock:
            if progress is not None:  # the session's prefill: a new generation starts
                self.prefills.append(list(ids))
                self._active = self._scripts.popleft() if self._scripts else []
            if self._active:
                forced = torch.full_like(logits, float("-inf"))
                forced[self._active.pop(0)] = 0.0
                return forced
            if self.banned:
                logits = logits.clone()
                logits[list(self.banned)] = float("-inf")
        return logits


class ScriptedEngine(Engine):
    """The real engine with :class:`ScriptedLogits` around its backend."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scripted = ScriptedLogits(self.backend)
        self.backend = self.scripted  # type: ignore[assignment]

    def expect(self, harmony_text: str) -> None:
        """Queue the completion (harmony text after ``<|start|>assistant``) for the next generation."""
        self.scripted.queue(self.tokenizer.encode(harmony_text, add_special_tokens=False).ids)

    def ban_stops(self) -> None:
        """Free-running generations never stop by themselves (for cancel/queue tests): no stop token,
        and no new message (a message by another author ends the turn too)."""
        sp = self.special
        self.scripted.banned = {sp.return_, sp.call, sp.endoftext, sp.start}

    def last_prompt_text(self) -> str:
        """Everything the backend holds after the last prefill, decoded with special tokens."""
        return str(self.tokenizer.decode(self.cached_ids, skip_special_tokens=False))

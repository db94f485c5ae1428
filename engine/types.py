"""The engine interface's data types: conversations in, events out.

One interface serves the GUI, the API server and the CLI: a front end builds a
:class:`Conversation` and :class:`GenerationParams`, calls ``Engine.generate`` (see
``engine/session.py``) on a worker thread and consumes the yielded events. Nothing here
knows about Qt, HTTP or CUDA.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "developer", "user", "assistant", "tool"]
Channel = Literal["analysis", "commentary", "final"]
ReasoningEffort = Literal["low", "medium", "high"]
FinishReason = Literal["stop", "length", "tool_calls", "cancelled", "error"]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text exactly as the model produced it


@dataclass(frozen=True)
class Tool:
    """A function tool (JSON Schema parameters), rendered into the harmony developer message."""

    name: str
    description: str = ""
    parameters: dict[str, Any] | None = None


@dataclass(frozen=True)
class Message:
    role: Role
    content: str = ""
    # assistant: the analysis channel of this turn (dropped from the prompt once a final exists)
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    # tool: which call this answers and the function's name
    tool_call_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class Conversation:
    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()
    reasoning_effort: ReasoningEffort = "medium"
    current_date: str | None = None  # YYYY-MM-DD; None = today's date at render time
    model_identity: str | None = None


@dataclass(frozen=True)
class GenerationParams:
    max_tokens: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    # applied in this order by engine/sampling.py (transformers' order; OpenAI's penalty definition)
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit); OpenAI range [-100, 100]
    presence_penalty: float = 0.0  # OpenAI: logit -= presence if the token occurs in the output so far
    frequency_penalty: float = 0.0  # OpenAI: logit -= frequency * its count in the output so far
    repetition_penalty: float = 1.0  # transformers: over prompt and output, logit < 0 ? *p : /p

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError("temperature must be a finite number >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError("top_k must be an integer >= 0 (0 = off)")
        if not 0 <= self.min_p <= 1:
            raise ValueError("min_p must be in [0, 1]")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2 <= getattr(self, name) <= 2:
                raise ValueError(f"{name} must be in [-2, 2]")
        if not (self.repetition_penalty > 0 and math.isfinite(self.repetition_penalty)):
            raise ValueError("repetition_penalty must be a finite number > 0")
        seen: set[int] = set()
        for entry in self.logit_bias:
            tok, bias = entry if isinstance(entry, tuple) and len(entry) == 2 else (None, None)
            if isinstance(tok, bool) or not isinstance(tok, int) or tok < 0 or tok in seen:
                raise ValueError("logit_bias keys must be distinct token ids >= 0")
            if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
                raise ValueError("logit_bias values must be numbers in [-100, 100]")
            seen.add(tok)


# ---- events ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextDelta:
    channel: Channel
    text: str


@dataclass(frozen=True)
class ToolCallEvent:
    call: ToolCall


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from the K/V cache (not reprocessed)
    completion_tokens: int = 0
    prompt_seconds: float = 0.0
    decode_seconds: float = 0.0

    @property
    def prompt_tps(self) -> float:
        n = self.prompt_tokens - self.cached_tokens
        return n / self.prompt_seconds if self.prompt_seconds > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        # the first generated token comes out of the prompt pass
        n = max(self.completion_tokens - 1, 0)
        return n / self.decode_seconds if self.decode_seconds > 0 else 0.0


@dataclass(frozen=True)
class Progress:
    """Prompt processing progress (long prompts take seconds)."""

    done: int
    total: int


@dataclass(frozen=True)
class Done:
    finish_reason: FinishReason
    usage: Usage
    token_ids: tuple[int, ...] = ()
    error: str | None = None


Event = TextDelta | ToolCallEvent | Progress | Done


class CancelToken:
    """Set from any thread; the engine checks it between tokens, and a backend between the layers,
    attention blocks and expert groups of a prompt."""

    def __init__(self, parent: CancelToken | None = None) -> None:
        self._ev = threading.Event()
        self._parent = parent

    def cancel(self) -> None:
        self._ev.set()

    @property
    def cancelled(self) -> bool:
        return self._ev.is_set() or (self._parent is not None and self._parent.cancelled)

    def child(self) -> CancelToken:
        """A token cancelled with this one or on its own (the engine's own stop, e.g. a closed stream)."""
        return CancelToken(self)

    def check(self) -> None:
        """Raise :class:`PromptCancelled` if cancelled: the backends' check point."""
        if self.cancelled:
            raise PromptCancelled()


class PromptCancelled(BaseException):
    """A prompt stopped by its CancelToken; the backend has rewound to the length it held before.

    A BaseException (like asyncio.CancelledError) so that no ``except Exception`` fallback, such as
    reprocessing a failed prompt token by token, can swallow a stop.
    """


@dataclass
class Telemetry:
    """A snapshot of what the engine holds and how fast it runs, cheap to read often."""

    state: Literal["loading", "ready", "generating", "error"] = "loading"
    backend: str = "cpu-reference"
    model_name: str = ""
    model_note: str = ""  # e.g. "random weights (synthetic demo model)"
    layers: int = 0
    experts_per_layer: int = 0
    # per layer: (experts in static slots, experts in adaptive slots, experts not in VRAM); empty on CPU engines
    slots: list[tuple[int, int, int]] = field(default_factory=list)
    # per-layer recent hit counts per slot kind, for colouring the residency map
    slot_hits: list[list[float]] = field(default_factory=list)
    vram_hit_rate: float = 0.0
    prompt_tps: float = 0.0
    decode_tps: float = 0.0
    vram_used_bytes: int = 0
    vram_reserved_bytes: int = 0
    ram_used_bytes: int = 0
    phases_ms: dict[str, float] = field(default_factory=dict)
    tokens_generated: int = 0
    cached_tokens: int = 0
    # the prompt being processed right now (0/0 when none): front ends poll this for live progress
    prompt_done: int = 0
    prompt_total: int = 0
    # RAM residency of the expert bytes the CPU reads (engine/residency/)
    store_bytes: int = 0
    store_resident_bytes: int = 0
    ram_budget_bytes: int = 0
    ram_locked_bytes: int = 0
    warmup_state: str = ""
    warmup_fraction: float = 0.0
    faults_major_per_token: float = 0.0
    faults_minor_per_token: float = 0.0
    residency_note: str = ""

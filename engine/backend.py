"""The compute backend behind a session: holds the K/V state of one token sequence.

The session (engine/session.py) owns rendering, sampling, prefix reuse and events; a
backend only turns token ids into logits and keeps the K/V of what it processed. The CPU
reference backend lives here; the GPU hybrid backend is engine/gpu/backend.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from .checkpoint import Checkpoint
from .reference import (
    DecodeAttention,
    DecodeLayer,
    ExpertsFn,
    KVCache,
    Projection,
    ReferenceModel,
    RowOps,
    cpu_has_bf16_gemm,
)
from .types import CancelToken, Telemetry

ProgressFn = Callable[[int, int], None]


class Backend(Protocol):
    name: str

    @property
    def length(self) -> int:
        """Number of tokens whose K/V is held."""
        ...

    def truncate(self, n: int) -> None: ...

    def forward(self, ids: list[int], progress: ProgressFn | None = None,
                cancel: CancelToken | None = None) -> torch.Tensor:
        """Process ``ids`` after the held tokens; fp32 logits of the last one [vocab].

        The prompt contract. The session calls this for a prompt from its prompt thread (one
        persistent thread per Engine, ``neural-prompt``) while the generate() thread yields the
        events; decode steps (one id, no progress, no cancel) come from the generate() thread:
        - ``progress(done, total)`` is called from the calling thread as the work advances (at
          least once per layer; ``total == len(ids)``, the last call ``done == total``).
        - ``cancel`` is polled between layers, attention blocks and expert groups, so that a stop
          takes effect within 0.5 s; when set, the backend rewinds to the length it held before
          this call (``length`` and the K/V exactly as before, as if never called) and raises
          :class:`engine.types.PromptCancelled` (``cancel.check()`` raises it). Never
          reprocess token by token on a stop: PromptCancelled is a BaseException, so an
          ``except Exception`` fallback does not see it.
        - On any other exception the held length must still be one whose K/V is exact (the
          length before the call, or 0); the session truncates to what it knows is valid.
        """
        ...

    def fill_telemetry(self, t: Telemetry) -> None: ...

    def state_tensors(self) -> dict[str, torch.Tensor]: ...

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], length: int) -> None: ...

    def close(self) -> None: ...


class ReferenceBackend:
    """CPU backend: the exact reference math, experts optionally by the native kernel."""

    def __init__(self, ck: Checkpoint, dtype: torch.dtype, block: int = 256, experts_fn: ExpertsFn | None = None,
                 name: str = "cpu-reference", native_linear: Projection | None = None,
                 native_attention: DecodeAttention | None = None, native_rows: RowOps | None = None,
                 native_decode: DecodeLayer | None = None) -> None:
        self.name = name
        self.model = ReferenceModel(ck, dtype, experts_fn=experts_fn, bf16_gemm=cpu_has_bf16_gemm(),
                                    native_linear=native_linear, native_attention=native_attention,
                                    native_rows=native_rows, native_decode=native_decode)
        self.cache = self.model.new_cache()
        self.block = block

    @property
    def length(self) -> int:
        return self.cache.length

    def truncate(self, n: int) -> None:
        if n < self.cache.length:
            self.cache.truncate(n)

    def prepare(self, progress: ProgressFn | None = None) -> int:
        """Load-time work a first prompt would otherwise pay for (the packed projections)."""
        return self.model.prepare(progress)

    def forward(self, ids: list[int], progress: ProgressFn | None = None,
                cancel: CancelToken | None = None) -> torch.Tensor:
        # layer-major: a long prompt reads each expert once per layer, not once per block. A stop
        # or error mid-prompt leaves some layers extended, so rewind all to the length before the
        # call (layer-major has no earlier consistent point short of redoing finished layers).
        before = self.cache.length
        try:
            return self.model.forward(ids, self.cache, last_only=True, attn_block=self.block, progress=progress,
                                      check=cancel.check if cancel is not None else None)[0]
        except BaseException:
            self.cache.truncate(before)
            raise

    def fill_telemetry(self, t: Telemetry) -> None:
        t.backend = self.name

    def state_tensors(self) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for i, (k, v) in enumerate(zip(self.cache.keys, self.cache.values, strict=True)):
            out[f"k.{i}"] = k.clone(memory_format=torch.contiguous_format)  # a copy: the cache's views
            out[f"v.{i}"] = v.clone(memory_format=torch.contiguous_format)  # are overwritten later
        return out

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], length: int) -> None:
        n = self.model.cfg.num_hidden_layers
        keys = [tensors[f"k.{i}"].to(self.model.dtype) for i in range(n)]
        values = [tensors[f"v.{i}"].to(self.model.dtype) for i in range(n)]
        if any(k.shape[1] != length for k in keys + values):
            raise ValueError("saved K/V length does not match its token count")
        self.cache = KVCache(keys, values)

    def close(self) -> None:
        self.cache = self.model.new_cache()
        self.model.release()  # the weights' views go, so the checkpoint's mappings close with it

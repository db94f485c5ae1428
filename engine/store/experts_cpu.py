"""MoE experts on the CPU with the native kernel, from an expert store or the checkpoint itself.

Source choice: a store next to the checkpoint (``experts-packed.nstore`` preferred, then
``experts-raw.nstore``) that matches the checkpoint's fingerprint is used; otherwise the kernel
reads the checkpoint's memory-mapped MXFP4 tensors directly (the raw layout, six parts per
expert, no repack needed). Both give bit-identical results; the store keeps each expert in one
contiguous, aligned record (fewer pages and TLB entries, one stream per matrix) and the packed
store reads ~3% fewer bytes. A store that does not match the checkpoint is refused, never used.

If the extension cannot load, :class:`native.kernel.NativeUnavailable` propagates with the reason,
and the engine falls back to the PyTorch reference.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from native.kernel import ExpertRef, NativeKernel, load_kernel

from .format import CHECKPOINT_PART, PART_NAMES, RecordLayout, StoreError
from .reader import ExpertStore, find_store

if TYPE_CHECKING:  # torch only for the engine hook: the kernel and the bench run without it
    import torch

    from ..checkpoint import Checkpoint
    from ..config import ModelConfig
    from ..reference import ExpertsFn

log = logging.getLogger(__name__)
MAX_TOKENS = 16


def expert_ref_from_record(kernel: NativeKernel, rec: np.ndarray | Any, layout: RecordLayout, n_exc: int,
                           capture: Any = None) -> ExpertRef:
    """Descriptor for a record given as a uint8 array or a cffi pointer to its first byte."""
    if isinstance(rec, np.ndarray):
        base, owner = kernel.pointer(rec)
    else:
        base, owner = kernel.ffi.cast("uint8_t *", rec), rec
    parts = [base + off for off in layout.offsets[:6]]
    ref = kernel.expert(parts, exc=base + layout.offsets[6] if n_exc else None, n_exc=n_exc, capture=capture)
    ref.keep.append(owner)
    return ref


class CpuExperts:
    """Per-layer MoE with the native kernel; ``forward`` matches the engine's ExpertsFn."""

    def __init__(self, cfg: ModelConfig, ck: Checkpoint | None = None, store: ExpertStore | None = None,
                 kernel: NativeKernel | None = None, threads: int = 0, bf16_inputs: bool = False) -> None:
        if (ck is None) == (store is None):
            raise ValueError("give exactly one source: a checkpoint or an expert store")
        self.cfg = cfg
        self.kernel = kernel or load_kernel()
        self.kernel.set_threads(threads)
        self.ck, self.store = ck, store
        fmt = store.fmt if store is not None else "raw"
        self.layout = store.layout if store is not None else RecordLayout.build(cfg.hidden_size,
                                                                                 cfg.intermediate_size, "raw")
        self.shape = self.kernel.shape(cfg.hidden_size, cfg.intermediate_size, fmt, cfg.swiglu_limit,
                                       cfg.swiglu_alpha, self.layout.offsets, bf16_inputs=bf16_inputs)
        self._refs: dict[tuple[int, int], ExpertRef] = {}
        self._store_base: Any = None
        if store is not None:
            self._store_base = self.kernel.pointer(store.buf)

    @property
    def source(self) -> str:
        return f"store {self.store.path} ({self.store.fmt})" if self.store is not None else "checkpoint (mmap)"

    def ref(self, layer: int, expert: int) -> ExpertRef:
        key = (layer, expert)
        r = self._refs.get(key)
        if r is None:
            if self.store is not None:
                base, owner = self._store_base
                r = expert_ref_from_record(self.kernel, base + self.store.offset(layer, expert), self.layout,
                                           self.store.n_exc(layer, expert))
                r.keep.append(owner)
            else:
                assert self.ck is not None
                pre = f"model.layers.{layer}.mlp.experts."
                r = self.kernel.expert([self.ck.array(pre + CHECKPOINT_PART[p])[expert] for p in PART_NAMES])
            self._refs[key] = r
        return r

    # ---- calls ------------------------------------------------------------------------------
    def forward_token(self, layer: int, ids: Sequence[int], weights: np.ndarray, x: np.ndarray,
                      out: np.ndarray | None = None) -> np.ndarray:
        """One token: sum over ids (in order) of weights[i] * expert_i(x)."""
        out = np.empty(self.cfg.hidden_size, np.float32) if out is None else out
        self.kernel.moe_token(self.shape, [self.ref(layer, int(e)) for e in ids],
                              np.ascontiguousarray(weights, np.float32), np.ascontiguousarray(x, np.float32), out)
        return out

    def forward_tokens(self, layer: int, ids: np.ndarray, weights: np.ndarray, x: np.ndarray,
                       check: Callable[[], None] | None = None) -> np.ndarray:
        """T tokens: grouped by expert through the multi-token kernel, then summed per token in
        routing order, which reproduces forward_token bit for bit. ``check`` runs before each
        expert's groups (a stop point for long prompts)."""
        t_count, k = ids.shape
        h = self.cfg.hidden_size
        flat = ids.reshape(-1)
        # one stable sort by expert and one gather: each expert's tokens are then a contiguous run
        # of rows that the kernel reads and writes in place (no per-group copies)
        order = np.argsort(flat, kind="stable")
        x_sorted = np.ascontiguousarray(x, np.float32)[order // k]
        w_sorted = np.ascontiguousarray(weights, np.float32).reshape(-1)[order]
        out_sorted = np.empty((t_count * k, h), np.float32)
        experts, starts = np.unique(flat[order], return_index=True)
        ends = [*starts[1:].tolist(), t_count * k]
        for e, a, b in zip(experts.tolist(), starts.tolist(), ends, strict=True):
            if check is not None:
                check()
            ref = self.ref(layer, e)
            for s in range(a, b, MAX_TOKENS):
                t = min(s + MAX_TOKENS, b)
                self.kernel.expert_tokens(self.shape, ref, x_sorted[s:t], w_sorted[s:t], out_sorted[s:t])
        contrib = np.empty((t_count * k, h), np.float32)
        contrib[order] = out_sorted
        contrib = contrib.reshape(t_count, k, h)
        acc = contrib[:, 0].copy()
        for j in range(1, k):
            acc = acc + contrib[:, j]
        return acc

    def forward(self, layer: int, t: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor,
                check: Callable[[], None] | None = None) -> torch.Tensor:
        """ExpertsFn: (layer, hidden [T, H], ids [T, k], weights [T, k]) -> [T, H] float32."""
        import torch

        x = t.detach().to(torch.float32).contiguous().numpy()
        ids = idx.detach().to(torch.int64).numpy()
        w = weights.detach().to(torch.float32).numpy()
        if x.shape[0] == 1:
            out = self.forward_token(layer, ids[0].tolist(), w[0], x[0])[None]
        else:
            out = self.forward_tokens(layer, ids, w, x, check)
        return torch.from_numpy(out)


def open_matching_store(ck: Checkpoint, path: str | Path | None = None) -> ExpertStore | None:
    """The store at ``path`` (or next to the checkpoint) if it matches ``ck``; None if there is none.

    A store that exists but does not match raises StoreMismatch: silently using stale weights
    would be wrong, and silently ignoring it would hide a slow path.
    """
    p = Path(path) if path is not None else find_store(ck.model_dir)
    if p is None:
        return None
    store = ExpertStore.open(p)
    try:
        store.check_matches(ck)
    except Exception:
        store.close()
        raise
    return store


def native_experts_fn(ck: Checkpoint, threads: int = 0, store_path: str | Path | None = None,
                      bf16_inputs: bool = False) -> ExpertsFn:
    """The engine's hook: an ExpertsFn backed by the native kernel (raises NativeUnavailable).

    ``bf16_inputs`` follows the engine's dtype: in bf16 mode the kernel rounds its inputs to
    bf16 as the model does (and may use its vdpbf16ps loop); in fp32 mode it keeps them fp32.

    A store that does not match the checkpoint is refused with a warning and the kernel reads
    the checkpoint's tensors instead: same results, and the stale store is never used.
    """
    kernel = load_kernel()
    try:
        store = open_matching_store(ck, store_path)
    except StoreError as exc:
        log.warning("expert store refused: %s; reading the checkpoint's tensors directly", exc)
        store = None
    experts = CpuExperts(ck.config, ck=None if store is not None else ck, store=store, kernel=kernel, threads=threads,
                         bf16_inputs=bf16_inputs)
    log.info("native CPU experts: %s, %d threads, %s path, %s inputs", experts.source, kernel.threads, kernel.isa,
             "bf16" if bf16_inputs else "fp32")
    return experts.forward

"""The CPU engine's experts: the native kernel (native_experts.py) from a store or the checkpoint.

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
from pathlib import Path
from typing import TYPE_CHECKING

from native.kernel import load_kernel

from .format import StoreError
from .native_experts import NativeExperts
from .reader import ExpertStore, find_store

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint
    from ..reference import ExpertsFn

log = logging.getLogger(__name__)


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
    # torch_beside=False: the reference model's torch ops and the kernel take turns on this thread
    experts = NativeExperts(ck.config, store if store is not None else ck, threads=threads, bf16_inputs=bf16_inputs,
                            torch_beside=False, kernel=kernel)
    log.info("native CPU experts: %s, %d threads, %s path, %s inputs", experts.source, experts.threads, kernel.isa,
             "bf16" if bf16_inputs else "fp32")
    return experts.forward

"""The engine's one adapter around the native CPU expert kernel (native/kernel.py).

Every engine path that computes experts on the CPU goes through :class:`NativeExperts`: the CPU
engine (``experts_cpu.native_experts_fn``), the GPU engine's decode misses
(``gpu/cpu_experts.py``) and its prompt groups (``gpu/prefill/cpu_groups.py``). It owns

- the loaded kernel and the process-wide thread team, sized by :func:`share_cores` from the
  settings' thread count (default: physical cores) together with torch's intra-op pool;
- the expert descriptors of one source: an expert store (raw or packed records) or the
  checkpoint's memory-mapped MXFP4 tensors (raw), built once per expert and kept;
- the entry points: one token (``moe_token``, with optional copy-on-compute capture into a
  buffer in ``capture_offsets``' layout), one expert over N tokens (``expert_tokens``, in calls of
  up to the kernel's MAX_TOKENS), N tokens routed to k experts each (``moe_tokens``: the experts'
  token groups GROUP_CHUNK experts per kernel call, bit-identical to N one-token calls), and the
  reference model's ExpertsFn (``forward``).

If the extension cannot load, :class:`native.kernel.NativeUnavailable` propagates with the reason.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from native.kernel import MAX_TOKENS, ExpertRef, NativeKernel, Span, load_kernel

from .. import settings
from .format import CHECKPOINT_PART, PART_NAMES, RecordLayout
from .reader import ExpertStore

if TYPE_CHECKING:  # torch only for the ExpertsFn face: the kernel benches run without it
    import torch

    from ..checkpoint import Checkpoint
    from ..config import ModelConfig

log = logging.getLogger(__name__)

# moe_tokens hands the kernel this many experts' token groups per call, with a stop check between
# calls: a 512-token prompt's ~128 groups per layer in 8 calls instead of 128 Python round trips,
# while a stop still lands within 16 groups' work (tens of ms on a 120b-shape layer).
GROUP_CHUNK = 16

_team_lock = threading.Lock()


def share_cores(threads: int = 0, kernel: NativeKernel | None = None, torch_beside: bool = True) -> int:
    """Size the native team to ``threads`` (0 = the settings' default: physical cores, at most 8)
    and torch's intra-op pool with it; returns the team size. Both are process-wide and every
    adapter of one engine asks for the same numbers: only the first call changes anything.

    torch's threads, deliberately (its own default is every core MKL counts, beside any team):

    - ``torch_beside=True`` (the GPU engine: prompt groups on a worker thread while the host runs
      torch): torch gets the physical cores the team leaves, at least 1. Its CPU work there is
      small, and an OpenMP worker spinning out its wait on a team core slows the kernel: on a
      busy 2-core box a second torch thread doubled the experts' time (bench/kernel/torch_threads.py).
    - ``torch_beside=False`` (the CPU engine: torch's attention, router and lm_head, about as many
      bytes per token as the experts, and the kernel take turns on the calling thread): torch gets
      the team's size, the same cores one after the other, and never more than the team.
    """
    n = settings.EngineSettings(cpu_threads=threads).threads()  # validates 0..256 with the setting's name
    torch_n = max(1, settings.physical_cores() - n) if torch_beside else n
    k = kernel or load_kernel()
    import torch

    with _team_lock:
        now = k.threads
        if now != n:
            got = k.set_threads(n)
            if got != n:
                log.warning("native kernel started %d of %d threads", got, n)
            log.info("native team: %d threads (was %d)", got, now)
            n = got
        if torch.get_num_threads() != torch_n:
            torch.set_num_threads(torch_n)
            log.info("torch intra-op threads: %d (native team: %d)", torch_n, n)
        return n


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


class NativeExperts:
    """The native kernel over one expert source (a Checkpoint or an ExpertStore).

    ``bf16_inputs``: the kernel rounds x and the SwiGLU activation to bf16 as the model does (and
    may use its vdpbf16ps loop); False keeps them fp32. ``capture_offsets``: the record layout a
    capture buffer gets (seven offsets, e.g. a VRAM slot's); checkpoint source only, default the
    raw record layout. ``threads``, ``torch_beside``: see :func:`share_cores`.
    """

    def __init__(self, cfg: ModelConfig, source: Checkpoint | ExpertStore, *, threads: int = 0,
                 bf16_inputs: bool = False, capture_offsets: Sequence[int] | None = None,
                 torch_beside: bool = True, kernel: NativeKernel | None = None) -> None:
        self.cfg = cfg
        self.kernel = kernel or load_kernel()
        self.threads = share_cores(threads, self.kernel, torch_beside)
        self.store: ExpertStore | None = None
        self.ck: Checkpoint | None = None
        if isinstance(source, ExpertStore):
            self.store = source
        else:
            self.ck = source
        if self.store is not None:
            if capture_offsets is not None:
                raise ValueError("capture_offsets apply to a checkpoint source; a store's records keep its layout")
            fmt, offsets = self.store.fmt, self.store.layout.offsets
            self._store_base = self.kernel.pointer(self.store.buf)
        else:
            fmt = "raw"
            offsets = tuple(capture_offsets) if capture_offsets is not None else RecordLayout.build(
                cfg.hidden_size, cfg.intermediate_size, "raw").offsets
        self.shape = self.kernel.shape(cfg.hidden_size, cfg.intermediate_size, fmt, cfg.swiglu_limit,
                                       cfg.swiglu_alpha, offsets, bf16_inputs=bf16_inputs)
        self.record_bytes = self.kernel.record_bytes(self.shape)  # what a capture buffer must hold
        self.name = f"native-{self.kernel.isa}-{self.threads}t"
        self._refs: dict[tuple[int, int], ExpertRef] = {}

    @property
    def source(self) -> str:
        return f"store {self.store.path} ({self.store.fmt})" if self.store is not None else "checkpoint (mmap)"

    def _new_ref(self, layer: int, expert: int, capture: np.ndarray | None) -> ExpertRef:
        if self.store is not None:
            base, owner = self._store_base
            r = expert_ref_from_record(self.kernel, base + self.store.offset(layer, expert), self.store.layout,
                                       self.store.n_exc(layer, expert), capture=capture)
            r.keep.append(owner)
            return r
        assert self.ck is not None
        pre = f"model.layers.{layer}.mlp.experts."
        parts = [self.ck.array(pre + CHECKPOINT_PART[p])[expert] for p in PART_NAMES]  # views into the mapping
        return self.kernel.expert(parts, capture=capture)

    def ref(self, layer: int, expert: int, capture: np.ndarray | None = None) -> ExpertRef:
        """The expert's descriptor (built once, kept); with ``capture``, a one-off descriptor that
        also copies the bytes it reads into that buffer, in the capture layout."""
        if capture is not None:
            if capture.nbytes < self.record_bytes:
                raise ValueError(f"capture buffer of {capture.nbytes} bytes; an expert record needs "
                                 f"{self.record_bytes}")
            return self._new_ref(layer, expert, capture)
        key = (layer, expert)
        r = self._refs.get(key)
        if r is None:
            r = self._refs[key] = self._new_ref(layer, expert, None)
        return r

    # ---- entry points -----------------------------------------------------------------------
    def moe_token(self, layer: int, ids: Sequence[int], weights: Sequence[float] | np.ndarray, x: np.ndarray,
                  out: np.ndarray | None = None, captures: dict[int, np.ndarray] | None = None,
                  heads: dict[int, int] | None = None) -> np.ndarray:
        """One token: out[H] = sum over ids (in order) of weights[i] * expert_i(x); zeros if no ids.
        Each expert in ``captures`` also writes its record bytes into that (uint8) buffer; each in ``heads``
        is computed over its first n gate_up units only (NativeKernel.head; the copy lane computes the rest)."""
        out = np.empty(self.cfg.hidden_size, np.float32) if out is None else out
        if not len(ids):
            out.fill(0.0)
            return out
        self.kernel.moe_token(self.shape, self._token_refs(layer, ids, captures, heads),
                              np.ascontiguousarray(weights, np.float32), np.ascontiguousarray(x, np.float32), out)
        return out

    @contextlib.contextmanager
    def moe_token_beside(self, layer: int, ids: Sequence[int], weights: Sequence[float] | np.ndarray, x: np.ndarray,
                         out: np.ndarray, captures: dict[int, np.ndarray] | None = None,
                         heads: dict[int, int] | None = None) -> Iterator[Span]:
        """:meth:`moe_token` into ``out`` while the with-block does other work (NativeKernel.moe_token_beside: the
        block must not call the kernel); the same bits, there when the block ends, and the Span of the work."""
        if not len(ids):
            out.fill(0.0)
            yield Span()
            return
        with self.kernel.moe_token_beside(self.shape, self._token_refs(layer, ids, captures, heads),
                                          np.ascontiguousarray(weights, np.float32),
                                          np.ascontiguousarray(x, np.float32), out) as span:
            yield span

    def _token_refs(self, layer: int, ids: Sequence[int], captures: dict[int, np.ndarray] | None,
                    heads: dict[int, int] | None) -> list[ExpertRef]:
        if captures:
            refs = [self.ref(layer, int(e), captures.get(int(e))) for e in ids]
        else:
            get = self._refs.get  # the decode hot path: one dict lookup per expert
            refs = [get((layer, e)) or self.ref(layer, int(e)) for e in ids]
        if heads:
            refs = [self.kernel.head(r, heads[int(e)]) if int(e) in heads else r
                    for e, r in zip(ids, refs, strict=True)]
        return refs

    def expert_tokens(self, layer: int, expert: int, x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        """One expert over N tokens: out[i] = w[i] * expert(x[i]) (fp32 [N, H]), in kernel calls of
        up to MAX_TOKENS tokens, each reading the expert's bytes once."""
        ref = self.ref(layer, expert)
        for s in range(0, x.shape[0], MAX_TOKENS):
            e = min(s + MAX_TOKENS, x.shape[0])
            self.kernel.expert_tokens(self.shape, ref, x[s:e], w[s:e], out[s:e])

    def expert_groups(self, layer: int, experts: Sequence[int] | np.ndarray, counts: np.ndarray, x: np.ndarray,
                      w: np.ndarray, out: np.ndarray, check: Callable[[], None] | None = None) -> None:
        """Experts' token groups, one after another in the rows of x / w / out (fp32): group g is
        the next counts[g] rows, out = w * expert(x). GROUP_CHUNK experts per kernel call, with the
        bits of expert_tokens; ``check`` runs before each call (a stop point)."""
        counts = np.ascontiguousarray(counts, dtype=np.int32)
        ends = np.cumsum(counts, dtype=np.int64)
        for c in range(0, len(experts), GROUP_CHUNK):
            if check is not None:
                check()
            d = min(c + GROUP_CHUNK, len(experts))
            a, b = int(ends[c] - counts[c]), int(ends[d - 1])
            refs = [self.ref(layer, int(e)) for e in experts[c:d]]
            self.kernel.expert_groups(self.shape, refs, counts[c:d], x[a:b], w[a:b], out[a:b])

    def moe_tokens(self, layer: int, ids: np.ndarray, weights: np.ndarray, x: np.ndarray,
                   check: Callable[[], None] | None = None) -> np.ndarray:
        """N tokens [T, k]: grouped by expert through the kernel's expert_groups call (GROUP_CHUNK
        experts per call), then summed per token in routing order, which reproduces moe_token bit
        for bit. ``check`` runs before each call (a stop point for long prompts)."""
        t_count, k = ids.shape
        h = self.cfg.hidden_size
        flat = ids.reshape(-1)
        # one stable sort by expert and one gather: each expert's tokens are then a contiguous run
        # of rows that the kernel reads and writes in place (no per-group copies)
        order = np.argsort(flat, kind="stable")
        x_sorted = np.ascontiguousarray(x, np.float32)[order // k]
        w_sorted = np.ascontiguousarray(weights, np.float32).reshape(-1)[order]
        out_sorted = np.empty((t_count * k, h), np.float32)
        experts, counts = np.unique(flat[order], return_counts=True)
        self.expert_groups(layer, experts, counts, x_sorted, w_sorted, out_sorted, check)
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
            out = self.moe_token(layer, ids[0].tolist(), w[0], x[0])[None]
        else:
            out = self.moe_tokens(layer, ids, w, x, check)
        return torch.from_numpy(out)

    def prefault(self) -> float:
        """Touch every expert page once (so decode takes no first-touch page faults); seconds."""
        t0 = time.perf_counter()
        if self.store is not None:
            self.kernel.probe_read(self.store.buf)
        else:
            assert self.ck is not None
            for layer in range(self.cfg.num_hidden_layers):
                for p in PART_NAMES:
                    self.kernel.probe_read(self.ck.array(f"model.layers.{layer}.mlp.experts.{CHECKPOINT_PART[p]}"))
        return time.perf_counter() - t0

"""The GPU prompt path: ``PrefillRunner.run(ids, start)`` -> logits of the last token.

Layer-major over blocks of up to ``prompt_block`` tokens (EngineSettings): for each layer,
every block in turn runs RMSNorm + QKV + RoPE, attention over the cache and the block
(Triton), writes its K/V into the cache or the sliding ring (exactly where the decode
kernels read it: row ``pos % rows``), and adds o_proj to the residual; then the router runs
over the whole prompt and the MoE runs once for all of its tokens (experts.py), so a staged
expert crosses PCIe once per layer, not once per block. The residual of the whole prompt
stays on the GPU between layers.

The runner works on a GPU backend's core (engine/gpu/core.py: weights, K/V, slot pool and
slot table) and does not change residency; ``last`` keeps the prompt's routing so that the
admission policy can count it (README.md in this folder: integration steps).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...checkpoint import Checkpoint
from ...config import ModelConfig
from ...settings import EngineSettings
from ...types import CancelToken
from . import dense
from .calibrate import measure_rates
from .cpu_groups import CpuGroups, make_cpu_groups
from .direct import MappedExperts, auto_budget
from .experts import PromptExperts, combine
from .launch import PrefillKernels
from .split import SplitModel
from .staging import StagingRing
from .stats import GpuTimer, PrefillStats
from .tiles import PrefillTiles
from .workspace import MAX_ROWS

log = logging.getLogger(__name__)
ProgressFn = Callable[[int, int], None]
CPU_MAX_TOKENS = 16  # design doc: a non-resident expert with <= 16 tokens goes to the CPU
RING_DEPTH = 4


@dataclass
class PrefillResult:
    logits: torch.Tensor  # fp32 [vocab] of the last token, on the CPU
    routing: np.ndarray  # int16 [tokens, layers, k] expert ids (AdmissionPolicy.observe_prompt takes it)
    counts: np.ndarray  # int64 [layers, experts] pairs routed to each expert
    stats: PrefillStats
    all_logits: torch.Tensor | None = None  # fp32 [tokens, vocab] when asked for (checks only)




class PrefillRunner:
    def __init__(self, core: Any, ck: Checkpoint, settings: EngineSettings, *, tiles: PrefillTiles | None = None,
                 cpu_groups: CpuGroups | None = None, cpu_max: int = CPU_MAX_TOKENS, ring_depth: int = RING_DEPTH,
                 pack_threads: int = 0, max_rows: int = MAX_ROWS, prefer_native: bool = True,
                 release_cache: bool = True, timed: bool = True, staged_group: int = 1,
                 split: SplitModel | None = None) -> None:
        self.core = core
        self.ck = ck
        self.cfg: ModelConfig = core.cfg
        self.settings = settings
        self.cuda = bool(core.cuda)
        tiles = tiles or PrefillTiles.for_config(self.cfg, interpret=not self.cuda)
        if settings.prefill_tiles:
            tiles = tiles.with_overrides(settings.prefill_tiles)
        self.kernels = PrefillKernels(self.cfg, tiles, core.layout)
        self.cpu = cpu_groups or make_cpu_groups(ck, settings.threads(), prefer_native)
        self.ring_depth = ring_depth
        # 0 = the engine's CPU threads: while a prompt runs they have little else to do, and packing
        # is the producer's bottleneck (H200 host: 8.3 GB/s with 4 threads, 9.4 with 8; MEASURED)
        self.pack_threads = pack_threads or max(1, settings.threads())
        self.ring = self._make_ring()
        self.direct = self._make_direct()
        self.cpu_max = cpu_max
        self.max_rows = max_rows
        self.release_cache = release_cache
        self.timed = timed  # CUDA-event phase times (a few events per wave; off saves ~10 us each)
        # the CPU / staging split from this machine's rates (calibrate()); "fixed": groups of <= cpu_max pairs
        self.split = split if split is not None else SplitModel(cpu_share=settings.prompt_cpu_share)
        fixed = settings.prompt_split == "fixed" and split is None
        self.experts = PromptExperts(core, self.kernels, self.cpu, self.ring, cpu_max, max_rows, PrefillStats(),
                                     GpuTimer(self.cuda), staged_group, None if fixed else self.split,
                                     self.direct)
        self.last: PrefillResult | None = None
        self.calibration: dict[str, float] = {}  # what calibrate() measured (benchmarks print it)

    def _make_ring(self) -> StagingRing | None:
        if self.core.plan.n_scratch <= 0:
            return None  # no scratch slots: large non-resident groups go to the CPU too
        return StagingRing(self.ck, self.core.layout, self.ring_depth, pinned=self.cuda,
                           pack_threads=self.pack_threads)

    def _make_direct(self) -> MappedExperts | None:
        """Register the checkpoint's shards for direct copies in the background (direct.py)."""
        budget = auto_budget(self.settings.stage_direct)
        if not self.cuda or self.ring is None or budget <= 0:
            return None
        try:
            return MappedExperts(self.ck, self.core.layout, budget)
        except Exception:  # a checkpoint the spans cannot describe: the ring serves every layer
            log.exception("direct expert copies unavailable")
            return None

    def _embed(self, ids: list[int]) -> torch.Tensor:
        rows = np.ascontiguousarray(self.core.embed_table[np.asarray(ids, dtype=np.int64)])
        x = torch.from_numpy(rows.view(np.int16)).view(torch.bfloat16)
        if self.cuda:
            x = x.pin_memory()
        return x.to(self.core.dev, non_blocking=self.cuda)

    # ---- the prompt -----------------------------------------------------------------------------
    def run(self, ids: list[int], start: int, progress: ProgressFn | None = None, *, all_logits: bool = False,
            block: int | None = None, cancel: CancelToken | None = None) -> torch.Tensor:
        """Process ``ids`` at positions ``start ..``; the cache must hold positions before ``start``.
        Returns the fp32 logits of the last token [vocab] on the CPU; details in ``self.last``.

        ``cancel`` is polled between blocks and layers (PromptCancelled). On any exception the
        cache holds a partly written prompt (sliding rings included): the caller must rewind (a
        ring checkpoint taken before the call, or 0)."""
        if not ids:
            raise ValueError("a prompt needs at least one token")
        n = len(ids)
        if start + n > self.settings.context:
            raise ValueError(f"context of {self.settings.context} tokens is full")
        try:
            return self._run(ids, start, progress, all_logits, block or self.settings.prompt_block, cancel)
        except BaseException:
            self._reset_after_failure()
            raise

    @torch.no_grad()
    def _run(self, ids: list[int], start: int, progress: ProgressFn | None, all_logits: bool,
             block: int, cancel: CancelToken | None = None) -> torch.Tensor:
        core, cfg, kern = self.core, self.cfg, self.kernels
        n, layers, topk = len(ids), cfg.num_hidden_layers, cfg.num_experts_per_tok
        t_wall = time.perf_counter()
        stats = PrefillStats(tokens=n, start=start)
        timer = GpuTimer(self.cuda, self.timed)
        self.experts.stats, self.experts.timer = stats, timer
        ring0 = (self.ring.pack_seconds, self.ring.event_wait_seconds) if self.ring is not None else (0.0, 0.0)
        blocks = [(b0, min(n, b0 + block)) for b0 in range(0, n, block)]
        stats.blocks = len(blocks)
        self.experts.begin(n, self.last.counts if self.last is not None else None)
        self.experts.stage_ahead(0)  # layer 0's copies overlap the embedding and its dense work
        x = self._embed(ids)
        positions = torch.arange(start, start + n, device=core.dev)
        routing = np.zeros((n, layers, topk), dtype=np.int16)
        counts = np.zeros((layers, cfg.num_local_experts), dtype=np.int64)
        t_all = torch.empty_like(x)
        e_ids = torch.empty((n, topk), dtype=torch.int64, device=core.dev)
        e_w = torch.empty((n, topk), dtype=torch.bfloat16, device=core.dev)
        for layer in range(layers):
            lw, kv = core.layers[layer], core.kv
            kc, vc, rows = kv.k[layer], kv.v[layer], kv.k[layer].shape[0]
            window = kv.window_of(layer)
            for b0, b1 in blocks:
                if cancel is not None:
                    cancel.check()  # between blocks: a stop lands within one block's dense work
                mark = timer.start()
                q, kb, vb = dense.qkv_rope(core, layer, x[b0:b1], positions[b0:b1])
                timer.stop("dense", mark)
                mark = timer.start()
                attn = torch.empty_like(q)
                kern.attention(q, kb, vb, kc, vc, lw.sinks, start + b0, window, attn)
                timer.stop("attention", mark)
                mark = timer.start()
                keep = max(b0, b1 - rows)  # a ring keeps only its last `rows` positions
                where = positions[keep:b1] % rows
                kc.index_copy_(0, where, kb[keep - b0 :])
                vc.index_copy_(0, where, vb[keep - b0 :])
                dense.oproj_residual(core, layer, x[b0:b1], attn)
                t_b, i_b, w_b = dense.route(core, layer, x[b0:b1])
                t_all[b0:b1], e_ids[b0:b1], e_w[b0:b1] = t_b, i_b, w_b
                timer.stop("dense", mark)
            if cancel is not None:
                cancel.check()
            contrib, ids_h = self.experts.run(layer, t_all, e_ids, e_w)
            routing[:, layer] = ids_h
            counts[layer] = np.bincount(ids_h.reshape(-1), minlength=cfg.num_local_experts)
            mark = timer.start()
            combine(x, contrib, topk, block)
            timer.stop("combine", mark)
            del contrib
            if progress is not None:
                progress(n * (layer + 1) // layers, n)
        mark = timer.start()
        last = dense.logits(core, x[-1:])[0]
        every = dense.logits(core, x).cpu() if all_logits else None
        timer.stop("tail", mark)
        logits = last.to("cpu", copy=True)  # synchronizes
        del x, t_all, e_ids, e_w
        stats.gpu = timer.resolve()
        if self.ring is not None:
            stats.pack = self.ring.pack_seconds - ring0[0]
            stats.pack_event_wait = self.ring.event_wait_seconds - ring0[1]
        self.split.observe_stage(stats.pack, stats.staged_experts - stats.direct_experts, core.layout.payload_bytes)
        stats.split = self.split.end_prompt()
        if self.cuda and self.release_cache:
            torch.cuda.empty_cache()  # give the prompt's workspace back before decode
        stats.wall = time.perf_counter() - t_wall
        self.last = PrefillResult(logits, routing, counts, stats, every)
        log.debug("prompt: %s", stats.summary())
        return logits

    # ---- this machine's rates --------------------------------------------------------------------
    def calibrate(self, tokens: int = 16, reps: int = 2) -> dict[str, float]:
        """Measure this machine's lanes and set the split's rates from them (calibrate.py)."""
        self.calibration = measure_rates(self, tokens, reps)
        return self.calibration

    def wait_direct(self, timeout: float) -> int:
        """Wait for the background registration (at load); returns the layers ready for direct copies."""
        if self.direct is None:
            return 0
        self.direct.wait(timeout)
        return self.direct.ready_layers

    # ---- lifecycle ----------------------------------------------------------------------------
    def _reset_after_failure(self) -> None:
        if self.cuda:
            try:
                torch.cuda.synchronize()
            except Exception:  # a faulted context: nothing more to save
                log.exception("synchronize after a failed prompt")
        if self.ring is not None:
            self.ring.close()
            self.ring = self._make_ring()
        self.experts.ring = self.ring
        self.experts.slot_free.clear()
        self.experts.ahead.reset()

    def close(self) -> None:
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        self.experts.close()
        if self.direct is not None:
            if self.cuda:
                torch.cuda.synchronize()  # no copy may still read a page being unlocked
            self.direct.close()
            self.direct = None
            self.experts.direct = None

"""One layer's MoE over a whole prompt: grouped by expert, split GPU slot / CPU / staged.

Per layer (all of the prompt's tokens at once, so a staged expert is copied once per layer
whatever the number of blocks):

1. sort the (token, k) pairs by expert id on the GPU; one routing sync brings ids and
   weights to the host (``stats.routing_sync``);
2. ``split.SplitModel`` picks the non-resident experts the CPU computes (the cheapest, until the
   CPU lane would outlast the staging lane) and ``grouping.plan_layer`` splits the experts:
   resident -> grouped GEMM from the slot; the CPU's -> the native multi-token kernel on a
   worker thread; the other non-resident ones -> the pinned staging ring (or, once the
   checkpoint's mapping is registered, straight from it: direct.py) -> a scratch slot -> GEMM
   (without a split model: the CPU takes groups of <= ``cpu_max`` pairs);
3. launch order: the staging producer starts packing at once, the CPU worker gets its rows,
   the resident waves go to the GPU, then each staged expert's copy (copy stream) and its
   wave (compute stream waits for that copy only);
4. the CPU results are scattered into the contributions buffer at the end of the layer.

Every (token, k) pair writes one bf16 row ``w * expert(t)`` into ``contrib[token * k + j]``;
``combine`` sums each token's k rows in routing order (fp32) and adds the bf16 sum to the
residual, as the decode path's combine kernel does.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from .cpu_groups import CpuGroups
from .direct import MappedExperts, plan_copies, run_copies
from .grouping import LayerPlan, plan_layer
from .launch import PrefillKernels
from .lookahead import Lookahead, choose_ahead, with_ahead
from .split import SplitModel
from .staging import StagingRing
from .stats import GpuTimer, PrefillStats


class PromptExperts:
    def __init__(self, core: Any, kernels: PrefillKernels, cpu: CpuGroups, ring: StagingRing | None,
                 cpu_max: int, max_rows: int, stats: PrefillStats, timer: GpuTimer, staged_group: int = 1,
                 split: SplitModel | None = None, direct: MappedExperts | None = None) -> None:
        self.core = core
        self.direct = direct  # registered checkpoint mapping: ready layers skip the ring
        self.cfg = core.cfg
        self.k = kernels
        self.cpu = cpu
        self.ring = ring
        self.cpu_max = cpu_max
        self.max_rows = max(max_rows, kernels.t.gemm_m)
        self.staged_group = staged_group
        self.split = split
        self.stats = stats
        self.timer = timer
        self.cuda = bool(core.cuda)
        self.dev = core.dev
        # the plan's last n_ahead scratch slots take the next layer's experts (lookahead.py); the
        # others hold the waves' staged experts
        n_ahead = max(0, min(core.plan.n_ahead, core.plan.n_scratch - 1)) if ring is not None else 0
        self.n_scratch = core.plan.n_scratch - n_ahead if ring is not None else 0
        first = core.plan.n_slots + self.n_scratch
        self.ahead = Lookahead(list(range(first, first + n_ahead)) if self.cuda else [])
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="neural-prompt-cpu")
        self.copy_stream = torch.cuda.Stream(self.dev) if self.cuda else None
        self.slot_free: dict[int, Any] = {}  # scratch slot -> event after the last GEMM that read it
        self.last_plan: LayerPlan | None = None

    # ---- routing -----------------------------------------------------------------------------
    def _routing_to_host(self, ids: torch.Tensor, w: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        t0 = time.perf_counter()
        if self.cuda:
            ids_h = torch.empty(ids.shape, dtype=torch.int32, pin_memory=True)
            w_h = torch.empty(w.shape, dtype=torch.float32, pin_memory=True)
            ids_h.copy_(ids.to(torch.int32), non_blocking=True)
            w_h.copy_(w.float(), non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
            ev.synchronize()
        else:
            ids_h, w_h = ids.to(torch.int32), w.float()
        self.stats.routing_sync += time.perf_counter() - t0
        return ids_h.numpy(), w_h.numpy()

    # ---- CPU groups --------------------------------------------------------------------------
    def _cpu_job(self, layer: int, experts: list[int], counts: np.ndarray, x: torch.Tensor, w: np.ndarray,
                 ready: Any) -> np.ndarray:
        t0 = time.perf_counter()
        if ready is not None:
            ready.synchronize()
        xs = x.numpy()
        out = np.empty_like(xs)
        t1 = time.perf_counter()
        self.cpu.compute_groups(layer, experts, counts[experts], xs, w, out)
        done = time.perf_counter()
        if self.split is not None:
            self.split.observe_cpu(done - t1, counts[experts], self.core.layout.payload_bytes)
        self.stats.cpu_jobs += done - t0
        return out

    def _start_cpu(self, layer: int, plan: LayerPlan, flat_ids: np.ndarray, w_flat: np.ndarray,
                   t: torch.Tensor) -> tuple[Future[np.ndarray], np.ndarray] | None:
        if not plan.cpu:
            return None
        topk = self.cfg.num_experts_per_tok
        cpu_flat = np.concatenate([np.flatnonzero(flat_ids == e) for e in plan.cpu])
        tok = torch.from_numpy(cpu_flat // topk).to(self.dev)
        rows = t.index_select(0, tok).float()
        ready = None
        if self.cuda:
            x = torch.empty(rows.shape, dtype=torch.float32, pin_memory=True)
            x.copy_(rows, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record()
        else:
            x = rows.contiguous()
        w = np.ascontiguousarray(w_flat[cpu_flat], dtype=np.float32)
        fut = self.worker.submit(self._cpu_job, layer, list(plan.cpu), plan.counts, x, w, ready)
        self.stats.cpu_experts += len(plan.cpu)
        self.stats.cpu_rows += len(cpu_flat)
        return fut, cpu_flat

    def _finish_cpu(self, job: tuple[Future[np.ndarray], np.ndarray] | None, contrib: torch.Tensor) -> None:
        if job is None:
            return
        fut, cpu_flat = job
        t0 = time.perf_counter()
        out = fut.result()
        self.stats.cpu_wait += time.perf_counter() - t0
        src = torch.from_numpy(out)
        if self.cuda:
            src = src.pin_memory()
        contrib.index_copy_(0, torch.from_numpy(cpu_flat).to(self.dev, non_blocking=self.cuda),
                            src.to(self.dev, non_blocking=self.cuda).to(torch.bfloat16))

    # ---- GPU waves ---------------------------------------------------------------------------
    def _launch_wave(self, plan: LayerPlan, i: int, tiles: torch.Tensor, t: torch.Tensor, order: torch.Tensor,
                     w_flat: torch.Tensor, act: torch.Tensor, contrib: torch.Tensor) -> None:
        wave = plan.waves[i]
        begin = self.timer.start()
        self.k.experts(self.core.pool, t, order, w_flat, tiles, wave.tile0, wave.n_tiles, act, contrib)
        self.timer.stop("gemm", begin)
        self.stats.gemm_rows += wave.rows
        self.stats.gemm_waves += 1

    def _stage_direct(self, layer: int, experts: list[int], slots: list[int]) -> None:
        """Copy a wave's experts from the registered mapping into their scratch slots on the copy
        stream (one 2-D copy per part and run of consecutive experts: direct.plan_copies), then
        make the compute stream wait for them: one stream switch, one timer and one event per
        wave, since the host's launch work, not the bytes, bounds direct staging."""
        # each slot's last GEMM must have read it; one wait per distinct event, in slot order
        waits = {id(ev): ev for ev in (self.slot_free.get(slot) for slot in slots) if ev is not None}
        done = self._copy_direct(layer, experts, slots, list(waits.values()), "copies")
        torch.cuda.current_stream(self.dev).wait_event(done)

    def _copy_direct(self, layer: int, experts: list[int], slots: list[int], waits: list[Any], name: str) -> Any:
        """Queue ``experts``' copies from the registered mapping into ``slots`` on the copy stream,
        after ``waits``, timed as ``name``; returns the event after them."""
        assert self.direct is not None and self.copy_stream is not None
        with torch.cuda.stream(self.copy_stream):
            for ev in waits:
                self.copy_stream.wait_event(ev)
            begin = self.timer.start(self.copy_stream)
            run_copies(self.direct, self.core.pool,
                       plan_copies(self.direct, layer, experts, slots, self.core.plan.slot_bytes))
            self.timer.stop(name, begin, self.copy_stream)
            done = torch.cuda.Event()
            done.record(self.copy_stream)
        n = len(experts)
        self.stats.direct_experts += n
        self.stats.staged_experts += n
        self.stats.staged_bytes += n * self.core.layout.payload_bytes
        return done

    def _stage_in(self, layer: int, i: int, e: int, slot: int) -> None:
        """Take expert ``e``'s packed buffer from the ring and copy it into scratch ``slot``; the
        compute stream will wait for exactly this copy."""
        assert self.ring is not None
        t0 = time.perf_counter()
        got_layer, got_e, buf = self.ring.take()
        self.stats.stage_wait += time.perf_counter() - t0
        if (got_layer, got_e) != (layer, e):
            raise RuntimeError(f"staging ring out of order: expected layer {layer} expert {e}, got {got_layer} {got_e}")
        dst = self.core.slot_view(slot)
        src = self.ring.buffers[buf]
        if self.copy_stream is None:
            begin = self.timer.start()
            dst.copy_(src)
            self.timer.stop("copies", begin)
            self.ring.give_back(buf, None)
        else:
            with torch.cuda.stream(self.copy_stream):
                prev = self.slot_free.get(slot)
                if prev is not None:  # the slot's previous expert has been read by its GEMM
                    self.copy_stream.wait_event(prev)
                begin = self.timer.start(self.copy_stream)
                dst.copy_(src, non_blocking=True)
                self.timer.stop("copies", begin, self.copy_stream)
                done = torch.cuda.Event()
                done.record(self.copy_stream)
            torch.cuda.current_stream(self.dev).wait_event(done)
            self.ring.give_back(buf, done)
        self.stats.staged_experts += 1
        self.stats.staged_bytes += self.core.layout.payload_bytes

    # ---- the next layer's experts, ahead of its routing (lookahead.py) ----------------------------
    def begin(self, tokens: int, history: np.ndarray | None) -> None:
        """A prompt of ``tokens`` starts; ``history``: the previous prompt's pairs [layers, experts]."""
        self.ahead.begin(tokens, self.cfg.num_experts_per_tok, self.cfg.num_local_experts, history)

    def stage_ahead(self, layer: int) -> None:
        """Queue copies of some of ``layer``'s non-resident experts into the lookahead slots, on the
        copy stream after everything queued there (the current layer's copies), once the GEMMs
        that read the slots' previous experts are done."""
        la = self.ahead
        if (not la.active or self.direct is None or self.copy_stream is None or layer >= self.cfg.num_hidden_layers
                or not self.direct.ready(layer)):
            return
        chosen = choose_ahead(self.core.np_table[layer], la.slots, la.history_row(layer))
        if not chosen:
            return
        waits = [la.read] if la.read is not None else []  # the GEMMs that read the slots' last experts
        la.copied = self._copy_direct(layer, list(chosen), list(chosen.values()), waits, "copies_ahead")
        la.layer, la.experts = layer, chosen
        self.stats.ahead_experts += len(chosen)

    # ---- one layer ---------------------------------------------------------------------------
    def run(self, layer: int, t: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        """t [N, H] bf16 (normalized hidden), ids [N, k], w [N, k] bf16 routing.
        Returns (contrib [N * k, H] bf16, the routing ids on the host [N, k])."""
        cfg = self.cfg
        n, topk = ids.shape
        flat = ids.reshape(-1)
        order = torch.sort(flat, stable=True).indices.to(torch.int32)
        ids_h, w_h = self._routing_to_host(ids, w)
        flat_h, w_flat_h = ids_h.reshape(-1), w_h.reshape(-1)
        t0 = time.perf_counter()
        waited0 = self.stats.stage_wait
        counts = np.bincount(flat_h, minlength=cfg.num_local_experts)
        ahead = self.ahead.take(layer)  # staged during the previous layer: read like resident experts
        table_row = with_ahead(self.core.np_table[layer], ahead)
        used_ahead = sum(1 for e in ahead if counts[e] > 0)
        self.stats.ahead_used += used_ahead
        cpu_set = None
        direct = self.cuda and self.direct is not None and self.n_scratch > 0 and self.direct.ready(layer)
        if self.split is not None:
            nonres = {int(e): int(counts[e]) for e in np.flatnonzero(counts) if table_row[e] < 0}
            cpu_set = self.split.choose(nonres, self.core.layout.payload_bytes, can_stage=self.n_scratch > 0,
                                        direct=direct)
        # direct copies come fast enough that launches, not bytes, bound a wave of one expert: half
        # the scratch slots per wave (one half computes while the other fills) cuts the launches
        group = max(self.staged_group, self.n_scratch // 2) if direct else self.staged_group
        plan = plan_layer(counts, table_row, self.core.plan.n_slots, self.n_scratch, self.cpu_max,
                          self.k.t.gemm_m, self.max_rows, group, cpu_set)
        self.last_plan = plan
        if plan.staged and not direct:
            assert self.ring is not None
            self.ring.submit(layer, plan.staged)
        cpu_job = self._start_cpu(layer, plan, flat_h, w_flat_h, t)
        self.stats.resident_experts += len(plan.resident) - used_ahead
        contrib = torch.empty((n * topk, cfg.hidden_size), dtype=torch.bfloat16, device=self.dev)
        if plan.waves:
            tiles = torch.from_numpy(plan.tiles).to(self.dev)
            w_flat = w.reshape(-1).contiguous()
            act = torch.empty((min(self.max_rows, n * topk), cfg.intermediate_size), dtype=torch.bfloat16,
                              device=self.dev)
            staged_in = 0
            if ahead and self.ahead.copied is not None:
                torch.cuda.current_stream(self.dev).wait_event(self.ahead.copied)
            for i, wave in enumerate(plan.waves):
                if direct and staged_in <= wave.needs:  # the wave's experts, straight from the mapping
                    self._stage_direct(layer, plan.staged[staged_in : wave.needs + 1],
                                       plan.staged_slots[staged_in : wave.needs + 1])
                    staged_in = wave.needs + 1
                while staged_in <= wave.needs:  # bring in the staged experts this wave reads
                    self._stage_in(layer, staged_in, plan.staged[staged_in], plan.staged_slots[staged_in])
                    staged_in += 1
                self._launch_wave(plan, i, tiles, t, order, w_flat, act, contrib)
                if ahead and wave.needs < 0 and (i + 1 == len(plan.waves) or plan.waves[i + 1].needs >= 0):
                    self.ahead.read = torch.cuda.Event()  # the slot-table waves come first and read the slots
                    self.ahead.read.record()
                if wave.frees and self.cuda:
                    ev = torch.cuda.Event()
                    ev.record()
                    for j in wave.frees:
                        self.slot_free[plan.staged_slots[j]] = ev
        self.stage_ahead(layer + 1)  # the copy engine would idle from here to the next layer's routing
        self.stats.launch += time.perf_counter() - t0 - (self.stats.stage_wait - waited0)
        self._finish_cpu(cpu_job, contrib)
        return contrib, ids_h

    def close(self) -> None:
        self.worker.shutdown(wait=True)


def combine(x: torch.Tensor, contrib: torch.Tensor, topk: int, chunk: int) -> None:
    """x[t] = bf16(x[t] + bf16(sum_j contrib[t * k + j])) in place, summing j in routing order (fp32)."""
    n, h = x.shape
    c = contrib.view(n, topk, h)
    for r0 in range(0, n, chunk):
        r1 = min(n, r0 + chunk)
        acc = c[r0:r1, 0].float()
        for j in range(1, topk):
            acc += c[r0:r1, j].float()
        x[r0:r1] = (x[r0:r1].float() + acc.to(torch.bfloat16).float()).to(torch.bfloat16)

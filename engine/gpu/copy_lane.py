"""A decode layer's misses split between the CPU kernel and the GPU: the copy lane.

The CPU computes a layer's non-resident experts from RAM while the GPU idles. The lane takes some of them: each is
copied from the checkpoint's page-locked mapping (prefill/direct.py) into a scratch slot on a copy stream, and the
resident-expert kernels compute it there, into a pinned buffer the host adds to the CPU's result before it raises
the layer's flag. Both read the same DRAM, so it pays only where the CPU kernel alone leaves DRAM bandwidth unused:
on the H200 host (16 cores, 8 threads) the kernel read 42.7 GB/s alone and 39.9 beside copies that ran at 45.8 GB/s
(bench.kernel.dma_share, MEASURED); the server design measured the opposite on a DDR4 PC, where the kernel alone
fills DRAM (-11%). :meth:`CopyLane.worth_it` repeats that measurement at load.

The host queues a layer's lane work in one native call where the kernel is loaded (native/neural_lane.c: routing
rows, the copies through cudaMemcpy2DAsync's address, the graph through cudaGraphLaunch's; settings.decode_lane_native).
Per layer, :meth:`split` gives the lane the m of the k misses that minimise max(CPU on k - m, lane on m) at the
rates measured so far (lane_split.py: how they are learned, and the probes that keep the lane's current).
Scratch slots hold the prompt path's staged experts only while a prompt runs, so decode borrows them. The lane is
Linux and CUDA only: it needs the registered mapping and a copy stream.

With ``split_units`` one more miss may be split by its gate_up units (lane_split.best_units): the CPU computes units
[0, f) and the down bias (native neural_expert.units), the lane the rest, from a split slot per parity whose first f
units (codes, scales, gate_up bias) and down bias are zero, so the unchanged expert kernels add exactly nothing for
them. Whole experts alone leave one side idle: 4 misses at 0.30 (CPU) and 0.35 ms (lane) an expert take 0.70 ms as
2 + 2 and 0.69 balanced, the CPU's part of the split expert costing 0.12 of an expert more (CALCULATED).

With the lane on, layers are launched the plain way, after the CPU's result (Decoder.step): beside an early-launched
graph, whose first kernel polls the host's flag over PCIe, the lane's copies ran at half speed (0.59 against 0.30
ms an expert) and its kernels took 0.40 against 0.06 ms a layer (bench.gpu.lane_check, H200 machine, MEASURED).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import torch

from ..plan import SLOT_PARTS
from . import cudart
from .kernels.pull import pull_rows
from .lane_split import PAYS, SplitRates, lane_gain
from .lane_units import SplitSlots
from .prefill.direct import MappedExperts, plan_copies, run_copies

log = logging.getLogger(__name__)
TIME_EVERY = 4  # lane uses timed by GPU events (three records and two reads); the rest wait on a stream query
MAX_PITCH = (1 << 31) - 1  # cudaMemcpy2D's largest pitch (cudaDeviceProp.memPitch on current GPUs)
WIDTH = 2  # the most misses of one layer the lane takes; it holds 2 x WIDTH scratch slots (one set per parity)


class CopyLane:
    def __init__(self, core: Any, direct: MappedExperts, width: int = WIDTH, cpu_fixed_ms: float = 0.05,
                 split_units: bool = False, native: Any = None, pull: bool = False, batch: bool = False) -> None:
        plan = core.plan
        need = 2 * width + (2 if split_units else 0)
        if plan.n_scratch < need:
            raise ValueError(f"the copy lane needs {need} scratch slots, the plan has {plan.n_scratch}")
        self.core = core
        self.direct = direct
        self.width = width
        self.cuda = bool(core.cuda)
        cfg = core.cfg
        bt, k = core.kern.block_t, cfg.num_experts_per_tok
        # per parity (layer % 2): the slots, the routing the kernels read (ids | weight bits | slots, -1 = none)
        # and the output, both pinned so the host writes and reads them without copies
        self.slots = [[plan.n_slots + p * width + j for j in range(width)] for p in (0, 1)]
        self.split_units = split_units
        self.inter = cfg.intermediate_size
        self.split_slots = SplitSlots(core, direct, [plan.n_slots + 2 * width + p for p in (0, 1)])
        self.split_share = 0.0  # experts' worth of units sent down the lane as parts of split experts
        self.route = [torch.full((3 * bt,), -1, dtype=torch.int32, pin_memory=self.cuda) for _ in (0, 1)]
        self.out = [torch.zeros(cfg.hidden_size, dtype=torch.float32, pin_memory=self.cuda) for _ in (0, 1)]
        self.np_route = [r.numpy() for r in self.route]
        self.np_out = [o.numpy() for o in self.out]
        half = cfg.intermediate_size // 2
        self.act = [(torch.zeros(k, half, dtype=torch.float32, device=core.dev),
                     torch.zeros(k, half, dtype=torch.float32, device=core.dev)) for _ in (0, 1)]
        self.stream = torch.cuda.Stream(core.dev) if self.cuda else None
        self.graphs: list[Any] = []
        self._execs: list[int] = []  # the graphs' cudaGraphExec_t, launched without replay()'s prologue
        self._rt = cudart.runtime() if self.cuda else None
        # per layer, once its shards are registered: (address of expert 0's bytes, bytes per expert, offset in a
        # slot) of each part, so a copy is one runtime call with no planning (the host issues them on the
        # critical path, before the CPU's share starts)
        self._parts: dict[int, list[tuple[int, int, int]]] = {}
        # the same, as the int64 [parts, 3] array that native/neural_lane.c reads; with a native kernel (``native``,
        # a NativeKernel) and the runtime's function addresses, a layer's routing rows, copies and launch are one
        # call (lane_issue), not ~76 us of Python a layer on caches the CPU experts have just flushed
        self._parts_np: dict[int, np.ndarray] = {}
        self._slots_np = [np.asarray(s, dtype=np.int32) for s in self.slots]
        self.native = native if native is not None and hasattr(native, "lane_issue") else None
        # with ``batch`` (decode_lane_batch) the native queueing issues a layer's copies as one cudaMemcpyBatchAsync
        # where the runtime has it (CUDA 12.8+), else as before; the same bytes into the same slots either way
        self.batch = batch
        if batch and (self.native is None or not self.copy_function(0)[1]):
            log.info("decode lane batch off: %s", "the lane is queued from Python (decode_lane_native off)"
                     if self.native is None else f"no cudaMemcpyBatchAsync in this CUDA runtime "
                     f"({getattr(self._rt, 'version', 0)}; it came in 12.8)")
        # with ``pull``, the lane's graph copies the experts itself (kernels/pull.py) from a table of rows the host
        # writes per layer (source device address, destination offset, words): one graph launch a layer, no copies
        why = "split experts copy their parts with the runtime" if split_units else self._pull_unavailable()
        if pull and why:
            log.info("decode lane pull off: %s", why)
        self.pull = pull and not why
        rows = width * len(SLOT_PARTS)
        self.pull_tab = [torch.zeros((rows, 3), dtype=torch.int64, pin_memory=self.cuda) for _ in (0, 1)] \
            if self.pull else []
        self.np_tab = [t.numpy() for t in self.pull_tab]
        self._pull_parts: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._events: list[tuple[Any, Any, Any] | None] = [None, None]
        self._spare = [tuple(torch.cuda.Event(enable_timing=True) for _ in range(3)) for _ in (0, 1)] \
            if self.cuda else []
        # per expert: set by worth_it(), then learned from every layer (lane_split.py)
        self.rates = SplitRates(cpu_fixed_ms=cpu_fixed_ms)
        self.not_ready = 0  # layers whose misses stayed on the CPU because their shards were not registered yet
        self.all_kept = 0  # layers whose every miss was being captured for admission (the CPU writes those out)
        self.experts = 0  # sent down the lane since load
        self.uses = 0  # layers that used the lane
        self.timed = 0.0  # experts (a split one's part by its units) of the timed uses: copy_ms, kernel_ms over it
        self.copy_ms = 0.0  # GPU-timed since load: the copies, then the kernels, of the timed uses
        self.kernel_ms = 0.0

    # ---- the GPU part -----------------------------------------------------------------------
    def _pull_unavailable(self) -> str:
        """Why the pull kernel cannot copy this checkpoint's parts (it moves aligned 8-byte words), or ''."""
        if self.core.pool.numel() % 8 or self.core.plan.slot_bytes % 8:
            return "the slot pool is not a whole number of 8-byte words"
        if any(o % 8 for o in self.direct.layout.offsets.values()):
            return "a slot part is not 8-byte aligned"
        for row in self.direct.spans:
            for _, start, size in row.values():
                if start % 8 or size % 8:
                    return "an expert part in the checkpoint is not 8-byte aligned"
        return ""

    def _pull_layer(self, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per slot part: the device address of expert 0's bytes, bytes per expert, offset in a slot."""
        got = self._pull_parts.get(layer)
        if got is None:
            dev = getattr(self._rt, "device_pointer", None) if self.stream is not None else None
            parts = self._layer_parts(layer)
            src = [dev(a) if dev is not None else a for a, _, _ in parts]  # the host's address under UVA
            got = (np.asarray(src, dtype=np.int64), np.asarray([n for _, n, _ in parts], dtype=np.int64),
                   np.asarray([o for _, _, o in parts], dtype=np.int64))
            self._pull_parts[layer] = got
        return got

    def _fill_pull(self, p: int, layer: int, experts: Sequence[int], slots: Sequence[int]) -> None:
        """The pull table's rows for ``experts`` into ``slots`` (the rest: no words)."""
        src, size, off = self._pull_layer(layer)
        n = len(size)
        t = self.np_tab[p]
        sb = self.core.plan.slot_bytes
        for j, (e, s) in enumerate(zip(experts, slots, strict=False)):
            t[j * n : (j + 1) * n, 0] = src + e * size
            t[j * n : (j + 1) * n, 1] = s * sb + off
            t[j * n : (j + 1) * n, 2] = size // 8
        t[len(experts) * n :, 2] = 0

    def _kernels(self, p: int) -> None:
        c = self.core
        ae, ao = self.act[p]
        if self.pull:  # the copies first, in the same stream (and graph) as the expert kernels
            pull_rows(self.pull_tab[p], c.pool.view(torch.int64), *((264, 2048, 8) if self.cuda else (2, 64, 1)))
        c.kern.experts(c.pool, self.route[p], c.t_even, c.t_odd, ae, ao, self.out[p])

    def capture(self) -> None:
        """Compile the kernels on the lane's buffers, then capture one graph per parity (CUDA)."""
        if not self.cuda:
            return
        assert self.stream is not None
        with torch.cuda.stream(self.stream):
            for p in (0, 1):
                self._kernels(p)
        self.stream.synchronize()
        self.graphs = []
        for p in (0, 1):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=self.stream):
                self._kernels(p)
            self.graphs.append(g)
        torch.cuda.synchronize()
        try:
            self._execs = [int(g.raw_cuda_graph_exec()) for g in self.graphs]
        except (AttributeError, RuntimeError):  # PyTorch < 2.6: replay()
            self._execs = []
        if self._rt is None or not self._rt.can_launch_graphs or not all(self._execs):
            self._execs = []

    def _layer_parts(self, layer: int) -> list[tuple[int, int, int]]:
        got = self._parts.get(layer)
        if got is None:
            row, offs = self.direct.spans[layer], self.direct.layout.offsets
            got = [(self.direct.address(row[part][0]) + row[part][1], row[part][2], offs[part]) for part in SLOT_PARTS]
            self._parts[layer] = got
        return got

    def parts_array(self, layer: int) -> np.ndarray:
        """:meth:`_layer_parts` as the int64 [parts, 3] array native/neural_lane.c reads (built once a layer)."""
        parts = self._parts_np.get(layer)
        if parts is None:
            parts = self._parts_np[layer] = np.asarray(self._layer_parts(layer), dtype=np.int64)
        return parts

    def _queue_copies(self, layer: int, experts: Sequence[int], slots: Sequence[int]) -> None:
        """Queue the copies of ``experts`` of ``layer`` into ``slots`` on the lane's stream (at once without CUDA):
        runtime calls where the runtime library is found, else the prompt path's planned copies. Two experts bound
        for adjacent slots, the lower id first, go in one 2-D copy per part (two rows: the source pitch is the
        experts' distance, the destination's one slot), halving the calls the host issues on the critical path."""
        if self.pull:  # the graph's pull kernel copies them
            self._fill_pull(layer % 2, layer, experts, slots)
            return
        self._dma_copies(layer, experts, slots)

    def _dma_copies(self, layer: int, experts: Sequence[int], slots: Sequence[int]) -> None:
        """The copies on the lane's stream by the runtime (or the prompt path's planned tensor copies)."""
        sb = self.core.plan.slot_bytes
        if self._rt is None:
            with torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext():
                run_copies(self.direct, self.core.pool, plan_copies(self.direct, layer, list(experts), slots, sb))
            return
        raw = self.stream.cuda_stream if self.stream is not None else 0
        base, copy = self.core.pool.data_ptr(), self._rt.copy_2d
        parts = self._layer_parts(layer)
        i, m = 0, len(experts)
        while i < m:
            e, dst = experts[i], base + slots[i] * sb
            d = experts[i + 1] - e if i + 1 < m and slots[i + 1] == slots[i] + 1 else 0
            if d > 0 and all(d * size <= MAX_PITCH for _, size, _ in parts):
                for src, size, off in parts:
                    copy(dst + off, sb, src + e * size, d * size, size, 2, raw)
                i += 2
                continue
            for src, size, off in parts:
                copy(dst + off, sb, src + e * size, size, size, 1, raw)
            i += 1

    def start(self, layer: int, experts: Sequence[int], weights: Sequence[float],
              part: tuple[int, float, int] | None = None) -> None:
        """Copy ``experts`` of ``layer`` into the parity's slots and queue their GPU compute; ``part``: (expert,
        weight, units) of a split expert whose last ``units`` units the lane computes too. Every ``TIME_EVERY``-th
        use, and every probe, is timed by GPU events for the split's rates."""
        p = layer % 2
        if self.native is not None and part is None and not self.pull and hasattr(self._rt, "addresses"):
            self._start_native(layer, p, experts, weights)
            return
        order = sorted(range(len(experts)), key=experts.__getitem__)  # ascending ids pair their copies
        experts = [experts[j] for j in order]
        m = len(experts)
        slots = self.slots[p][:m]
        bt = self.core.kern.block_t
        r = self.np_route[p]
        r[2 * bt : 3 * bt] = -1
        r[:m] = experts
        r[bt : bt + m] = np.asarray([weights[j] for j in order], dtype=np.float32).view(np.int32)
        r[2 * bt : 2 * bt + m] = slots
        if part is not None:
            r[m] = part[0]
            r[bt + m] = np.float32(part[1]).view(np.int32)
            r[2 * bt + m] = self.split_slots.slots[p]
            self.split_share += part[2] / self.inter
        self.experts += m
        self.uses += 1
        if self.stream is None:  # interpreter / CPU tensors: everything at once
            self._queue_copies(layer, experts, slots)
            if part is not None:
                self.split_slots.queue(self._rt, None, layer, self._layer_parts, part, p)
            self._kernels(p)
            return
        stream = self.stream
        timed = self.uses % TIME_EVERY == 0 or self.rates.probed
        if timed:
            self._spare[p][0].record(stream)
        self._queue_copies(layer, experts, slots)
        if part is not None:
            self.split_slots.queue(self._rt, stream, layer, self._layer_parts, part, p)
        self._launch(p, stream, timed)

    def _launch(self, p: int, stream: Any, timed: bool) -> None:
        """The parity's graph on the lane's stream after its copies were queued; timed: between the spare events'
        copy mark and end mark (the caller recorded the start)."""
        t0, tc, t1 = self._spare[p]
        if timed:
            tc.record(stream)
        if self._rt is not None and self._execs:
            self._rt.graph_launch(self._execs[p], stream.cuda_stream)
        else:
            with torch.cuda.stream(stream):
                if self.graphs:
                    self.graphs[p].replay()
                else:
                    self._kernels(p)
        if timed:
            t1.record(stream)
            self._events[p] = (t0, tc, t1)

    def _start_native(self, layer: int, p: int, experts: Sequence[int], weights: Sequence[float]) -> None:
        """:meth:`start` for whole experts with the native kernel: the routing rows, the copies (paired as
        :meth:`_queue_copies` pairs them) and, untimed, the graph launch in one call (native/neural_lane.c)."""
        m = len(experts)
        self.experts += m
        self.uses += 1
        stream = self.stream
        timed = stream is not None and (self.uses % TIME_EVERY == 0 or self.rates.probed)
        exe = self._execs[p] if stream is not None and self._execs and not timed else 0
        if timed:
            self._spare[p][0].record(stream)
        self._issue(layer, p, experts, weights, exe, self.batch)
        if exe:
            return
        if stream is None:  # interpreter / CPU tensors: the kernels at once
            self._kernels(p)
            return
        self._launch(p, stream, timed)

    def _issue(self, layer: int, p: int, experts: Sequence[int], weights: Sequence[float], exe: int,
               batch: bool) -> None:
        """neural_lane_issue for ``experts`` of ``layer`` into parity ``p``'s slots on the lane's stream, copying with
        cudaMemcpyBatchAsync where ``batch`` and the runtime allow (:meth:`copy_function`), launching ``exe`` unless
        it is 0."""
        copy, launch = self._rt.addresses  # type: ignore[union-attr]  # the callers checked
        copy, abi = self.copy_function(copy) if batch else (copy, 0)
        raw = self.stream.cuda_stream if self.stream is not None else 0
        self.native.lane_issue(copy, launch, raw, exe,  # type: ignore[union-attr]  # the callers checked
                               self.core.pool.data_ptr(), self.core.plan.slot_bytes, MAX_PITCH,
                               self.parts_array(layer), self._slots_np[p], self.np_route[p], experts, weights, abi)

    def copy_function(self, copy2d: int) -> tuple[int, int]:
        """(address, copy_abi) of what the native queueing copies with: cudaMemcpyBatchAsync and its signature (12 or
        13) with ``batch`` where the runtime has it, else ``copy2d`` (cudaMemcpy2DAsync) and 0."""
        if self.batch and self._rt is not None:
            fn, abi = getattr(self._rt, "batch_copy", (0, 0))  # a test's runtime may have none
            if fn and abi:
                return fn, abi
        return copy2d, 0

    def observe_timed(self, events: Sequence[Any], m: float) -> None:
        """A timed use's completed events (start, copies done, end) for ``m`` experts' worth: the GPU-timed totals
        and the split's lane rate."""
        copy, kern = events[0].elapsed_time(events[1]), events[1].elapsed_time(events[2])
        self.copy_ms += copy
        self.kernel_ms += kern
        self.timed += m
        self.rates.observe_lane(m, copy + kern)

    def finish(self, layer: int, m: float, out: np.ndarray) -> None:
        """Wait for the layer's lane work (``m`` experts' worth, a split expert's part counted by its units) and
        add its result to the CPU's ``out``."""
        p = layer % 2
        ev = self._events[p]
        if ev is not None:
            while not ev[2].query():
                pass
            self.observe_timed(ev, m)
            self._events[p] = None
        elif self.stream is not None:
            while not self.stream.query():  # the stream holds only this layer's lane work
                pass
        out += self.np_out[p]

    # ---- the split ----------------------------------------------------------------------------
    def observe_cpu(self, experts: float, seconds: float) -> None:
        self.rates.observe_cpu(experts, seconds)

    def split(self, layer: int, experts: list[int], weights: list[float], keep: Collection[int] = ()
              ) -> tuple[list[int], list[float], list[int], list[float], tuple[int, float, int] | None]:
        """(CPU experts, weights, lane experts, weights, part). ``keep``: experts the CPU must compute (captures).
        ``part``: None, or (expert, weight, units) of a CPU expert whose last ``units`` units the lane computes
        (``split_units``); the CPU then computes only its first inter - units."""
        free = [i for i, e in enumerate(experts) if e not in keep]
        if not free:
            self.all_kept += 1
            return experts, weights, [], [], None
        if not self.direct.ready(layer):
            self.not_ready += 1
            return experts, weights, [], [], None
        units = 0
        if self.split_units:
            best, units = self.rates.choose_units(len(experts), self.width, len(free), self.inter)
        else:
            best = self.rates.choose(len(experts), min(self.width, len(free)))
        if best == 0 and not units:
            return experts, weights, [], [], None
        lane = set(free[len(free) - best:]) if best else set()  # the last misses: these keep the CPU's order stable
        cpu_e = [e for i, e in enumerate(experts) if i not in lane]
        cpu_w = [w for i, w in enumerate(weights) if i not in lane]
        part = None
        if units:  # the last free miss the lane does not take whole
            i = free[len(free) - best - 1]
            part = (experts[i], weights[i], units)
        return cpu_e, cpu_w, [experts[i] for i in sorted(lane)], [weights[i] for i in sorted(lane)], part

    def report(self) -> dict[str, Any]:
        """What the lane did since load: the split's rates and choices, the GPU-timed work (bench reports)."""
        return {**self.rates.report(), "experts": self.experts, "split_share": round(self.split_share, 2),
                "layers_not_registered": self.not_ready,
                "layers_all_captured": self.all_kept,
                "uses": self.uses, "timed_experts": round(self.timed, 2), "pull": self.pull,
                "native_queueing": self.native is not None and not self.pull,
                "gpu_copy_ms_per_expert": round(self.copy_ms / self.timed, 4) if self.timed else None,
                "gpu_kernel_ms_per_expert": round(self.kernel_ms / self.timed, 4) if self.timed else None}

    def after_prompt(self) -> None:
        """Order the lane after the prompt's work on the compute stream (its GEMMs read the scratch slots). Called
        before any decode graph is queued: later, waiting on the compute stream would wait on early-launched
        graphs that wait for this lane."""
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.core.dev))
        self.split_slots.forget()  # the prompt staged experts in the split slots

    # ---- at load ----------------------------------------------------------------------------
    def verify_batch(self) -> str:
        """With ``batch``: layer 0's first two experts copied into the parity-0 slots by the 2-D copies and again by
        cudaMemcpyBatchAsync, the bytes compared. Where the batch fails or lands other bytes, the lane goes back to
        the 2-D copies (``batch`` off, a warning) and the reason is returned; "" where it holds or does not apply."""
        if not self.batch or self.native is None or not self.direct.ready(0) or not self.copy_function(0)[1]:
            return ""
        from native.kernel import KernelError

        ids = list(range(min(2, self.width, self.core.cfg.num_local_experts)))
        sb = self.core.plan.slot_bytes
        region = self.core.pool.view(-1).narrow(0, int(self._slots_np[0][0]) * sb, len(ids) * sb)

        def copied(batch: bool) -> None:
            self._issue(0, 0, ids, [0.5] * len(ids), 0, batch)
            if self.stream is not None:
                self.stream.synchronize()

        why = ""
        try:
            copied(False)
            want = region.clone()
            region.zero_()
            copied(True)
            if not torch.equal(region, want):
                why = "it landed other bytes than the 2-D copies"
        except KernelError as exc:
            why = str(exc)
        if why:
            self.batch = False
            log.warning("decode lane batch off: %s; the lane copies with cudaMemcpy2DAsync", why)
        return why

    def worth_it(self, misses: Any, seconds: float = 0.12, seed: int = 0) -> tuple[bool, dict[str, float]]:
        """Measure, on layer 0's experts, the CPU kernel alone and beside the lane's own copies running back to back
        (as bench.kernel.dma_share does); the lane pays where the two together compute 15% more experts a
        millisecond than the kernel alone. Sets the starting rates of :meth:`split`."""
        if not self.cuda or not self.direct.ready(0):
            return False, {}
        assert self.stream is not None
        stream = self.stream
        cfg = self.core.cfg
        rng = random.Random(seed)
        x = np.random.default_rng(seed).standard_normal(cfg.hidden_size).astype(np.float32)
        out = np.zeros(cfg.hidden_size, dtype=np.float32)
        n_e = cfg.num_local_experts

        def cpu_for(s: float) -> float:  # ms per expert, two a call as a decode layer's misses, fixed cost included
            calls, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < s or calls < 3:
                misses.compute(0, x, rng.sample(range(n_e), 2), [0.5, 0.5], out, {})
                calls += 1
            return (time.perf_counter() - t0) * 1e3 / calls / 2

        def copies(stop: threading.Event, sent: list[float]) -> None:  # one expert at a time, each waited for
            copy_rng = random.Random(seed + 1)
            n, t0 = 0, time.perf_counter()
            while not stop.is_set() or n < 3:
                self._dma_copies(0, [copy_rng.randrange(n_e)], self.slots[0][:1])  # the DMA's rate: pull's ~0.9x
                stream.synchronize()
                n += 1
            sent.append((time.perf_counter() - t0) * 1e3 / n)

        def beside_copies() -> tuple[float, float]:  # (CPU ms per expert, copy ms per expert), together
            stop, sent = threading.Event(), list[float]()
            th = threading.Thread(target=copies, args=(stop, sent), name="neural-lane-check", daemon=True)
            th.start()
            cpu = cpu_for(seconds)
            stop.set()
            th.join()
            if not sent:
                raise RuntimeError("the lane check's copies failed")
            return cpu, sent[0]

        cpu_for(0.1)  # the team warm, and layer 0's expert pages mapped (first-touch faults would slow "alone")
        for e in range(3):  # the copy path warm (first touches of the registered pages)
            self._dma_copies(0, [e], self.slots[0][:1])
        stream.synchronize()
        # alone, beside, beside, alone: drifting load hits both; means
        a1 = cpu_for(seconds)
        b1, c1 = beside_copies()
        b2, c2 = beside_copies()
        a2 = cpu_for(seconds)
        alone, beside, per_copy = (a1 + a2) / 2, (b1 + b2) / 2, (c1 + c2) / 2
        gain = lane_gain(alone, beside, per_copy)
        self.rates.reset(beside, per_copy)
        return gain >= PAYS, {"cpu_ms_alone": round(alone, 4), "cpu_ms_beside": round(beside, 4),
                              "copy_ms": round(per_copy, 4), "gain": round(gain, 3)}


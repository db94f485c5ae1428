"""A decode layer's host work, from its routing flag to the next graph's launch, in one native call.

With the copy lane on, the host's part of a layer sat between the router and the next launch: read the routing, split
the misses between the CPU and the lane (lane_split.py), queue the lane (copy_lane.py), compute the CPU's misses, wait
for the lane and add its result, launch. Run as Python it ran on caches the CPU experts had just streamed through:
~1.3-2 ms a token at 18 layers in ``lane_start`` alone on the H200 host (session 25), where the same code warm takes
a few microseconds a layer (bench/kernel/cold_python.py: 13-20x). ``native/neural_lane.c::neural_lane_layer`` does it
all in C with the split's arithmetic and tie rule; this module fills its per-layer job and, after the call (the next
layer's graph already queued), does the bookkeeping the GPU does not wait for: the split's learning and probes, the
lane's counters and timed uses.

Used where nothing needs Python in between: the copy lane queued natively (whole experts, DMA copies), graphs
launched by ``cudaGraphLaunch`` the plain way. A layer that misses an admission candidate
(AdmissionPolicy.wanted_mask) is handed back right after its routing is read, and Decoder.step's Python path captures
the expert as the CPU reads it (calibrated decode admits ~1 expert a token at 18 layers); until session 28 every layer
took the Python path while any candidate existed, so adaptive residency never used the call. Without the lane (a PC
whose CPU kernel alone fills DRAM: the copy lane's load-time check turns it off there), the same call serves the early
launch: the routing flag, the CPU's misses, the flag the early-launched next layer waits on, the launch of the layer
after it. Setting: ``decode_native_layer``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import cudart
from .copy_lane import MAX_PITCH, TIME_EVERY, CopyLane

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0  # as decoder.SPIN_TIMEOUT_S: a GPU that never publishes the routing


@dataclass(frozen=True)
class Runtime:
    """The runtime functions' addresses and the handles the native call uses (fakes in tests)."""

    copy2d: int
    launch: int
    query: int  # cudaStreamQuery
    record: int  # cudaEventRecord
    layer_execs: tuple[int, ...]  # the layers' graphs then the tail's; early: layers 1.. then the tail's (run_early)
    compute_stream: int
    lane_execs: tuple[int, int] | None  # None: no lane (the early launch's mode)
    lane_stream: int
    events: tuple[tuple[int, int, int], tuple[int, int, int]] | None  # per parity: start, copies done, end
    current_stream: Callable[[], int] | None = None  # the thread's stream, where GraphLauncher launches
    wait_value: int = 0  # cuStreamWaitValue32, for the front-end wait (decode_front_end_wait); 0 = none
    cpu_done_dev: int = 0  # the device address of GpuCore.np_cpu_done[0] (the flags it waits on)
    copy_abi: int = 0  # copy2d is cudaMemcpy2DAsync (0) or cudaMemcpyBatchAsync with CUDA 12's or 13's signature


def runtime_for(core: Any, lane: CopyLane, front_end: bool = False) -> Runtime | None:
    """The CUDA handles for ``core`` and ``lane``, or None where something is missing (no bare launches, no lane
    graphs, a runtime without the query or record). ``front_end``: with the driver's cuStreamWaitValue32 too (left
    out where the driver lacks it)."""
    rt, launcher = lane._rt, getattr(core, "_launcher", None)
    if rt is None or launcher is None or lane.stream is None or not lane._execs or lane.pull or lane.split_units:
        return None
    copy, launch = rt.addresses
    query, record = rt.sync_addresses
    if not (copy and launch and query and record):
        return None
    copy, abi = lane.copy_function(copy)
    for p in (0, 1):  # a torch Event creates its CUDA event on first record
        for ev in lane._spare[p]:
            ev.record(lane.stream)
    lane.stream.synchronize()
    events = tuple(tuple(int(ev.cuda_event) for ev in lane._spare[p]) for p in (0, 1))
    wait = cudart.wait_value_address() if front_end else 0
    done = 0
    if wait:
        try:
            done = rt.device_pointer(core.np_cpu_done.ctypes.data)
        except RuntimeError as exc:  # flags the GPU cannot address: the plain launch after the CPU's work
            log.warning("decode front-end wait off: %s", exc)
            wait = 0
    elif front_end:
        log.warning("decode front-end wait off: the driver has no cuStreamWaitValue32")
    return Runtime(copy, launch, query, record, tuple(launcher._execs), int(launcher._stream()),
                   (lane._execs[0], lane._execs[1]), int(lane.stream.cuda_stream), events,  # type: ignore[arg-type]
                   launcher._stream, wait, done, abi)


def early_runtime_for(core: Any) -> Runtime | None:
    """The handles for the early launch without a lane (GpuCore.run_early's graphs), or None."""
    rt, launcher = cudart.runtime(), getattr(core, "_early_launcher", None)
    if rt is None or launcher is None:
        return None
    launch = rt.addresses[1]
    if not launch:
        return None
    return Runtime(0, launch, 0, 0, tuple(launcher._execs), int(launcher._stream()), None, 0, None, launcher._stream)


class NativeLayer:
    def __init__(self, core: Any, experts: Any, lane: CopyLane | None, rt: Runtime, n_static: int,
                 wanted: np.ndarray | None = None) -> None:
        """``experts``: the NativeExperts adapter of the CPU misses (its kernel, shape and descriptors);
        ``n_static``: slots below it hold the static hot set (counted apart in the step's statistics); ``wanted``:
        uint8 [layers, experts], 1 for admission candidates (AdmissionPolicy.wanted_mask, updated in place): a layer
        that misses one is handed back to the Python path, which captures it (run's ``capture``). Without a
        ``lane``, the early launch's mode: the call raises the layer's CPU flag (np_cpu_done) and launches the
        graph of the layer after next (GpuCore.run_early), as the Python path does."""
        self.core, self.experts, self.lane, self.rt = core, experts, lane, rt
        self.early = lane is None
        # beside the lane, the next graph queued behind a stream wait on this layer's CPU flag (decode_front_end_wait):
        # a step that stops half-way must raise the flags it left, as the early launch's does
        self.front_end = lane is not None and bool(rt.wait_value)
        self.n_static = n_static
        self.wanted = wanted
        self.kernel = experts.kernel
        self.ffi = self.kernel.ffi
        n = core.cfg.num_hidden_layers
        self.jobs: list[Any] = [None] * n
        self._keep: list[Any] = []  # what the jobs' pointers point to
        self.ready = [False] * n  # the layer's shards registered: lane_most set
        self._stream = rt.compute_stream

    def _ptr(self, ctype: str, a: np.ndarray) -> Any:
        self._keep.append(a)
        return self.ffi.cast(ctype, a.ctypes.data)

    def _job(self, layer: int) -> Any:
        """The layer's job with every field that does not change between tokens."""
        c, lane, rt, ffi = self.core, self.lane, self.rt, self.ffi
        p = layer % 2
        n = c.cfg.num_hidden_layers
        j = self.kernel.lane_layer_job()
        j.flag = ffi.cast("int32_t *", c.np_flags.ctypes.data + 4 * layer)
        j.k, j.bt = c.cfg.num_experts_per_tok, c.kern.block_t
        j.n_static = self.n_static
        j.route = self._ptr("int32_t *", c.np_route[layer])
        j.timeout_us = TIMEOUT_S * 1e6
        j.shape = self.experts.shape
        e = c.cfg.num_local_experts
        table = ffi.new("neural_expert *[]", [self.experts.ref(layer, i).cdata for i in range(e)])
        self._keep.append(table)
        j.table, j.n_experts = table, e
        j.x = self._ptr("float *", c.np_t)
        if self.wanted is not None:
            j.wanted = self._ptr("uint8_t *", self.wanted[layer])
        j.out = self._ptr("float *", c.np_cpu_moe[p])
        j.launch = ffi.cast("void *", rt.launch)
        j.next_stream = ffi.cast("void *", self._stream)
        if lane is None:  # the early launch: the flag the next graph waits on, and the graph after it
            j.done_flag = ffi.cast("int32_t *", c.np_cpu_done.ctypes.data + 4 * layer)
            if layer + 2 <= n:
                j.next_exec = ffi.cast("void *", rt.layer_execs[layer + 1])  # run_early(layer + 2)
            return j
        j.fixed_ms = lane.rates.cpu_fixed_ms
        assert rt.lane_execs is not None
        j.copy2d, j.copy_abi = ffi.cast("void *", rt.copy2d), rt.copy_abi
        j.query, j.record = ffi.cast("void *", rt.query), ffi.cast("void *", rt.record)
        j.lane_stream, j.lane_exec = ffi.cast("void *", rt.lane_stream), ffi.cast("void *", rt.lane_execs[p])
        j.next_exec = ffi.cast("void *", rt.layer_execs[layer + 1])
        if rt.wait_value:  # the next graph queued at the call's start, behind the front-end's wait for this flag
            j.done_flag = ffi.cast("int32_t *", c.np_cpu_done.ctypes.data + 4 * layer)
            j.wait_value, j.wait_addr = ffi.cast("void *", rt.wait_value), rt.cpu_done_dev + 4 * layer
        if rt.events is not None:
            for i in range(3):
                j.events[i] = ffi.cast("void *", rt.events[p][i])
        j.pool, j.slot_bytes, j.max_pitch = c.pool.data_ptr(), c.plan.slot_bytes, MAX_PITCH
        parts = lane.parts_array(layer)
        j.parts, j.nparts = self._ptr("int64_t *", parts), parts.shape[0]
        j.lane_slots = self._ptr("int32_t *", lane._slots_np[p])
        j.lane_route = self._ptr("int32_t *", lane.np_route[p])
        j.lane_out = self._ptr("float *", lane.np_out[p])
        return j

    def begin_step(self) -> None:
        """Once a token: the next graphs go on the stream the thread launches on now (as GraphLauncher's do)."""
        if self.rt.current_stream is None:
            return
        s = int(self.rt.current_stream())
        if s != self._stream:
            self._stream = s
            for j in self.jobs:
                if j is not None:
                    j.next_stream = self.ffi.cast("void *", s)

    def run(self, layer: int, step: int, beside: bool = False, capture: bool = False) -> Any:
        """The layer's miss path (the next graph launched at its end); returns the job with its results. ``beside``:
        the CPU's misses start before the lane is queued (settings.decode_lane_beside). ``capture``: a capture buffer
        is free and candidates exist; a miss among ``wanted`` (any miss without it) then ends the call right after
        the routing is read (``j.yielded``; ``j.queued`` where the next graph is already queued behind the
        front-end's wait)."""
        j = self.jobs[layer]
        if j is None:
            j = self.jobs[layer] = self._job(layer)
        j.step = step
        j.capture = capture
        lane = self.lane
        if lane is None:
            self.kernel.lane_layer(j)
            return j
        rates = lane.rates
        if not self.ready[layer] and lane.direct.ready(layer):
            self.ready[layer] = True
        j.lane_most = lane.width if self.ready[layer] else 0
        j.beside = beside
        j.probe = rates.would_probe()
        j.timed = (lane.uses + 1) % TIME_EVERY == 0
        j.cpu_ms, j.lane_ms = rates.cpu_ms, rates.lane_ms
        self.kernel.lane_layer(j)
        return j

    def learn(self, layer: int, j: Any) -> None:
        """What the Python path learns from a layer (CopyLane.split / SplitRates.choose, observe_cpu, finish)."""
        lane = self.lane
        if lane is None:
            return
        rates = lane.rates
        n, m = int(j.misses), int(j.lane_n)
        if n and not self.ready[layer]:
            lane.not_ready += 1
        elif n:  # SplitRates.choose's bookkeeping, as the native call chose
            rates.record(m, bool(j.probed))
            rates.chosen[min(m, 2)] += 1
        rates.observe_cpu(n - m, float(j.cpu_us) * 1e-6)
        if m:
            lane.experts += m
            lane.uses += 1
            if j.timed_use and lane._spare:  # the events (CUDA only)
                lane.observe_timed(lane._spare[layer % 2], m)

    @staticmethod
    def account(j: Any, st: Any) -> None:
        """The call's phases into the step's statistics (StepStats), as the Python path times them: the wait for the
        routing, the CPU's experts, the next launch, and with the lane its decision, queueing and wait."""
        st.gpu_wait += 1e-6 * j.wait_us
        st.cpu += 1e-6 * j.cpu_us
        st.launch += 1e-6 * j.launch_us
        m = int(j.lane_n)
        if m:
            decide, issue, wait = 1e-6 * j.decide_us, 1e-6 * j.issue_us, 1e-6 * j.lane_wait_us
            st.lane_decide += decide
            st.lane_start += decide + issue
            st.lane_wait += wait
            st.lane += decide + issue + wait
            st.lane_experts += m

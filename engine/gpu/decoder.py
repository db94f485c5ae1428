"""One decode step of the hybrid engine: GPU core per layer, CPU misses in between.

Per layer the host replays the layer's graph (attention, router, resident-expert GEMVs),
starts the previous layer's admission copies and scores its routing while that graph runs,
spins until the router has published the routing in pinned memory, and runs the native kernel
for the non-resident experts (writing its result where the next layer's graph reads it
zero-copy). The GPU computes the resident experts meanwhile. With the early launch (the
default) the graph of the layer after next is queued as soon as a layer's CPU result is
flagged, its first kernel waiting on that flag. After the last layer the tail graph picks
the token.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from native.kernel import KernelTimeout

from .admission import AdmissionPolicy, Residency
from .copy_lane import CopyLane
from .core import GpuCore
from .cpu_experts import MissExperts
from .native_layer import NativeLayer
from .pool import SlotPool

SPIN_TIMEOUT_S = 30.0
log = logging.getLogger(__name__)


class GpuStall(RuntimeError):
    """The GPU did not publish a result in time (driver hang, or a kernel fault)."""


class CudaCopier:
    """Uploads a pinned capture buffer into a slot on a copy stream, ordered after all work
    issued so far on the compute stream (so an evicted slot's last readers have finished)."""

    def __init__(self, core: GpuCore, buffers: torch.Tensor) -> None:
        self.core = core
        self.buffers = buffers
        self.stream = torch.cuda.Stream()

    def start(self, slot: int, buffer: int) -> object:
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream())
        self.stream.wait_event(ready)
        with torch.cuda.stream(self.stream):
            self.core.slot_view(slot).copy_(self.buffers[buffer], non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        return done

    def done(self, handle: object) -> bool:
        assert isinstance(handle, torch.cuda.Event)
        return bool(handle.query())


class SyncCopier:
    """Interpreter/CPU mode: the copy happens at once."""

    def __init__(self, core: GpuCore, buffers: torch.Tensor) -> None:
        self.core = core
        self.buffers = buffers

    def start(self, slot: int, buffer: int) -> object:
        self.core.slot_view(slot).copy_(self.buffers[buffer])
        return None

    def done(self, handle: object) -> bool:
        return True


@dataclass
class StepStats:
    """Accumulated per-phase host times (seconds) and hit counts since the last reset."""

    tokens: int = 0
    wall: float = 0.0
    launch: float = 0.0
    gpu_wait: float = 0.0
    cpu: float = 0.0
    admission: float = 0.0  # the sum of the four parts below; only adm_route delays the layer
    adm_poll: float = 0.0  # landed copies flipped (Residency.poll), once a token, while the tail runs
    adm_route: float = 0.0  # the layer's routing read, hit/miss split, capture buffers picked
    adm_after: float = 0.0  # the previous layer's copies started and routing scored, while this one runs
    adm_refresh: float = 0.0  # the last layer's adm_after and the policy's end-of-token step, while the tail runs
    tail: float = 0.0
    # the copy lane's host time: its copies and graph queued (inside ``cpu`` with lane_beside), its result waited
    # for and added
    lane: float = 0.0
    lane_start: float = 0.0  # ... of which queueing (beside the CPU experts' worker threads, inside ``cpu``)
    lane_decide: float = 0.0  # ... the split's decision, inside lane_start when queueing first (not beside)
    lane_wait: float = 0.0  # ... of which waiting for the lane after the CPU's part, and adding its result
    lane_experts: int = 0  # misses computed by the copy lane
    hits: int = 0
    routed: int = 0
    last_hit_rate: float = 0.0
    per_layer_kinds: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))  # static hits, adaptive hits, misses

    def phases_ms(self) -> dict[str, float]:
        n = max(self.tokens, 1)
        out = {"token": 1e3 * self.wall / n, "launch": 1e3 * self.launch / n, "gpu_wait": 1e3 * self.gpu_wait / n,
               "cpu_experts": 1e3 * self.cpu / n, "admission": 1e3 * self.admission / n,
               "tail": 1e3 * self.tail / n}
        if self.lane_experts:  # only where the copy lane runs (copy_lane.py)
            out["gpu_lane"] = 1e3 * self.lane / n
        return out


class Decoder:
    def __init__(self, core: GpuCore, misses: MissExperts, pool: SlotPool, policy: AdmissionPolicy,
                 residency: Residency, capture_np: list[np.ndarray]) -> None:
        self.core = core
        self.misses = misses
        self.pool = pool
        self.policy = policy
        self.residency = residency
        self.capture_np = capture_np
        self.step_no = 0
        self.stats = StepStats(per_layer_kinds=np.zeros((core.cfg.num_hidden_layers, 3)))
        self.record_routing: list[np.ndarray] | None = None  # [layers, k] per step when set
        self._kinds: list[tuple[int, int, int]] = [(0, 0, 0)] * core.cfg.num_hidden_layers  # this step's, per layer
        # Launch each layer's graph (and the tail) before the previous layer's CPU experts are done: its first
        # kernel waits on the host's flag (GpuCore.run_early), so the launch's host time and the GPU's start-up
        # leave the critical path. Only where the core captured those graphs (a GPU); the backend sets it from
        # EngineSettings.early_launch (on by default).
        self.early_launch = False
        self.lane_beside = False  # CPU misses start before the lane's copies are queued (settings.decode_lane_beside)
        self.late_steps = 0  # early-launched steps decoded again because a wait gave up (GpuCore.np_late)
        # a machine where the waits keep giving up (a driver that holds queued work back, a host far slower than
        # the bound) pays ~1 s per late token: after this many late steps in a row the process decodes the plain
        # way (a few scattered ones, e.g. CPU experts paged in from disk on a cold start, do not count together)
        self.late_limit = 3
        self._late_run = 0
        self.lane: CopyLane | None = None  # some misses copied to the GPU and computed there (copy_lane.py)
        self.lane_early = False  # early launches beside the lane: only with the gentle poll (early_poll_ns > 0)
        # with the lane and plain launches: a layer's host work from its routing to the next launch in one native
        # call (native_layer.py), handing back a layer that misses an admission candidate; the backend sets it
        # (decode_native_layer)
        self.native_layer: NativeLayer | None = None
        self.native_layers = 0  # layers decoded by it since load
        self.native_yields = 0  # layers it handed back to the Python path (an admission candidate missed)

    def _after_layer(self, layer: int, ids: list[int], caps: dict[int, int], prompt_weight: float) -> None:
        """A computed layer's bookkeeping: copies started for its captured experts, its routing scored."""
        if caps:
            self.residency.after_compute(layer, caps)
        self.policy.observe_token(layer, ids, prompt_weight)

    def _wait(self, index: int, step: int) -> None:
        flags = self.core.np_flags
        if flags[index] == step:
            return
        deadline = time.perf_counter() + SPIN_TIMEOUT_S
        n = 0
        while flags[index] != step:
            n += 1
            if n & 0xFFFF == 0 and time.perf_counter() > deadline:
                raise GpuStall(f"GPU did not publish layer {index} of step {step} within {SPIN_TIMEOUT_S:.0f} s")

    def step(self, token: int, pos: int, temperature: float = 0.0, seed: int = 0, prompt_weight: float = 1.0) -> int:
        """Run one token at ``pos``; returns the sampled token id (greedy at temperature 0).
        The fp32 logits stay in ``core.logits``."""
        c = self.core
        cfg = c.cfg
        k = cfg.num_experts_per_tok
        bt = c.kern.block_t
        st = self.stats
        t0 = time.perf_counter()
        self.step_no = (self.step_no % 2_000_000_000) + 1
        step = self.step_no
        ctrl = c.np_ctrl
        ctrl[0], ctrl[1], ctrl[2], ctrl[3] = pos, step, token, seed & 0x7FFFFFFF
        ctrl[4] = np.float32(temperature).view(np.int32)
        c.np_embed[:] = c.embed_table[token]
        n = cfg.num_hidden_layers
        routing = np.zeros((n, k), dtype=np.int64) if self.record_routing is not None else None
        hits = 0
        n_static = self.pool.n_static
        frozen = self.policy.frozen
        residency = self.residency
        kinds = self._kinds
        done: tuple[int, list[int], dict[int, int]] | None = None  # the last layer's bookkeeping, deferred
        lane = self.lane
        # the copy lane runs beside plain launches unless the early launch's wait polls gently: back-to-back polls
        # from every program of the waiting kernel halved the lane's copy rate (copy_lane.py)
        early = self.early_launch and c.can_early and (lane is None or self.lane_early)
        nat = self.native_layer  # in the mode it was built for: beside the lane, or the early launch without it
        if nat is not None and (nat.early != early or nat.lane is not lane):
            nat = None
        queued = False  # this layer's graph (or the tail) was launched by the native call of the one before
        if nat is not None:
            nat.begin_step()
        try:
            for layer in range(n):
                tl0 = time.perf_counter()
                if not early:
                    if not queued:
                        c.run_layer(layer)
                    queued = False
                elif layer == 0:
                    c.run_layer(0)
                    c.run_early(1)  # waits for layer 0's flag (the tail when there is one layer)
                tl1 = time.perf_counter()
                # Host bookkeeping that the GPU does not wait for runs while the layer just launched
                # computes its attention and routing: the last layer's admissions and scores (a copy
                # started here is ordered after this launch too, which only delays it), so none of it
                # sits between a layer's CPU experts and the next launch. Its logical order is
                # unchanged: layer L's admissions still precede layer L+1's captures.
                if done is not None:
                    d, done = done, None
                    self._after_layer(*d, prompt_weight)
                tl2 = time.perf_counter()
                front_queued = False  # the native call queued the next graph behind the front-end's wait, then yielded
                if nat is not None:
                    capture = not frozen and residency.may_capture()
                    if capture:
                        self.policy.wanted_mask()  # the candidates as they stand (the array the jobs point to)
                    try:
                        j = nat.run(layer, step, self.lane_beside, capture)
                    except KernelTimeout as exc:
                        raise GpuStall(f"GPU did not publish layer {layer} of step {step} within "
                                       f"{SPIN_TIMEOUT_S:.0f} s") from exc
                    # yielded: a missed expert is an admission candidate; the Python path below captures it
                    front_queued = bool(j.yielded and j.queued)
                    self.native_yields += bool(j.yielded)
                if nat is not None and not j.yielded:
                    queued = True
                    # the next graph is queued: what follows runs while the GPU computes it
                    nat.learn(layer, j)
                    nat.account(j, st)
                    self.native_layers += 1
                    nh, ns = int(j.hits), int(j.static_hits)
                    hits += nh
                    ids = c.np_route[layer][:k].tolist()
                    done = (layer, ids, {})
                    kinds[layer] = (ns, nh - ns, k - nh)
                    if routing is not None:
                        routing[layer] = ids
                    st.launch += tl1 - tl0
                    st.adm_after += tl2 - tl1
                    st.admission += tl2 - tl1
                    continue
                queued = queued or front_queued
                self._wait(layer, step)
                tl3 = time.perf_counter()
                row = c.np_route[layer]
                ids = row[:k].tolist()
                wts = row[bt : bt + k].view(np.float32).tolist()
                slots = row[2 * bt : 2 * bt + k].tolist()
                miss_ids: list[int] = []
                miss_w: list[float] = []
                nh = ns = 0
                for e, w, s in zip(ids, wts, slots, strict=True):
                    if s < 0:
                        miss_ids.append(e)
                        miss_w.append(w)
                    else:
                        nh += 1
                        ns += s < n_static
                hits += nh
                caps = residency.captures_for(layer, miss_ids) if miss_ids and not frozen else {}
                lane_ids: list[int] = []
                part = None  # a split expert: (id, weight, units the lane computes)
                tl4 = tr = time.perf_counter()  # tr: the routing read and split (admission's adm_route)
                if lane is not None and miss_ids:
                    miss_ids, miss_w, lane_ids, lane_w, part = lane.split(layer, miss_ids, miss_w, keep=caps)
                    st.lane_decide += time.perf_counter() - tr
                out = c.np_cpu_moe[layer % 2]
                heads = {part[0]: lane.inter - part[2]} if part is not None and lane is not None else None
                cap_np = {e: self.capture_np[b] for e, b in caps.items()} if caps else {}
                sends = lane is not None and (bool(lane_ids) or part is not None)
                cpu_s: float | None = None
                if sends and self.lane_beside:
                    assert lane is not None
                    # the CPU kernel's workers start first and this thread queues the lane's copies beside them
                    # (~0.1 ms a layer of runtime calls, which had delayed the CPU experts), then joins them
                    with self.misses.compute_beside(layer, c.np_t, miss_ids, miss_w, out, cap_np, heads) as span:
                        ts = time.perf_counter()
                        lane.start(layer, lane_ids, lane_w, part)
                        ts = time.perf_counter() - ts
                    st.lane += ts
                    st.lane_start += ts
                    # the split learns the CPU's rate from its experts' own span: had it learned from the block,
                    # a slow queueing would have made the CPU look slow and sent the lane more (H200, session 21:
                    # learned 0.36-2.8 ms an expert against 0.27 alone, MEASURED)
                    cpu_s = span.seconds
                else:
                    if sends:
                        assert lane is not None
                        lane.start(layer, lane_ids, lane_w, part)
                        tl4 = time.perf_counter()
                        st.lane += tl4 - tr
                        st.lane_start += tl4 - tr
                    self.misses.compute(layer, c.np_t, miss_ids, miss_w, out, cap_np, heads)
                tl5 = tc = time.perf_counter()
                if lane is not None:
                    share = part[2] / lane.inter if part is not None else 0.0
                    lane.observe_cpu(len(miss_ids) - share, tl5 - tl4 if cpu_s is None else cpu_s)
                    if lane_ids or part is not None:
                        lane.finish(layer, len(lane_ids) + share, out)
                        st.lane_experts += len(lane_ids) + (part is not None)
                        tl6 = time.perf_counter()
                        st.lane += tl6 - tl5
                        st.lane_wait += tl6 - tl5
                        tl5 = tl6
                launched = tl1 - tl0
                if early:
                    c.np_cpu_done[layer] = step  # the result is written: layer + 1's graph goes on
                    if layer + 2 <= n:
                        c.run_early(layer + 2)  # while the GPU runs layer + 1 up to its routing
                    launched += time.perf_counter() - tl5
                elif front_queued:
                    c.np_cpu_done[layer] = step  # the graph the native call queued waits for this flag
                done = (layer, ids, caps)
                kinds[layer] = (ns, nh - ns, k - nh)
                if routing is not None:
                    routing[layer] = ids
                st.launch += launched
                st.gpu_wait += tl3 - tl2
                st.cpu += tc - tl4
                st.adm_route += tr - tl3
                st.adm_after += tl2 - tl1
                st.admission += (tr - tl3) + (tl2 - tl1)
            tt = time.perf_counter()
            if not early and not queued:
                c.run_tail()
        except BaseException:
            if early or (nat is not None and nat.front_end):  # graphs queued behind flags that will not come
                c.np_cpu_done[:] = step
            raise
        finally:
            # a layer that raised leaves its predecessor's admissions and scores to be recorded
            ta = time.perf_counter()
            if done is not None:
                self._after_layer(*done, prompt_weight)
        self.policy.token_done(self.pool)
        st.per_layer_kinds += np.asarray(kinds, dtype=np.float64)
        tp = time.perf_counter()
        residency.poll()  # landed copies become readable from the next token's first layer on
        dp = time.perf_counter() - tp
        st.adm_poll += dp
        dt = time.perf_counter() - ta
        st.adm_refresh += dt - dp
        st.admission += dt
        self._wait(n, step)
        st.tail += time.perf_counter() - tt - dt
        if routing is not None and self.record_routing is not None:
            self.record_routing.append(routing)
        st.tokens += 1
        st.hits += hits
        st.routed += k * n
        st.last_hit_rate = hits / (k * n)
        st.wall += time.perf_counter() - t0
        if early and int(c.np_late[0]) == step:
            # a layer's wait gave up before the host's CPU experts were done (a stall of ~1 s): the rest of
            # the step read an old result, so the token is decoded again, launching each layer after them
            self.late_steps += 1
            self._late_run += 1
            log.warning("decode step at position %d waited too long for the CPU experts; decoded again", pos)
            self.early_launch = False
            keep = self._late_run < self.late_limit
            if not keep:
                log.warning("%d decode steps in a row waited too long: early launch is off for this process",
                            self._late_run)
            try:
                return self.step(token, pos, temperature, seed, prompt_weight)
            finally:
                self.early_launch = keep
        if early:
            self._late_run = 0
        return int(c.np_token[0])

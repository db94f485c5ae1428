"""A decode layer's miss path in one native call (engine/gpu/native_layer.py, native/neural_lane.c) under Triton's
interpreter, the CUDA runtime played by ctypes callbacks: copies are host memmoves, a "graph launch" runs the layer,
the tail or the lane's kernels at once. It must decode the bits the Python path decodes, split as lane_split.py
splits, and name what fails."""

from __future__ import annotations

import ctypes
import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from batch_fake import BatchCopy  # this folder is on sys.path
from test_copy_lane import LANE_TOKENS, mapped
from test_gpu_backend import make

from engine.checkpoint import Checkpoint
from engine.gpu.backend import GpuBackend
from engine.gpu.copy_lane import CopyLane
from engine.gpu.decoder import GpuStall
from engine.gpu.lane_split import PROBE_FIRST, best_split
from engine.gpu.native_layer import NativeLayer, Runtime
from engine.plan import SLOT_PARTS

COPY2D = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                          ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
QUERY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
RECORD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
LAYER, LANE, EVENT, STREAM, LANE_STREAM = 0x1000, 0x2000, 0x3000, 0x4000, 0x5000


class FakeRuntime:
    """Callbacks with the runtime's C signatures: graph ids LAYER + i (the tail at i = layers) and LANE + parity."""

    def __init__(self, be: GpuBackend, lane: CopyLane, fail: str = "", busy: int = 0, layers: bool = True,
                 abi: int = 0) -> None:
        """``abi`` 12 or 13: the lane copies through cudaMemcpyBatchAsync with that signature (decode_lane_batch)."""
        self.log: list[tuple[str, int]] = []
        n = be.core.cfg.num_hidden_layers
        self.busy = busy  # queries answered "not ready" before "done"

        def copy(dst: int, dpitch: int, src: int, spitch: int, width: int, height: int, kind: int, s: int) -> int:
            self.log.append(("copy", height))
            for r in range(height):
                ctypes.memmove(dst + r * dpitch, src + r * spitch, width)
            return 700 if fail == "copy" else 0

        def launch(exe: int, stream: int) -> int:
            exe = int(exe or 0)
            if exe >= LANE:
                self.log.append(("lane", exe - LANE))
                lane._kernels(exe - LANE)
                return 0
            i = exe - LAYER
            self.log.append(("layer", i))
            if fail == "launch":
                return 719
            if layers:
                be.core.run_layer(i) if i < n else be.core.run_tail()
            return 0

        def query(stream: int) -> int:
            self.log.append(("query", int(stream or 0)))
            if self.busy:
                self.busy -= 1
                return 600
            return 0

        def record(event: int, stream: int) -> int:
            self.log.append(("record", int(event or 0) - EVENT))
            return 0

        self._cbs = (COPY2D(copy), LAUNCH(launch), QUERY(query), RECORD(record))
        addr = [ctypes.cast(f, ctypes.c_void_p).value or 0 for f in self._cbs]
        self.batch = BatchCopy(abi, 700 if fail == "copy" else 0) if abi else None
        if self.batch is not None:
            addr[0] = self.batch.address
        self.runtime = Runtime(addr[0], addr[1], addr[2], addr[3], tuple(LAYER + i for i in range(n + 1)), STREAM,
                               (LANE, LANE + 1), LANE_STREAM, ((EVENT, EVENT + 1, EVENT + 2),) * 2, copy_abi=abi)


def python_path(ck: Checkpoint, cpu_ms: float, lane_ms: float, **kw: object) -> GpuBackend:
    """A backend with the copy lane at fixed rates and no native layer: every layer through Decoder.step's Python."""
    be = make(ck, slots=10, scratch_slots=4, static_slots=4, native=True, **kw)
    lane = CopyLane(be.core, mapped(ck, be), width=2)
    lane.rates.fix(cpu_ms, lane_ms)
    be.decoder.lane = lane
    return be


def native_backend(ck: Checkpoint, cpu_ms: float, lane_ms: float, fail: str = "",
                   layers: bool = True, abi: int = 0, **kw: object) -> tuple[GpuBackend, FakeRuntime]:
    be = python_path(ck, cpu_ms, lane_ms, **kw)
    lane = be.decoder.lane
    assert lane is not None
    rt = FakeRuntime(be, lane, fail, layers=layers, abi=abi)
    be.decoder.native_layer = NativeLayer(be.core, be.misses.experts, lane, rt.runtime, be.pool.n_static,
                                          be.policy.wanted_mask())
    return be, rt


@pytest.mark.parametrize("cpu_ms,lane_ms", [(10.0, 0.01), (0.1, 0.35)])  # two of 4 misses down the lane; one
def test_native_layers_decode_the_python_paths_bits(tiny_ck: Checkpoint, cpu_ms: float, lane_ms: float) -> None:
    tokens = LANE_TOKENS[:4]
    plain = python_path(tiny_ck, cpu_ms, lane_ms)
    lane = plain.decoder.lane
    assert lane is not None
    want = torch.stack([plain.forward([t]) for t in tokens])
    be, rt = native_backend(tiny_ck, cpu_ms, lane_ms)
    got = torch.stack([be.forward([t]) for t in tokens])
    assert torch.equal(got, want)
    layers = len(tokens) * tiny_ck.config.num_hidden_layers
    assert be.decoder.native_layers == layers and plain.decoder.native_layers == 0
    a, b = be.decoder.stats, plain.decoder.stats
    assert a.lane_experts == b.lane_experts > 0 and a.hits == b.hits
    np.testing.assert_array_equal(a.per_layer_kinds, b.per_layer_kinds)
    assert be.decoder.lane.rates.chosen == lane.rates.chosen and be.decoder.lane.uses == lane.uses
    # each layer: its lane copies and graph, then (after the CPU's experts) the query, then the next launch
    launches = [x for kind, x in rt.log if kind == "layer"]
    assert launches == [i + 1 for _ in tokens for i in range(tiny_ck.config.num_hidden_layers)]
    first = rt.log.index(("lane", 0))
    assert [k for k, _ in rt.log[first: first + 3]] == ["lane", "query", "layer"]
    assert 0 < a.lane_decide < a.lane_start and a.cpu > 0 and a.lane_wait > 0


@pytest.mark.parametrize("abi", [12, 13])
def test_batched_lane_copies_decode_the_same_bits(tiny_ck: Checkpoint, abi: int) -> None:
    """decode_lane_batch in the native call: each lane layer's copies in one cudaMemcpyBatchAsync (CUDA 12's or
    13's signature), the same logits as the 2-D copies, bit for bit."""
    tokens = LANE_TOKENS[:3]
    got = {}
    for a in (0, abi):
        be, rt = native_backend(tiny_ck, 10.0, 0.01, abi=a)  # two of 4 misses down the lane
        got[a] = torch.stack([be.forward([t]) for t in tokens])
        st = be.decoder.stats
        uses = be.decoder.native_layers
        assert uses == 3 * tiny_ck.config.num_hidden_layers and st.lane_experts > 0
        copies = [c for c, _ in rt.log if c == "copy"]
        if a:
            assert rt.batch is not None and not copies
            assert [s for _, s in rt.batch.calls] == [LANE_STREAM] * uses
            assert sum(n for n, _ in rt.batch.calls) == st.lane_experts * len(SLOT_PARTS)
        else:
            assert copies
    assert torch.equal(got[abi], got[0])


def test_beside_the_lanes_queueing_the_cpu_experts_give_the_same_bits(tiny_ck: Checkpoint) -> None:
    """decode_lane_beside in the native call: the CPU's misses start on the workers before the lane is queued
    (neural_moe_token_begin / end); the same logits as queue-first, bit for bit, with both sides used."""
    tokens = LANE_TOKENS[:3]
    got = {}
    for beside in (False, True):
        be, _ = native_backend(tiny_ck, 0.1, 0.35)  # one of 4 misses down the lane, three on the CPU
        be.decoder.lane_beside = beside
        got[beside] = torch.stack([be.forward([t]) for t in tokens])
        st = be.decoder.stats
        assert be.decoder.native_layers == 3 * tiny_ck.config.num_hidden_layers
        assert st.lane_experts == be.decoder.native_layers and st.cpu > 0
    assert torch.equal(got[True], got[False])


def test_the_native_split_is_best_split(tiny_ck: Checkpoint) -> None:
    """Over rates either side of each choice (ties included), the native call sends the lane what best_split says,
    the last misses in routing order; with probe set and nothing chosen it sends one and says so."""
    be, rt = native_backend(tiny_ck, 1.0, 1.0, layers=False)  # launches of the next layer logged, not run
    nat = be.decoder.native_layer
    assert nat is not None
    c, k, bt = be.core, tiny_ck.config.num_experts_per_tok, be.core.kern.block_t
    row = c.np_route[0]
    step = 7
    c.np_flags[0] = step
    ids = [3, 6, 1, 4][:k]
    row[:k] = ids
    row[bt: bt + k] = np.full(k, 0.25, np.float32).view(np.int32)
    lane_input_row = np.random.default_rng(0).standard_normal(tiny_ck.config.hidden_size).astype(np.float32)
    c.np_t[:] = lane_input_row
    checked = 0
    nat.lane.rates.cpu_fixed_ms = 0.0625
    nat.jobs[0] = None  # built again with that fixed cost
    for hits in range(k + 1):
        row[2 * bt: 2 * bt + k] = [0] * hits + [-1] * (k - hits)
        misses = ids[hits:]
        # rates in binary fractions, so that ties are exact (1 miss at CPU 0.25 + 0.0625 against the lane's
        # 0.3125; 4 at 0.015625 against 0.125): a tie keeps the misses on the CPU
        for cpu in (0.015625, 0.25, 0.5):
            for lane_ms in (0.125, 0.3125):
                for probe in (False, True):
                    nat.lane.rates.fix(cpu, lane_ms)
                    nat.lane.rates.idle = PROBE_FIRST if probe else 0
                    nat.lane.rates.frozen = not probe
                    rt.log.clear()
                    j = nat.run(0, step)
                    want, _ = best_split(len(misses), 2, nat.lane.rates.cpu_fixed_ms, cpu, lane_ms)
                    probed = probe and want == 0 and len(misses) > 0
                    m = want or int(probed)
                    assert (int(j.hits), int(j.misses), int(j.lane_n), bool(j.probed)) == (hits, len(misses), m,
                                                                                          probed)
                    assert list(j.lane_ids)[:m] == misses[len(misses) - m:]
                    # the CPU's part plus the lane's: the sum of the two computed apart
                    cpu_out = np.zeros_like(lane_input_row)
                    be.misses.compute(0, c.np_t, misses[: len(misses) - m], [0.25] * (len(misses) - m), cpu_out, {})
                    want_out = cpu_out + nat.lane.np_out[0] if m else cpu_out
                    assert c.np_cpu_moe[0].tobytes() == want_out.tobytes()
                    timed = ("record", 0) in rt.log
                    assert timed == (probed or bool(m and j.timed))
                    checked += 1
    assert checked == (k + 1) * 12


def test_a_native_layer_names_what_failed(tiny_ck: Checkpoint) -> None:
    from native.kernel import KernelError

    for fail, abi, match in (("copy", 0, r"cudaMemcpy2DAsync \(copy 0\) failed with CUDA error 700"),
                             ("copy", 13, r"cudaMemcpyBatchAsync \(the lane's copies\) failed with CUDA error 700"),
                             ("launch", 0, r"the next launch failed with CUDA error 719")):
        be, _ = native_backend(tiny_ck, 10.0, 0.01, fail, abi=abi)
        with pytest.raises(KernelError, match=match):
            be.forward([LANE_TOKENS[0]])


def test_a_flag_never_raised_is_a_gpu_stall(tiny_ck: Checkpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.gpu.native_layer as nl
    from native.kernel import KernelTimeout

    monkeypatch.setattr(nl, "TIMEOUT_S", 0.05)
    be, _ = native_backend(tiny_ck, 10.0, 0.01)
    nat = be.decoder.native_layer
    assert nat is not None
    be.core.np_flags[:] = 0
    with pytest.raises(KernelTimeout, match="timed out waiting for the GPU's flag"):
        nat.run(0, 12345)
    monkeypatch.setattr(be.core, "run_layer", lambda i: None)  # nothing publishes the routing
    with pytest.raises(GpuStall, match="did not publish layer 0"):
        be.decoder.step(LANE_TOKENS[0], 0)


def test_the_lane_is_waited_for_before_its_sum(tiny_ck: Checkpoint) -> None:
    be, rt = native_backend(tiny_ck, 10.0, 0.01)
    rt.busy = 5
    be.forward([LANE_TOKENS[0]])
    queries = [i for i, (kind, _) in enumerate(rt.log) if kind == "query"]
    assert len(queries) >= 6 and rt.log[queries[0]] == ("query", LANE_STREAM)


EARLY = 0x6000


class EarlyEmulation:
    """Early-launched graphs under the interpreter (which has none): a launch of graph i (GpuCore.run_early(i):
    layer i, or the tail at i = layers) is held until the flag its first kernel waits on, np_cpu_done[i - 1], holds
    the step; held graphs run in order at every launch and before every wait of the decoder's."""

    def __init__(self, be: GpuBackend) -> None:
        self.be = be
        self.held: list[int] = []
        self.ran: list[int] = []

    def launch(self, i: int) -> None:
        self.held.append(i)
        self.flush()

    def flush(self) -> None:
        c = self.be.core
        step = int(c.np_ctrl[1])
        while self.held and int(c.np_cpu_done[self.held[0] - 1]) == step:
            i = self.held.pop(0)
            self.ran.append(i)
            c.run_layer(i) if i < c.cfg.num_hidden_layers else c.run_tail()


def early_backend(ck: Checkpoint, monkeypatch: pytest.MonkeyPatch, native: bool,
                  **kw: object) -> tuple[GpuBackend, EarlyEmulation]:
    be = make(ck, slots=10, scratch_slots=4, static_slots=4, native=True, **kw)
    emu = EarlyEmulation(be)
    monkeypatch.setattr(type(be.core), "can_early", property(lambda self: True))
    be.core.run_early = emu.launch  # type: ignore[method-assign]
    wait = be.decoder._wait

    def waiting(index: int, step: int) -> None:
        emu.flush()
        wait(index, step)

    be.decoder._wait = waiting  # type: ignore[method-assign]
    be.decoder.early_launch = True
    if native:
        def launch(exe: int, stream: int) -> int:
            emu.launch(int(exe or 0) - EARLY + 1)  # early graph index i - 1 is run_early(i)
            return 0

        be._cb = cb = LAUNCH(launch)  # type: ignore[attr-defined]  # kept alive with the backend
        addr = ctypes.cast(cb, ctypes.c_void_p).value or 0
        n = ck.config.num_hidden_layers
        rt = Runtime(0, addr, 0, 0, tuple(EARLY + i for i in range(n)), STREAM, None, 0, None)
        be.decoder.native_layer = NativeLayer(be.core, be.misses.experts, None, rt, be.pool.n_static,
                                              be.policy.wanted_mask())
    return be, emu


def test_without_the_lane_the_native_call_serves_the_early_launch(tiny_ck: Checkpoint,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """No lane: the call raises the layer's CPU flag and launches the layer after next (run_early), as the Python
    path's early launch does; the same logits bit for bit, every layer through the call, the graphs run in order."""
    tokens = LANE_TOKENS[:4]
    plain, emu_py = early_backend(tiny_ck, monkeypatch, native=False)
    want = torch.stack([plain.forward([t]) for t in tokens])
    be, emu = early_backend(tiny_ck, monkeypatch, native=True)
    got = torch.stack([be.forward([t]) for t in tokens])
    assert torch.equal(got, want)
    n = tiny_ck.config.num_hidden_layers
    assert be.decoder.native_layers == len(tokens) * n and plain.decoder.native_layers == 0
    assert emu.ran == emu_py.ran and emu.ran[: n] == list(range(1, n + 1)) and not emu.held
    assert be.decoder.stats.hits == plain.decoder.stats.hits and be.decoder.late_steps == 0
    # with the early launch off (after late steps), the early-mode call is not used: the Python path's plain launch
    be.decoder.early_launch = plain.decoder.early_launch = False
    before = be.decoder.native_layers
    assert torch.equal(be.forward([tokens[0]]), plain.forward([tokens[0]]))
    assert be.decoder.native_layers == before


WAIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint)


class FrontEnd:
    """cuStreamWaitValue32 played on the host: a launch on the waiting stream after a wait is held until the word at
    its address holds the value (then it runs, in order); flush() runs what may run (before each native call and each
    wait of the decoder's, where the GPU would have)."""

    def __init__(self, be: GpuBackend, rt: FakeRuntime) -> None:
        self.be, self.rt = be, rt
        self.gate: tuple[int, int] | None = None
        self.held: list[tuple[int, tuple[int, int]]] = []
        launch_cb = rt._cbs[1]
        run_layer = LAUNCH(lambda exe, stream: launch_cb(exe, stream))

        def wait(stream: int, addr: int, value: int, flags: int) -> int:
            assert int(stream or 0) == STREAM and flags == 1  # EQ, on the compute stream
            rt.log.append(("wait", value))
            self.gate = (int(addr), int(value))
            return 0

        def launch(exe: int, stream: int) -> int:
            if int(stream or 0) == STREAM and self.gate is not None:
                self.held.append((int(exe or 0), self.gate))
                self.gate = None
                self.flush()
                return 0
            return int(run_layer(exe, stream))

        self._cbs = (WAIT(wait), LAUNCH(launch), run_layer)
        w, ln = (ctypes.cast(f, ctypes.c_void_p).value or 0 for f in self._cbs[:2])
        r = rt.runtime
        done = be.core.np_cpu_done.ctypes.data
        self.runtime = Runtime(r.copy2d, ln, r.query, r.record, r.layer_execs, r.compute_stream, r.lane_execs,
                               r.lane_stream, r.events, None, w, done)

    def flush(self) -> None:
        while self.held and ctypes.c_int32.from_address(self.held[0][1][0]).value == self.held[0][1][1]:
            exe, _ = self.held.pop(0)
            self.rt.log.append(("released", exe - LAYER))
            self._cbs[2](exe, STREAM)


def front_end_backend(ck: Checkpoint, fail: str = "", **kw: object) -> tuple[GpuBackend, FakeRuntime, FrontEnd]:
    be, rt = native_backend(ck, 0.1, 0.35, fail, **kw)
    lane = be.decoder.lane
    assert lane is not None
    fe = FrontEnd(be, rt)
    nat = NativeLayer(be.core, be.misses.experts, lane, fe.runtime, be.pool.n_static, be.policy.wanted_mask())
    assert nat.front_end
    run = nat.run
    nat.run = lambda *a: (fe.flush(), run(*a))[1]  # type: ignore[method-assign]
    wait = be.decoder._wait
    be.decoder._wait = lambda i, s: (fe.flush(), wait(i, s))[1]  # type: ignore[method-assign]
    be.decoder.native_layer = nat
    return be, rt, fe


def test_the_next_graph_queued_behind_the_front_ends_wait(tiny_ck: Checkpoint) -> None:
    """decode_front_end_wait: each call queues the next graph at its start behind a wait on its CPU flag; the graph
    runs once the flag is stored, after the CPU's and the lane's work: the same logits bit for bit."""
    tokens = LANE_TOKENS[:3]
    be0, _ = native_backend(tiny_ck, 0.1, 0.35)
    want = torch.stack([be0.forward([t]) for t in tokens])
    be, rt, fe = front_end_backend(tiny_ck)
    got = torch.stack([be.forward([t]) for t in tokens])
    assert torch.equal(got, want)
    n = tiny_ck.config.num_hidden_layers
    assert be.decoder.native_layers == len(tokens) * n and not fe.held
    first = rt.log.index(("wait", 1))  # step 1, layer 0: the wait and the held launch, then the lane, then release
    kinds = [k for k, _ in rt.log[first:] if k != "copy"]
    assert kinds[:4] == ["wait", "lane", "query", "released"]  # held through the CPU's and the lane's work
    assert [x for k, x in rt.log if k == "released"][: n] == list(range(1, n + 1))


def test_a_step_that_fails_releases_the_queued_graphs(tiny_ck: Checkpoint) -> None:
    from native.kernel import KernelError

    be, _, fe = front_end_backend(tiny_ck, fail="copy")
    with pytest.raises(KernelError, match="cudaMemcpy2DAsync"):
        be.forward([LANE_TOKENS[0]])
    step = int(be.core.np_ctrl[1])
    assert (be.core.np_cpu_done == step).all()  # what a graph queued behind a flag waits for
    fe.flush()
    assert not fe.held


ADAPTIVE = {"refresh_every": 1, "refresh_m": 6}  # candidates every token: layers that miss one yield


def same_residency(a: GpuBackend, b: GpuBackend) -> None:
    assert a.residency.stats.admissions == b.residency.stats.admissions > 0
    assert a.pool.where == b.pool.where and a.policy.pending == b.policy.pending
    np.testing.assert_array_equal(a.decoder.stats.per_layer_kinds, b.decoder.stats.per_layer_kinds)


def test_a_layer_that_misses_a_candidate_takes_the_python_path(tiny_ck: Checkpoint) -> None:
    """Adaptive residency: a layer whose misses include an admission candidate is handed back after the routing is
    read (the Python path captures it as the CPU reads it); every other layer stays in the native call. The same
    logits bit for bit, the same admissions and slots as the Python path alone."""
    tokens = LANE_TOKENS
    plain = python_path(tiny_ck, 0.1, 0.35, **ADAPTIVE)
    want = torch.stack([plain.forward([t]) for t in tokens])
    be, _ = native_backend(tiny_ck, 0.1, 0.35, **ADAPTIVE)
    got = torch.stack([be.forward([t]) for t in tokens])
    assert torch.equal(got, want)
    same_residency(be, plain)
    d, n = be.decoder, len(tokens) * tiny_ck.config.num_hidden_layers
    assert 0 < d.native_yields < n and 0 < d.native_layers < n and d.native_layers + d.native_yields == n
    # a mask of nothing wanted never yields, and the missed candidates then go uncaptured: fewer admissions
    be2, _ = native_backend(tiny_ck, 0.1, 0.35, **ADAPTIVE)
    nat = be2.decoder.native_layer
    assert nat is not None
    nat.wanted = np.zeros_like(be2.policy.wanted_mask())
    torch.stack([be2.forward([t]) for t in tokens])
    assert be2.decoder.native_yields == 0 and be2.residency.stats.admissions < be.residency.stats.admissions


def test_a_yield_behind_the_front_ends_wait_raises_the_flag(tiny_ck: Checkpoint) -> None:
    """decode_front_end_wait: a call that yields has already queued the next graph behind the layer's CPU flag;
    the Python path raises that flag after the CPU's work and launches nothing again."""
    tokens = LANE_TOKENS[:4]
    plain = python_path(tiny_ck, 0.1, 0.35, **ADAPTIVE)
    want = torch.stack([plain.forward([t]) for t in tokens])
    be, rt, fe = front_end_backend(tiny_ck, **ADAPTIVE)
    got = torch.stack([be.forward([t]) for t in tokens])
    assert torch.equal(got, want) and not fe.held and be.decoder.native_yields > 0
    same_residency(be, plain)
    n = tiny_ck.config.num_hidden_layers
    released = [x for k, x in rt.log if k == "released"]
    assert released == [i + 1 for _ in tokens for i in range(n)]  # each graph once, in order


def test_the_early_launchs_call_yields_too(tiny_ck: Checkpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = LANE_TOKENS[:4]
    plain, emu_py = early_backend(tiny_ck, monkeypatch, native=False, **ADAPTIVE)
    want = torch.stack([plain.forward([t]) for t in tokens])
    be, emu = early_backend(tiny_ck, monkeypatch, native=True, **ADAPTIVE)
    got = torch.stack([be.forward([t]) for t in tokens])
    assert torch.equal(got, want) and emu.ran == emu_py.ran and not emu.held
    assert be.decoder.native_yields > 0 and be.decoder.native_layers > 0
    same_residency(be, plain)

"""Early launch (EngineSettings.early_launch): the decode step queues each layer's graph before the
previous layer's CPU experts are done, and the graph's first kernel waits on the host's flag. A
fake GPU thread runs the queued graphs in stream order as the device would (a waiting graph spins
on ``np_cpu_done``), so the host's protocol is checked here without a GPU: every graph reads the
CPU result of its own step and layer, the routing and residency match the launch-after-compute
order, and a failing layer releases the graphs already queued. The waiting kernel itself runs
under the interpreter in test_gpu_kernels.py."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import pytest

from engine.gpu.admission import AdmissionPolicy, AdmissionSettings, Residency
from engine.gpu.decoder import Decoder
from engine.gpu.pool import SlotPool

LAYERS, EXPERTS, K, BT, H = 4, 16, 2, 4, 4


class FakeGpuCore:
    """Graphs queued on one stream, run by a thread; layer L routes (L + 5, L + pos // 4) mod E."""

    def __init__(self, table: np.ndarray, can_early: bool) -> None:
        self.table = table
        self.can_early = can_early
        self.cfg = SimpleNamespace(num_hidden_layers=LAYERS, num_experts_per_tok=K)
        self.kern = SimpleNamespace(block_t=BT)
        self.np_ctrl = np.zeros(8, dtype=np.int32)
        self.np_embed = np.zeros(H, dtype=np.float32)
        self.embed_table = np.ones((16, H), dtype=np.float32)
        self.np_flags = np.zeros(LAYERS + 1, dtype=np.int32)
        self.np_cpu_done = np.zeros(LAYERS, dtype=np.int32)
        self.np_route = np.zeros((LAYERS, 3 * BT), dtype=np.int32)
        self.np_t = np.zeros(H, dtype=np.float32)
        self.np_cpu_moe = np.zeros((2, H), dtype=np.float32)
        self.np_token = np.zeros(1, dtype=np.int32)
        self.np_late = np.zeros(1, dtype=np.int32)
        self.max_wait_s = 5.0  # the waiting kernel's bound (MAX_POLLS)
        self.stream: queue.Queue[tuple[bool, int] | None] = queue.Queue()
        self.read: list[tuple[int, int, float]] = []  # (step, layer read, value of cpu_moe seen)
        self.errors: list[str] = []
        self.gpu = threading.Thread(target=self._run, daemon=True)
        self.gpu.start()

    def run_layer(self, i: int) -> None:
        self.stream.put((False, i))

    def run_tail(self) -> None:
        self.stream.put((False, LAYERS))

    def run_early(self, i: int) -> None:
        assert self.can_early and 1 <= i <= LAYERS
        self.stream.put((True, i))

    def close(self) -> None:
        self.stream.put(None)
        self.gpu.join(5)

    def _run(self) -> None:
        while (item := self.stream.get()) is not None:
            wait, i = item
            step = int(self.np_ctrl[1])
            if wait:
                deadline = time.monotonic() + self.max_wait_s
                while self.np_cpu_done[i - 1] != step:
                    if time.monotonic() > deadline:
                        if self.max_wait_s >= 5:
                            self.errors.append(f"graph {i} of step {step} never released")
                        self.np_late[0] = step
                        break
                    time.sleep(0)
            if i > 0:  # combine: the previous layer's CPU result, read where the graph runs
                self.read.append((step, i - 1, float(self.np_cpu_moe[(i - 1) % 2][0])))
            if i < LAYERS:
                pos = int(self.np_ctrl[0])
                ids = [(i + 5) % EXPERTS, (i + pos // 4) % EXPERTS]
                row = self.np_route[i]
                row[:K] = ids
                row[BT : BT + K] = np.array([0.5, 0.5], dtype=np.float32).view(np.int32)
                row[2 * BT : 2 * BT + K] = [self.table[i, e] for e in ids]
            if i == LAYERS:  # the tail picks a token from what the last layer's combine read
                self.np_token[0] = int(self.np_cpu_moe[(i - 1) % 2][0]) % 997
            self.np_flags[i] = step


class StepMisses:
    """Writes a value naming the step and layer, so the fake GPU can tell what it read."""

    name = "fake"

    def __init__(self, core: FakeGpuCore, fail_at: tuple[int, int] | None = None,
                 slow_at: tuple[int, int] | None = None) -> None:
        self.core = core
        self.fail_at = fail_at
        self.slow_at = slow_at

    def compute(self, layer: int, x: np.ndarray, experts: list[int], weights: Sequence[float], out: np.ndarray,
                captures: dict[int, np.ndarray], heads: dict[int, int] | None = None) -> None:
        step = int(self.core.np_ctrl[1])
        if (step, layer) == self.fail_at:
            raise RuntimeError("kernel failed")
        time.sleep(0.2 if (step, layer) == self.slow_at else 0.001)  # the GPU thread runs meanwhile
        out[:] = 1000 * step + layer

    def prefault(self) -> float:
        return 0.0


class Copier:
    def start(self, slot: int, buffer: int) -> object:
        return None

    def done(self, handle: object) -> bool:
        return True


def make(early: bool, fail_at: tuple[int, int] | None = None,
         slow_at: tuple[int, int] | None = None) -> tuple[Decoder, FakeGpuCore]:
    table = np.full((LAYERS, EXPERTS), -1, dtype=np.int32)
    pool = SlotPool(8, 0, table)
    policy = AdmissionPolicy(LAYERS, EXPERTS, AdmissionSettings(refresh_every=2, refresh_m=4, capture_buffers=4))
    core = FakeGpuCore(table, can_early=early)
    res = Residency(pool, policy, Copier(), 4)
    dec = Decoder(core, StepMisses(core, fail_at, slow_at), pool, policy, res,  # type: ignore[arg-type]
                  [np.zeros(8, np.uint8) for _ in range(4)])
    dec.early_launch = early
    return dec, core


def run(dec: Decoder, core: FakeGpuCore, steps: int) -> list[tuple[float, int, int]]:
    out = []
    for pos in range(steps):
        tok = dec.step(1, pos)
        assert tok == (1000 * dec.step_no + LAYERS - 1) % 997  # the tail saw this step's last result
        out.append((dec.stats.last_hit_rate, dec.residency.stats.admissions, len(dec.pool.where)))
    core.close()
    return out


def test_every_graph_reads_its_own_layers_result_and_decisions_match_the_plain_order() -> None:
    plain, pc = make(early=False)
    early, ec = make(early=True)
    want = run(plain, pc, 12)
    got = run(early, ec, 12)
    assert not ec.errors
    assert got == want  # same hits, admissions and residency step by step
    assert early.residency.stats.admissions > 0 and max(h for h, _, _ in got) > 0
    assert (early.stats.per_layer_kinds == plain.stats.per_layer_kinds).all()
    # each graph combined the CPU result of the previous layer of its own step, never an older one
    assert ec.read == [(s, layer, 1000.0 * s + layer) for s in range(1, 13) for layer in range(LAYERS)]


def test_the_flag_is_what_releases_a_queued_graph() -> None:
    dec, core = make(early=True)
    dec.step(1, 0)
    core.np_ctrl[1] = 99  # a step the host has not flagged: the queued graph must wait
    core.run_early(1)
    time.sleep(0.05)
    assert core.np_flags[1] != 99
    core.np_cpu_done[0] = 99
    deadline = time.monotonic() + 5
    while core.np_flags[1] != 99 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert core.np_flags[1] == 99
    core.close()


def test_a_failing_layer_releases_the_graphs_already_queued() -> None:
    dec, core = make(early=True, fail_at=(2, 1))
    dec.step(1, 0)
    with pytest.raises(RuntimeError, match="kernel failed"):
        dec.step(1, 1)
    core.close()
    assert not core.gpu.is_alive() and not core.errors  # nothing left spinning
    # the next step is decoded normally
    dec2, core2 = make(early=True)
    run(dec2, core2, 2)
    assert not core2.errors


def test_a_wait_that_gives_up_has_the_token_decoded_again() -> None:
    dec, core = make(early=True, slow_at=(3, 1))
    core.max_wait_s = 0.05  # the kernel's bound, reached while layer 1 of step 3 takes 0.2 s
    run(dec, core, 5)  # every token checked against its own step's result
    assert dec.late_steps == 1 and dec.early_launch
    assert dec.stats.tokens == 6  # the late step and its redo


def test_waits_that_keep_giving_up_turn_the_early_launch_off() -> None:
    dec, core = make(early=True)
    dec.late_limit = 2
    core.max_wait_s = 0.0  # every wait gives up at once (a driver that never starts the queued graphs in time)
    run(dec, core, 4)  # every token still checked against its own step's result
    assert dec.late_steps == 2 and not dec.early_launch
    assert dec.stats.tokens == 6  # two late steps redone, then the plain launch


def test_late_steps_that_are_not_in_a_row_keep_the_early_launch() -> None:
    dec, core = make(early=True)
    dec.late_limit = 2
    core.max_wait_s = 0.05
    slow = {3, 6}  # two late steps with on-time steps between them (a cold page-in, not a broken driver)
    orig = dec.misses.compute

    def compute(layer, x, experts, weights, out, captures, heads=None):  # type: ignore[no-untyped-def]
        if layer == 1 and int(core.np_ctrl[1]) in slow and dec.early_launch:
            time.sleep(0.2)
        orig(layer, x, experts, weights, out, captures)

    dec.misses.compute = compute  # type: ignore[method-assign]
    run(dec, core, 6)
    assert dec.late_steps == 2 and dec.early_launch

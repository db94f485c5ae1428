"""The decode step's host order (no GPU, no Triton): a fake core that logs each launch, the real
pool, policy and residency. A layer's admissions and scores are recorded while the next layer's
graph runs (after its launch, before its routing is read), never between a layer's CPU experts
and the next launch; their logical order stays that of the serial loop."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import pytest

from engine.gpu.admission import AdmissionPolicy, AdmissionSettings, Residency
from engine.gpu.decoder import Decoder
from engine.gpu.pool import SlotPool

LAYERS, EXPERTS, K, BT = 3, 8, 2, 4


class Log(list[str]):
    pass


class FakeCore:
    """Publishes each layer's routing at its launch: experts (2L, 2L+1), both misses unless resident."""

    def __init__(self, log: Log, table: np.ndarray) -> None:
        self.log = log
        self.table = table
        self.cfg = SimpleNamespace(num_hidden_layers=LAYERS, num_experts_per_tok=K)
        self.kern = SimpleNamespace(block_t=BT)
        self.np_ctrl = np.zeros(8, dtype=np.int32)
        self.np_embed = np.zeros(4, dtype=np.float32)
        self.embed_table = np.ones((16, 4), dtype=np.float32)
        self.np_flags = np.zeros(LAYERS + 1, dtype=np.int32)
        self.np_route = np.zeros((LAYERS, 3 * BT), dtype=np.int32)
        self.np_t = np.zeros(4, dtype=np.float32)
        self.np_cpu_moe = [np.zeros(4, dtype=np.float32) for _ in range(2)]
        self.np_token = np.zeros(1, dtype=np.int32)

    def run_layer(self, layer: int) -> None:
        self.log.append(f"launch {layer}")
        ids = [2 * layer, 2 * layer + 1]
        row = self.np_route[layer]
        row[:K] = ids
        row[BT : BT + K] = np.array([0.5, 0.5], dtype=np.float32).view(np.int32)
        row[2 * BT : 2 * BT + K] = [self.table[layer, e] for e in ids]
        self.np_flags[layer] = self.np_ctrl[1]

    def run_tail(self) -> None:
        self.log.append("launch tail")
        self.np_flags[LAYERS] = self.np_ctrl[1]


class FakeMisses:
    name = "fake"

    def __init__(self, log: Log, fail_at: int | None = None) -> None:
        self.log = log
        self.fail_at = fail_at

    def compute(self, layer: int, x: np.ndarray, experts: list[int], weights: Sequence[float], out: np.ndarray,
                captures: dict[int, np.ndarray], heads: dict[int, int] | None = None) -> None:
        if layer == self.fail_at:
            raise RuntimeError("kernel failed")
        self.log.append(f"compute {layer} captures {sorted(captures)}")

    def prefault(self) -> float:
        return 0.0


class LoggingResidency(Residency):
    def __init__(self, log: Log, *a: object) -> None:
        super().__init__(*a)  # type: ignore[arg-type]
        self.log = log

    def after_compute(self, layer: int, captured: dict[int, int]) -> int:
        self.log.append(f"admit {layer} {sorted(captured)}")
        return super().after_compute(layer, captured)


class Copier:
    def start(self, slot: int, buffer: int) -> object:
        return None

    def done(self, handle: object) -> bool:
        return True


def make(fail_at: int | None = None) -> tuple[Decoder, Log, AdmissionPolicy]:
    log = Log()
    table = np.full((LAYERS, EXPERTS), -1, dtype=np.int32)
    pool = SlotPool(2 * LAYERS, 0, table)
    settings = AdmissionSettings(refresh_every=1, refresh_m=16, capture_buffers=2 * LAYERS)
    policy = AdmissionPolicy(LAYERS, EXPERTS, settings)
    res = LoggingResidency(log, pool, policy, Copier(), 2 * LAYERS)
    core = FakeCore(log, table)
    dec = Decoder(core, FakeMisses(log, fail_at), pool, policy, res, [np.zeros(8, np.uint8) for _ in range(2 * LAYERS)])  # type: ignore[arg-type]
    return dec, log, policy


def test_a_layers_admissions_run_after_the_next_launch_and_before_its_captures() -> None:
    dec, log, policy = make()
    dec.step(1, 0)  # scores every routed expert; the refresh makes them candidates
    assert policy.pending
    log.clear()
    dec.step(1, 1)
    for layer in range(LAYERS):
        nxt = f"launch {layer + 1}" if layer + 1 < LAYERS else "launch tail"
        admit = log.index(f"admit {layer} {[2 * layer, 2 * layer + 1]}")
        assert log.index(f"compute {layer} captures {[2 * layer, 2 * layer + 1]}") < log.index(nxt) < admit
        if layer + 1 < LAYERS:  # the logical order: layer L's admissions precede layer L+1's captures
            assert admit < log.index(f"compute {layer + 1} captures {[2 * layer + 2, 2 * layer + 3]}")
    assert dec.residency.stats.admissions == 2 * LAYERS
    dec.pool.check()
    # the next token finds them resident (the copies landed at its first layer's poll)
    log.clear()
    dec.step(1, 2)
    assert dec.stats.last_hit_rate == 1.0


def test_scores_and_kinds_are_recorded_for_every_layer() -> None:
    dec, _, policy = make()
    dec.step(1, 0)
    dec.step(1, 1)
    assert dec.stats.per_layer_kinds.sum(axis=1).tolist() == [2 * K] * LAYERS
    assert (policy.counts.sum(axis=1) == 2 * K).all()


def test_a_failing_layer_still_records_the_previous_layers_bookkeeping() -> None:
    dec, _, policy = make(fail_at=2)
    with pytest.raises(RuntimeError, match="kernel failed"):
        dec.step(1, 0)
    assert policy.counts[:2].sum() == 2 * K  # layers 0 and 1 scored, layer 2 never computed
    assert policy.counts[2].sum() == 0

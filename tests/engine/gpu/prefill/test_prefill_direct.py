"""Direct copies from the registered checkpoint mapping (engine/gpu/prefill/direct.py), on the CPU:
registration is replaced by a recorder, the copies run as plain tensor copies."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.checkpoint import Checkpoint
from engine.gpu.layout import ExpertLayout
from engine.gpu.prefill.direct import MappedExperts, auto_budget, plan_copies, run_copies, runs
from engine.gpu.prefill.split import SplitRates, choose_cpu
from engine.plan import SLOT_PARTS


class Recorder:
    def __init__(self, fail_after: int = 1 << 30, err: int = 712) -> None:
        self.registered: list[tuple[int, int]] = []
        self.unregistered: list[int] = []
        self.fail_after, self.err = fail_after, err

    def register(self, ptr: int, n: int) -> int:
        if len(self.registered) >= self.fail_after:
            return self.err
        self.registered.append((ptr, n))
        return 0

    def unregister(self, ptr: int) -> None:
        self.unregistered.append(ptr)


@pytest.fixture(scope="module")
def sharded(synth_dir):
    # small shards: a layer's expert tensors spread over several files, as in the real checkpoint
    return Checkpoint.open(synth_dir("tiny", 3, max_shard_bytes=1 << 13))


def test_direct_sources_give_the_packed_bytes(sharded) -> None:
    lay = ExpertLayout.for_config(sharded.config)
    rec = Recorder()
    m = MappedExperts(sharded, lay, budget=1 << 40, register=rec.register, unregister=rec.unregister,
                      background=False)
    cfg = sharded.config
    assert m.error is None and m.ready_layers == cfg.num_hidden_layers
    assert len(rec.registered) == len({s for row in m.spans for s, _, _ in row.values()}) > 1
    for layer in range(cfg.num_hidden_layers):
        for e in (0, 1, cfg.num_local_experts - 1):
            dst = torch.zeros(lay.slot_bytes, dtype=torch.uint8)
            run_copies(m, dst, plan_copies(m, layer, [e], [0], lay.slot_bytes))
            assert np.array_equal(dst.numpy(), lay.pack_expert(sharded, layer, e)), (layer, e)
    m.close()
    assert sorted(rec.unregistered) == sorted(p for p, _ in rec.registered)
    assert m.locked_bytes == 0 and m.ready_layers == 0


def test_runs_join_consecutive_experts_in_consecutive_slots() -> None:
    assert runs([], []) == []
    assert runs([3, 4, 5, 9, 10, 12], [7, 8, 9, 10, 11, 7]) == [(3, 7, 3), (9, 10, 2), (12, 7, 1)]
    assert runs([3, 4], [8, 7]) == [(3, 8, 1), (4, 7, 1)]  # consecutive experts, slots not: two copies


def test_a_wave_lands_as_packing_would_put_it(sharded) -> None:
    """A wave with runs and gaps, into a pool of several slots: every slot holds exactly the packed
    expert, and the bytes between the slots' parts stay untouched."""
    lay = ExpertLayout.for_config(sharded.config)
    m = MappedExperts(sharded, lay, budget=1 << 40, register=Recorder().register, unregister=lambda p: None,
                      background=False)
    sb, layer = lay.slot_bytes, 1
    experts, slots = [0, 1, 2, 5, 6, 7], [2, 3, 4, 5, 0, 1]
    pool = torch.full((6 * sb,), 0xAB, dtype=torch.uint8)
    copies = plan_copies(m, layer, experts, slots, sb)
    assert len(copies) == 6 * 3  # six parts x runs (0-2 -> 2-4, 5 -> 5, 6-7 -> 0-1)
    run_copies(m, pool, copies)
    for e, s in zip(experts, slots, strict=True):
        want = lay.pack_expert(sharded, layer, e)
        got = pool[s * sb : (s + 1) * sb].numpy()
        written = np.zeros(sb, dtype=bool)
        for part in SLOT_PARTS:
            off, size = lay.offsets[part], m.spans[layer][part][2]
            assert np.array_equal(got[off : off + size], want[off : off + size]), (e, s, part)
            written[off : off + size] = True
        assert (got[~written] == 0xAB).all()  # padding between the parts: not written
    m.close()


def test_budget_and_failures_leave_layers_to_the_ring(sharded) -> None:
    lay = ExpertLayout.for_config(sharded.config)
    none = MappedExperts(sharded, lay, budget=1000, register=Recorder().register, background=False)
    assert none.ready_layers == 0 and "RAM budget" in (none.error or "")
    rec = Recorder(fail_after=1)
    part = MappedExperts(sharded, lay, budget=1 << 40, register=rec.register, unregister=rec.unregister,
                         background=False)
    assert "CUDA error 712" in (part.error or "")
    assert part.ready_layers < sharded.config.num_hidden_layers  # layers in the failed shard: not ready
    part.close()
    assert len(rec.unregistered) == 1


def test_background_registration_can_be_waited_for(sharded) -> None:
    lay = ExpertLayout.for_config(sharded.config)
    m = MappedExperts(sharded, lay, budget=1 << 40, register=Recorder().register, unregister=lambda p: None)
    m.wait(30)
    assert m.ready_layers == sharded.config.num_hidden_layers
    m.close()


def test_auto_budget() -> None:
    assert auto_budget("off") == 0
    assert auto_budget("on") > 1 << 50
    got = auto_budget("auto")
    assert got >= 0  # Linux: RAM less the headroom (0 on a small machine); elsewhere 0


def test_direct_lane_gives_the_cpu_fewer_experts() -> None:
    nbytes = 13_236_480  # a 120b expert
    pairs = {e: 16 for e in range(100)}  # a short prompt: every expert lightly used
    rates = SplitRates(cpu_pass=1 / 60e9, cpu_token=1 / 180e9, stage=1 / 10e9, direct=1 / 45e9)
    packed, cpu_p, stage_p = choose_cpu(pairs, nbytes, rates)
    direct, cpu_d, stage_d = choose_cpu(pairs, nbytes, rates, direct=True)
    assert len(direct) < len(packed)
    assert max(cpu_d, stage_d) < max(cpu_p, stage_p)

"""ResidencyManager over a real expert store built from the tiny synthetic checkpoint."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from conftest import linux_only

from engine.checkpoint import Checkpoint
from engine.residency import GIB, Mapping, MemoryInfo, ResidencyManager, checkpoint_regions, store_regions
from engine.settings import EngineSettings
from engine.store.reader import ExpertStore
from engine.store.writer import build_store
from engine.synth import PRESETS, write_synthetic_checkpoint
from engine.types import Telemetry

pytestmark = linux_only
BIG = MemoryInfo(256 * GIB, 200 * GIB)


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    write_synthetic_checkpoint(d, PRESETS["tiny"], seed=3)
    return build_store(Checkpoint.open(d), d / "experts-raw.nstore", "raw").path


@pytest.fixture
def store(store_path):
    s = ExpertStore.open(store_path)
    yield s
    s.close()


def wait_for(cond, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


def test_regions_follow_the_record_table(store):
    regs = store_regions(store)
    assert len(regs) == store.layers * store.experts
    assert regs[9].key == (1, 1) and regs[9].offset == store.offset(1, 1)
    assert regs[9].length == len(store.record(1, 1))


def test_warmup_lock_sampling_and_telemetry(store):
    res = ResidencyManager.for_store(store, EngineSettings(mlock_gib=0.001), mem=BIG, hot=[(3, 7)],
                                     sample_interval_s=0.005)
    assert res.plan.keys[0] == (3, 7) and res.budget.budget_bytes == res.residency.store_bytes
    res.start()
    assert res.warmer is not None and res.warmer.join(10)
    assert res.warmer.progress().state == "done"
    assert res.lock_result.method == "mlock" and res.lock_result.locked_bytes > 0  # root or a roomy rlimit
    assert (3, 7) in res.lock_result.keys  # the hot set is locked first
    assert wait_for(lambda: res.stats().resident_bytes == res.residency.store_bytes)
    res.token_started()
    sum(int(store.record(0, e)[::4096].sum()) for e in range(store.experts))
    f = res.token_finished()
    assert f.total >= 0 and res.stats().faults.tokens == 1

    t = SimpleNamespace(store_bytes=0, store_resident_bytes=0, warmup_state="", warmup_fraction=0.0,
                        ram_budget_bytes=0, ram_locked_bytes=0, faults_major_per_token=-1.0)
    res.fill_telemetry(t)
    assert t.store_bytes == t.store_resident_bytes == res.residency.store_bytes
    assert (t.warmup_state, t.warmup_fraction) == ("done", 1.0)
    assert t.ram_locked_bytes == res.lock_result.locked_bytes and t.faults_major_per_token >= 0
    tel = Telemetry()
    res.fill_telemetry(tel)  # fields the lead has not added yet are skipped, nothing breaks
    res.close()
    res.close()
    assert store.record(0, 0).sum() >= 0  # the store's own mapping is still usable


def test_the_whole_store_is_sampled_when_warm_up_ends(store):
    """The sampler re-reads one layer every interval; right after a warm-up the panel read "resident 50 %" beside
    "warm-up: done (100 %)" until it had been round every layer. The end of the warm-up now samples them all."""
    res = ResidencyManager.for_store(store, EngineSettings(), mem=BIG, sample_interval_s=0)  # no sampler thread
    assert res.stats().resident_bytes == 0
    res.start()
    assert res.warmer is not None and res.warmer.join(10) and res.warmer.progress().state == "done"
    assert wait_for(lambda: res.stats().resident_bytes == res.residency.store_bytes)
    res.close()


def test_computing_pauses_warmup(store):
    res = ResidencyManager.for_store(store, EngineSettings(), mem=BIG, sample_interval_s=0)
    assert res.warmer is not None
    with res.computing():
        res.start()
        time.sleep(0.05)
        assert res.warmer.progress().done_bytes == 0
        assert res.warmer.progress().state == "paused"
    assert res.warmer.join(10) and res.warmer.progress().state == "done"
    res.close()


def test_partial_budget_no_warmup_and_prefetch(store):
    one_record = len(store.record(0, 0))
    s = EngineSettings(ram_budget_gib=3.5 * one_record / GIB, warmup=False)
    res = ResidencyManager.for_store(store, s, mem=BIG, sample_interval_s=0, prefetch_enabled=True,
                                     exclude=[(0, 0)])
    assert res.warmer is None
    assert res.budget.store_bytes == res.residency.store_bytes - one_record
    assert res.plan.keys == [(0, 1), (0, 2), (0, 3)]  # file order after the excluded static expert
    res.start()
    assert res.prefetch([(1, 0), (1, 1)]) == 2 * one_record
    res.residency.refresh()
    out = res.experts_released([(1, 0)])  # everything is cached here: far past the 3.5-record budget
    assert out.released == [(1, 0)] and out.over_bytes > 0
    res.sample()
    res.close()


def test_prefetch_off_by_default(store):
    res = ResidencyManager.for_store(store, EngineSettings(warmup=False), mem=BIG, sample_interval_s=0)
    assert res.prefetch([(0, 0)]) == 0  # the design measured it neutral; opt-in
    assert res.stats().warm is None and res.stats().telemetry_fields()["warmup_state"] == "off"
    res.close()


@pytest.fixture(scope="module")
def sharded_checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("sharded")
    write_synthetic_checkpoint(d, PRESETS["tiny"], seed=4, max_shard_bytes=64 << 10)  # several shard files
    return d


def test_checkpoint_regions_match_the_expert_views(sharded_checkpoint):
    ck = Checkpoint.open(sharded_checkpoint)
    files, regions = checkpoint_regions(ck)
    assert len(files) > 1
    assert len(regions) == 6 * ck.config.num_hidden_layers * ck.config.num_local_experts
    maps = [Mapping.open(f) for f in files]
    for layer, e in [(0, 0), (2, 5), (3, 7)]:
        mine = sorted((bytes(maps[r.file].view[r.offset : r.end]) for r in regions if r.key == (layer, e)), key=len)
        theirs = sorted((a.tobytes() for a in ck.expert_arrays(layer, e).values()), key=len)
        assert mine == theirs
    for m in maps:
        m.close()
    ck.close()


def test_manager_over_checkpoint_shards(sharded_checkpoint):
    ck = Checkpoint.open(sharded_checkpoint)
    res = ResidencyManager.for_checkpoint(ck, EngineSettings(), mem=BIG, hot=[(1, 2)], sample_interval_s=0)
    assert len(res.mappings) > 1 and res.plan.keys[0] == (1, 2)
    res.start()
    assert res.warmer is not None and res.warmer.join(10) and res.warmer.progress().state == "done"
    assert res.residency.refresh() == res.residency.store_bytes  # every part of every expert, all shards
    assert res.prefetch([(0, 0)]) == 0
    res.close()
    assert all(m.closed for m in res.mappings)
    ck.close()

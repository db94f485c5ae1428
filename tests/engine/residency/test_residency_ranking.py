"""Calibration ranking (order, persistence, model checks) and the warm-up plan built from it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.residency import ExpertRanking, RankingError, Region, WarmupPlan, ranking_path


def regions(layers: int = 3, experts: int = 4, size: int = 100) -> list[Region]:
    # file order deliberately differs from key order: layer 2 is stored first
    out = []
    off = 0
    for layer in (2, 0, 1):
        for e in range(experts):
            out.append(Region(layer, e, off, size))
            off += size
    return out


def test_order_by_count_then_key_and_zeros_left_out():
    counts = np.array([[0, 5, 1, 0], [5, 0, 0, 9], [1, 0, 2, 0]])
    r = ExpertRanking(counts)
    assert r.order() == [(1, 3), (0, 1), (1, 0), (2, 2), (0, 2), (2, 0)]
    assert r.top(2) == [(1, 3), (0, 1)]


def test_record_token_accumulates_routing():
    r = ExpertRanking.empty(2, 4)
    r.record_token([[0, 1], [3, 1]])
    r.record_token([[0, 2], [3, 0]])
    r.record(1, [2], weight=16)  # prompt tokens weighted like the design's prefill weight
    assert r.counts.tolist() == [[2, 1, 1, 0], [1, 1, 16, 2]]
    assert r.tokens == 2
    assert r.order()[:2] == [(1, 2), (0, 0)]


def test_save_load_round_trip_and_checks(tmp_path):
    r = ExpertRanking(np.arange(12).reshape(3, 4), fingerprint="abc123", tokens=7)
    p = r.save(ranking_path(tmp_path / "cache", "abc123"))
    assert p.name == "expert-ranking-abc123.json"
    back = ExpertRanking.load(p, expect_fingerprint="abc123", expect_shape=(3, 4))
    assert back.counts.tolist() == r.counts.tolist() and back.tokens == 7
    with pytest.raises(RankingError, match="not 'other'"):
        ExpertRanking.load(p, expect_fingerprint="other")
    with pytest.raises(RankingError, match="does not match the model"):
        ExpertRanking.load(p, expect_shape=(36, 128))
    assert ExpertRanking.load_or_none(p, expect_fingerprint="other") is None
    assert ExpertRanking.load_or_none(tmp_path / "missing.json") is None
    assert not list((tmp_path / "cache").glob("*.tmp"))  # atomic write leaves no temp file


@pytest.mark.parametrize("payload, match", [
    ("not json", "not JSON"),
    (json.dumps({"format": "something-else"}), "not an expert ranking"),
    (json.dumps({"format": "neural-expert-ranking", "version": 99}), "unsupported ranking version"),
    (json.dumps({"format": "neural-expert-ranking", "version": 1, "layers": 2, "experts": 2,
                 "counts": [[1, 2], [3]]}), "bad counts"),
    (json.dumps({"format": "neural-expert-ranking", "version": 1, "layers": 2, "experts": 3,
                 "counts": [[1, 2], [3, 4]]}), "does not match layers"),
])
def test_malformed_ranking_files_are_refused(tmp_path, payload, match):
    p = tmp_path / "r.json"
    p.write_text(payload)
    with pytest.raises(RankingError, match=match):
        ExpertRanking.load(p)


def test_negative_counts_refused():
    with pytest.raises(RankingError):
        ExpertRanking(np.array([[1, -1]]))


def test_plan_orders_hot_then_ranked_then_rest_in_file_order():
    regs = regions()
    ranking = ExpertRanking(np.array([[0, 0, 0, 7], [0, 3, 0, 0], [0, 0, 0, 0]]))
    plan = WarmupPlan.build(regs, budget_bytes=10**9, hot=[(1, 2), (0, 0)], ranking=ranking)
    keys = plan.keys
    assert keys[:2] == [(1, 2), (0, 0)]  # hot set as given
    assert keys[2:4] == [(0, 3), (1, 1)]  # ranking by count
    rest = [r.key for r in regs if r.key not in set(keys[:4])]
    assert keys[4:] == rest  # file order, so the disk reads sequentially
    assert (plan.hot_count, plan.ranked_count, plan.rest_count) == (2, 2, 8)
    assert plan.planned_bytes == plan.store_bytes == 1200


def test_plan_cut_at_budget_is_a_prefix():
    regs = regions()
    ranking = ExpertRanking(np.array([[0, 0, 0, 7], [0, 3, 0, 0], [0, 0, 0, 1]]))
    full = WarmupPlan.build(regs, 10**9, hot=[(2, 1)], ranking=ranking).keys
    for budget in (0, 99, 100, 250, 400, 1199):
        plan = WarmupPlan.build(regs, budget, hot=[(2, 1)], ranking=ranking)
        assert plan.keys == full[: budget // 100]
        assert plan.planned_bytes <= budget


def test_plan_skips_excluded_duplicates_and_unknown_keys():
    regs = regions()
    ranking = ExpertRanking(np.array([[9, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]))
    plan = WarmupPlan.build(regs, 10**9, hot=[(0, 0), (0, 0), (7, 7)], ranking=ranking, exclude=[(2, 0), (2, 1)])
    assert plan.keys.count((0, 0)) == 1
    assert (7, 7) not in plan.keys and (2, 0) not in plan.keys and (2, 1) not in plan.keys
    assert plan.store_bytes == 1000 == plan.planned_bytes


def test_plan_keeps_all_parts_of_a_multi_region_expert():
    regs = [Region(0, 0, 0, 50), Region(0, 1, 50, 60), Region(0, 0, 110, 50)]  # expert 0 in two parts
    plan = WarmupPlan.build(regs, 100, hot=[(0, 0)])
    assert [(r.key, r.offset) for r in plan.regions] == [((0, 0), 0), ((0, 0), 110)]
    assert plan.hot_count == 1 and plan.rest_count == 0  # expert 1 (60 B) no longer fits

"""Harness arithmetic: medians and spreads, weighted rates, ratios, mirrored order."""

from __future__ import annotations

import pytest

from bench.harness.ordering import mirrored_order
from bench.harness.stats import median_of_dicts, quantile, ratio, summarize, weighted_rate


def test_mirrored_order_two_endpoints_two_rounds():
    assert mirrored_order(["A", "B"], 2) == ["A", "B", "B", "A"]


def test_mirrored_order_three_endpoints():
    assert mirrored_order(["A", "B", "C"], 2) == ["A", "B", "C", "C", "B", "A"]
    assert mirrored_order(["A", "B", "C"], 3) == ["A", "B", "C", "C", "B", "A", "A", "B", "C"]


def test_mirrored_order_single_round_and_endpoint():
    assert mirrored_order(["A", "B"], 1) == ["A", "B"]
    assert mirrored_order(["only"], 4) == ["only"] * 4


@pytest.mark.parametrize(("names", "rounds"), [(["A", "B"], 0), ([], 2), (["A", "A"], 2)])
def test_mirrored_order_rejects(names, rounds):
    with pytest.raises(ValueError):
        mirrored_order(names, rounds)


def test_weighted_rate_is_total_tokens_over_total_seconds():
    # 511 tokens in 20 s and 99 tokens in 10 s: (511 + 99) / 30 = 20.333..., while the mean of
    # the per-answer rates (25.55 and 9.9) would be 17.725
    assert weighted_rate([511, 99], [20.0, 10.0]) == pytest.approx(610 / 30)
    assert weighted_rate([100, 100, 100], [1.0, 2.0, 2.0]) == pytest.approx(60.0)


def test_weighted_rate_edge_cases():
    assert weighted_rate([], []) is None
    assert weighted_rate([5], [0.0]) is None
    with pytest.raises(ValueError):
        weighted_rate([1, 2], [1.0])


def test_summarize_median_and_spread():
    s = summarize([4.0, 1.0, 3.0, 2.0])
    assert s["n"] == 4
    assert s["median"] == 2.5
    assert (s["min"], s["max"]) == (1.0, 4.0)
    assert s["q1"] == pytest.approx(1.75) and s["q3"] == pytest.approx(3.25)
    assert s["runs"] == [4.0, 1.0, 3.0, 2.0]  # in run order
    assert summarize([])["median"] is None


def test_quantile_interpolates():
    assert quantile([0.0, 10.0], 0.25) == 2.5
    assert quantile([7.0], 0.9) == 7.0


def test_ratio_and_dict_medians():
    assert ratio(30.0, 20.0) == 1.5
    assert ratio(None, 2.0) is None and ratio(1.0, 0.0) is None
    assert median_of_dicts([{"a": 1.0, "b": 5.0}, {"a": 3.0}, {"a": 2.0, "b": 7.0}]) == {"a": 2.0, "b": 6.0}

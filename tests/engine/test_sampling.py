"""The sampler against transformers' processors and warpers, statistically with fixed seeds.

Each distribution test draws N tokens through the real sampler and runs a chi-square test
against the exact probabilities transformers' processors give (bins with an expected count
below 5 merged); with fixed seeds the outcome is deterministic, and ignoring any parameter
moves the distribution far past the bound (see test_ignoring_a_parameter_is_detected).
"""

from __future__ import annotations

import math
from typing import cast

import pytest
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import engine.sampling as sampling
import engine.sampling_host as sampling_host
from engine.sampling import Sampler
from engine.stops import StopMatcher
from engine.types import GenerationParams

V = 3000  # > PRESELECT: candidates, complete prefixes and the fallback all get exercised
N = 2000  # draws per distribution
P_MIN = 1e-3  # chi-square p-value bound (deterministic with the fixed seeds)


def lm_logits(seed: int, spread: float = 2.0, peaks: int = 12, boost: float = 7.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(V, generator=g) * spread
    x[torch.randperm(V, generator=g)[:peaks]] += boost
    return x


def reference(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
              min_p: float = 0.0, logit_bias: tuple[tuple[int, float], ...] = (), repetition_penalty: float = 1.0,
              presence_penalty: float = 0.0, frequency_penalty: float = 0.0, prompt: tuple[int, ...] = (),
              output: tuple[int, ...] = ()) -> torch.Tensor:
    """Exact probabilities: transformers' processors in generate()'s order (+ OpenAI penalties)."""
    scores = logits.double()[None].clone()
    ids = cast(torch.LongTensor, torch.tensor([list(prompt) + list(output) or [0]]))
    if logit_bias:
        scores = SequenceBiasLogitsProcessor([[[t], b] for t, b in logit_bias])(ids, scores)
    if repetition_penalty != 1.0:
        scores = RepetitionPenaltyLogitsProcessor(repetition_penalty)(ids, scores)
    for t in set(output):  # OpenAI: mu[j] -= c[j] * frequency + (c[j] > 0) * presence
        scores[0, t] -= output.count(t) * frequency_penalty + presence_penalty
    scores = TemperatureLogitsWarper(temperature)(ids, scores)
    if top_k:
        scores = TopKLogitsWarper(top_k)(ids, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(ids, scores)
    if min_p > 0.0:
        scores = MinPLogitsWarper(min_p)(ids, scores)
    return torch.softmax(scores[0], -1)


def chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of counts against probs; bins expecting < 5 merged into one."""
    n = float(counts.sum())
    exp = probs.double() * n
    assert int(counts[exp == 0].sum()) == 0, "a token outside the reference's support was drawn"
    big = exp >= 5
    obs = torch.cat([counts[big].double(), counts[~big].double().sum().reshape(1)])
    ex = torch.cat([exp[big], exp[~big].sum().reshape(1)])
    keep = ex > 0
    obs, ex = obs[keep], ex[keep]
    stat = float(((obs - ex) ** 2 / ex).sum())
    df = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64),
                                         torch.tensor(stat / 2.0, dtype=torch.float64)))


def draw(logits: torch.Tensor, seed: int, n: int = N, device_code: bool = False, **kw: object) -> torch.Tensor:
    s = Sampler(seed=seed, **kw)  # type: ignore[arg-type]
    s.host_math = not device_code  # device_code: the GPU path's torch ops, run on the CPU
    counts = torch.zeros(V, dtype=torch.long)
    for _ in range(n):
        counts[s(logits)] += 1
    return counts


CASES = {
    "T=1": dict(temperature=1.0),
    "T=0.7 top_p=0.9": dict(temperature=0.7, top_p=0.9),
    "T=1.3 top_k=40": dict(temperature=1.3, top_k=40),
    "T=1 top_k=300 top_p=0.95": dict(temperature=1.0, top_k=300, top_p=0.95),  # k past PRESELECT
    "T=1 top_p=0.8 min_p=0.02": dict(temperature=1.0, top_p=0.8, min_p=0.02),
    "T=2 min_p=0.01": dict(temperature=2.0, min_p=0.01),  # the kept set runs past the candidates
    "T=1.5 top_p=0.97": dict(temperature=1.5, top_p=0.97),  # idem: the full sorted path
}


@pytest.mark.parametrize("name", list(CASES))
def test_distribution_matches_transformers(name: str) -> None:
    kw = CASES[name]
    logits = lm_logits(11)
    counts = draw(logits, seed=5, **kw)  # type: ignore[arg-type]
    assert chi_square_p(counts, reference(logits, **kw)) > P_MIN  # type: ignore[arg-type]


@pytest.mark.slow  # ~10 s: 2000 draws through the torch ops on the CPU (the fast suite compares paths token for token)
def test_device_path_distribution_matches_transformers() -> None:
    """The sort-free device path (its torch ops on the CPU) against transformers directly."""
    kw = dict(temperature=0.7, top_k=300, top_p=0.9, min_p=0.001)
    logits = lm_logits(19, spread=0.3, peaks=3, boost=2.0)  # the kept set runs far past 256 tokens
    counts = draw(logits, seed=6, device_code=True, **kw)  # type: ignore[arg-type]
    assert chi_square_p(counts, reference(logits, **kw)) > P_MIN  # type: ignore[arg-type]


def test_penalties_and_bias_match_their_definitions() -> None:
    """Repetition over prompt + output (transformers), presence/frequency over the output
    (OpenAI), bias first. The output is fixed by biasing: each sampler sees the same history."""
    logits = lm_logits(12)
    top = torch.topk(logits, 6).indices.tolist()
    prompt = (top[0], top[1], 17)
    kw = dict(logit_bias=((top[2], 1.5), (top[3], -2.0), (5, 3.0)), repetition_penalty=1.3, presence_penalty=0.4,
              frequency_penalty=0.3)
    s = Sampler(seed=3, prompt=prompt, **kw)  # type: ignore[arg-type]
    # feed a known output: sample once from a one-hot row per forced token
    forced = (top[4], top[4], top[1])
    for t in forced:
        row = torch.full((V,), -1e4)
        row[t] = 0.0
        assert s(row) == t
    counts = torch.zeros(V, dtype=torch.long)
    for _ in range(N):
        counts[s._sample(s.penalties.apply(logits, True), True)] += 1  # the same history for every draw
    ref = reference(logits, prompt=prompt, output=forced, **kw)  # type: ignore[arg-type]
    assert chi_square_p(counts, ref) > P_MIN


def test_ignoring_a_parameter_is_detected() -> None:
    """The bound rejects the distribution each parameter produces when that parameter is dropped."""
    logits = lm_logits(11)
    base = dict(temperature=1.0, top_p=0.9)
    for extra in (dict(top_k=5), dict(min_p=0.3), dict(logit_bias=((int(logits.argmax()), -3.0),)),
                  dict(temperature=0.6), dict(top_p=0.5)):
        ref = reference(logits, **{**base, **extra})  # type: ignore[arg-type]
        counts = draw(logits, seed=5, n=2000, **base)  # type: ignore[arg-type]
        with pytest.raises(AssertionError):
            assert chi_square_p(counts, ref) > P_MIN


def test_each_new_parameter_changes_the_draws_as_defined() -> None:
    logits = lm_logits(13)
    order = torch.argsort(logits, descending=True).tolist()
    assert set(draw(logits, 1, 400, top_k=3).nonzero().flatten().tolist()) == set(order[:3])
    ratio = torch.exp(logits - logits.max())  # min_p keeps p >= min_p * p_max
    kept = set((ratio >= 0.2).nonzero().flatten().tolist())
    assert set(draw(logits, 1, 400, min_p=0.2).nonzero().flatten().tolist()) <= kept
    assert draw(logits, 1, 200, logit_bias=((order[0], -100.0),))[order[0]] == 0
    assert draw(logits, 1, 50, logit_bias=((17, 100.0),))[17] == 50
    # presence penalty 2 on a token sampled once makes it rarer; a frequency penalty keeps growing
    for kw in (dict(presence_penalty=2.0), dict(frequency_penalty=2.0), dict(repetition_penalty=3.0)):
        s = Sampler(seed=2, temperature=0, **kw)  # type: ignore[arg-type]
        assert s(logits) == order[0]
        assert s(logits) != order[0] or logits[order[0]] - logits[order[1]] > 2.0


def test_same_seed_same_tokens_whatever_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Host (numpy) and device (torch: topk candidates, id-order scan, full sort, penalties) code,
    tiny candidate lists (mostly the full sort) and every token a candidate: one seed, one
    token sequence."""
    logits = lm_logits(14)
    penalties = dict(logit_bias=((3, 2.0), (int(logits.argmax()), -1.0)), repetition_penalty=1.3,
                     presence_penalty=0.7, frequency_penalty=0.4, prompt=(1, 2, 3))
    for kw in [*CASES.values(), {**CASES["T=0.7 top_p=0.9"], **penalties}, {"temperature": 0.0, **penalties}]:
        a = Sampler(seed=9, **kw)  # type: ignore[arg-type]
        seq = [a(logits) for _ in range(40)]
        for preselect, device in ((256, True), (8, False), (8, True), (V, False)):
            with monkeypatch.context() as m:
                m.setattr(sampling, "PRESELECT", preselect)
                b = Sampler(seed=9, **kw)  # type: ignore[arg-type]
                b.host_math = not device
                assert [b(logits) for _ in range(40)] == seq, (kw, preselect, device)
    s1, s2, s3 = Sampler(seed=7), Sampler(seed=7), Sampler(seed=8)
    seq1 = [s1(logits) for _ in range(50)]
    assert seq1 == [s2(logits) for _ in range(50)] and seq1 != [s3(logits) for _ in range(50)]


def test_unseeded_sampler_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    a, b = Sampler(), Sampler(top_p=0.9)
    logits = lm_logits(15, spread=0.2, peaks=0)
    seq_a = [a(logits) for _ in range(20)]
    seq_b = [b(logits) for _ in range(20)]
    assert torch.equal(torch.get_rng_state(), before)
    assert seq_a != seq_b  # fresh entropy per sampler


@pytest.mark.parametrize("t", [5e-324, 1e-310, 1e-306, 1e-300, 1e-40, 1e-38, 1e-30, 1e-8])
def test_tiny_temperatures_are_the_greedy_limit(t: float) -> None:
    logits = lm_logits(16)
    for kw in (dict(), dict(top_p=0.9), dict(top_k=5), dict(min_p=0.1)):
        s = Sampler(temperature=t, seed=1, **kw)  # type: ignore[arg-type]
        assert [s(logits) for _ in range(5)] == [int(logits.argmax())] * 5
    tied = torch.tensor([0.0, 2.0, 2.0, 1.0])  # the limit of softmax(x / T): uniform over the tied maxima
    s = Sampler(temperature=max(t, sampling.GREEDY_BELOW * 2), seed=1)
    assert {s(tied) for _ in range(64)} == {1, 2}
    assert GenerationParams(temperature=t).temperature == t


def test_greedy_is_argmax_with_ties_to_the_lowest_id() -> None:
    assert Sampler(temperature=0)(torch.tensor([0.1, 3.0, 3.0, -1.0])) == 1
    s = Sampler(temperature=0, logit_bias=((3, 5.0),))
    assert s(torch.tensor([0.1, 3.0, 3.0, -1.0])) == 3


@pytest.mark.parametrize("field,value", [
    ("max_tokens", 0), ("temperature", -0.1), ("temperature", math.nan), ("top_p", 0.0), ("top_p", 1.5),
    ("top_k", -1), ("top_k", 2.5), ("min_p", 1.5), ("min_p", math.nan), ("presence_penalty", 2.5),
    ("frequency_penalty", -3.0), ("repetition_penalty", 0.0), ("repetition_penalty", math.inf),
    ("logit_bias", ((-1, 1.0),)), ("logit_bias", ((5, 101.0),)), ("logit_bias", ((5, 1.0), (5, 2.0))),
    ("logit_bias", ((5, math.nan),)),
])
def test_params_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        GenerationParams(**{field: value})  # type: ignore[arg-type]


def test_logit_bias_outside_the_vocabulary_is_refused() -> None:
    with pytest.raises(ValueError, match="logit_bias"):
        Sampler(logit_bias=((10, 1.0),))(torch.zeros(4))


def test_stop_matcher_holds_back_prefixes() -> None:
    m = StopMatcher(("END",))
    out = m.push("abc E") + m.push("N") + m.push("D more")
    assert out == "abc " and m.hit
    m2 = StopMatcher(("END",))
    assert m2.push("abc EN") + m2.push("x") + m2.flush() == "abc ENx" and not m2.hit


def test_flat_logits_skip_the_candidate_attempt_for_a_while() -> None:
    flat = lm_logits(17, spread=0.05, peaks=0)  # top-p 0.9 keeps ~90% of the tokens: the full sort
    peaked = lm_logits(17)
    s = Sampler(seed=4, top_p=0.9)
    s(flat)
    assert s.fallbacks == 1
    for _ in range(sampling.SKIP_AFTER_FALLBACK):
        s(peaked)  # straight to the full sort
    assert s.fallbacks == 1 + sampling.SKIP_AFTER_FALLBACK
    s(peaked)  # candidates again: this one ends inside them
    assert s.fallbacks == 1 + sampling.SKIP_AFTER_FALLBACK


def test_order_keys_sort_like_a_stable_sort_on_host_and_device() -> None:
    import engine.sampling_device as sampling_device

    x = torch.tensor([0.5, -0.0, 2.0, 0.0, 2.0, -3.0, float("-inf"), 0.5, -1e-30, 1e30, -1e-45, 1e-45])
    y = torch.cat([x, lm_logits(18).round(decimals=1)])  # many ties
    for row in (x, y):
        key = sampling_host.order_key(row.numpy())
        assert key.tolist() == sampling_device.order_key(row).tolist()
        want = torch.sort(row, descending=True, stable=True).indices.tolist()
        assert sorted(range(len(key)), key=lambda i: (-int(key[i]), i)) == want

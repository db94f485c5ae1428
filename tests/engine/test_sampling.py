from __future__ import annotations

import pytest
import torch

from engine.sampling import Sampler
from engine.stops import StopMatcher
from engine.types import GenerationParams


def test_greedy_is_argmax():
    logits = torch.tensor([0.1, 3.0, 2.9, -1.0])
    assert Sampler(temperature=0)(logits) == 1


def test_seed_reproducible_and_seeds_differ():
    logits = torch.randn(500, generator=torch.Generator().manual_seed(0))
    a = [Sampler(1.0, 1.0, seed=7)(logits) for _ in range(1)]
    s1, s2, s3 = Sampler(1.0, 1.0, seed=7), Sampler(1.0, 1.0, seed=7), Sampler(1.0, 1.0, seed=8)
    seq1 = [s1(logits) for _ in range(50)]
    assert seq1 == [s2(logits) for _ in range(50)]
    assert seq1 != [s3(logits) for _ in range(50)]
    assert a[0] == seq1[0]


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    s = Sampler(1.0, top_p=0.75, seed=1)
    seen = {s(logits) for _ in range(400)}
    assert seen == {0, 1}


def test_params_validation():
    with pytest.raises(ValueError):
        GenerationParams(max_tokens=0)
    with pytest.raises(ValueError):
        GenerationParams(top_p=0)


def test_stop_matcher_holds_back_prefixes():
    m = StopMatcher(("END",))
    out = m.push("abc E") + m.push("N") + m.push("D more")
    assert out == "abc " and m.hit
    m2 = StopMatcher(("END",))
    assert m2.push("abc EN") + m2.push("x") + m2.flush() == "abc ENx" and not m2.hit

"""The sampler's paths against each other and against a plain-Python reference of the shared
arithmetic: the device path's radix search (no sort) keeps exactly the tokens a sort keeps, ties
at the cut included, and every path gives the same tokens for the same seed."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import engine.sampling as sampling
import engine.sampling_device as dev
from engine.sampling import Sampler


def kept_reference(x: torch.Tensor, scale32: float, k: int, top_p: float, min_p: float) -> list[int]:
    """Each token's weight if kept, else 0: the docstring's rules over a Python sort."""
    bits = dev.weight_bits(x.numel())
    w = dev.weights(x, scale32, bits)[0].tolist()
    xs = x.tolist()
    order = sorted(range(len(xs)), key=lambda i: (-xs[i], i))  # -0.0 == 0.0: ties by id
    if k:
        kept = [i for i in order if xs[i] >= xs[order[k - 1]]]
    else:
        kept = order
    if top_p < 1.0:
        p = dev.top_p_bound(sum(w[i] for i in kept), top_p)
        before, prefix = 0, []
        for i in kept:
            if before >= p:
                break
            prefix.append(i)
            before += w[i]
        kept = prefix
    if min_p > 0.0:
        kept = [i for i in kept if w[i] >= dev.min_p_bound(min_p, bits)]
    out = [0] * len(xs)
    for i in kept:
        out[i] = w[i]
    return out


def kept_device(x: torch.Tensor, scale32: float, k: int, top_p: float, min_p: float) -> list[int]:
    c = dev.DeviceSampler(x.numel(), scale32, k, top_p, min_p).prepare(x)[0]
    return torch.diff(c, prepend=c.new_zeros(1)).tolist()


def tricky_rows(n: int = 900) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(21)
    base = torch.randn(n, generator=g)
    ties = (base * 2).round() / 2  # ~15 distinct values: every cut falls inside a group of ties
    ties[::7] = -0.0
    ties[1::7] = 0.0
    ties[::11] = -math.inf
    wide = base * 40.0  # most weights underflow the fixed point: mass in a few tokens
    wide[5] = wide[9] = wide.max()  # a tied maximum
    return {"ties": ties, "flat": base * 0.01, "peaked": base + 9.0 * (torch.rand(n, generator=g) < 0.01),
            "wide": wide, "negative": -100.0 - base.abs()}


SETTINGS = [(0, 0.9, 0.0), (0, 0.5, 0.0), (0, 0.999, 0.0), (0, 1e-9, 0.0), (40, 0.95, 0.0), (3, 1.0, 0.0),
            (0, 1.0, 0.05), (7, 0.8, 0.02), (500, 0.97, 0.0), (0, 0.9999999999999999, 0.0)]


@pytest.mark.parametrize("name", list(tricky_rows()))
def test_radix_cut_keeps_what_a_sort_keeps(name: str) -> None:
    x = tricky_rows()[name]
    for scale in (1.0, 0.5, 7.0, 3e5):
        for k, top_p, min_p in SETTINGS:
            want = kept_reference(x, scale, k, top_p, min_p)
            assert kept_device(x, scale, k, top_p, min_p) == want, (scale, k, top_p, min_p)


def test_a_cut_inside_a_group_of_ties_keeps_the_lowest_ids() -> None:
    x = torch.tensor([1.0, 3.0, 2.0, 3.0, 2.0, 2.0, 3.0, 0.0])
    w = dev.weights(x, 1.0, dev.weight_bits(8))[0].tolist()
    # mass before: 3.0 at ids 1, 3, 6 (w3 each), then 2.0 at ids 2, 4, 5: keep while < P
    top_p = (3 * w[1] + 1.5 * w[2]) / sum(w)
    p = dev.top_p_bound(sum(w), top_p)
    assert 3 * w[1] + w[2] < p < 3 * w[1] + 2 * w[2]
    got = kept_device(x, 1.0, 0, top_p, 0.0)
    assert [i for i, v in enumerate(got) if v] == [1, 2, 3, 4, 6]  # id 5 waits behind 2 and 4
    assert got == kept_reference(x, 1.0, 0, top_p, 0.0)


@pytest.mark.parametrize("key_a,key_b", [(100 << 16, 50 << 16), (-(100 << 16), -(150 << 16)), (100, 50), (7, 7)])
def test_top_p_cut_at_exact_mass_boundaries(key_a: int, key_b: int) -> None:
    """Masses that hit P exactly (a token whose mass before is P is dropped), at a bucket edge
    of either radix round and inside a group of ties."""
    s = torch.tensor([key_b, key_a] * 4, dtype=torch.int32)  # key_a at the odd ids
    w = torch.full((8,), 2, dtype=torch.int64)
    kept = dev.top_p_keep(s, w, 0.5).nonzero().flatten().tolist()  # Z = 16, P = 8: four tokens
    assert kept == ([0, 1, 2, 3] if key_a == key_b else [1, 3, 5, 7])
    assert dev.top_p_keep(s, w, 0.4375).nonzero().flatten().tolist() == kept  # P = 7
    assert dev.top_p_keep(s, w, 0.375).nonzero().flatten().tolist() == kept[:3]  # P = 6


def rows_for_paths() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(31)
    v = 3000
    peaked = torch.randn(v, generator=g) * 2.0
    peaked[torch.randperm(v, generator=g)[:12]] += 7.0
    ties = (torch.randn(v, generator=g) * 3).round()
    ties[:40] = -math.inf
    return {"peaked": peaked, "flat": torch.randn(v, generator=g) * 0.05, "ties": ties}


PATH_CASES = [dict(temperature=1.0), dict(temperature=0.7, top_p=0.9), dict(temperature=1.0, top_p=0.5),
              dict(temperature=1.3, top_k=40), dict(temperature=1.0, top_k=300, top_p=0.95),
              dict(temperature=1.0, top_p=0.8, min_p=0.02), dict(temperature=2.0, min_p=0.01),
              dict(temperature=1e-30, top_p=0.9), dict(temperature=1e-38), dict(temperature=0.05, top_p=0.99)]


@pytest.mark.parametrize("row", list(rows_for_paths()))
def test_every_path_gives_the_same_tokens(row: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Host candidates (PRESELECT 256), host sort (PRESELECT 8: mostly past the candidates),
    host with every token a candidate, and the device code run on the CPU: one seed, one sequence."""
    x = rows_for_paths()[row]
    varied = 0
    for kw in PATH_CASES:
        seqs = []
        for preselect, host in ((256, True), (8, True), (x.numel(), True), (256, False)):
            with monkeypatch.context() as m:
                m.setattr(sampling, "PRESELECT", preselect)
                s = Sampler(seed=3, **kw)  # type: ignore[arg-type]
                s.host_math = host
                seqs.append([s(x) for _ in range(25)])
        assert all(q == seqs[0] for q in seqs), (kw, seqs)
        varied += len(set(seqs[0])) > 1
    assert varied >= 5  # real draws, not only the greedy limit


@pytest.mark.parametrize("kind", ["flat", "peaked"])
def test_paths_agree_at_the_real_vocabulary(kind: str) -> None:
    g = torch.Generator().manual_seed(41)
    x = torch.randn(201_088, generator=g)
    if kind == "peaked":
        x = x * 2.0
        x[torch.randint(0, x.numel(), (20,), generator=g)] += 14.0
    for kw in (dict(top_p=0.9), dict(top_p=0.9, top_k=50, min_p=0.05), dict()):
        a, b = Sampler(seed=5, **kw), Sampler(seed=5, **kw)  # type: ignore[arg-type]
        b.host_math = False
        assert [a(x) for _ in range(4)] == [b(x) for _ in range(4)], kw
        assert b.fallbacks == 0  # the device path never sorts


class CountReads(TorchDispatchMode):
    """Counts the ops that read a device value back to the host."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func.__name__.startswith(("_local_scalar_dense", "is_nonzero", "nonzero", "equal", "item")):
            self.reads.append(func.__name__)
        return func(*args, **(kwargs or {}))


def test_the_device_path_reads_the_device_once() -> None:
    x = rows_for_paths()["ties"]
    for k, top_p, min_p in SETTINGS[::2]:
        with CountReads() as c:
            dev.sample_device(x, 1.0, k, top_p, min_p, 0.37)
        assert c.reads == ["_local_scalar_dense.default"], (k, top_p, min_p)


def test_bad_logits_are_refused_on_every_path() -> None:
    for row in (torch.full((300,), -math.inf), torch.tensor([0.0, math.nan, 1.0] * 100)):
        for host in (True, False):
            s = Sampler(seed=1, top_p=0.9)
            s.host_math = host
            with pytest.raises(ValueError, match="no finite maximum"):
                s(row)


def test_fixed_point_sums_fit_int64_and_the_top_token_weighs_2_to_the_bits() -> None:
    for vocab in (2, 3000, 65_536, 201_088, 1 << 20):
        bits = dev.weight_bits(vocab)
        assert vocab * 2**bits < 2**62 and vocab * 2**bits * 4 >= 2**62
    w, _ = dev.weights(torch.zeros(201_088), 1.0, dev.weight_bits(201_088))
    assert int(w[0]) == 2 ** dev.weight_bits(201_088) and int(w.sum()) < 2**63 - 1


def test_penalties_device_copy_follows_the_output() -> None:
    """The device copy of the penalties is reused while only a bias is set, refreshed after every
    token that changes a count: the device result always equals the host's."""
    from engine.logit_penalties import LogitPenalties

    x = torch.linspace(-2.0, 2.0, 50)
    for rep, pres in ((1.0, 0.0), (1.3, 0.0), (1.0, 0.8)):
        pen = LogitPenalties(((3, 1.5),), rep, pres, 0.25 * (pres > 0), prompt=(7,))
        for tok in (5, 5, 9, 3):
            assert torch.equal(pen.apply(x, host=False), pen.apply(x, host=True)), (rep, pres, tok)
            pen.record(tok)


def test_graph_cache_captures_after_a_few_tokens_and_falls_back_on_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA graph bookkeeping (the capture itself needs CUDA): eager until a setting has run
    CAPTURE_AFTER tokens, then one capture; a failed capture is remembered as eager; at most
    GRAPHS settings kept."""
    made: list[float] = []

    class FakeGraph:
        def __init__(self, fn: object, x: torch.Tensor) -> None:
            made.append(float(x[0]))
            if float(x[0]) < 0:
                raise RuntimeError("capture failed")

    monkeypatch.setattr(dev, "_Graph", FakeGraph)
    monkeypatch.setattr(dev, "_graphs", dev.OrderedDict())
    monkeypatch.setattr(dev, "_uses", {})
    x = torch.ones(10)
    ds = [dev.DeviceSampler(10, 1.0, 0, p, 0.0) for p in (0.9, 0.8, 0.7)]
    got = [dev._graph_for(ds[0], x) for _ in range(dev.CAPTURE_AFTER + 3)]
    assert got[: dev.CAPTURE_AFTER] == [None] * dev.CAPTURE_AFTER and made == [1.0]
    assert all(isinstance(g, FakeGraph) and g is got[-1] for g in got[dev.CAPTURE_AFTER :])
    bad = -x
    assert [dev._graph_for(ds[1], bad) for _ in range(dev.CAPTURE_AFTER + 3)] == [None] * (dev.CAPTURE_AFTER + 3)
    assert made == [1.0, -1.0] and dev.graphs_captured() == [True, False]  # tried once, then eager
    for _ in range(dev.CAPTURE_AFTER + 1):
        dev._graph_for(ds[2], x)
    assert len(dev.graphs_captured()) == dev.GRAPHS and made[-1] == 1.0

"""Measuring the routing a checkpoint produces: which experts the reference engine picks for
a token sequence, per layer, and how concentrated and how stable those choices are.

Used by the synth tests and to produce the figures in docs/perf-harness.md (small shapes on
the CPU; the reference engine dequantizes every expert it touches).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..reference import ReferenceModel
from .routing import DriftTables, RoutingSpec, token_topics
from .shapes import SynthShape


@dataclass
class RoutingTrace:
    experts: int
    choices: np.ndarray  # [layers, tokens, k] expert ids picked
    inputs: list[np.ndarray] | None  # per layer [tokens, hidden] router inputs (when kept)

    def window(self, rows: slice) -> RoutingTrace:
        inputs = [x[rows] for x in self.inputs] if self.inputs is not None else None
        return RoutingTrace(self.experts, self.choices[:, rows], inputs)


class _Tracing(ReferenceModel):
    def __init__(self, ck: Checkpoint, dtype: torch.dtype, keep_inputs: bool) -> None:
        super().__init__(ck, dtype)
        self.keep_inputs = keep_inputs
        self.choices: dict[int, list[torch.Tensor]] = {}
        self.inputs: dict[int, list[torch.Tensor]] = {}

    def route(self, layer: int, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx, w = super().route(layer, t)
        self.choices.setdefault(layer, []).append(idx.clone())
        if self.keep_inputs:
            self.inputs.setdefault(layer, []).append(t.float().clone())
        return idx, w


def trace_routing(model_dir: str | Path, ids: list[int], dtype: torch.dtype = torch.float32,
                  keep_inputs: bool = False, block: int = 1024) -> RoutingTrace:
    """Run ``ids`` through the reference engine (in blocks of ``block`` tokens over one K/V
    cache) and record every layer's expert choices (and router inputs)."""
    ck = Checkpoint.open(model_dir)
    model = _Tracing(ck, dtype, keep_inputs)
    cache = model.new_cache()
    for s in range(0, len(ids), block):
        model.forward(ids[s : s + block], cache, last_only=True, attn_block=256)
    layers = ck.config.num_hidden_layers
    choices = np.stack([torch.cat(model.choices[i]).numpy() for i in range(layers)])
    inputs = [torch.cat(model.inputs[i]).numpy() for i in range(layers)] if keep_inputs else None
    experts = ck.config.num_local_experts
    ck.close()
    return RoutingTrace(experts, choices, inputs)


def top_share(choices: np.ndarray, experts: int, frac: float = 0.25) -> float:
    """Share of the expert uses in ``choices`` (any shape) taken by the top ``frac`` of experts."""
    counts = np.sort(np.bincount(choices.ravel(), minlength=experts))[::-1]
    return float(counts[: math.ceil(frac * experts)].sum() / max(1, counts.sum()))


def concentration(trace: RoutingTrace, window: int, frac: float = 0.25) -> float:
    """Mean over layers and consecutive windows of :func:`top_share` (1/4 of the experts
    taking 1/4 of the uses is even use; uniform routing over a short window sits a little
    above, from sampling noise)."""
    layers, n, _ = trace.choices.shape
    shares = [top_share(trace.choices[layer, s : s + window], trace.experts, frac)
              for layer in range(layers) for s in range(0, n - window + 1, window)]
    return float(np.mean(shares))


def top_experts(choices: np.ndarray, experts: int, frac: float = 0.25) -> set[int]:
    """The ``frac`` most used experts (ties to the lower id)."""
    counts = np.bincount(choices.ravel(), minlength=experts)
    order = np.lexsort((np.arange(experts), -counts))
    return {int(e) for e in order[: math.ceil(frac * experts)]}


def hot_overlap(trace: RoutingTrace, a: slice, b: slice, frac: float = 0.25) -> float:
    """Mean over layers of |top(a) ∩ top(b)| / |top|: 1 = the same hot set in both stretches."""
    m = math.ceil(frac * trace.experts)
    return float(np.mean([len(top_experts(c[a], trace.experts, frac) & top_experts(c[b], trace.experts, frac)) / m
                          for c in trace.choices]))


def drift_tables(model_dir: str | Path) -> DriftTables:
    """The drift tables a drift checkpoint was written with (from its SYNTHETIC.json)."""
    from tokenizers import Tokenizer

    d = Path(model_dir)
    meta = json.loads((d / "SYNTHETIC.json").read_text())
    shape = SynthShape(**meta["shape"])
    spec = RoutingSpec(meta["routing"]["mode"], float(meta["routing"]["skew"]))
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    n = min(shape.vocab_size, tok.get_vocab_size())
    texts = list(tok.decode_batch([[i] for i in range(n)], skip_special_tokens=True))
    return DriftTables(spec, int(meta["seed"]), shape, token_topics(texts, shape.vocab_size))


def topic_alignment(trace: RoutingTrace, tables: DriftTables, ids: list[int]) -> list[float]:
    """Per layer, the mean of (router input · d_topic(token)) / sqrt(hidden): the share of the
    RMS-normed router input that still points along the token's topic direction."""
    if trace.inputs is None:
        raise ValueError("trace the routing with keep_inputs=True")
    d = tables.directions[tables.topic[np.asarray(ids)]]
    return [float(np.mean(np.sum(x * d, axis=1)) / math.sqrt(tables.hidden)) for x in trace.inputs]


def coverage(choices: np.ndarray, hot: list[set[int]]) -> float:
    """Share of the uses in ``choices`` [layers, tokens, k] that fall in each layer's ``hot`` set:
    the hit rate a cache holding exactly those experts would see."""
    return float(np.mean([np.isin(c, sorted(h)).mean() for c, h in zip(choices, hot, strict=True)]))


def shared_with_previous(trace: RoutingTrace) -> float:
    """Mean share of a token's experts that the previous token also used (per layer)."""
    c = trace.choices
    same = (c[:, 1:, :, None] == c[:, :-1, None, :]).any(-1)
    return float(same.mean())


def topic_switch_ids(topics: np.ndarray, n: int, a: int = 3, b: int = 6, seed: int = 1,
                     ordinary: int | None = None) -> list[int]:
    """``n`` ids: the first half drawn from topic ``a``, the second from topic ``b`` (ids below
    ``ordinary`` only, i.e. no specials)."""
    pool = topics[: ordinary or len(topics)]
    rng = np.random.default_rng(seed)
    half = n // 2
    return (rng.choice(np.flatnonzero(pool == a), half).tolist()
            + rng.choice(np.flatnonzero(pool == b), n - half).tolist())

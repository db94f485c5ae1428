"""Routing statistics of a checkpoint on given prompts: how unevenly experts are used and how
soon they come back — what VRAM slots and RAM warm-up feed on."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.checkpoint import Checkpoint
from engine.reference import ReferenceModel


@dataclass(frozen=True)
class RoutingStats:
    top10_share: float  # share of expert uses taken by the top 10% experts of each layer (mean over layers)
    median_reuse_distance: float  # tokens since the same expert was last used in that layer (median)
    next_token_overlap: float  # mean fraction of a token's experts also used by the previous token
    lru_hit_rate: float  # SIMULATED: per-layer LRU of 25% of the experts, admitting every miss
    tokens: int


def route_trace(model_dir: Path, prompts: list[list[int]]) -> list[list[list[int]]]:
    """[prompt][token] -> flat list of (layer * E + expert) ids chosen by the router."""
    ck = Checkpoint.open(model_dir)
    model = ReferenceModel(ck, torch.float32)
    seen: list[list[int]] = []
    orig = model.route

    def route(layer: int, t: torch.Tensor):
        idx, w = orig(layer, t)
        for row, ids in enumerate(idx.tolist()):
            while len(seen) <= row:
                seen.append([])
            seen[row].extend(layer * ck.config.num_local_experts + e for e in ids)
        return idx, w

    model.route = route  # type: ignore[method-assign]
    out = []
    for p in prompts:
        seen = []
        model.forward(p)
        out.append(seen)
    return out


def stats(trace: list[list[list[int]]], experts: int, layers: int) -> RoutingStats:
    counts: list[Counter[int]] = [Counter() for _ in range(layers)]
    dists: list[int] = []
    overlaps: list[float] = []
    hits = total = 0
    cap = max(1, experts // 4)
    n_tok = 0
    for seq in trace:
        last: dict[int, int] = {}
        lru: list[list[int]] = [[] for _ in range(layers)]
        prev: set[int] = set()
        for t, ids in enumerate(seq):
            n_tok += 1
            cur = set(ids)
            if prev:
                overlaps.append(len(cur & prev) / len(cur))
            prev = cur
            for gid in ids:
                layer, e = divmod(gid, experts)
                counts[layer][e] += 1
                if gid in last:
                    dists.append(t - last[gid])
                last[gid] = t
                cache = lru[layer]
                total += 1
                if e in cache:
                    hits += 1
                    cache.remove(e)
                elif len(cache) >= cap:
                    cache.pop(0)
                cache.append(e)
    shares = []
    for c in counts:
        if not c:
            continue
        top = sorted(c.values(), reverse=True)[: max(1, experts // 10)]
        shares.append(sum(top) / sum(c.values()))
    return RoutingStats(
        top10_share=statistics.fmean(shares) if shares else 0.0,
        median_reuse_distance=float(statistics.median(dists)) if dists else float("nan"),
        next_token_overlap=statistics.fmean(overlaps) if overlaps else 0.0,
        lru_hit_rate=hits / total if total else 0.0,
        tokens=n_tok,
    )

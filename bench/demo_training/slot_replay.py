"""Adaptive-slot hit rate on a recorded routing trace, through the GPU backend's own residency
code (engine/gpu/pool.py SlotPool, engine/gpu/admission.py AdmissionPolicy + Residency) with
the decoder's per-layer order of calls. Copies land by the next token (an idealized copier), so
the result is SIMULATED; the policy, scores, refreshes and admission limits are the real ones."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.gpu.admission import AdmissionPolicy, AdmissionSettings, Residency, rank_hot_set
from engine.gpu.pool import SlotPool


class _InstantCopier:
    def start(self, slot: int, buffer: int) -> object:
        return slot

    def done(self, handle: object) -> bool:
        return True


@dataclass(frozen=True)
class SlotReplay:
    hit_rate: float
    static_hit_rate: float
    adaptive_hit_rate: float
    admissions: int
    tokens: int
    slots: int


def replay(calibration: list[list[list[int]]], trace: list[list[list[int]]], layers: int, experts: int,
           slot_fraction: float = 0.25, settings: AdmissionSettings | None = None,
           static_slots: int = -1, calibration_weight: float = 1.0) -> SlotReplay:
    """Traces: [sequence][token] -> flat (layer * experts + expert) ids, layer-major per token.
    The static part of the pool (``static_slots``; -1: half the pool, the engine's default) is the
    hot set ranked from ``calibration``, whose routing also enters the admission scores with
    ``calibration_weight`` per use (the engine weighs a prompt's routing by min(1, prefill_weight /
    prompt tokens)); each sequence of ``trace`` then runs as a conversation of its own (scores
    carried over, like one engine)."""
    s = settings or AdmissionSettings()
    n_slots = max(2, round(slot_fraction * layers * experts))
    policy = AdmissionPolicy(layers, experts, s)
    for seq in calibration:
        for ids in seq:
            for gid in ids:
                policy.observe(gid // experts, [gid % experts], calibration_weight)
    hot = rank_hot_set(policy.counts, n_slots // 2 if static_slots < 0 else min(static_slots, n_slots))
    pool = SlotPool(n_slots, len(hot), np.full((layers, experts), -1, dtype=np.int32))
    for slot, key in enumerate(hot):
        pool.begin_copy(slot, key)
        pool.finish_copy(slot)
    res = Residency(pool, policy, _InstantCopier(), s.capture_buffers)
    hits = static = routed = tokens = 0
    for seq in trace:
        for ids in seq:
            res.poll()
            per_layer: dict[int, list[int]] = {}
            for gid in ids:
                per_layer.setdefault(gid // experts, []).append(gid % experts)
            for layer in range(layers):
                chosen = per_layer.get(layer, [])
                misses = []
                for e in chosen:
                    slot = pool.slot_of((layer, e))
                    if slot < 0:
                        misses.append(e)
                    else:
                        hits += 1
                        static += slot < pool.n_static
                routed += len(chosen)
                caps = res.captures_for(layer, misses) if misses and not policy.frozen else {}
                if caps:
                    res.after_compute(layer, caps)
                policy.observe_token(layer, chosen, 1.0)
            policy.token_done(pool)
            tokens += 1
    return SlotReplay(hits / routed if routed else 0.0, static / routed if routed else 0.0,
                      (hits - static) / routed if routed else 0.0, res.stats.admissions, tokens, n_slots)

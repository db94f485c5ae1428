"""Adaptive-slot hit rate on a recorded routing trace, through the GPU backend's own residency
code (engine/gpu/pool.py SlotPool, engine/gpu/admission.py AdmissionPolicy + Residency) with
the decoder's per-layer order of calls. Copies land by the next token (an idealized copier), so
the result is SIMULATED; the policy, scores, refreshes and admission limits are the real ones."""

from __future__ import annotations

from dataclasses import dataclass

from engine.gpu.admission import AdmissionPolicy, AdmissionSettings

from ..routing.slot_sim import decode_token, seeded_residency


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
    res = seeded_residency(policy, n_slots, n_slots // 2 if static_slots < 0 else min(static_slots, n_slots), s)
    hits = static = routed = tokens = 0
    for seq in trace:
        for ids in seq:
            per_layer: dict[int, list[int]] = {}
            for gid in ids:
                per_layer.setdefault(gid // experts, []).append(gid % experts)
            chosen = [per_layer.get(layer, []) for layer in range(layers)]
            h, st = decode_token(res, chosen, res.pool.n_static)
            hits += h
            static += st
            routed += sum(len(c) for c in chosen)
            tokens += 1
    return SlotReplay(hits / routed if routed else 0.0, static / routed if routed else 0.0,
                      (hits - static) / routed if routed else 0.0, res.stats.admissions, tokens, n_slots)

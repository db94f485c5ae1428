"""The engine's own VRAM residency (engine/gpu: SlotPool, AdmissionPolicy, Residency) stepped
through a routing trace in the GPU decoder's order of calls, shared by the replays
(bench/routing/policy_replay.py, bench/demo_training/slot_replay.py). SIMULATED: copies land by
the next token (an idealized copier); the policy, scores, refreshes, capture-buffer and
candidate limits are the real ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.gpu.admission import AdmissionPolicy, AdmissionSettings, Residency, rank_hot_set
from engine.gpu.pool import SlotPool


class InstantCopier:
    """Every copy has landed when it is next polled."""

    def start(self, slot: int, buffer: int) -> object:
        return slot

    def done(self, handle: object) -> bool:
        return True


def seeded_residency(policy: AdmissionPolicy, slots: int, n_static: int, settings: AdmissionSettings,
                     prompt: np.ndarray | None = None, fill_tokens: int = 0) -> Residency:
    """A pool of ``slots`` whose static part holds :func:`rank_hot_set` of the policy's routing
    counts so far (at most ``n_static`` experts), as the engine seeds it after the prompt, with
    the adaptive slots aimed at the ``prompt``'s (int [tokens, layers, k]) last ``fill_tokens``
    tokens (Residency.plan_fill; EngineSettings.fill_tokens)."""
    layers, experts = policy.counts.shape
    hot = rank_hot_set(policy.counts, n_static)
    pool = SlotPool(slots, len(hot), np.full((layers, experts), -1, dtype=np.int32))
    for slot, key in enumerate(hot):
        pool.begin_copy(slot, key)
        pool.finish_copy(slot)
    res = Residency(pool, policy, InstantCopier(), settings.capture_buffers)
    if prompt is not None:
        res.plan_fill(prompt, fill_tokens)
    return res


def decode_token(res: Residency, chosen: Sequence[list[int]], static_below: int) -> tuple[int, int]:
    """One decoded token: ``chosen[layer]`` the experts it routes to in every layer. Per layer the
    decoder looks its experts up, captures the misses, then the policy observes the routing;
    the token ends with the policy's refresh. Returns (hits, hits in slots below ``static_below``)."""
    pool, policy = res.pool, res.policy
    table = pool.table
    hits = static = 0
    res.poll()
    for layer, experts in enumerate(chosen):
        misses = []
        for e in experts:
            slot = int(table[layer, e])
            if slot < 0:
                misses.append(e)
            else:
                hits += 1
                static += slot < static_below
        caps = res.captures_for(layer, misses) if misses and not policy.frozen else {}
        if caps:
            res.after_compute(layer, caps)
        policy.observe_token(layer, experts, 1.0)
    policy.token_done(pool)
    return hits, static

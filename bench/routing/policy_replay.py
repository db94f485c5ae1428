"""The engine's own VRAM admission (engine/gpu: SlotPool, AdmissionPolicy, Residency) replayed on
a routing trace, in the GPU decoder's order of calls, next to LRU and Belady at the same slot
count. SIMULATED: copies land by the next token (an idealized copier); the policy, scores,
refreshes, capture-buffer and candidate limits are the real ones.

As in the engine: the prompt (``prompt_tokens`` of the trace) is observed with the prompt weight,
the static slots get :func:`rank_hot_set` of its routing counts, and then every later token is
decoded one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.gpu.admission import AdmissionPolicy, AdmissionSettings

from .replay_sim import belady_hits, flat_keys, lru_hits
from .slot_sim import decode_token, seeded_residency


@dataclass(frozen=True)
class PolicyRates:
    """Hit rates over the decoded tokens (SIMULATED)."""

    slots: int
    static: int
    tokens: int  # decoded (the prompt excluded)
    hit: float
    static_hit: float
    admissions_per_token: float
    lru: float  # LRU admitting every miss, all slots adaptive, warmed on the prompt
    lru_admissions_per_token: float
    belady: float  # MIN with bypass, knowing the prompt and the decode


def replay_policy(choices: np.ndarray, experts: int, slots: int, static: int = -1, prompt_tokens: int = 1024,
                  settings: AdmissionSettings | None = None, fill_tokens: int = 128) -> PolicyRates:
    """``choices`` int [tokens, layers, k]: the first ``prompt_tokens`` are the prompt, the rest
    are decoded. ``static`` -1 is the engine's default (half the pool); ``fill_tokens`` as the
    engine setting (the adaptive slots aimed at the prompt's last tokens; 0 = off)."""
    c = np.asarray(choices, dtype=np.int64)
    n, layers, k = c.shape
    if not 0 < prompt_tokens < n:
        raise ValueError(f"prompt_tokens must be between 1 and {n - 1} (got {prompt_tokens})")
    s = settings or AdmissionSettings()
    policy = AdmissionPolicy(layers, experts, s)
    policy.observe_prompt(c[:prompt_tokens])
    n_static = slots // 2 if static < 0 else min(static, slots)
    res = seeded_residency(policy, slots, n_static, s, c[:prompt_tokens], fill_tokens)
    hits = static_hits = 0
    decode = c[prompt_tokens:]
    rows = decode.tolist()
    for tok in rows:
        h, sh = decode_token(res, tok, n_static)
        hits += h
        static_hits += sh
    uses = decode.size
    keys = flat_keys(c, experts)
    start = prompt_tokens * layers * k
    lru = lru_hits(keys, slots, start)
    bel = belady_hits(keys, slots, start)
    return PolicyRates(slots, n_static, len(rows), hits / uses, static_hits / uses,
                       res.stats.admissions / len(rows), lru / uses, (uses - lru) / len(rows), bel / uses)


def replay_follow_up(choices: np.ndarray, experts: int, slots: int, prompt: int, answer: int, follow_up: int,
                     window: int = 128, fill_tokens: int = 128, settings: AdmissionSettings | None = None) -> tuple[
                         float, float]:
    """A conversation's two turns on one trace: a ``prompt``, an ``answer`` decoded, a ``follow_up``
    prompt, then ``window`` decoded tokens. Returns the hit rates (SIMULATED) of the first ``window``
    tokens of each answer, with the adaptive slots aimed at each prompt's end (``fill_tokens``) as
    the GPU backend does after every prompt (0 = off)."""
    c = np.asarray(choices, dtype=np.int64)
    n, layers, k = c.shape
    if prompt + answer + follow_up + window > n or min(prompt, answer, follow_up, window) < 1 or answer < window:
        raise ValueError(f"the trace of {n} tokens must hold prompt + answer + follow_up + window, answer >= window")
    s = settings or AdmissionSettings()
    policy = AdmissionPolicy(layers, experts, s)
    policy.observe_prompt(c[:prompt])
    res = seeded_residency(policy, slots, slots // 2, s, c[:prompt], fill_tokens)
    n_static = res.pool.n_static

    def decode(lo: int, hi: int) -> float:
        hits = sum(decode_token(res, tok, n_static)[0] for tok in c[lo:hi].tolist())
        return hits / ((hi - lo) * layers * k)

    first = decode(prompt, prompt + window)
    decode(prompt + window, prompt + answer)
    at = prompt + answer
    policy.observe_prompt(c[at : at + follow_up])
    res.plan_fill(c[at : at + follow_up], fill_tokens)
    return first, decode(at + follow_up, at + follow_up + window)

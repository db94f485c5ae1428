"""Would keeping the copy lane's experts in VRAM raise the hit rate? The engine's admission replayed with "lane-kept"
admissions added. SIMULATED.

    python -m bench.routing.lane_keep_replay [--tokens 6048] [--prompt 2048] [--layers 36] [--slots 548]

The decode copy lane (engine/gpu/copy_lane.py) copies some of a layer's misses into scratch slots over PCIe every
token (~21 of 41 misses a token at 18 layers on calibrated routing, session 25) and forgets them. A device-to-device
copy from the scratch slot into an adaptive slot would admit them without another PCIe or RAM read. This replays the
real SlotPool / AdmissionPolicy / Residency as bench/routing/policy_replay.py does (copies land by the next token),
and after each layer's captures gives the lane the split's share of its misses (the last ones in routing order; m
minimising max(CPU 0.30 x (k - m), lane 0.35 x m) ms, at most 2: session 25's rates) and keeps them:
- ``score``: into the lowest-scoring adaptive slot when the lane expert scores higher (the admission rule);
- ``always``: into the lowest-scoring adaptive slot whatever its score (a free copy, so any recency helps).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from engine.gpu.admission import AdmissionPolicy, AdmissionSettings

from .slot_sim import seeded_residency

MODES = ("off", "score", "always")


def lane_take(misses: int, width: int = 2, cpu_ms: float = 0.30, lane_ms: float = 0.35) -> int:
    """The lane's share of ``misses`` (lane_split.best_split without the fixed cost: the fewest on a tie)."""
    return min(range(min(width, misses) + 1), key=lambda m: (max(cpu_ms * (misses - m), lane_ms * m), m))


@dataclass(frozen=True)
class LaneKeep:
    mode: str
    static: int
    hit: float
    admissions_per_token: float  # the engine's own (captured by the CPU, uploaded)
    kept_per_token: float  # lane experts kept
    lane_per_token: float  # lane experts


def replay_lane_keep(choices: np.ndarray, experts: int, slots: int, prompt_tokens: int, mode: str,
                     static: int = -1, fill_tokens: int = 128) -> LaneKeep:
    """``choices`` int [tokens, layers, k]: the first ``prompt_tokens`` are the prompt, the rest decoded."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
    c = np.asarray(choices, dtype=np.int64)
    n, layers, k = c.shape
    if not 0 < prompt_tokens < n:
        raise ValueError(f"prompt_tokens must be between 1 and {n - 1} (got {prompt_tokens})")
    s = AdmissionSettings()
    policy = AdmissionPolicy(layers, experts, s)
    policy.observe_prompt(c[:prompt_tokens])
    n_static = slots // 2 if static < 0 else min(static, slots)
    res = seeded_residency(policy, slots, n_static, s, c[:prompt_tokens], fill_tokens)
    pool, table = res.pool, res.pool.table
    hits = kept = lane_n = 0
    landing: list[int] = []
    for tok in c[prompt_tokens:].tolist():
        res.poll()
        for slot in landing:  # a device-to-device copy lands by the next token, as the replay's uploads do
            pool.finish_copy(slot)
        landing = []
        for layer, ids in enumerate(tok):
            misses = [e for e in ids if table[layer, e] < 0]
            hits += k - len(misses)
            caps = res.captures_for(layer, misses) if misses else {}
            if caps:
                res.after_compute(layer, caps)
            m = lane_take(len(misses)) if mode != "off" else 0
            lane_n += m
            for e in misses[len(misses) - m:]:
                key = (layer, e)
                if pool.is_tracked(key):
                    continue
                below = float(policy.scores[key]) if mode == "score" else np.inf
                victim = pool.pick_victim(policy.scores, below=below)
                if victim is None:
                    continue
                evicted = pool.begin_copy(victim, key)
                res.stale.discard(evicted) if evicted is not None else None
                policy.admitted(key)
                landing.append(victim)
                kept += 1
            policy.observe_token(layer, ids, 1.0)
        policy.token_done(pool)
    d = n - prompt_tokens
    return LaneKeep(mode, n_static, hits / (d * layers * k), res.stats.admissions / d, kept / d, lane_n / d)


def main(argv: list[str] | None = None) -> int:
    from engine.synth import PRESETS
    from engine.synth.calibrated import CalibratedTables, calibrated_text, designed_trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=6048)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--slots", type=int, default=548)
    ap.add_argument("--static", default="274,137,0", help="static slot counts to replay, comma-separated")
    a = ap.parse_args(argv)
    if not 0 < a.prompt < a.tokens or not 1 <= a.layers <= 36 or a.slots < 1:
        ap.error("need 0 < --prompt < --tokens, 1 <= --layers <= 36, --slots >= 1")
    tables = CalibratedTables(0, PRESETS["120b-shape"])
    trace = designed_trace(tables, calibrated_text(tables, a.tokens))[:, : a.layers]
    print(f"SIMULATED, calibrated routing seed 0: {a.layers} layers, {a.slots} slots, prompt {a.prompt}, "
          f"{a.tokens - a.prompt} decoded tokens")
    for static in (int(x) for x in a.static.split(",")):
        for mode in MODES:
            r = replay_lane_keep(trace, 128, a.slots, a.prompt, mode, static)
            print(f"  static {r.static:4d}  lane-kept {mode:6s}: hit {r.hit:.3f}  admissions/token "
                  f"{r.admissions_per_token:.2f}  kept/token {r.kept_per_token:.2f}  lane/token {r.lane_per_token:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

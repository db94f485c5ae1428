"""Host time of the GPU decoder's admission bookkeeping per decoded token (MEASURED on this
machine's Python; no GPU): the real SlotPool / AdmissionPolicy / Residency stepped through a
routing trace in the decoder's order of calls (bench/routing/slot_sim.py), timed per token.

    python -m bench.routing.admission_cost [--layers 36] [--slots 520] [--tokens 2000]

Traces: uniform (random top-4), skewed (a fixed per-layer Zipf hot set) and calibrated (the
designed trace of `neural synth --routing calibrated`). Prints the hit rate, admissions per token
and microseconds per token; ``--digest`` adds a hash of every token's hits and the final slot
table, so two versions of engine/gpu can be checked to make the same decisions.
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np

from engine.gpu.admission import AdmissionPolicy, AdmissionSettings

from .slot_sim import decode_token, seeded_residency


def trace(kind: str, layers: int, experts: int, tokens: int, seed: int = 0) -> np.ndarray:
    """int [tokens, layers, 4] expert choices."""
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return np.argsort(rng.random((tokens, layers, experts)), axis=2)[:, :, :4]
    if kind == "skewed":  # per layer a random permutation of Zipf(1.1) popularity, top-4 by Gumbel draw
        pop = np.log(1.0 / np.arange(1, experts + 1) ** 1.1)
        perm = np.stack([rng.permutation(experts) for _ in range(layers)])
        logits = pop[np.argsort(perm, axis=1)][None] + rng.gumbel(size=(tokens, layers, experts))
        return np.argsort(-logits, axis=2)[:, :, :4]
    if kind == "calibrated":
        from engine.synth import shape_with
        from engine.synth.calibrated import CalibratedTables, calibrated_text, designed_trace

        shape = shape_with("120b-shape", num_hidden_layers=layers)
        tables = CalibratedTables(seed, shape)
        return designed_trace(tables, calibrated_text(tables, tokens, seed))
    raise ValueError(f"unknown trace {kind!r}")


def run(kind: str, layers: int, slots: int, tokens: int, prompt: int, digest: bool) -> dict[str, object]:
    experts = 128
    ch = trace(kind, layers, experts, prompt + tokens)
    settings = AdmissionSettings()
    policy = AdmissionPolicy(layers, experts, settings)
    policy.observe_prompt(ch[:prompt])
    res = seeded_residency(policy, slots, slots // 2, settings)
    h = hashlib.sha256()
    hits = 0
    times = []
    for t in range(prompt, prompt + tokens):
        chosen = [list(map(int, ch[t, layer])) for layer in range(layers)]
        t0 = time.perf_counter()
        n, _ = decode_token(res, chosen, res.pool.n_static)
        times.append(time.perf_counter() - t0)
        hits += n
        if digest:
            h.update(n.to_bytes(2, "little"))
    if digest:
        h.update(res.pool.table.tobytes())
    out: dict[str, object] = {
        "trace": kind, "hit": round(hits / (tokens * layers * 4), 4),
        "admissions_per_token": round(res.stats.admissions / tokens, 3),
        "us_per_token_median": round(1e6 * float(np.median(times)), 1),
        "us_per_token_mean": round(1e6 * float(np.mean(times)), 1),
    }
    if digest:
        out["digest"] = h.hexdigest()[:16]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.routing.admission_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=36)
    p.add_argument("--slots", type=int, default=520)
    p.add_argument("--tokens", type=int, default=2000)
    p.add_argument("--prompt", type=int, default=2048)
    p.add_argument("--traces", default="uniform,skewed,calibrated")
    p.add_argument("--digest", action="store_true")
    a = p.parse_args(argv)
    for kind in a.traces.split(","):
        print(run(kind, a.layers, a.slots, a.tokens, a.prompt, a.digest), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

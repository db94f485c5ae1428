"""What the grammar mask costs: per token at the real 201,088-id vocabulary, and decode rate on the demo model.

    python -m bench.grammar.mask_cost [--o200k DIR] [--tokens 96] [--rounds 3] [--device cuda]

1. Per-token cost of ``HarmonyGuide.apply`` (llguidance bitmask + unpack + ``where`` on the logits'
   device, CPU here) and ``advance`` with the o200k_harmony tokenizer (engine/synth/o200k.py builds
   it offline), while a JSON-Schema answer is decoded; and the free-analysis phase (one index_fill).
2. Decode tok/s on the demo model, unconstrained vs JSON mode with every token masked (analysis
   budget 0), alternated ``--rounds`` times on the same prompt and seed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from engine.grammar import Constraint, HarmonyGuide, compile_constraint

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city"]}}, "required": ["name", "age", "tags", "address"]}
ANSWER = {"name": "Ada Lovelace", "age": 36, "tags": ["math", "engines", "poetry"],
          "address": {"city": "London", "zip": "W1"}}


def mask_cost(tok_dir: Path, vocab: int, device: str = "cpu") -> dict[str, float]:
    from engine.tokenizer import load_tokenizer

    tok, sp = load_tokenizer(tok_dir)
    t0 = time.perf_counter()
    cc = compile_constraint(Constraint("json", SCHEMA, analysis_budget=None), tok, sp, vocab)
    compile_s = time.perf_counter() - t0
    text = "<|channel|>analysis<|message|>Let me think about this person.<|end|><|start|>assistant" \
           "<|channel|>final<|message|>" + json.dumps(ANSWER, separators=(",", ":")) + "<|return|>"
    ids = tok.encode(text, add_special_tokens=False).ids
    logits = torch.randn(vocab, device=device)
    sync = torch.cuda.synchronize if logits.is_cuda else (lambda: None)
    masked: list[float] = []
    free: list[float] = []
    for _ in range(5):
        guide = HarmonyGuide(cc)
        for t in ids:
            phase = guide.phase
            a = time.perf_counter()
            out = guide.apply(logits)
            sync()
            took = time.perf_counter() - a
            assert bool(torch.isfinite(out[t])), f"token {t} masked out in phase {phase}"
            a = time.perf_counter()
            guide.advance(t)
            took += time.perf_counter() - a
            (masked if phase == "grammar" else free).append(took)
    return {"compile_s": compile_s, "masked_us_median": statistics.median(masked) * 1e6,
            "masked_us_p90": sorted(masked)[int(0.9 * len(masked))] * 1e6,
            "free_us_median": statistics.median(free) * 1e6, "tokens": len(ids)}


def decode_rate(n_tokens: int, rounds: int) -> dict[str, list[float]]:
    from engine.session import Engine
    from engine.settings import EngineSettings
    from engine.types import Conversation, Done, GenerationParams, Message

    demo = Path(__file__).resolve().parents[2] / "resources" / "demo-model"
    eng = Engine.load(demo, EngineSettings(backend="cpu", context=2048, dtype="float32"))
    conv = Conversation(messages=(Message("user", "Describe a person as JSON."),), reasoning_effort="low")
    cc = compile_constraint(Constraint("json", None, analysis_budget=0), eng.tokenizer, eng.special,
                            int(eng.config.vocab_size))
    params = GenerationParams(max_tokens=n_tokens, temperature=1.0, seed=7)
    out: dict[str, list[float]] = {"free": [], "json": []}
    for _ in range(rounds):
        for name, guide in (("free", None), ("json", cc)):
            for ev in eng.generate(conv, params, guide=guide):
                if isinstance(ev, Done):
                    out[name].append(ev.usage.decode_tps)
    eng.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--o200k", default=None, help="folder with the o200k_harmony tokenizer.json (built if missing)")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="where the logits live for the per-token cost (cuda on a GPU box)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # the engine's sampling runs on one thread; two would spin on a busy box
    from engine.synth.o200k import ensure_o200k

    demo = Path(__file__).resolve().parents[2] / "resources" / "demo-model"
    print(json.dumps({"mask_demo_4096": mask_cost(demo, 4096, args.device)}, indent=1), flush=True)
    print(json.dumps({"mask_201088": mask_cost(ensure_o200k(args.o200k), 201_088, args.device)}, indent=1), flush=True)
    print(json.dumps({"demo_decode_tps": decode_rate(args.tokens, args.rounds)}, indent=1))


if __name__ == "__main__":
    main()

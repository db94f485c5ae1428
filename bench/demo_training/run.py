"""One command that reproduces the demo model: corpus → tokenizer → training → MXFP4 export →
routing statistics and sample answers. ``neural train-demo --out DIR`` (needs transformers)."""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from engine.tokenizer import SpecialTokens, train_byte_bpe

from .corpus import build_corpus, split
from .export import export
from .routing_stats import route_trace, stats
from .train import TrainConfig, encode_sample, train


def run(out: Path, cfg: TrainConfig, device: str, corpus_root: Path | None = None, n_samples: int = 6) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    samples, corpus_hash = build_corpus(corpus_root, seed=cfg.seed)
    train_s, held_s = split(samples, seed=cfg.seed)
    tok = train_byte_bpe((s.user + "\n" + s.answer for s in train_s), cfg.vocab_size)
    sp = SpecialTokens.from_tokenizer(tok)
    rng = random.Random(cfg.seed)
    enc_train = [encode_sample(s, tok, sp, rng) for s in train_s]
    enc_held = [encode_sample(s, tok, sp, rng) for s in held_s]
    print(f"corpus {corpus_hash}: {len(train_s)} train / {len(held_s)} held-out samples, "
          f"{sum(len(e[0]) for e in enc_train):,} train tokens", flush=True)
    model = train(enc_train, enc_held, cfg, out, sp.endoftext, device)
    wall = time.perf_counter() - t0
    # the exported weights are those of step ``exported_step`` (the best held-out loss, see train.py)
    meta = {"pyver": sys.version.split()[0], "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "tokens": model.exported_tokens, "corpus_hash": corpus_hash, "exported_step": model.exported_step,
            "steps_trained": model.steps_done, "held_out_loss": model.best_held_out_loss}
    train_cfg = cfg
    cfg = replace(cfg, steps=model.exported_step)  # what the model card states
    model_dir = export(model.float().cpu(), tok, cfg, out / "model", meta)
    # routing statistics on held-out prompts: trained vs a random-weight model of the same shape
    from engine.synth import write_synthetic_checkpoint

    prompts = [e[0][:256] for e in enc_held[:24]]
    trained = stats(route_trace(model_dir, prompts), cfg.experts, cfg.layers)
    random_dir = write_synthetic_checkpoint(out / "random-same-shape", cfg.shape(), seed=cfg.seed)
    rand = stats(route_trace(random_dir, prompts), cfg.experts, cfg.layers)
    answers = sample_answers(model_dir, held_s[:n_samples])
    report = {"train_config": asdict(replace(train_cfg, steps=model.steps_done)), "samples": answers,
              "wall_s_total": round(time.perf_counter() - t0, 1), "wall_s_train": round(wall, 1),
              "stop_reason": model.stop_reason, "tokens_seen": model.tokens_seen,
              "routing_trained": asdict(trained), "routing_random": asdict(rand), **meta}
    (out / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return report


def sample_answers(model_dir: Path, held: list) -> list[dict]:
    """Greedy answers of the exported model (through the engine) to held-out requests."""
    from engine.session import Engine
    from engine.settings import EngineSettings
    from engine.types import Conversation, Done, GenerationParams, Message, TextDelta

    eng = Engine.load(model_dir, EngineSettings(backend="reference", dtype="float32"))
    out = []
    for s in held:
        conv = Conversation((Message("user", s.user),), reasoning_effort="low", current_date="2026-11-29")
        text = {"analysis": "", "final": "", "commentary": ""}
        finish = ""
        for ev in eng.generate(conv, GenerationParams(max_tokens=160, temperature=0)):
            if isinstance(ev, TextDelta):
                text[ev.channel] += ev.text
            elif isinstance(ev, Done):
                finish = ev.finish_reason
        out.append({"user": s.user, "analysis": text["analysis"], "final": text["final"], "finish": finish})
    eng.close()
    return out

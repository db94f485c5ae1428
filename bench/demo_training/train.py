"""Train the demo model: transformers' ``GptOssForCausalLM`` at a small size on the stdlib corpus.

The real architecture is kept — attention sinks, alternating sliding/full attention, YaRN, top-k
MoE with the clamped SwiGLU — only smaller. Loss is taken on the assistant's reply only. Every
``log_every`` steps a JSON line (step, loss, tokens seen, wall seconds) goes to ``train_log.jsonl``.

Early stopping: every ``eval_every`` steps the held-out loss (token-weighted cross-entropy over the
whole held-out split, without the router aux term) is measured; a copy of the weights with the
lowest held-out loss so far is kept, and those weights — not the last step's — are what
:func:`train` returns for export. With ``patience_evals`` > 0 training stops once that many
evaluations in a row have not improved on the best. The last log line says which step was
exported and why.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from engine.harmony import render_conversation
from engine.tokenizer import SpecialTokens
from engine.types import Conversation, Message

from .corpus import Sample


@dataclass(frozen=True)
class TrainConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    layers: int = 4
    experts: int = 16
    top_k: int = 4
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 64
    intermediate: int = 256
    sliding_window: int = 64
    seq_len: int = 512
    batch: int = 32
    steps: int = 3000
    lr: float = 2e-3
    warmup: int = 100
    seed: int = 0
    log_every: int = 25
    aux_loss_coef: float = 0.01
    time_budget_s: float = 0.0  # >0: fit the step count to this wall-clock budget after 20 timed steps
    eval_every: int = 50  # steps between held-out evaluations (0: only after the last step)
    eval_batches: int = 0  # 0: the whole held-out split in order; N: N seeded random batches
    patience_evals: int = 4  # >0: stop after this many evaluations without a new best held-out loss
    min_delta: float = 0.0  # an evaluation is a new best only if it is lower than the best by more than this
    keep_best: bool = True  # export the best held-out weights (False: the last step's, the old recipe)

    def shape(self):  # -> engine.synth.SynthShape: the one definition export and training share
        from engine.synth import SynthShape

        return SynthShape(self.hidden_size, self.layers, self.experts, self.top_k, self.heads, self.kv_heads,
                          self.head_dim, self.intermediate, self.vocab_size, sliding_window=self.sliding_window,
                          rope_factor=8.0, original_context=2048)

    def hf_config(self):
        """transformers' config built from the very config.json the export writes, so training and
        the exported checkpoint cannot disagree on RoPE/YaRN or layer types."""
        from transformers import GptOssConfig

        d = dict(self.shape().config_dict())
        d.pop("quantization_config")
        d.update(output_router_logits=True, router_aux_loss_coef=self.aux_loss_coef)
        return GptOssConfig.from_dict(d)


ANALYSES = (
    "The user wants {what}. I'll write it and explain briefly.",
    "Need {what}. Write the function, then one sentence.",
    "They ask for {what}. Give the code.",
)


def encode_sample(s: Sample, tok, sp: SpecialTokens, rng: random.Random) -> tuple[list[int], int]:
    """(ids, index where the assistant's reply starts): prompt rendered by the engine's own
    harmony renderer, reply = analysis message + final message ending in <|return|>."""
    date = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    conv = Conversation((Message("user", s.user),), reasoning_effort=rng.choice(("low", "medium", "high")),
                        current_date=date)
    prompt = render_conversation(conv, tok, sp)
    what = s.user.split("`")[1] if "`" in s.user else "a function"

    def text(t: str) -> list[int]:
        return tok.encode(t, add_special_tokens=False).ids

    reply = ([sp.channel, *text("analysis"), sp.message, *text(rng.choice(ANALYSES).format(what=what)), sp.end,
              sp.start, *text("assistant"), sp.channel, *text("final"), sp.message, *text(s.answer), sp.return_])
    return prompt + reply, len(prompt)


def pack_batch(samples: list[tuple[list[int], int]], seq_len: int, pad: int):
    """(ids, labels, mask) for samples of (token ids, reply start): loss on the reply only."""
    ids = torch.full((len(samples), seq_len), pad, dtype=torch.long)
    labels = torch.full((len(samples), seq_len), -100, dtype=torch.long)
    mask = torch.zeros((len(samples), seq_len), dtype=torch.long)
    for b, (seq, start) in enumerate(samples):
        seq = seq[:seq_len]
        n = len(seq)
        ids[b, :n] = torch.tensor(seq)
        mask[b, :n] = 1
        labels[b, start:n] = torch.tensor(seq[start:n])
    return ids, labels, mask


def batches(encoded: list[tuple[list[int], int]], cfg: TrainConfig, pad: int, rng: random.Random):
    while True:
        yield pack_batch([encoded[rng.randrange(len(encoded))] for _ in range(cfg.batch)], cfg.seq_len, pad)


@dataclass
class EarlyStopping:
    """Best-held-out bookkeeping: which evaluation was best, and whether patience ran out."""

    patience_evals: int = 0
    min_delta: float = 0.0
    best_loss: float = math.inf
    best_step: int = 0
    since_best: int = 0  # evaluations since the best one

    def update(self, step: int, loss: float) -> bool:
        """Record an evaluation; True if it is a new best (the caller then snapshots the weights)."""
        if loss < self.best_loss - self.min_delta:
            self.best_loss, self.best_step, self.since_best = loss, step, 0
            return True
        self.since_best += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.patience_evals > 0 and self.since_best >= self.patience_evals


def snapshot(model) -> dict[str, torch.Tensor]:
    """A detached copy of every parameter and buffer, on the model's device."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train(encoded: list[tuple[list[int], int]], held: list[tuple[list[int], int]], cfg: TrainConfig,
          out_dir: Path, pad_id: int, device: str = "cuda") -> Any:
    """Train and return the model holding the weights to export, with ``steps_done``,
    ``tokens_seen``, ``exported_step``, ``exported_tokens``, ``best_held_out_loss`` and
    ``stop_reason`` set on it."""
    from transformers import GptOssForCausalLM

    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    # fp32 master weights with bf16 autocast on the GPU: casting the model itself would also round
    # the RoPE inv_freq buffer to bf16 and train with frequencies the export does not have.
    model = GptOssForCausalLM(cfg.hf_config()).to(device=device)  # type: ignore[call-arg]
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1)
    total = [cfg.steps]  # may shrink once the step rate is known (time_budget_s)
    sched = torch.optim.lr_scheduler.LambdaLR(  # type: ignore[call-arg]
        opt, lambda s: min(1.0, (s + 1) / cfg.warmup) * 0.5 * (1 + math.cos(math.pi * min(s, total[0]) / total[0])))
    log = (out_dir / "train_log.jsonl").open("w")
    log.write(json.dumps({"config": asdict(cfg), "device": torch.cuda.get_device_name() if device == "cuda"
                          else "cpu", "torch": torch.__version__}) + "\n")
    t0 = time.perf_counter()
    seen = 0
    it = batches(encoded, cfg, pad_id, rng)
    step = 0
    stopper = EarlyStopping(cfg.patience_evals, cfg.min_delta)
    best: dict[str, torch.Tensor] | None = None
    best_tokens = 0
    stopped_early = False
    while step < total[0]:
        step += 1
        if step == 21 and cfg.time_budget_s > 0:
            rate = 20 / (time.perf_counter() - t0)
            total[0] = max(21, min(cfg.steps, int(rate * cfg.time_budget_s)))
            print(f"{rate:.2f} steps/s: training {total[0]} steps to fit {cfg.time_budget_s:.0f} s", flush=True)
        ids, labels, mask = (t.to(device) for t in next(it))
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        seen += int(mask.sum())
        last = step == total[0]
        do_eval = bool(held) and ((cfg.eval_every > 0 and step % cfg.eval_every == 0) or last)
        if step % cfg.log_every == 0 or last or do_eval:
            rec: dict[str, Any] = {
                "step": step, "loss": round(float(out.loss.detach()), 4),
                "aux": round(float(out.aux_loss.detach()) if out.aux_loss is not None else 0.0, 4),
                "tokens": seen, "wall_s": round(time.perf_counter() - t0, 1), "lr": sched.get_last_lr()[0]}
            if do_eval:
                loss = evaluate(model, held, cfg, pad_id, device, cfg.eval_batches)
                rec["held_out_loss"] = round(loss, 4)
                if stopper.update(step, loss):
                    rec["best"] = True
                    if cfg.keep_best:
                        best, best_tokens = snapshot(model), seen
                rec["best_step"] = stopper.best_step
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(json.dumps(rec), flush=True)
            if do_eval and stopper.should_stop and not last:
                stopped_early = True
                break
    if stopped_early:
        reason = (f"early stop at step {step}: held-out loss did not improve for {stopper.since_best} "
                  f"evaluations (every {cfg.eval_every} steps) after its best at step {stopper.best_step}")
    else:
        reason = f"step limit {step} reached"
    if best is not None and stopper.best_step != step:
        model.load_state_dict(best)
        exported, exported_tokens = stopper.best_step, best_tokens
        reason += f"; exporting the best held-out weights (step {exported})"
    else:
        exported, exported_tokens = step, seen
        reason += f"; exporting the last step's weights (step {step}" + (
            ", the best held-out loss)" if best is not None else ")")
    final = {"event": "export", "steps_trained": step, "exported_step": exported, "exported_tokens": exported_tokens,
             "best_step": stopper.best_step or None,
             "best_held_out_loss": round(stopper.best_loss, 4) if stopper.best_step else None,
             "reason": reason, "wall_s": round(time.perf_counter() - t0, 1)}
    log.write(json.dumps(final) + "\n")
    log.close()
    print(json.dumps(final), flush=True)
    model.eval()
    model.steps_done = step
    model.tokens_seen = seen
    model.exported_step = exported
    model.exported_tokens = exported_tokens
    model.best_held_out_loss = final["best_held_out_loss"]
    model.stop_reason = reason
    return model


def held_out_batches(held: list[tuple[list[int], int]], cfg: TrainConfig, pad: int):
    """Every held-out sample once, in order, ``cfg.batch`` at a time (the last batch may be smaller)."""
    for at in range(0, len(held), cfg.batch):
        yield pack_batch(held[at : at + cfg.batch], cfg.seq_len, pad)


@torch.no_grad()
def evaluate(model, held: list[tuple[list[int], int]], cfg: TrainConfig, pad_id: int, device: str,
             n_batches: int = 0) -> float:
    """Held-out loss: cross-entropy per reply token (the router aux term left out), over the whole
    held-out split in order (``n_batches`` 0) or over ``n_batches`` seeded random batches."""
    was = model.training
    model.eval()
    if n_batches > 0:
        rand = batches(held, cfg, pad_id, random.Random(1234))
        source = (next(rand) for _ in range(n_batches))
    else:
        source = held_out_batches(held, cfg, pad_id)
    total, count = 0.0, 0
    for batch in source:
        ids, labels, mask = (t.to(device) for t in batch)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(input_ids=ids, attention_mask=mask, output_router_logits=False).logits
        target = labels[:, 1:]
        total += float(torch.nn.functional.cross_entropy(
            logits[:, :-1].float().reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100,
            reduction="sum"))
        count += int((target != -100).sum())
    model.train(was)
    return total / max(count, 1)

"""Early stopping in the demo recipe: the exported weights are the best held-out snapshot (not the
last step's), patience ends training, and the held-out loss is a token-weighted mean."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from bench.demo_training import train as train_mod
from bench.demo_training.train import EarlyStopping, TrainConfig, evaluate, train

TINY = TrainConfig(vocab_size=128, hidden_size=64, intermediate=64, layers=2, experts=4, top_k=2, heads=2, kv_heads=1,
                   head_dim=32, sliding_window=8, seq_len=32, batch=4, steps=12, warmup=2, log_every=1, eval_every=1,
                   patience_evals=0)


def samples(n: int, seed: int) -> list[tuple[list[int], int]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(12, 30, (1,), generator=g))
        ids = torch.randint(0, 120, (length,), generator=g).tolist()
        out.append((ids, int(torch.randint(2, 8, (1,), generator=g))))
    return out


class Scripted:
    """Stands in for ``evaluate``: returns the given held-out losses in turn and records a copy of
    the weights it was shown at each evaluation."""

    def __init__(self, losses: list[float]) -> None:
        self.losses = list(losses)
        self.seen: list[dict[str, torch.Tensor]] = []

    def __call__(self, model, held, cfg, pad_id, device, n_batches=0) -> float:
        self.seen.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return self.losses[len(self.seen) - 1]


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def log_lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


def test_early_stopping_bookkeeping():
    s = EarlyStopping(patience_evals=2, min_delta=0.05)
    assert s.update(10, 3.0) and s.best_step == 10
    assert not s.update(20, 2.97)  # not better by more than min_delta
    assert not s.should_stop
    assert s.update(30, 2.5) and s.best_step == 30 and s.since_best == 0
    assert not s.update(40, 2.6) and not s.should_stop
    assert not s.update(50, 2.5) and s.should_stop
    assert not EarlyStopping(patience_evals=0).should_stop


def test_patience_stops_and_the_best_snapshot_is_returned(tmp_path, monkeypatch):
    # best at the 3rd evaluation (step 3), then 3 worse ones: patience 3 stops at step 6 of 12
    script = Scripted([3.0, 2.5, 2.0, 2.2, 2.1, 2.3, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    monkeypatch.setattr(train_mod, "evaluate", script)
    cfg = TrainConfig(**{**TINY.__dict__, "patience_evals": 3})
    model = train(samples(8, 0), samples(3, 1), cfg, tmp_path, pad_id=127, device="cpu")
    assert model.steps_done == 6 and len(script.seen) == 6
    assert model.exported_step == 3 and model.best_held_out_loss == 2.0
    exported = {k: v.detach() for k, v in model.state_dict().items()}
    assert same(exported, script.seen[2])  # the weights evaluated at step 3 ...
    assert not same(exported, script.seen[-1])  # ... not those of the last step
    last = log_lines(tmp_path)[-1]
    assert last["event"] == "export" and last["exported_step"] == 3 and last["steps_trained"] == 6
    assert "early stop at step 6" in last["reason"] and "step 3" in last["reason"]
    assert [r["step"] for r in log_lines(tmp_path)[1:-1] if r.get("best")] == [1, 2, 3]


def test_without_patience_training_runs_to_the_limit_and_still_exports_the_best(tmp_path, monkeypatch):
    script = Scripted([3.0, 1.5, 2.0, 2.5, 2.6, 2.7])
    monkeypatch.setattr(train_mod, "evaluate", script)
    cfg = TrainConfig(**{**TINY.__dict__, "steps": 6, "patience_evals": 0})
    model = train(samples(8, 0), samples(3, 1), cfg, tmp_path, pad_id=127, device="cpu")
    assert model.steps_done == 6 and model.exported_step == 2
    assert same({k: v.detach() for k, v in model.state_dict().items()}, script.seen[1])
    assert "step limit 6 reached" in model.stop_reason


def test_export_last_keeps_the_last_weights(tmp_path, monkeypatch):
    script = Scripted([3.0, 1.5, 2.0, 2.5])
    monkeypatch.setattr(train_mod, "evaluate", script)
    cfg = TrainConfig(**{**TINY.__dict__, "steps": 4, "keep_best": False})
    model = train(samples(8, 0), samples(3, 1), cfg, tmp_path, pad_id=127, device="cpu")
    assert model.exported_step == 4 and model.best_held_out_loss == 1.5
    assert same({k: v.detach() for k, v in model.state_dict().items()}, script.seen[-1])


def test_eval_every_sets_the_evaluation_steps(tmp_path, monkeypatch):
    script = Scripted([3.0] * 10)
    monkeypatch.setattr(train_mod, "evaluate", script)
    cfg = TrainConfig(**{**TINY.__dict__, "steps": 7, "eval_every": 3, "log_every": 5})
    train(samples(8, 0), samples(3, 1), cfg, tmp_path, pad_id=127, device="cpu")
    evals = [r["step"] for r in log_lines(tmp_path)[1:-1] if "held_out_loss" in r]
    assert evals == [3, 6, 7]  # every 3 steps, and after the last


def test_held_out_loss_is_per_token_over_the_whole_split():
    from transformers import GptOssForCausalLM

    torch.manual_seed(0)
    model = GptOssForCausalLM(TINY.hf_config()).eval()
    held = samples(5, 2)
    a = evaluate(model, held, TrainConfig(**{**TINY.__dict__, "batch": 2}), 127, "cpu")
    b = evaluate(model, held, TrainConfig(**{**TINY.__dict__, "batch": 5}), 127, "cpu")
    total = count = 0.0
    with torch.no_grad():
        for ids, start in held:
            logits = model(torch.tensor([ids]), output_router_logits=False).logits[0]
            target = torch.tensor(ids[start:])  # the reply, each token predicted from the one before
            total += float(torch.nn.functional.cross_entropy(logits[start - 1 : -1], target, reduction="sum"))
            count += len(target)
    assert a == pytest.approx(total / count, rel=1e-4) and b == pytest.approx(total / count, rel=1e-4)


def test_recipe_exports_the_best_snapshot(tmp_path, monkeypatch):
    """End to end: the exported checkpoint holds the best evaluation's weights (bf16 of them)."""
    from bench.demo_training.run import run
    from engine.checkpoint import Checkpoint
    from engine.synth import _bf16_bits

    script = Scripted([3.0, 2.0, 2.5, 2.6])
    monkeypatch.setattr(train_mod, "evaluate", script)
    root = Path(sysconfig.get_paths()["stdlib"]) / "json"
    cfg = TrainConfig(vocab_size=400, hidden_size=64, intermediate=64, layers=2, experts=4, top_k=2, heads=2,
                      kv_heads=1, head_dim=32, sliding_window=8, seq_len=96, batch=2, steps=10, log_every=1,
                      eval_every=1, patience_evals=2, lr=1e-2, warmup=1)
    report = run(tmp_path, cfg, "cpu", corpus_root=root, n_samples=1)
    assert report["exported_step"] == 2 and report["steps_trained"] == 4 and report["held_out_loss"] == 2.0
    assert "early stop at step 4" in report["stop_reason"]
    demo = json.loads((tmp_path / "model" / "DEMO.json").read_text())
    assert demo["exported_step"] == 2
    ck = Checkpoint.open(tmp_path / "model")
    name = "model.embed_tokens.weight"
    got = ck.array(name)  # raw bf16 bits as written
    want = _bf16_bits(script.seen[1][name].float().numpy())
    last = _bf16_bits(script.seen[-1][name].float().numpy())
    assert (got == want).all() and not (got == last).all()

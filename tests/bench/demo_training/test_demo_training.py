"""The demo-model recipe end to end at a micro size: corpus → tokenizer → train → MXFP4 export,
and the exported folder is a gpt-oss checkpoint that the engine and transformers agree on."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")


def test_recipe_exports_a_checkpoint_transformers_and_engine_agree_on(tmp_path):
    from transformers import GptOssForCausalLM, Mxfp4Config

    from bench.demo_training.corpus import build_corpus
    from bench.demo_training.run import run
    from bench.demo_training.train import TrainConfig
    from engine.checkpoint import Checkpoint
    from engine.reference import ReferenceModel

    root = Path(sysconfig.get_paths()["stdlib"]) / "json"
    samples, _ = build_corpus(root)
    assert samples and all("```python" in s.answer for s in samples)
    cfg = TrainConfig(vocab_size=400, hidden_size=64, intermediate=64, layers=2, experts=4, top_k=2, heads=2,
                      kv_heads=1, head_dim=32, sliding_window=8, seq_len=96, batch=2, steps=3, log_every=1)
    report = run(tmp_path, cfg, "cpu", corpus_root=root, n_samples=1)
    model_dir = tmp_path / "model"
    assert (model_dir / "README.md").is_file() and (tmp_path / "train_log.jsonl").is_file()
    assert report["samples"][0]["finish"] in ("stop", "length", "tool_calls")

    ck = Checkpoint.open(model_dir)
    ids = list(range(5, 45))
    ours = ReferenceModel(ck, torch.float32).forward(ids)
    hf = GptOssForCausalLM.from_pretrained(str(model_dir), quantization_config=Mxfp4Config(dequantize=True),
                                           dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits[0]
    assert float((ours - theirs).abs().max() / theirs.abs().max()) <= 1e-4

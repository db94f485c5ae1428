"""The bundled demo model: a real gpt-oss checkpoint that transformers and the engine agree on,
labelled as what it is, and answering in the trained pattern (analysis, then code on final)."""

from __future__ import annotations

import pytest
import torch

from app.core.models import DEMO_DIR, demo_model_dir
from engine.checkpoint import Checkpoint
from engine.reference import ReferenceModel
from engine.session import Engine
from engine.settings import EngineSettings
from engine.types import Conversation, Done, GenerationParams, Message, TextDelta


def test_demo_model_is_bundled_and_labelled():
    assert demo_model_dir() == DEMO_DIR
    eng = Engine.load(DEMO_DIR, EngineSettings(backend="reference"))
    assert "not gpt-oss-120b" in eng.info.note
    assert (DEMO_DIR / "README.md").read_text().startswith("# Neural demo model")
    assert (DEMO_DIR / "model.safetensors").stat().st_size < 30 * 2**20


def test_transformers_and_engine_agree_on_demo_logits():
    transformers = pytest.importorskip("transformers")
    ck = Checkpoint.open(DEMO_DIR)
    ids = list(range(100, 160))  # longer than the sliding window (64)
    ours = ReferenceModel(ck, torch.float32).forward(ids)
    hf = transformers.GptOssForCausalLM.from_pretrained(
        str(DEMO_DIR), quantization_config=transformers.Mxfp4Config(dequantize=True), dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits[0]
    assert float((ours - theirs).abs().max() / theirs.abs().max()) <= 1e-4


def test_demo_model_answers_with_code():
    eng = Engine.load(DEMO_DIR, EngineSettings(backend="reference", dtype="float32"))
    conv = Conversation((Message("user", "Write a Python function `is_empty(seq)` that return True if seq is empty"),),
                        reasoning_effort="low", current_date="2026-11-29")
    text = {"analysis": "", "final": "", "commentary": ""}
    done = None
    for ev in eng.generate(conv, GenerationParams(max_tokens=120, temperature=0)):
        if isinstance(ev, TextDelta):
            text[ev.channel] += ev.text
        elif isinstance(ev, Done):
            done = ev
    assert done is not None and done.error is None
    assert text["analysis"].strip()
    assert "```python" in text["final"] and "def " in text["final"]

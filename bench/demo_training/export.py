"""Export a trained ``GptOssForCausalLM`` to the exact HF gpt-oss layout with MXFP4 experts,
through the project's own writer (engine/safetensors_io.py) — the same files the engine and
transformers read for the real checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from engine.checkpoint import SINGLE_NAME, expected_tensors
from engine.config import ModelConfig
from engine.mxfp4 import quantize_codes
from engine.reference import yarn_inv_freq
from engine.safetensors_io import TensorSpec, write_safetensors
from engine.synth import _bf16_bits

from .train import TrainConfig

MODEL_CARD = """# Neural demo model (gpt-oss architecture, {params:,} parameters)

**What it is:** a very small model with the exact gpt-oss-120b architecture (attention sinks,
alternating sliding/full attention, YaRN RoPE, top-{top_k} mixture of {experts} experts per layer
with the clamped SwiGLU, MXFP4 experts), trained by the Neural project from scratch on chat samples
built from the Python {pyver} standard library: a user asks for a function, the assistant answers
on the final channel with code and one sentence. Trained for {steps} steps ({tokens:,} tokens) on
{device}; recipe and log in `docs/demo-model.md`.

**What it is not:** it is not gpt-oss-120b, not instruction-tuned beyond that one pattern, and not
reliable: its code is often wrong and it does not follow instructions. It exists so that the app,
`neural generate` and `neural serve` answer something recognisable on a fresh machine with no
download, and so that expert-residency policies can be measured on routing that was learned.
License: trained on Python standard library sources (PSF License).
"""


def _bf16(t: torch.Tensor) -> np.ndarray:
    return _bf16_bits(t.detach().float().cpu().numpy())


def export(model, tok, cfg: TrainConfig, out_dir: Path, meta: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    cdict = cfg.shape().config_dict()
    ret, call, eot = (tok.token_to_id(s) for s in ("<|return|>", "<|call|>", "<|endoftext|>"))
    cdict.update(eos_token_id=ret, pad_token_id=eot)
    mcfg = ModelConfig.from_dict(cdict)
    # the exported RoPE must be the one the model was trained with
    inv, conc = yarn_inv_freq(mcfg)
    rot = model.model.rotary_emb
    if not torch.allclose(rot.inv_freq.float().cpu(), torch.tensor(inv), rtol=1e-5) or \
            abs(float(rot.attention_scaling) - conc) > 1e-6:
        raise RuntimeError("exported RoPE/YaRN parameters differ from the trained model's")
    sd = {k: v for k, v in model.state_dict().items()}

    def produce(name: str):
        def make() -> np.ndarray:
            if ".mlp.experts." in name:
                layer = name.split(".")[2]
                base = f"model.layers.{layer}.mlp.experts."
                part = name.rsplit(".", 1)[1]
                if part.endswith("_bias"):
                    return _bf16(sd[base + part])
                w = sd[base + part.replace("_blocks", "").replace("_scales", "")].float()
                w = w.transpose(1, 2).contiguous().cpu().numpy()  # HF in-memory is in x out; disk is out x in
                blocks, scales = quantize_codes(w)
                g = w.shape[-1] // 32
                return blocks.reshape(*w.shape[:-1], g, 16) if part.endswith("_blocks") else scales
            return _bf16(sd[name])

        return make

    specs = [TensorSpec(n, dt, shp, produce(n)) for n, (dt, shp) in expected_tensors(mcfg).items()]
    write_safetensors(out_dir / SINGLE_NAME, specs, {"format": "pt"})
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "config.json").write_text(json.dumps(cdict, indent=2))
    (out_dir / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": tok.token_to_id("<|startoftext|>"), "eos_token_id": [ret, eot, call],
         "pad_token_id": eot, "do_sample": True, "temperature": 0.7}, indent=2))
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}, indent=2))
    params = sum(p.numel() for p in model.parameters())
    (out_dir / "README.md").write_text(MODEL_CARD.format(params=params, top_k=cfg.top_k, experts=cfg.experts,
                                                         steps=cfg.steps, **meta))
    (out_dir / "DEMO.json").write_text(json.dumps(
        {"note": "demo model trained on Python stdlib code (not gpt-oss-120b; often wrong)", **meta}, indent=2))
    return out_dir

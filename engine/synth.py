"""Synthetic gpt-oss checkpoints in the exact Hugging Face layout.

Weights cannot be downloaded here, so every test and benchmark runs on checkpoints written
by this module: ``config.json`` (with the mxfp4 ``quantization_config``), safetensors with
MXFP4 experts (sharded through ``model.safetensors.index.json`` when large),
``tokenizer.json`` and ``generation_config.json``. The engine loads them through the same
code path as the real 61 GB checkpoint. Tensors are generated and written one at a time.
"""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from .checkpoint import INDEX_NAME, SINGLE_NAME, expected_tensors
from .config import ModelConfig
from .safetensors_io import TensorSpec, write_safetensors
from .tokenizer import build_synthetic_tokenizer


@dataclass(frozen=True)
class SynthShape:
    hidden_size: int
    num_hidden_layers: int
    num_local_experts: int
    num_experts_per_tok: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    sliding_window: int = 128
    rope_factor: float = 32.0
    original_context: int = 4096

    def config_dict(self) -> dict[str, object]:
        n = self.num_hidden_layers
        tok_eos = [200002, 199999, 200012]
        return {
            "architectures": ["GptOssForCausalLM"],
            "model_type": "gpt_oss",
            "hidden_size": self.hidden_size,
            "num_hidden_layers": n,
            "num_local_experts": self.num_local_experts,
            "num_experts_per_tok": self.num_experts_per_tok,
            "experts_per_token": self.num_experts_per_tok,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "rope_theta": 150000,
            "rope_scaling": {
                "rope_type": "yarn", "factor": self.rope_factor, "beta_fast": 32.0, "beta_slow": 1.0,
                "original_max_position_embeddings": self.original_context, "truncate": False,
            },
            "initial_context_length": self.original_context,
            "max_position_embeddings": self.original_context * int(self.rope_factor),
            "sliding_window": self.sliding_window,
            "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)],
            "swiglu_limit": 7.0,
            "rms_norm_eps": 1e-05,
            "attention_bias": True,
            "attention_dropout": 0.0,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "eos_token_id": tok_eos[0] if self.vocab_size > 200019 else None,
            "pad_token_id": 199999 if self.vocab_size > 200019 else None,
            "initializer_range": 0.02,
            "router_aux_loss_coef": 0.9,
            "output_router_logits": False,
            "use_cache": True,
            "torch_dtype": "bfloat16",
            "quantization_config": {
                "quant_method": "mxfp4",
                "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                           "model.embed_tokens", "lm_head"],
            },
        }


PRESETS: dict[str, SynthShape] = {
    "tiny": SynthShape(64, 4, 8, 4, 4, 2, 16, 64, 512, sliding_window=8),
    # odd sizes: nothing a power of two, top-k 3, a window shorter than test prompts
    "odd": SynthShape(96, 3, 6, 3, 6, 3, 24, 160, 600, sliding_window=5),
    # the bundled demo model (random weights): small enough to ship, big enough to look like a model
    "demo": SynthShape(128, 4, 16, 4, 4, 2, 32, 128, 1024, sliding_window=16),
    "small": SynthShape(256, 6, 16, 4, 8, 2, 32, 256, 1024, sliding_window=16),
    "20b-shape": SynthShape(2880, 24, 32, 4, 64, 8, 64, 2880, 201088),
    "120b-shape": SynthShape(2880, 36, 128, 4, 64, 8, 64, 2880, 201088),
}


def _rng(seed: int, name: str) -> np.random.Generator:
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bits, round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
    return (rounded >> np.uint32(16)).astype(np.uint16)


class _Fast:
    """Seeded tiled pattern for speed-test checkpoints: one random pool reused per tensor."""

    def __init__(self, seed: int, pool_bytes: int = 64 << 20) -> None:
        self.pool = np.random.default_rng(seed).integers(0, 256, pool_bytes, dtype=np.uint8)

    def bytes(self, n: int, salt: int) -> np.ndarray:
        off = (salt * 7919) % len(self.pool)
        reps = -(-(n + off) // len(self.pool))
        return np.tile(self.pool, reps)[off : off + n] if reps > 1 else self.pool[off : off + n].copy()


def _producer(name: str, dtype: str, shape: tuple[int, ...], cfg: ModelConfig, seed: int,
              skew: float, fast: _Fast | None) -> Callable[[], np.ndarray]:
    h = cfg.hidden_size
    n = int(np.prod(shape))

    def normal(std: float, mean: float = 0.0) -> np.ndarray:
        return _bf16_bits((mean + std * _rng(seed, name).standard_normal(n, dtype=np.float32)).reshape(shape))

    def make() -> np.ndarray:
        if dtype == "U8":
            if name.endswith("_blocks"):
                if fast is not None:
                    return fast.bytes(n, zlib.crc32(name.encode())).reshape(shape)
                return _rng(seed, name).integers(0, 256, n, dtype=np.uint8).reshape(shape)
            # scales: E8M0 exponents chosen so weights have std ~ 1/sqrt(fan_in) (random E2M1 codes
            # have rms ~2.93), jittered by +-1 so rows differ.
            fan_in = shape[-1] * 32
            s0 = 127 + round(math.log2(1.0 / (2.93 * math.sqrt(fan_in))))
            return (s0 + _rng(seed, name).integers(-1, 2, n)).astype(np.uint8).reshape(shape)
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            return normal(0.1, 1.0)
        if name.endswith("embed_tokens.weight"):
            return normal(1.0)
        if name.endswith("sinks"):
            return normal(1.0)
        if name.endswith("router.bias"):
            e = shape[0]
            base = _rng(seed, name).standard_normal(e, dtype=np.float32) * 0.1
            if skew:
                # Skewed popularity: a per-layer random ranking with log-rank penalties.
                rank = _rng(seed, name + ":perm").permutation(e)
                base = base - skew * np.log1p(rank).astype(np.float32)
            return _bf16_bits(base)
        if name.endswith(".bias"):
            return normal(0.02)
        if name.endswith("o_proj.weight"):
            return normal(1.0 / math.sqrt(cfg.q_width))
        if name.endswith("router.weight"):
            return normal(2.0 / math.sqrt(h))
        return normal(1.0 / math.sqrt(h))  # q/k/v, lm_head

    return make


def write_synthetic_checkpoint(out_dir: str | Path, shape: SynthShape, seed: int = 0, skew: float = 0.0,
                               max_shard_bytes: int = 2 << 30, fast: bool = False,
                               progress: Callable[[int, int], None] | None = None) -> Path:
    """Write a complete HF-layout gpt-oss folder; returns its path.

    ``progress(done_bytes, total_bytes)`` is called as tensors are written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cdict = shape.config_dict()
    cfg = ModelConfig.from_dict(cdict)
    tok = build_synthetic_tokenizer(shape.vocab_size)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
    }, indent=2))
    ret, call, eot = (tok.token_to_id(s) for s in ("<|return|>", "<|call|>", "<|endoftext|>"))
    cdict["eos_token_id"] = ret
    cdict["pad_token_id"] = eot
    (out / "config.json").write_text(json.dumps(cdict, indent=2))
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": tok.token_to_id("<|startoftext|>"), "eos_token_id": [ret, eot, call],
         "pad_token_id": eot, "do_sample": True}, indent=2))
    (out / "SYNTHETIC.json").write_text(json.dumps(
        {"note": "random weights (synthetic checkpoint written by neural synth)", "seed": seed,
         "skew": skew, "fast": fast, "shape": asdict(shape)}, indent=2))

    pool = _Fast(seed) if fast else None
    specs = [TensorSpec(n, dt, shp, _producer(n, dt, shp, cfg, seed, skew, pool))
             for n, (dt, shp) in expected_tensors(cfg).items()]
    total = sum(s.nbytes for s in specs)
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for s in specs:
        if shards[-1] and size + s.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(s)
        size += s.nbytes
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    for stale in [*list(out.glob("model*.safetensors")), out / INDEX_NAME]:
        stale.unlink(missing_ok=True)
    if len(shards) == 1:
        write_safetensors(out / SINGLE_NAME, shards[0], {"format": "pt"}, tick)
    else:
        weight_map: dict[str, str] = {}
        for k, group in enumerate(shards):
            fname = f"model-{k:05d}-of-{len(shards) - 1:05d}.safetensors"
            write_safetensors(out / fname, group, {"format": "pt"}, tick)
            weight_map.update({s.name: fname for s in group})
        (out / INDEX_NAME).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                                 indent=2))
    return out


def shape_with(preset: str, **overrides: int) -> SynthShape:
    base = PRESETS[preset]
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})

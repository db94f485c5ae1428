"""Shapes of synthetic checkpoints: the config a shape writes and the named presets."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


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
    # "o200k": the real gpt-oss tokenizer (engine/synth/o200k.py) when vocab_size is its 201,088;
    # "synthetic" (or another vocab_size): a small byte-level BPE with the harmony specials.
    tokenizer: str = "synthetic"

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
    # the real shapes speak the real vocabulary: prompts count the tokens gpt-oss would see
    "20b-shape": SynthShape(2880, 24, 32, 4, 64, 8, 64, 2880, 201088, tokenizer="o200k"),
    "120b-shape": SynthShape(2880, 36, 128, 4, 64, 8, 64, 2880, 201088, tokenizer="o200k"),
}


def shape_with(preset: str, **overrides: int) -> SynthShape:
    base = PRESETS[preset]
    changes: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
    return replace(base, **changes)

"""Validated model configuration parsed from a gpt-oss ``config.json``.

Every later component (reader, reference math, kernels, slot pool) takes its shapes from
:class:`ModelConfig`, so the checks here are the single place where a malformed or
inconsistent config is turned into a message that names the file and the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MXFP4_BLOCK = 32  # values per MXFP4 block (16 bytes of codes + one E8M0 scale)


class ConfigError(ValueError):
    """A model ``config.json`` is missing, unreadable or inconsistent."""


@dataclass(frozen=True)
class RopeScaling:
    """YaRN parameters; ``factor == 1`` with type ``default`` means plain RoPE."""

    rope_type: str = "yarn"
    factor: float = 32.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    original_max_position_embeddings: int = 4096
    # transformers defaults a missing `truncate` to True; gpt-oss ships False explicitly.
    truncate: bool = True


@dataclass(frozen=True)
class ModelConfig:
    hidden_size: int
    num_hidden_layers: int
    num_local_experts: int
    num_experts_per_tok: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float
    rope_scaling: RopeScaling
    sliding_window: int
    layer_types: tuple[str, ...]
    swiglu_limit: float = 7.0
    swiglu_alpha: float = 1.702
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 131072
    tie_word_embeddings: bool = False
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    quant_method: str = "mxfp4"
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # ---- derived shapes -------------------------------------------------------------
    @property
    def q_width(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def gqa_group(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def hidden_blocks(self) -> int:
        """MXFP4 blocks along a hidden-size row (input of gate_up)."""
        return self.hidden_size // MXFP4_BLOCK

    @property
    def intermediate_blocks(self) -> int:
        """MXFP4 blocks along an intermediate row (input of down)."""
        return self.intermediate_size // MXFP4_BLOCK

    def is_sliding(self, layer: int) -> bool:
        return self.layer_types[layer] == "sliding_attention"

    def expert_mxfp4_bytes(self) -> int:
        """MXFP4 codes + scales of one expert (the design doc's 13,219,200 B at the 120b shape)."""
        h, i = self.hidden_size, self.intermediate_size
        return 2 * i * (h // 2 + h // MXFP4_BLOCK) + h * (i // 2 + i // MXFP4_BLOCK)

    def expert_bytes(self) -> int:
        """Bytes of one expert as stored in the checkpoint: MXFP4 plus both bf16 biases."""
        return self.expert_mxfp4_bytes() + 2 * (2 * self.intermediate_size + self.hidden_size)

    # ---- parsing --------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config.json") -> ModelConfig:
        def need(key: str, *aliases: str) -> Any:
            for k in (key, *aliases):
                if k in d and d[k] is not None:
                    return d[k]
            names = " or ".join(repr(k) for k in (key, *aliases))
            raise ConfigError(f"{source}: missing required key {names}")

        def pos_int(key: str, *aliases: str) -> int:
            v = need(key, *aliases)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ConfigError(f"{source}: {key!r} must be a positive integer, got {v!r}")
            return v

        mt = d.get("model_type")
        if mt is not None and mt != "gpt_oss":
            raise ConfigError(f"{source}: model_type is {mt!r}, expected 'gpt_oss'")
        hidden = pos_int("hidden_size")
        layers = pos_int("num_hidden_layers")
        experts = pos_int("num_local_experts", "num_experts")
        topk = pos_int("num_experts_per_tok", "experts_per_token")
        heads = pos_int("num_attention_heads")
        kv_heads = pos_int("num_key_value_heads")
        head_dim = int(d.get("head_dim") or hidden // heads)
        inter = pos_int("intermediate_size")
        vocab = pos_int("vocab_size")
        window = int(d.get("sliding_window") or 0)

        if topk > experts:
            raise ConfigError(f"{source}: num_experts_per_tok={topk} exceeds num_local_experts={experts}")
        if heads % kv_heads:
            raise ConfigError(
                f"{source}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}"
            )
        if head_dim % 2:
            raise ConfigError(f"{source}: head_dim={head_dim} must be even for RoPE")
        for key, v in (("hidden_size", hidden), ("intermediate_size", inter)):
            if v % MXFP4_BLOCK:
                raise ConfigError(f"{source}: {key}={v} must be a multiple of the MXFP4 block ({MXFP4_BLOCK})")

        lt = d.get("layer_types")
        if lt is None:  # transformers' default: even layers slide
            lt = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]
        if not isinstance(lt, list) or len(lt) != layers:
            raise ConfigError(f"{source}: layer_types must list {layers} entries (num_hidden_layers)")
        bad = sorted({t for t in lt if t not in ("sliding_attention", "full_attention")})
        if bad:
            raise ConfigError(f"{source}: unknown layer_types {bad}")
        if "sliding_attention" in lt and window <= 0:
            raise ConfigError(f"{source}: layer_types has sliding layers but sliding_window is {window}")

        rs = d.get("rope_scaling") or d.get("rope_parameters") or {}
        if not isinstance(rs, dict):
            raise ConfigError(f"{source}: rope_scaling must be an object")
        rtype = rs.get("rope_type", rs.get("type", "default"))
        if rtype not in ("yarn", "default"):
            raise ConfigError(f"{source}: rope_scaling type {rtype!r} is not supported (yarn or default)")
        theta = float(rs.get("rope_theta", d.get("rope_theta", 150000.0)))
        rope = RopeScaling(
            rope_type=rtype,
            factor=float(rs.get("factor", 1.0)),
            beta_fast=float(rs.get("beta_fast", 32.0)),
            beta_slow=float(rs.get("beta_slow", 1.0)),
            original_max_position_embeddings=int(
                rs.get("original_max_position_embeddings", d.get("initial_context_length", 4096))
            ),
            truncate=bool(rs.get("truncate", True)),
        )
        if rope.factor <= 0:
            raise ConfigError(f"{source}: rope_scaling.factor must be positive")

        eos = d.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if isinstance(eos, int) else ())
        qc = d.get("quantization_config") or {}
        return cls(
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_local_experts=experts,
            num_experts_per_tok=topk,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=inter,
            vocab_size=vocab,
            rope_theta=theta,
            rope_scaling=rope,
            sliding_window=window,
            layer_types=tuple(lt),
            swiglu_limit=float(d.get("swiglu_limit", 7.0)),
            swiglu_alpha=float(d.get("swiglu_alpha", 1.702)),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-5)),
            max_position_embeddings=int(d.get("max_position_embeddings", 131072)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            eos_token_ids=eos_ids,
            pad_token_id=d.get("pad_token_id"),
            quant_method=str(qc.get("quant_method", "none")),
            raw=dict(d),
        )

    @classmethod
    def load(cls, model_dir: str | Path) -> ModelConfig:
        path = Path(model_dir) / "config.json"
        if not path.is_file():
            raise ConfigError(not_a_model_folder(Path(model_dir)))
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: cannot be read as JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a JSON object")
        return cls.from_dict(data, source=str(path))


GGUF_HINT = ("GGUF is the format of llama.cpp, Ollama and LM Studio; Neural runs gpt-oss from its Hugging Face "
             "checkpoint (a folder with config.json, tokenizer.json and *.safetensors holding the MXFP4 experts), "
             "as openai/gpt-oss-120b and openai/gpt-oss-20b are published")


def not_a_model_folder(d: Path) -> str:
    """Why ``d`` (without a config.json) is no model folder, in the words that help: the GGUF file a user of another
    local runner has, or the checkpoint one or two folders down (a Hugging Face cache keeps it in
    ``models--owner--name/snapshots/<revision>/``)."""
    if d.is_file():
        if d.suffix.lower() == ".gguf":
            return f"{d} is a GGUF file: {GGUF_HINT}"
        return f"{d} is a file: choose the model's folder (the one with config.json)"
    if not d.is_dir():
        return f"{d}: model folder not found"
    try:
        below = sorted(p.parent for pattern in ("*/config.json", "*/*/config.json") for p in d.glob(pattern)
                       if p.parent.name != "original")  # gpt-oss repos keep the reference weights' config there
        ggufs = sorted(p.name for p in d.glob("*.gguf"))
    except OSError:
        below, ggufs = [], []
    if len(below) == 1:
        return f"{d / 'config.json'}: not found; the model folder is probably {below[0]}"
    if below:
        return f"{d / 'config.json'}: not found; model folders below it: " + ", ".join(str(b) for b in below[:4])
    if ggufs:
        more = f" (and {len(ggufs) - 1} more GGUF files)" if len(ggufs) > 1 else ""
        return f"{d} holds {ggufs[0]}{more} and no config.json: {GGUF_HINT}"
    return f"{d / 'config.json'}: not found — is {d} a gpt-oss model folder?"

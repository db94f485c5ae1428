"""A gpt-oss checkpoint folder in the Hugging Face layout, opened lazily.

``Checkpoint.open`` parses ``config.json``, resolves tensors through
``model.safetensors.index.json`` (or a single ``model.safetensors``) and checks every
expected tensor's presence, dtype and shape up front, so a broken download fails at load
with the file and tensor named rather than mid-generation. Tensor data stays memory-mapped;
MXFP4 expert tensors are handed out as raw blocks + scales and never dequantized wholesale.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import torch

from .config import MXFP4_BLOCK, ConfigError, ModelConfig
from .safetensors_io import CheckpointError, SafetensorsFile

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
EXPERT_PARTS = (
    "gate_up_proj_blocks",
    "gate_up_proj_scales",
    "gate_up_proj_bias",
    "down_proj_blocks",
    "down_proj_scales",
    "down_proj_bias",
)


def expected_tensors(cfg: ModelConfig) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (dtype, shape) for every tensor of the HF gpt-oss layout."""
    h, e, i = cfg.hidden_size, cfg.num_local_experts, cfg.intermediate_size
    q, kv, v = cfg.q_width, cfg.kv_width, cfg.vocab_size
    out: dict[str, tuple[str, tuple[int, ...]]] = {"model.embed_tokens.weight": ("BF16", (v, h))}
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        out.update(
            {
                p + "input_layernorm.weight": ("BF16", (h,)),
                p + "self_attn.q_proj.weight": ("BF16", (q, h)),
                p + "self_attn.q_proj.bias": ("BF16", (q,)),
                p + "self_attn.k_proj.weight": ("BF16", (kv, h)),
                p + "self_attn.k_proj.bias": ("BF16", (kv,)),
                p + "self_attn.v_proj.weight": ("BF16", (kv, h)),
                p + "self_attn.v_proj.bias": ("BF16", (kv,)),
                p + "self_attn.o_proj.weight": ("BF16", (h, q)),
                p + "self_attn.o_proj.bias": ("BF16", (h,)),
                p + "self_attn.sinks": ("BF16", (cfg.num_attention_heads,)),
                p + "post_attention_layernorm.weight": ("BF16", (h,)),
                p + "mlp.router.weight": ("BF16", (e, h)),
                p + "mlp.router.bias": ("BF16", (e,)),
                p + "mlp.experts.gate_up_proj_blocks": ("U8", (e, 2 * i, h // MXFP4_BLOCK, 16)),
                p + "mlp.experts.gate_up_proj_scales": ("U8", (e, 2 * i, h // MXFP4_BLOCK)),
                p + "mlp.experts.gate_up_proj_bias": ("BF16", (e, 2 * i)),
                p + "mlp.experts.down_proj_blocks": ("U8", (e, h, i // MXFP4_BLOCK, 16)),
                p + "mlp.experts.down_proj_scales": ("U8", (e, h, i // MXFP4_BLOCK)),
                p + "mlp.experts.down_proj_bias": ("BF16", (e, h)),
            }
        )
    out["model.norm.weight"] = ("BF16", (h,))
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = ("BF16", (v, h))
    return out


def bf16_bits_to_tensor(bits: np.ndarray) -> torch.Tensor:
    """View uint16 bf16 bits as a torch bf16 tensor (copies out of the mapping)."""
    return torch.from_numpy(np.array(bits, copy=True)).view(torch.bfloat16)


class Checkpoint:
    def __init__(self, model_dir: Path, config: ModelConfig, files: dict[str, SafetensorsFile],
                 where: dict[str, str]) -> None:
        self.model_dir = model_dir
        self.config = config
        self._files = files
        self._where = where  # tensor name -> file name
        self._fingerprint: str | None = None

    @classmethod
    def open(cls, model_dir: str | Path) -> Checkpoint:
        d = Path(model_dir)
        try:
            cfg = ModelConfig.load(d)  # says what a missing path, a file or a folder without config.json is
        except ConfigError as exc:
            raise CheckpointError(str(exc)) from exc
        if cfg.quant_method != "mxfp4":
            raise CheckpointError(f"{d / 'config.json'}: quantization_config.quant_method must be 'mxfp4' "
                                  f"(got {cfg.quant_method!r}); only native MXFP4 gpt-oss checkpoints are supported")
        index = d / INDEX_NAME
        where: dict[str, str] = {}
        if index.is_file():
            try:
                wm = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                if not isinstance(wm, dict):
                    raise TypeError
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise CheckpointError(f"{index}: unreadable or has no 'weight_map'") from exc
            where = {str(k): str(v) for k, v in wm.items()}
        elif (d / SINGLE_NAME).is_file():
            where = {}
        else:
            raise CheckpointError(f"{d}: no {INDEX_NAME} or {SINGLE_NAME} — not a safetensors checkpoint")
        files: dict[str, SafetensorsFile] = {}
        for fname in sorted(set(where.values())) or [SINGLE_NAME]:
            fp = d / fname
            if not fp.is_file():
                raise CheckpointError(f"{fp}: shard listed in {INDEX_NAME} is missing")
            files[fname] = SafetensorsFile(fp)
        if not where:
            where = {n: SINGLE_NAME for n in files[SINGLE_NAME].tensors}
        ck = cls(d, cfg, files, where)
        ck.validate()
        return ck

    def validate(self) -> None:
        for name, (dtype, shape) in expected_tensors(self.config).items():
            fname = self._where.get(name)
            if fname is None:
                raise CheckpointError(f"{self.model_dir}: tensor {name!r} is missing from the checkpoint")
            info = self._files[fname].tensors.get(name)
            if info is None:
                raise CheckpointError(f"{self.model_dir / fname}: tensor {name!r} is listed in the index but absent")
            if info.dtype != dtype or info.shape != shape:
                raise CheckpointError(
                    f"{self.model_dir / fname}: tensor {name!r} is {info.dtype}{list(info.shape)}, "
                    f"expected {dtype}{list(shape)} for this config"
                )

    def array(self, name: str) -> np.ndarray:
        """Zero-copy view (BF16 tensors as uint16 bits)."""
        try:
            return self._files[self._where[name]].array(name)
        except KeyError as exc:
            raise CheckpointError(f"{self.model_dir}: tensor {name!r} is missing") from exc

    def bf16(self, name: str) -> torch.Tensor:
        return bf16_bits_to_tensor(self.array(name))

    def bf16_view(self, name: str) -> torch.Tensor:
        """A bf16 tensor on the file's mapping itself (no copy; read-only memory: never write to it). Valid while
        the checkpoint is open: :meth:`close` unmaps the file (numpy's views hold no buffer export), so a holder
        drops its views first (``ReferenceBackend.close``). The CPU engine's dense weights: a copy cost their size
        again in RAM and, at a first prompt, the time to fill it (issue 16: a fresh process's first request)."""
        bits = self.array(name)
        if bits.dtype != np.uint16:
            raise CheckpointError(f"{self.model_dir}: tensor {name!r} is not bf16")
        with warnings.catch_warnings():  # torch warns that the array is not writable: it is not, by design
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(bits).view(torch.bfloat16)

    def tensor_span(self, name: str) -> tuple[str, int, int]:
        """(shard file name, first byte, end byte) of a tensor's data in its shard."""
        try:
            fname = self._where[name]
            info = self._files[fname].tensors[name]
        except KeyError as exc:
            raise CheckpointError(f"{self.model_dir}: tensor {name!r} is missing") from exc
        return fname, info.start, info.end

    def shard_mapping(self, fname: str) -> np.ndarray:
        """The whole read-only mapping of one shard file (uint8), as the tensor views use it."""
        return self._files[fname]._mapped()

    def file_of(self, name: str) -> Path:
        return self.model_dir / self._where[name]

    def expert_arrays(self, layer: int, expert: int) -> dict[str, np.ndarray]:
        """The six MXFP4 / bias views of one expert (zero-copy)."""
        p = f"model.layers.{layer}.mlp.experts."
        return {part: self.array(p + part)[expert] for part in EXPERT_PARTS}

    def fingerprint(self) -> str:
        """Identifies the checkpoint: config, header layout and 4 KiB samples of every tensor's
        data (start, middle, end) — a fine-tune of the same shape gets another fingerprint
        while a 61 GB checkpoint is fingerprinted by reading only a few MB."""
        if self._fingerprint is None:
            import hashlib

            h = hashlib.sha256()
            h.update(json.dumps(self.config.raw, sort_keys=True).encode())
            for fname, f in sorted(self._files.items()):
                h.update(fname.encode())
                h.update(str(f.path.stat().st_size).encode())
                data = f._mapped()
                for n, t in sorted(f.tensors.items()):
                    h.update(f"{n}:{t.dtype}:{t.shape}:{t.start}".encode())
                    for a in (t.start, (t.start + t.end) // 2, max(t.start, t.end - 4096)):
                        h.update(data[a : min(a + 4096, t.end)].tobytes())
            self._fingerprint = h.hexdigest()[:32]
        return self._fingerprint

    def close(self) -> None:
        for f in self._files.values():
            f.close()

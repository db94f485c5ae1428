"""Synthetic gpt-oss checkpoints in the exact Hugging Face layout.

Weights cannot be downloaded here, so every test and benchmark runs on checkpoints written
by this package: ``config.json`` (with the mxfp4 ``quantization_config``), safetensors with
MXFP4 experts (sharded through ``model.safetensors.index.json`` when large),
``tokenizer.json``, ``generation_config.json`` and ``SYNTHETIC.json`` (seed, routing, shape).
The engine loads them through the same code path as the real 61 GB checkpoint. Tensors are
generated and written in chunks, shards by several threads.

- :mod:`.shapes`: :class:`SynthShape` and the presets.
- :mod:`.routing`: routing modes (uniform, static, drift) — how experts are favoured.
- :mod:`.tensors`: the bytes of every tensor.
- :mod:`.writer`: folders, sharding, and routing variants sharing expert bytes.
- :mod:`.routing_stats`: measuring the routing a checkpoint produces (reference engine).
"""

from __future__ import annotations

from .routing import DEFAULT_SKEW, MODES, DriftTables, RoutingSpec, token_topics
from .shapes import PRESETS, SynthShape, shape_with
from .tensors import _bf16_bits, _producer, _rng, is_routing_tensor
from .writer import (
    VariantReport,
    default_jobs,
    read_synthetic_meta,
    source_routing,
    write_routing_variant,
    write_synthetic_checkpoint,
)

__all__ = [
    "DEFAULT_SKEW", "MODES", "PRESETS", "DriftTables", "RoutingSpec", "SynthShape", "VariantReport", "_bf16_bits",
    "_producer", "_rng", "default_jobs", "is_routing_tensor", "read_synthetic_meta", "shape_with", "source_routing",
    "token_topics", "write_routing_variant", "write_synthetic_checkpoint",
]

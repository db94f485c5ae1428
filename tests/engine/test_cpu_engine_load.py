"""What the CPU engine does at load so that a fresh process's first prompt costs what later ones do (issue 16 item 3).

Measured before: at the 120b shape (36 layers, 2-core VM) the first 100-token prompt of a process took 20-25 s
against 2.3 s for the next, its time spent copying the dense weights out of the file mapping and packing them for
oneDNN. The dense weights are now views of the mapping (no copy), and the prompt path's projections are packed in
Engine.load, with progress.
"""

from __future__ import annotations

import pytest
import torch

from engine.reference import cpu_has_bf16_gemm
from engine.session import Engine
from engine.settings import EngineSettings


def _load(model, progress=None) -> Engine:
    return Engine.load(model, EngineSettings(backend="cpu", dtype="bfloat16", cpu_threads=1, context=1024),
                       progress=progress)


def test_dense_weights_are_views_of_the_file_not_copies(tiny_model):
    eng = _load(tiny_model)
    try:
        m = eng.backend.model
        for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.router.weight", "lm_head.weight"):
            w = m.w(name)
            fname, start, end = eng.ck.tensor_span(name)
            shard = eng.ck.shard_mapping(fname)
            base = shard.ctypes.data
            assert w.dtype == torch.bfloat16 and w.data_ptr() == base + start, name  # the file's bytes themselves
            assert w.numel() * 2 == end - start
        eng.prefill([5, 6, 7, 8])  # and the engine computes with them (read-only memory: a write would crash)
    finally:
        eng.close()


def test_fp32_reference_still_converts(tiny_model):
    eng = Engine.load(tiny_model, EngineSettings(backend="reference", dtype="float32", context=256))
    try:
        assert eng.backend.model.w("model.layers.0.self_attn.q_proj.weight").dtype == torch.float32
    finally:
        eng.close()


@pytest.mark.skipif(not cpu_has_bf16_gemm(), reason="oneDNN packs bf16 only where its bf16 path is native")
def test_load_packs_the_prompt_projections_and_the_first_prompt_packs_nothing(tiny_model):
    seen: list[tuple[str, float]] = []
    eng = _load(tiny_model, progress=lambda msg, frac: seen.append((msg, frac)))
    try:
        m = eng.backend.model
        names = m.projection_weights()
        assert len(names) == 5 * eng.config.num_hidden_layers
        assert all(m.w(n) in m._packed for n in names)
        prep = [s for s in seen if s[0].startswith("Preparing the CPU engine's projections")]
        assert len(prep) == len(names) and prep[-1] == (f"Preparing the CPU engine's projections ({len(names)}/"
                                                        f"{len(names)})", 1.0)
        packed = len(m._packed._packed)
        logits, _ = eng.prefill(list(range(10, 40)))
        assert len(m._packed._packed) == packed  # the first prompt found everything packed
    finally:
        eng.close()
    # the same bits as packing lazily in the prompt: prepare() only moves the work
    lazy = Engine.load(tiny_model, EngineSettings(backend="cpu", dtype="bfloat16", cpu_threads=1, context=1024))
    try:
        lazy.backend.model._packed._packed.clear()
        again, _ = lazy.prefill(list(range(10, 40)))
        assert torch.equal(logits, again)
    finally:
        lazy.close()


def test_close_drops_the_views_before_the_file_is_unmapped(tiny_model):
    """Checkpoint.close unmaps the shards even while numpy views exist (they hold no buffer export): a weight view
    kept past it would crash on its next read. Engine.close releases the model's views and the native caches that
    point into them first; a weight asked for afterwards comes from a new mapping."""
    eng = _load(tiny_model)
    m = eng.backend.model
    name = "model.layers.0.self_attn.q_proj.weight"
    eng.prefill([5, 6, 7, 8])
    eng.prefill([5, 6, 7, 8, 9])  # one decode-like row: the native caches fill
    want = float(m.w(name).float().sum())
    eng.close()
    assert m._dense == {} and m._embed_bits is None and len(m._packed._packed if m._packed is not None else {}) == 0
    assert getattr(m._native, "_views", {}) == {} and getattr(m._decode, "_layers", {}) == {}
    assert float(m.w(name).float().sum()) == want  # a fresh view on a new mapping
    eng.ck.close()

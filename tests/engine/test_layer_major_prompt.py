"""The CPU prompt path is layer-major: attention in blocks, the MoE once per layer over all tokens."""

from __future__ import annotations

import torch

from engine.backend import ReferenceBackend
from engine.checkpoint import Checkpoint
from engine.reference import ReferenceModel


def test_blocked_attention_equals_one_pass(tiny_model):
    ck = Checkpoint.open(tiny_model)
    ids = list(range(3, 43))  # 40 tokens, window 8
    model = ReferenceModel(ck, torch.float32)
    one = model.forward(ids)
    blocked = model.forward(ids, attn_block=7)
    assert float((one - blocked).abs().max() / one.abs().max()) <= 1e-5
    assert torch.equal(one.argmax(-1), blocked.argmax(-1))


def test_experts_called_once_per_layer_and_progress_reported(tiny_model):
    ck = Checkpoint.open(tiny_model)
    calls: list[tuple[int, int]] = []
    ref = ReferenceModel(ck, torch.float32)

    def experts(layer, t, idx, w, check=None):
        calls.append((layer, t.shape[0]))
        return ref.experts(layer, t, idx, w, check)

    be = ReferenceBackend(ck, torch.float32, block=8, experts_fn=experts)
    seen: list[tuple[int, int]] = []
    logits = be.forward(list(range(3, 43)), lambda d, n: seen.append((d, n)))
    layers = ck.config.num_hidden_layers
    assert calls == [(i, 40) for i in range(layers)]  # not once per 8-token block
    assert seen[-1] == (40, 40) and len(seen) == layers
    assert torch.allclose(logits, ref.forward(list(range(3, 43)))[-1], rtol=0, atol=1e-4)


def test_query_rows_bound_the_scores():
    from engine.reference import MIN_QUERY_ROWS, SCORE_BYTES, query_rows

    assert query_rows(256, 64, 512) == 256  # a short context keeps the whole block
    deep = query_rows(256, 64, 8192)
    assert MIN_QUERY_ROWS <= deep < 256 and deep * 64 * 8192 * 4 <= max(SCORE_BYTES, MIN_QUERY_ROWS * 64 * 8192 * 4)
    assert query_rows(256, 64, 10**7) == MIN_QUERY_ROWS  # never fewer rows than that
    assert query_rows(7, 64, 10**7) == 7  # nor more than asked


def test_deep_context_attention_runs_in_smaller_blocks_with_the_same_result(tiny_model, monkeypatch):
    ck = Checkpoint.open(tiny_model)
    ids = list(range(3, 43))
    model = ReferenceModel(ck, torch.float32)
    one = model.forward(ids)

    def checks_with(score_bytes: int) -> tuple[int, torch.Tensor]:
        monkeypatch.setattr("engine.reference.SCORE_BYTES", score_bytes)
        calls = [0]

        def check() -> None:
            calls[0] += 1

        out = model.forward(ids, attn_block=32, check=check)
        return calls[0], out

    wide, out_wide = checks_with(1 << 30)
    narrow, out_narrow = checks_with(1)  # every block at MIN_QUERY_ROWS (16) rows
    assert narrow > wide  # more blocks: the stop check runs between them
    for out in (out_wide, out_narrow):
        assert float((one - out).abs().max() / one.abs().max()) <= 1e-5
        assert torch.equal(one.argmax(-1), out.argmax(-1))

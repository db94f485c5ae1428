"""The whole hybrid decode path (kernels, slot pool, CPU misses, admission, K/V ring) on the
CPU under TRITON_INTERPRET=1, against the fp32 reference model."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from engine.checkpoint import Checkpoint
from engine.gpu.backend import GpuBackend, GpuUnavailable
from engine.gpu.layout import ExpertLayout
from engine.reference import ReferenceModel
from engine.settings import EngineSettings

TOKENS = [5, 77, 300, 12, 9, 401, 33, 250, 8, 100, 42, 7]
# bf16 activations vs the fp32 reference: the bf16 reference itself deviates by up to ~2.5%
# per token on this model, so each token must be within 5% and the mean within 2.5%.
TOL, MEAN_TOL = 5e-2, 2.5e-2


def settings_for(ck: Checkpoint, slots: int, **kw: object) -> EngineSettings:
    sb = ExpertLayout.for_config(ck.config).slot_bytes
    base: dict[str, object] = {"context": 64, "kv_ring": 8, "pool_gib": (slots + 2) * sb / 2**30,
                               "scratch_slots": 2, "static_slots": slots // 2, "refresh_every": 0, "cpu_threads": 2}
    base.update(kw)
    return EngineSettings(**base)  # type: ignore[arg-type]


def make(ck: Checkpoint, slots: int = 8, native: bool = False, **kw: object) -> GpuBackend:
    return GpuBackend.create(ck, settings_for(ck, slots, **kw), interpret=True, prefer_native=native,
                             hot_set_file=None)


def reference_logits(ck: Checkpoint, ids: list[int]) -> torch.Tensor:
    ref = ReferenceModel(ck, torch.float32)
    cache = ref.new_cache()
    return torch.cat([ref.forward([t], cache) for t in ids])


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.fixture(scope="module")
def ref_logits(tiny_ck: Checkpoint) -> torch.Tensor:
    return reference_logits(tiny_ck, TOKENS)


def run(be: GpuBackend, ids: list[int]) -> torch.Tensor:
    return torch.stack([be.forward([t]) for t in ids])


def close_to_reference(got: torch.Tensor, ref: torch.Tensor) -> None:
    errs = [rel(g, r) for g, r in zip(got, ref, strict=True)]
    assert max(errs) < TOL and sum(errs) / len(errs) < MEAN_TOL, errs


@pytest.mark.slow  # the interpreter makes it 15-30 s on 2 cores: CI's slow job runs it
def test_decode_matches_reference_with_all_experts_on_cpu(tiny_ck: Checkpoint, ref_logits: torch.Tensor) -> None:
    be = make(tiny_ck)  # no hot set yet: every expert is a CPU miss
    got = run(be, TOKENS)
    assert be.decoder.stats.hits == 0
    close_to_reference(got, ref_logits)
    assert (got.argmax(1) == ref_logits.argmax(1)).float().mean() >= 0.9


def test_decode_matches_reference_with_resident_experts(tiny_ck: Checkpoint, ref_logits: torch.Tensor) -> None:
    be = make(tiny_ck, slots=24)
    be.policy.counts[:, :3] = 5  # as if a calibration pass had routed experts 0-2 of every layer most
    assert be.install_hot_set() == 12
    got = run(be, TOKENS)
    st = be.decoder.stats
    assert 0 < st.hits < st.routed
    # the admission phase is exactly its four timed parts (what the device's decode A/B reads)
    parts = (st.adm_poll, st.adm_route, st.adm_after, st.adm_refresh)
    assert all(x > 0 for x in parts) and sum(parts) == pytest.approx(st.admission, rel=1e-12)
    close_to_reference(got, ref_logits)
    occ = be.pool.occupancy()
    assert sum(s for s, _, _ in occ) == 12 and all(a == 0 for _, a, _ in occ)


@pytest.mark.slow  # the interpreter makes it 15-30 s on 2 cores: CI's slow job runs it
def test_adaptive_admission_matches_reference(tiny_ck: Checkpoint, ref_logits: torch.Tensor) -> None:
    be = make(tiny_ck, slots=10, refresh_every=1, refresh_m=4)
    got = run(be, TOKENS)
    assert be.residency.stats.admissions > 0
    assert sum(a for _, a, _ in be.pool.occupancy()) > 0
    be.pool.check()
    close_to_reference(got, ref_logits)


@pytest.mark.slow  # the interpreter makes it 15-30 s on 2 cores: CI's slow job runs it
def test_frozen_residency_is_bit_identical(tiny_ck: Checkpoint) -> None:
    a = make(tiny_ck, slots=24)
    b = make(tiny_ck, slots=24)
    keys = [(layer, e) for layer in range(4) for e in (0, 3, 5)]
    a.install_hot_set(keys)
    b.install_hot_set(keys)
    assert torch.equal(run(a, TOKENS[:5]), run(b, TOKENS[:5]))


@pytest.mark.slow  # the interpreter makes it 15-30 s on 2 cores: CI's slow job runs it
def test_ring_wraps_and_rewinds_with_checkpoints(tiny_ck: Checkpoint, ref_logits: torch.Tensor) -> None:
    be = make(tiny_ck)  # kv_ring 8 = window: the ring wraps after 8 tokens, slack of one token
    n = len(TOKENS)
    steps = lambda: be.decoder.stats.tokens
    be.forward(TOKENS[:8])  # a prompt leaves a ring checkpoint at 8
    got = run(be, TOKENS[8:])
    assert rel(got[-1], ref_logits[-1]) < TOL
    s0 = steps()
    be.truncate(n - 1)  # within the ring's slack (n - ring + window - 1): nothing recomputed
    assert be.length == n - 1 and steps() == s0
    assert rel(run(be, TOKENS[n - 1 :])[-1], ref_logits[-1]) < TOL
    s0 = steps()
    be.truncate(8)  # beyond the slack: restore the checkpoint taken at 8, nothing recomputed
    assert be.length == 8 and steps() == s0
    assert rel(run(be, TOKENS[8:])[-1], ref_logits[-1]) < TOL
    last = be.prefill.last
    be.truncate(2)  # before any checkpoint: the first 2 tokens are recomputed (through the prompt path)
    assert be.length == 2 and be.prefill.last is not last and be.prefill.last.routing.shape[0] == 2
    assert rel(be.forward(TOKENS[2:]), ref_logits[-1]) < TOL


def test_state_round_trip(tiny_ck: Checkpoint, ref_logits: torch.Tensor) -> None:
    be = make(tiny_ck)
    be.forward(TOKENS[:9])
    state = be.state_tensors()
    assert state["k.0"].shape == (2, 9, 16) and state["k.1"].shape == (2, 9, 16)
    assert not state["k.0"][:, 0].any()  # sliding layer 0: position 0 left the ring
    fresh = make(tiny_ck)
    fresh.load_state_tensors(state, 9)
    out = run(fresh, TOKENS[9:])
    assert rel(out[-1], ref_logits[-1]) < TOL
    with pytest.raises(ValueError):
        fresh.truncate(1)  # would need the token ids
    fresh.set_ids(TOKENS)
    fresh.truncate(9)  # the checkpoint taken at load time
    assert rel(fresh.forward(TOKENS[9:]), ref_logits[-1]) < TOL


@pytest.mark.slow  # the interpreter makes it 15-30 s on 2 cores: CI's slow job runs it
def test_greedy_sampling_in_the_tail(tiny_ck: Checkpoint, ref_logits: torch.Tensor) -> None:
    be = make(tiny_ck)
    nxt = [be.sample_next(t) for t in TOKENS[:4]]
    assert nxt == [int(x) for x in be_logits_argmax(tiny_ck, TOKENS[:4])]


def be_logits_argmax(ck: Checkpoint, ids: list[int]) -> list[int]:
    be = make(ck)
    return [int(be.forward([t]).argmax()) for t in ids]


def test_telemetry_fields(tiny_ck: Checkpoint) -> None:
    from engine.types import Telemetry

    be = make(tiny_ck, slots=24, refresh_every=2)
    run(be, TOKENS[:4])
    t = Telemetry()
    be.fill_telemetry(t)
    assert t.backend.startswith("gpu-hybrid")
    assert len(t.slots) == 4 and all(sum(s) == 8 for s in t.slots)
    assert len(t.slot_hits) == 4 and sum(sum(r) for r in t.slot_hits) == 4 * 4 * 4
    assert 0.0 <= t.vram_hit_rate <= 1.0
    assert {"token", "gpu_wait", "cpu_experts", "admission"} <= set(t.phases_ms)


def test_plan_that_cannot_fit_is_refused(tiny_ck: Checkpoint) -> None:
    s = EngineSettings(vram_budget_gib=0.5, pool_gib=0.4, context=64, kv_ring=16)
    with pytest.raises(GpuUnavailable, match="does not fit"):
        GpuBackend.create(tiny_ck, s, interpret=True, hot_set_file=None)


def test_no_cuda_is_a_clear_message(tiny_ck: Checkpoint) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(GpuUnavailable, match="no CUDA"):
        GpuBackend.create(tiny_ck, EngineSettings(), hot_set_file=None)


def test_native_misses_match_torch_and_capture_slot_bytes(tiny_ck: Checkpoint) -> None:
    from engine.gpu.cpu_experts import NativeMisses, TorchMisses

    try:
        nat = NativeMisses(tiny_ck, ExpertLayout.for_config(tiny_ck.config), 2)
    except Exception as exc:  # extension not built on this machine
        pytest.skip(f"native kernel unavailable: {exc}")
    lay = ExpertLayout.for_config(tiny_ck.config)
    tor = TorchMisses(tiny_ck, lay)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal(64).astype(np.float32)).bfloat16().float().numpy()  # bf16-exact
    w = np.array([0.5, 0.3, 0.2], dtype=np.float32)
    out_n, out_t = np.zeros(64, np.float32), np.zeros(64, np.float32)
    cap = np.full(lay.slot_bytes, 0xAB, dtype=np.uint8)
    nat.compute(2, x, [1, 4, 6], w, out_n, {4: cap})
    tor.compute(2, x, [1, 4, 6], w, out_t, {})
    # the native misses round the SwiGLU activation to bf16 (as the GPU experts do), the torch
    # fallback keeps it fp32: within a few bf16 roundings of the output scale
    assert np.abs(out_n - out_t).max() <= 4e-3 * np.abs(out_t).max()
    assert np.array_equal(cap, lay.pack_expert(tiny_ck, 2, 4))
    nat.compute(2, x, [], w[:0], out_n, {})
    assert not out_n.any()


def test_engine_session_runs_on_the_gpu_backend(tiny_ck: Checkpoint) -> None:
    """The lead's Engine drives the backend: a completion, then a follow-up that reuses the prefix."""
    from engine.backend import ReferenceBackend
    from engine.session import Engine
    from engine.types import Done, GenerationParams

    be = make(tiny_ck)
    eng = Engine(tiny_ck, be.settings, be, "")
    params = GenerationParams(max_tokens=3, temperature=0.0)
    done = list(eng.complete([5, 77, 300, 12], params))[-1]
    assert isinstance(done, Done) and done.error is None and len(done.token_ids) == 3
    ref = Engine(tiny_ck, be.settings, ReferenceBackend(tiny_ck, torch.float32), "")
    ref_done = list(ref.complete([5, 77, 300, 12], params))[-1]
    assert isinstance(ref_done, Done) and ref_done.token_ids == done.token_ids
    follow = [5, 77, 300, 12, *done.token_ids[:2], 9]
    again = list(eng.complete(follow, params))[-1]
    assert isinstance(again, Done) and again.error is None and again.usage.cached_tokens == 6
    assert eng.telemetry().backend.startswith("gpu-hybrid")


def test_ram_residency_warms_what_the_cpu_reads(tiny_ck: Checkpoint, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The GPU backend owns a RAM residency manager for the CPU's experts: a saved hot set is in
    VRAM, so it is left out of the warm-up plan, which follows the saved routing counts."""
    import numpy as np

    cfg = tiny_ck.config
    counts = np.zeros((cfg.num_hidden_layers, cfg.num_local_experts), dtype=np.int64)
    counts[0, 3], counts[1, 5], counts[0, 1], counts[1, 2] = 90, 80, 70, 60
    counts[0, 6] = 5  # ranked below the four above: the first non-static expert of the warm-up
    hot = tmp_path / "hot.npy"
    np.save(hot, counts)
    be = GpuBackend.create(tiny_ck, settings_for(tiny_ck, 8), interpret=True, hot_set_file=hot)
    try:
        res = be.ram_residency
        assert res is not None
        static = {s.key for s in be.pool.slots if s.static and s.key is not None}
        assert static == {(0, 3), (1, 5), (0, 1), (1, 2)}
        planned = res.plan.keys
        assert not static & set(planned)
        assert planned[0] == (0, 6)
        assert len(planned) == cfg.num_hidden_layers * cfg.num_local_experts - len(static)
    finally:
        be.close()
    assert res._closed  # the backend closes what it started


def test_engine_state_on_disk_resumes_bit_identically(tiny_ck: Checkpoint, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 5 on the GPU backend: a follow-up processes only its new tokens (through the
    layer-major prompt path), and a state saved to disk and restored in a fresh engine continues
    with the same logits, bit for bit (frozen residency), as the uninterrupted engine."""
    from engine.session import Engine

    prompt, follow = TOKENS[:7], TOKENS[7:]
    be = make(tiny_ck)
    eng = Engine(tiny_ck, be.settings, be, "")
    calls: list[int] = []
    orig = be.prefill.run

    def counted(ids, start, *a, **kw):  # type: ignore[no-untyped-def]
        calls.append(len(ids))
        return orig(ids, start, *a, **kw)

    be.prefill.run = counted  # type: ignore[method-assign]
    eng.prefill(prompt)
    eng.save_state(tmp_path / "gpu.kv")
    logits, reused = eng.prefill(prompt + follow)
    assert reused == len(prompt) and calls == [len(prompt), len(follow)]  # only the new tokens

    fresh_be = make(tiny_ck)
    fresh = Engine(tiny_ck, fresh_be.settings, fresh_be, "")
    assert fresh.restore_state(tmp_path / "gpu.kv") and fresh.cached_ids == prompt
    again, reused_again = fresh.prefill(prompt + follow)
    assert reused_again == len(prompt)
    assert torch.equal(again, logits)
    assert torch.equal(fresh.backend.forward([7]), be.forward([7]))
    eng.close()
    fresh.close()


def test_a_prompt_fills_the_free_adaptive_slots_from_its_last_tokens(tiny_ck: Checkpoint) -> None:
    from engine.gpu.admission import rank_fill

    be = make(tiny_ck, slots=10, refresh_every=1000, refresh_m=4, fill_tokens=4)
    be.install_hot_set([(layer, 0) for layer in range(4)])  # 4 static, 6 adaptive free
    be.forward(TOKENS[:10])
    last = be.prefill.last
    assert last is not None
    want = rank_fill(last.routing[-4:], be.policy.counts, set(be.pool.where), 6)
    assert len(want) == 6 and be.policy.fill == set(want)
    run(be, TOKENS[10:14])  # no refresh due: every admission is a fill key, into a free slot
    st = be.residency.stats
    assert st.admissions > 0 and st.evictions == 0
    adaptive = {s.key for s in be.pool.slots if not s.static and s.key is not None}
    assert adaptive and adaptive <= set(want)
    be.pool.check()
    off = make(tiny_ck, slots=10, refresh_every=1000, refresh_m=4, fill_tokens=0)
    off.forward(TOKENS[:10])
    assert off.policy.fill == set()

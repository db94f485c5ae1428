"""The decode copy lane (engine/gpu/copy_lane.py) under Triton's interpreter: misses copied from the mapping into
scratch slots and computed by the expert kernels give the reference's logits, and the same experts' output as the
CPU's; the per-layer split follows the rates."""

from __future__ import annotations

import ctypes
import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from batch_fake import BatchCopy  # this folder is on sys.path
from test_gpu_backend import (
    TOKENS,
    close_to_reference,
    make,
    reference_logits,
    rel,
)

from engine.checkpoint import Checkpoint
from engine.gpu.backend import GpuBackend
from engine.gpu.copy_lane import CopyLane
from engine.gpu.lane_split import PAYS, lane_gain
from engine.gpu.prefill.direct import MappedExperts
from engine.plan import SLOT_PARTS
from engine.settings import EngineSettings, SettingsError

# half of the decode tests' tokens: each lane test runs a model under the interpreter twice (20 s with all 12 on
# 2 cores); 6 tokens still send 2 misses a layer down the lane on every token
LANE_TOKENS = TOKENS[:6]


def backend(ck: Checkpoint) -> GpuBackend:
    return make(ck, slots=10, scratch_slots=4, static_slots=4)  # 4 scratch slots: two per parity


def mapped(ck: Checkpoint, be: GpuBackend) -> MappedExperts:
    # the interpreter has no CUDA registration: every shard "registers" and copies are tensor copies
    return MappedExperts(ck, be.core.layout, budget=1 << 40, register=lambda p, n: 0, unregister=lambda p: None,
                         background=False)


def lane_input(be: GpuBackend, seed: int) -> torch.Tensor:
    """A bf16-exact hidden row as the lane's kernels read it (the core's even/odd halves); the row, for the CPU."""
    h = be.core.cfg.hidden_size
    x = torch.randn(h, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16).float()
    be.core.t_even.copy_(x[0::2])
    be.core.t_odd.copy_(x[1::2])
    return x


def greedy_lane(be: GpuBackend, ck: Checkpoint, width: int = 2) -> CopyLane:
    lane = CopyLane(be.core, mapped(ck, be), width=width)
    lane.rates.fix(10.0, 0.01)  # the split sends as many misses as fit down the lane
    be.decoder.lane = lane
    return lane


def test_lane_decode_matches_the_reference(tiny_ck: Checkpoint) -> None:
    ref = reference_logits(tiny_ck, LANE_TOKENS)
    plain = backend(tiny_ck)
    want = torch.stack([plain.forward([t]) for t in LANE_TOKENS])
    be = backend(tiny_ck)
    greedy_lane(be, tiny_ck)
    got = torch.stack([be.forward([t]) for t in LANE_TOKENS])
    st = be.decoder.stats
    # no hot set: every routed expert is a miss, 2 of each layer's 4 go down the lane
    assert st.lane_experts == len(LANE_TOKENS) * tiny_ck.config.num_hidden_layers * 2
    assert "gpu_lane" in st.phases_ms()
    assert st.lane_start > 0 and st.lane_wait > 0 and abs(st.lane_start + st.lane_wait - st.lane) < 1e-9
    assert 0 < st.lane_decide < st.lane_start  # queue-first: the split's decision is timed inside the queueing
    close_to_reference(got, ref)
    # the same experts on the GPU's bf16 kernels instead of the CPU's fp32 ones, summed in another order: the
    # spread of a resident against a CPU-computed expert, well inside the reference's bound
    assert max(rel(g, w) for g, w in zip(got, want, strict=True)) < 2.5e-2


def test_native_cpu_experts_run_beside_the_lanes_queueing(tiny_ck: Checkpoint) -> None:
    """With the native kernel, a layer's CPU misses start on the worker threads before the lane's copies are queued
    (NativeMisses.compute_beside): the logits match the reference, and the lane's queueing time sits inside ``cpu``.
    decode_lane_beside=false queues first, as before: the same logits, bit for bit."""
    ref = reference_logits(tiny_ck, LANE_TOKENS[:3])
    got = {}
    for beside in (True, False):
        be = make(tiny_ck, slots=10, scratch_slots=4, static_slots=4, native=True, decode_lane_beside=beside)
        assert be.misses.name.startswith("native") and be.decoder.lane_beside is beside
        greedy_lane(be, tiny_ck)
        got[beside] = torch.stack([be.forward([t]) for t in LANE_TOKENS[:3]])
        st = be.decoder.stats
        assert st.lane_experts == 3 * tiny_ck.config.num_hidden_layers * 2
        assert st.lane_start > 0
        if beside:
            assert st.lane_start < st.cpu
    close_to_reference(got[True], ref)
    assert torch.equal(got[True], got[False])


def test_the_split_learns_the_cpus_rate_from_its_experts_not_the_queueing(tiny_ck: Checkpoint) -> None:
    """Beside the lane's queueing (here the interpreter's, which runs the lane's kernels inside start(): far longer
    than the CPU's experts), the CPU's rate comes from the experts' own span. Learned from the block, a slow
    queueing made the CPU look slow and sent the lane more work (H200 machine, session 21)."""
    be = make(tiny_ck, slots=10, scratch_slots=4, static_slots=4, native=True)
    lane = CopyLane(be.core, mapped(tiny_ck, be))
    lane.rates.reset(0.3, 0.01)  # learning on: the lane is cheap, so it takes misses from the first layer on
    be.decoder.lane = lane
    for t in LANE_TOKENS[:3]:
        be.forward([t])
    st = be.decoder.stats
    layers = 3 * tiny_ck.config.num_hidden_layers
    assert st.lane_experts > 0 and lane.rates.cpu_samples > 0
    start_ms = 1e3 * st.lane_start / layers
    assert start_ms > 20 * lane.rates.cpu_ms, (start_ms, lane.rates.cpu_ms)


def test_lane_output_is_the_cpus_for_the_same_experts(tiny_ck: Checkpoint) -> None:
    be = backend(tiny_ck)
    lane = CopyLane(be.core, mapped(tiny_ck, be), width=2)
    h = tiny_ck.config.hidden_size
    x = lane_input(be, 1)
    experts, weights = [3, 6], [0.7, 0.3]
    lane.start(1, experts, weights)
    out = np.zeros(h, dtype=np.float32)
    lane.finish(1, 2, out)
    cpu = np.zeros(h, dtype=np.float32)
    be.misses.compute(1, x.numpy(), experts, weights, cpu, {})
    assert np.abs(out).max() > 0
    assert rel(torch.from_numpy(out), torch.from_numpy(cpu)) < 1e-2
    out2 = np.ones(h, dtype=np.float32)
    lane.start(1, experts, weights)
    lane.finish(1, 2, out2)  # finish adds to what the CPU wrote
    np.testing.assert_allclose(out2, out + 1.0, rtol=1e-6)


class HostRuntime:
    """cudaMemcpy2DAsync and cudaMemset2DAsync on host memory (the interpreter's slot pool is a CPU tensor): row r of
    ``width`` bytes from ``src + r * spitch`` to ``dst + r * dpitch``; row r at ``dst + r * pitch`` set."""

    def __init__(self) -> None:
        self.heights: list[int] = []
        self.memsets = 0

    def copy_2d(self, dst: int, dpitch: int, src: int, spitch: int, width: int, height: int, stream: int) -> None:
        for r in range(height):
            ctypes.memmove(dst + r * dpitch, src + r * spitch, width)
        self.heights.append(height)

    def memset_2d(self, dst: int, pitch: int, value: int, width: int, height: int, stream: int) -> None:
        for r in range(height):
            ctypes.memset(dst + r * pitch, value, width)
        self.memsets += 1


def test_runtime_copies_pair_two_experts_and_land_the_planned_bytes(tiny_ck: Checkpoint) -> None:
    be = backend(tiny_ck)
    pool = be.core.pool
    lane = CopyLane(be.core, mapped(tiny_ck, be), width=2)
    slots = lane.slots[1]
    for experts, heights in (([3, 9], [2] * len(SLOT_PARTS)), ([9, 3], [1] * 2 * len(SLOT_PARTS))):
        pool.zero_()
        lane._rt = None  # the prompt path's planned tensor copies
        lane._queue_copies(1, experts, slots)
        want = pool.clone()
        pool.zero_()
        lane._rt = rt = HostRuntime()  # type: ignore[assignment]
        lane._queue_copies(1, experts, slots)
        assert rt.heights == heights  # ascending ids: one two-row copy per part; else one copy per expert and part
        assert torch.equal(pool, want) and want.any()


def test_start_orders_the_experts_and_keeps_each_weight_with_its_expert(tiny_ck: Checkpoint) -> None:
    be = backend(tiny_ck)
    lane = CopyLane(be.core, mapped(tiny_ck, be), width=2)
    lane._rt = rt = HostRuntime()  # type: ignore[assignment]
    h = tiny_ck.config.hidden_size
    x = lane_input(be, 2)
    lane.start(0, [6, 3], [0.2, 0.8])
    out = np.zeros(h, dtype=np.float32)
    lane.finish(0, 2, out)
    assert rt.heights == [2] * len(SLOT_PARTS)
    cpu = np.zeros(h, dtype=np.float32)
    be.misses.compute(0, x.numpy(), [6, 3], [0.2, 0.8], cpu, {})
    assert rel(torch.from_numpy(out), torch.from_numpy(cpu)) < 1e-2


COPY2D = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                          ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)


class AddressRuntime(HostRuntime):
    """HostRuntime whose cudaMemcpy2DAsync also has an address, for native/neural_lane.c to call (a ctypes callback:
    the same row copies, recorded with their arguments); ``fail_at`` makes that call return CUDA error 700."""

    def __init__(self, fail_at: int = -1) -> None:
        super().__init__()
        self.calls: list[tuple[int, ...]] = []
        self.fail_at = fail_at

        def copy(dst: int, dpitch: int, src: int, spitch: int, width: int, height: int, kind: int, stream: int) -> int:
            self.calls.append((dst, dpitch, src, spitch, width, height, kind))
            if len(self.calls) - 1 == self.fail_at:
                return 700
            for r in range(height):
                ctypes.memmove(dst + r * dpitch, src + r * spitch, width)
            return 0

        self._cb = COPY2D(copy)

    @property
    def addresses(self) -> tuple[int, int]:
        return ctypes.cast(self._cb, ctypes.c_void_p).value or 0, 0


class BatchRuntime(AddressRuntime):
    """AddressRuntime with cudaMemcpyBatchAsync too (batch_fake.BatchCopy, CUDA 12's or 13's signature)."""

    def __init__(self, abi: int, fail: int = 0, short: bool = False) -> None:
        super().__init__()
        self.batch = BatchCopy(abi, fail, short)

    @property
    def batch_copy(self) -> tuple[int, int]:
        return self.batch.address, self.batch.abi


@pytest.mark.parametrize("experts,weights", [([6, 3], [0.2, 0.8]), ([2, 5], [0.5, 0.5]), ([7], [1.0])])  # of 8
def test_native_queueing_lands_the_same_rows_bytes_and_result(tiny_ck: Checkpoint, experts: list[int],
                                                              weights: list[float]) -> None:
    """lane_issue (native/neural_lane.c) writes the routing rows and issues the copies the Python queueing does,
    paired the same way, so the lane's kernels compute the same bits."""
    from native.kernel import load_kernel

    be = backend(tiny_ck)
    h = tiny_ck.config.hidden_size
    lane_input(be, 5)
    got = []
    for native in (None, load_kernel()):
        lane = CopyLane(be.core, mapped(tiny_ck, be), width=2, native=native)
        lane._rt = rt = AddressRuntime()  # type: ignore[assignment]
        be.core.pool.zero_()
        lane.np_route[0][:] = 77  # stale rows from an earlier layer: both paths must overwrite what they use
        lane.start(0, experts, weights)
        out = np.zeros(h, dtype=np.float32)
        lane.finish(0, len(experts), out)
        got.append((be.core.pool.clone(), lane.np_route[0].copy(), out, rt.heights or [c[5] for c in rt.calls]))
    (pool_py, route_py, out_py, heights_py), (pool_c, route_c, out_c, heights_c) = got
    assert torch.equal(pool_c, pool_py) and pool_py.any()
    np.testing.assert_array_equal(route_c, route_py)
    assert heights_c == heights_py  # the same copies: two-row ones for ascending ids in adjacent slots
    assert out_c.tobytes() == out_py.tobytes() and out_py.any() and np.isfinite(out_py).all()


def test_native_queueing_names_a_failed_copy(tiny_ck: Checkpoint) -> None:
    from native.kernel import KernelError, load_kernel

    be = backend(tiny_ck)
    lane = CopyLane(be.core, mapped(tiny_ck, be), width=2, native=load_kernel())
    lane._rt = AddressRuntime(fail_at=2)  # type: ignore[assignment]
    with pytest.raises(KernelError, match=r"cudaMemcpy2DAsync \(copy 2\) failed with CUDA error 700"):
        lane.start(0, [3, 5], [0.5, 0.5])


@pytest.mark.parametrize("abi", [12, 13])
def test_batched_copies_land_the_two_d_copies_bytes_and_result(tiny_ck: Checkpoint, abi: int) -> None:
    """decode_lane_batch: every part of every lane expert in one cudaMemcpyBatchAsync (either signature) lands the
    bytes, rows and result of the 2-D copies; without the function in the runtime the lane copies as before."""
    from native.kernel import load_kernel

    be = backend(tiny_ck)
    h = tiny_ck.config.hidden_size
    lane_input(be, 5)
    got = []
    for batch in (False, True):
        lane = CopyLane(be.core, mapped(tiny_ck, be), width=2, native=load_kernel(), batch=batch)
        lane._rt = rt = BatchRuntime(abi)  # type: ignore[assignment]
        be.core.pool.zero_()
        lane.np_route[0][:] = 77
        lane.start(0, [6, 3], [0.2, 0.8])
        out = np.zeros(h, dtype=np.float32)
        lane.finish(0, 2, out)
        got.append((be.core.pool.clone(), lane.np_route[0].copy(), out))
        assert (len(rt.calls), rt.batch.calls) == ((0, [(2 * len(SLOT_PARTS), 0)]) if batch else
                                                   (len(SLOT_PARTS), []))
    (pool_2d, route_2d, out_2d), (pool_b, route_b, out_b) = got
    assert torch.equal(pool_b, pool_2d) and pool_2d.any()
    np.testing.assert_array_equal(route_b, route_2d)
    assert out_b.tobytes() == out_2d.tobytes() and out_2d.any()
    lane = CopyLane(be.core, mapped(tiny_ck, be), width=2, native=load_kernel(), batch=True)
    lane._rt = AddressRuntime()  # type: ignore[assignment]  # a runtime before CUDA 12.8
    assert lane.copy_function(123) == (123, 0)


@pytest.mark.parametrize("fail,short,why", [(0, False, ""),
                                            (700, False, "cudaMemcpyBatchAsync failed with CUDA error 700"),
                                            (0, True, "other bytes than the 2-D copies")])
def test_the_batch_is_checked_at_load_and_turned_off_where_it_fails(tiny_ck: Checkpoint, fail: int, short: bool,
                                                                    why: str) -> None:
    """verify_batch: the same copies both ways before the lane is used; a failing or wrong batch sends the lane back
    to the 2-D copies, and the lane then works."""
    from native.kernel import load_kernel

    be = backend(tiny_ck)
    lane = CopyLane(be.core, mapped(tiny_ck, be), width=2, native=load_kernel(), batch=True)
    lane._rt = rt = BatchRuntime(13, fail, short)  # type: ignore[assignment]
    got = lane.verify_batch()
    assert (got == "") if not why else (why in got)
    assert lane.batch is (not why) and rt.batch.calls and len(rt.calls) == len(SLOT_PARTS)  # both ways once
    lane.start(0, [6, 3], [0.2, 0.8])
    assert len(rt.batch.calls) == (2 if not why else 1)
    lane.finish(0, 2, np.zeros(tiny_ck.config.hidden_size, dtype=np.float32))


def test_a_failed_batch_is_named(tiny_ck: Checkpoint) -> None:
    from native.kernel import KernelError, load_kernel

    be = backend(tiny_ck)
    lane = CopyLane(be.core, mapped(tiny_ck, be), width=2, native=load_kernel(), batch=True)
    lane._rt = BatchRuntime(13, fail=700)  # type: ignore[assignment]
    with pytest.raises(KernelError, match=r"cudaMemcpyBatchAsync failed with CUDA error 700"):
        lane.start(0, [3, 5], [0.5, 0.5])


@pytest.mark.parametrize("experts,weights", [([6, 3], [0.2, 0.8]), ([7], [1.0])])
def test_pulled_experts_land_the_copied_bytes_and_result(tiny_ck: Checkpoint, experts: list[int],
                                                         weights: list[float]) -> None:
    """decode_lane_pull: the lane's own kernel (kernels/pull.py) copies the parts the runtime copies would, and the
    table's unused rows copy nothing (a stale row from a two-expert layer must not land after a one-expert one)."""
    be = backend(tiny_ck)
    h = tiny_ck.config.hidden_size
    lane_input(be, 5)
    got = []
    for pull in (False, True):
        lane = CopyLane(be.core, mapped(tiny_ck, be), width=2, pull=pull)
        assert lane.pull is pull
        lane._rt = HostRuntime()  # type: ignore[assignment]
        if pull:
            lane.start(0, [1, 2], [0.5, 0.5])  # an earlier layer of the same parity, two experts
            lane.finish(0, 2, np.zeros(h, dtype=np.float32))
        be.core.pool.zero_()
        lane.start(0, experts, weights)
        out = np.zeros(h, dtype=np.float32)
        lane.finish(0, len(experts), out)
        got.append((be.core.pool.clone(), out))
    (pool_dma, out_dma), (pool_pull, out_pull) = got
    assert torch.equal(pool_pull, pool_dma) and pool_dma.any()
    assert out_pull.tobytes() == out_dma.tobytes() and np.isfinite(out_dma).all() and out_dma.any()


def test_decode_lane_native_and_pull_settings_are_checked() -> None:
    assert EngineSettings().decode_lane_native is True and EngineSettings().decode_lane_pull is False
    assert EngineSettings().decode_lane_batch is False
    for flag in ("decode_lane_native", "decode_lane_pull", "decode_lane_batch"):
        with pytest.raises(SettingsError, match=flag):
            EngineSettings(**{flag: "yes"})  # type: ignore[arg-type]


def test_split_follows_the_rates_and_keeps_captures_on_the_cpu(tiny_ck: Checkpoint) -> None:
    be = backend(tiny_ck)
    lane = CopyLane(be.core, mapped(tiny_ck, be), width=2, cpu_fixed_ms=0.05)
    lane.rates.fix(0.3, 0.3)
    e, w = [4, 9, 12], [0.5, 0.3, 0.2]
    # 3 misses: CPU alone 0.95; 2 + 1 lane 0.65; 1 + 2 lane 0.6 -> two down the lane
    cpu_e, cpu_w, lane_e, lane_w, part = lane.split(0, e, w)
    assert part is None  # whole experts only unless split_units
    assert (cpu_e, lane_e) == ([4], [9, 12]) and (cpu_w, lane_w) == ([0.5], [0.3, 0.2])
    assert lane.split(0, e, w, keep={9: 0, 12: 1})[2] == [4]  # captures stay with the CPU kernel
    assert lane.split(0, e, w, keep={4: 0, 9: 1, 12: 2})[2] == [] and lane.all_kept == 1
    lane.rates.fix(0.3, 5.0)  # a slow lane: everything on the CPU
    assert lane.split(0, e, w)[2] == []
    lane.rates.fix(0.3, 0.3)
    lane.direct.ready = lambda layer: False  # type: ignore[method-assign]  # a layer not registered yet
    assert lane.split(0, e, w)[2] == []
    assert lane.not_ready == 1 and lane.report()["layers_not_registered"] == 1


def test_too_few_scratch_slots_is_refused(tiny_ck: Checkpoint) -> None:
    be = backend(tiny_ck)
    with pytest.raises(ValueError, match="scratch slots"):
        CopyLane(be.core, mapped(tiny_ck, be), width=3)


def test_decode_lane_setting_is_checked() -> None:
    with pytest.raises(SettingsError, match="decode_lane"):
        EngineSettings(decode_lane="sometimes")  # type: ignore[arg-type]


def test_the_load_check_keeps_the_lane_where_the_lanes_add_up() -> None:
    # the H200 host (session 16): CPU 0.28 ms an expert alone, 0.30 beside copies of 0.32 ms: nearly twice the work
    g = lane_gain(0.28, 0.30, 0.32)
    assert g == pytest.approx(1.808, abs=1e-3) and g >= PAYS
    # a PC whose kernel alone fills DRAM: the copies slow it by as much as they add (the design doc's -11%)
    assert lane_gain(0.45, 0.70, 1.20) < PAYS


def test_early_poll_setting_is_checked() -> None:
    assert EngineSettings(early_poll_ns=500).early_poll_ns == 500
    for bad in (-1, 100_001, 2.5, True):
        with pytest.raises(SettingsError, match="early_poll_ns"):
            EngineSettings(early_poll_ns=bad)  # type: ignore[arg-type]


# ---- one expert split by its units (split_units) ------------------------------------------------------------------
@pytest.fixture(scope="module")
def odd_ck(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    """hidden 96, 160 units (5 blocks of 32), top-3: splits at 32..128 units."""
    from engine.synth.shapes import PRESETS
    from engine.synth.writer import write_synthetic_checkpoint

    return Checkpoint.open(write_synthetic_checkpoint(tmp_path_factory.mktemp("lane-odd"), PRESETS["odd"], seed=5))


def split_lane(ck: Checkpoint, native: bool = False) -> tuple[GpuBackend, CopyLane]:
    be = make(ck, slots=10, scratch_slots=6, static_slots=4, native=native, kv_ring=16)  # 2 a parity + a split slot
    return be, CopyLane(be.core, mapped(ck, be), width=2, split_units=True)


def test_split_slot_holds_the_lanes_units_and_zeros_for_the_cpus(odd_ck: Checkpoint) -> None:
    """The runtime path (2-D copies of the lane's units, 2-D memsets of the CPU's where the last use left bytes) and
    the planned tensor copies (the whole expert, then the CPU's units and the down bias zeroed) leave the same slot,
    use after use, as the lane's share grows and shrinks."""
    be, lane = split_lane(odd_ck)
    pool, sb, slot = be.core.pool, be.core.plan.slot_bytes, lane.split_slots.slots[1]
    view = pool[slot * sb : (slot + 1) * sb]
    view.fill_(0xFF)  # whatever a prompt staged there: the first use must zero it
    lane._rt = rt = HostRuntime()  # type: ignore[assignment]
    lay = be.core.layout
    for expert, units in ((2, 96), (4, 32), (4, 128), (1, 64), (1, 64)):
        lane.split_slots.queue(lane._rt, None, 1, lane._layer_parts, (expert, 1.0, units), 1)
        got = view.clone()
        keep_rt = lane.split_slots.zero_blocks[1], lane.split_slots.bias_zero[1]
        lane._rt = None
        view.fill_(0x5A)
        lane.split_slots.queue(lane._rt, None, 1, lane._layer_parts, (expert, 1.0, units), 1)
        assert torch.equal(view, got) or torch.equal(  # padding between parts: never written by either
            *(torch.cat([t[lay.offsets[p] : lay.offsets[p] + lay.sizes[p]] for p in SLOT_PARTS]) for t in (view, got)))
        view.copy_(got)
        lane._rt, (lane.split_slots.zero_blocks[1], lane.split_slots.bias_zero[1]) = rt, keep_rt  # type: ignore[assignment]
        whole = lay.pack_expert(odd_ck, 1, expert)
        b = (160 - units) // 32
        for part in SLOT_PARTS:
            o, n = lay.offsets[part], lay.sizes[part]
            g = got[o : o + n].numpy()
            if part == "down_proj_bias":
                assert not g.any()
                continue
            rows, pitch, per = lane.split_slots.geometry[part]
            g2, w2 = g.reshape(rows, pitch), whole[o : o + n].reshape(rows, pitch)
            assert not g2[:, : b * per].any(), part  # the CPU's units
            assert np.array_equal(g2[:, b * per :], w2[:, b * per :]), part  # the lane's, as in the checkpoint
    # zeroing only where the last use left bytes: CPU's blocks 2 (5 parts + the down bias, first use), 4 (grown: 5),
    # 1 (none), 3 (grown: 5), 3 (none)
    assert rt.memsets == 6 + 5 + 0 + 5 + 0


@pytest.mark.parametrize("native", [False, True])
def test_a_split_expert_adds_up_to_the_whole_one(odd_ck: Checkpoint, native: bool) -> None:
    be, lane = split_lane(odd_ck, native)
    h = odd_ck.config.hidden_size
    x = lane_input(be, 3)
    whole = np.zeros(h, dtype=np.float32)
    be.misses.compute(2, x.numpy(), [1, 5], [0.6, 0.4], whole, {})
    for units in (32, 96, 128):
        out = np.zeros(h, dtype=np.float32)
        be.misses.compute(2, x.numpy(), [5], [0.4], out, {}, heads={5: 160 - units})  # the CPU: its first units
        lane.start(2, [1], [0.6], part=(5, 0.4, units))  # the lane: expert 1 and the rest of expert 5
        lane.finish(2, 1 + units / 160, out)
        # the lane's bf16 kernels against the CPU's fp32 ones, as for whole experts
        assert rel(torch.from_numpy(out), torch.from_numpy(whole)) < 1e-2, units
        cpu_only = np.zeros(h, dtype=np.float32)
        be.misses.compute(2, x.numpy(), [5], [0.4], cpu_only, {}, heads={5: 160 - units})
        assert rel(torch.from_numpy(cpu_only), torch.from_numpy(whole)) > 0.05  # a part alone is not the whole


def test_split_decode_matches_the_reference(tmp_path_factory: pytest.TempPathFactory) -> None:
    from engine.synth.shapes import PRESETS
    from engine.synth.writer import write_synthetic_checkpoint

    # the GPU decode's kernels need power-of-two widths: the demo shape (128 units, top-4)
    ck = Checkpoint.open(write_synthetic_checkpoint(tmp_path_factory.mktemp("lane-demo"), PRESETS["demo"], seed=5))
    ref = reference_logits(ck, LANE_TOKENS)
    be, lane = split_lane(ck)
    lane.rates.fix(0.30, 0.50)  # 4 misses: 1 whole + half of another down the lane (best_units)
    be.decoder.lane = lane
    got = torch.stack([be.forward([t]) for t in LANE_TOKENS])
    close_to_reference(got, ref)
    rep = lane.report()
    assert rep["layers_split"] > 0 and rep["split_share"] > 0
    # a whole expert and a split one (counted once) per layer of every token, no hot set
    assert be.decoder.stats.lane_experts == len(LANE_TOKENS) * ck.config.num_hidden_layers * 2


def test_split_units_setting_needs_its_slots(odd_ck: Checkpoint) -> None:
    be = backend(odd_ck)  # 4 scratch slots: whole experts only
    with pytest.raises(ValueError, match="needs 6 scratch slots"):
        CopyLane(be.core, mapped(odd_ck, be), width=2, split_units=True)
    with pytest.raises(SettingsError, match="decode_lane_split"):
        EngineSettings(decode_lane_split="yes")  # type: ignore[arg-type]

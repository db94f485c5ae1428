"""Engine settings as one validated dataclass, shared by the CLI, the GUI and the API server."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

Backend = Literal["auto", "cpu", "gpu", "reference"]


def physical_cores() -> int:
    """Physical cores (SMT siblings share one core's vector units: the kernel gains nothing from them)."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except Exception:  # no psutil or an unreadable topology: logical count
        n = None
    return int(n or os.cpu_count() or 2)


class SettingsError(ValueError):
    """A setting is out of range; the message names the setting and the allowed range."""


@dataclass(frozen=True)
class EngineSettings:
    backend: Backend = "auto"
    dtype: Literal["bfloat16", "float32"] = "bfloat16"
    cpu_threads: int = 0  # 0 = all physical cores up to 8
    context: int = 16384
    # GPU residency (see docs/architecture.md)
    vram_budget_gib: float = 12.0
    pool_gib: float = 0.0  # 0 = whatever the budget leaves after core, K/V and scratch
    static_slots: int = -1  # -1 = half of the pool
    scratch_slots: int = 6
    # more scratch slots that take the next prompt layer's experts while a layer finishes (engine/gpu/prefill/
    # lookahead.py); only where staged experts are copied straight from the mapping (stage_direct), else none.
    # 0 / 16 / 28 slots: 600-token follow-ups 1.43 / 1.32 / 1.25 s (with prompt_cpu_share 0.9, session 8); they
    # come from the pool (548 -> 520 slots at 12 GiB): ~1% more CPU expert bytes per decoded token (CALCULATED)
    lookahead_slots: int = 28
    kv_ring: int = 256
    # GPU decode: each layer's graph launched before the previous layer's CPU experts are done, its first kernel
    # waiting on the host's flag (engine/gpu/decoder.py). H200 machine, session 13: logits bit-identical to the
    # plain launch; time outside the CPU experts 0.01-0.49 ms per token lower in all six A B B A pairs (MEASURED,
    # docs/performance.md). After 3 steps in a row whose wait gives up, the process goes back to the plain launch.
    early_launch: bool = True
    # how the early launch's wait polls the host's flag: 0 = every program of its kernel back to back (as measured in
    # session 13); > 0 = one program, sleeping this many ns between polls. Beside back-to-back polls the copy lane's
    # copies and kernels ran at half speed, so with the lane on, layers are launched early only when this is > 0
    # (engine/gpu/copy_lane.py). Session 18, H200 machine: at 1000 ns a lane step still took 0.5-0.9 ms longer than
    # beside plain launches (MEASURED, docs/performance.md), so 0 stays the default
    early_poll_ns: int = 0
    # GPU decode: some of a layer's CPU misses copied from the page-locked checkpoint into scratch slots and computed
    # by the GPU beside the CPU (engine/gpu/copy_lane.py; Linux, with direct copies). "auto" = where a load-time
    # check finds the CPU kernel and the copies together 15% faster than the kernel alone (the H200 host: kernel
    # 42.7 GB/s alone, 39.9 beside copies at 45.8 GB/s, MEASURED; a DDR4 PC whose kernel fills DRAM loses)
    decode_lane: Literal["auto", "on", "off"] = "auto"
    # with the copy lane: one more miss of a layer split by its gate_up units, the CPU computing the first ones and
    # the lane the rest, so that both sides finish together (lane_split.best_units; 0.70 -> 0.69 ms a layer for 4
    # misses at CPU 0.30 / lane 0.35 ms an expert, CALCULATED). Off: session 18 measured no gain on its one host
    # (uniform 81.7 -> 82.2 tok/s, A B B A, where the CPU ran twice the lane's speed; docs/performance.md)
    decode_lane_split: bool = False
    # with the copy lane: a layer's CPU misses start on the native kernel's worker threads before this thread queues
    # the lane's copies (~0.1 ms a layer of runtime calls, 1.7-2.1 ms a token at 18 layers, which the CPU experts
    # had waited for: session 21, H200 machine, MEASURED), and it joins them after. False: queue, then compute.
    # Off by default: session 24 (one H200 lease, calibrated routing, 10 runs each) read 78.8 tok/s queue-first
    # against 74.6 beside (A B B A: beside / queue-first 0.970), uniform 61.1 / 61.2; beside, the CPU phase grew
    # by the queueing (9.1-10.7 against 6.5-7.8 ms a token) and the split sent the lane fewer misses
    decode_lane_beside: bool = False
    # with the copy lane: a layer's routing rows, copies and graph launch queued by one native call
    # (native/neural_lane.c) instead of Python around six cudaMemcpy2DAsync and a launch (lane_start 1.1-2.1 ms a
    # token at 18 layers, session 24; the six calls alone 26-54 us a layer warm: bench/gpu/zero_copy_probe.py).
    # Session 25 (H200, calibrated, A B B A x3): 67.41 against 64.45 tok/s (1.046x, inside the runs' spread), the
    # same logits bit for bit (bench/gpu/lane_check.py hashes), lane_start 1.80-2.08 against 2.01-2.45 ms a token
    decode_lane_native: bool = True
    # with the copy lane: the lane's graph copies its experts itself from the mapping (engine/gpu/kernels/pull.py),
    # one graph launch a layer and no runtime copies (whose issue cost lane_start kept with decode_lane_native:
    # 1.8-2.1 ms a token in session 25's A/B); the pull reads PCIe at 47.9 GB/s against the DMA's 52.4 (MEASURED).
    # Off: session 25 (H200, calibrated, A B B A x3) read 78.96 tok/s with it against 82.47 without (0.957x), the
    # queueing barely shorter (0.86-1.41 against 1.31-1.91 ms a token) and the lane slower (0.36-0.39 ms an expert)
    decode_lane_pull: bool = False
    # with the copy lane queued natively: a layer's copies (six parts an expert) in one cudaMemcpyBatchAsync (CUDA
    # 12.8+) instead of one cudaMemcpy2DAsync per part, the same bytes into the same slots. Off: session 28 (H200,
    # CUDA 13.0 runtime, driver 580) measured the one batch call at 202-213 us of host time warm against 35-48 us for
    # the 2-D copies of the same experts (bench.gpu.batch_copy_probe), the same GPU time, and calibrated decode at
    # 0.78x (cal_ab A B C D D C B A: 59.67 against 76.33 tok/s), the same logits (lane_check hashes)
    decode_lane_batch: bool = False
    # with the copy lane (queued natively, plain launches): a decode layer's host work from its routing flag to the
    # next graph's launch (the split, the lane's queueing, the CPU's misses, the wait for the lane, the launch) in one
    # native call (engine/gpu/native_layer.py), not Python run on caches the CPU experts have just flushed; a layer
    # that misses an admission candidate is handed back to the Python path, which captures it. Session 28 (H200,
    # calibrated, 18 layers, cal_ab A B B A x2): 93.89 against 78.43 tok/s (1.197x; lane_start 0.45-0.64 against
    # 1.36-1.74 ms a token, 17 native layers and 1 hand-back a token), the same logits (lane_check hashes); with it
    # the one-lease peer call read 2.60x llama.cpp calibrated and 2.00x uniform (docs/performance.md)
    decode_native_layer: bool = True
    # decode_native_layer without the copy lane (Windows, where direct copies are off; a PC whose load-time lane
    # check says the lane does not pay): the same call serves the early launch (the CPU flag, the launch of the layer
    # after next). Off until measured on a GPU: its bits are tested under the interpreter only, and session 28's
    # A/B ran beside the lane. Its A/B: A="decode_lane=off" B="decode_lane=off decode_native_early=true" bash
    # bench/device/cal_ab.sh
    decode_native_early: bool = False
    # with decode_native_layer beside the lane: the next layer's graph queued at the start of a layer's call, behind
    # cuStreamWaitValue32 on the layer's CPU flag (the GPU's front-end waits, no kernel polls), so it starts without
    # the host's launch after the CPU's work. Off: session 28 (H200) woke the front-end in 6.65 us against a polling
    # kernel's 24.56 (bench.gpu.wait_value_probe), but calibrated decode read 78.01 against the native layer's 93.89
    # tok/s (A B C C B A x2, one run of four at 53.9: not clearly worse, not better)
    decode_front_end_wait: bool = False
    refresh_every: int = 8  # tokens between admission refreshes; 0 freezes residency
    refresh_m: int = 16  # admissions per refresh
    prefill_weight: float = 16.0  # prompt routing counts as this many generated tokens
    # after a prompt the adaptive slots are aimed at the experts its last fill_tokens tokens routed to most, each
    # captured the first time the CPU computes it, into a free slot or over a resident the prompt no longer routes
    # to (engine/gpu/admission.py plan_fill; 0 = off). H200 machine, session 14, calibrated routing after a
    # 2,048-token prompt: VRAM hit 0.378 -> 0.428, CPU experts per token 44.8 -> 41.2, tok/s +2.1% (mean of 8
    # A B B A runs, inside the hosts' +-10% spread; MEASURED, docs/performance.md)
    fill_tokens: int = 128
    prompt_block: int = 4096
    gpu_prefill: bool = True  # prompts through the layer-major GPU path (False: token by token, for checks)
    # non-resident prompt experts: "auto" = the split from this machine's measured rates (split.py; with direct
    # copies a 600-token prompt took 1.75 s against 4.2-4.8 s "fixed" on the H200 host, MEASURED, docs/perf-prompt.md),
    # "fixed" = groups of <= 16 pairs to the CPU
    prompt_split: Literal["auto", "fixed"] = "auto"
    # the measured split plans the CPU lane to at most this share of the staging lane (the layer waits for the
    # CPU's results). Session 8 chose 0.9: its CPU lane ran 10-30% over the prediction beside the copies (600-token
    # follow-ups 1.38 s at 1.0, 1.25 at 0.9, 28 lookahead slots). With session 9's multi-token kernel the lane is
    # shorter and 1.0 is ahead, one process, 4 mirrored rounds (H200 machine, session 10): 600-token prompt
    # 1.152 / 1.167 / 1.171 s at 1.0 / 0.9 / 0.8, follow-up 600 1.146 / 1.166 / 1.169, follow-up 400 1.107 /
    # 1.119 / 1.123 (medians; docs/perf-prompt.md)
    prompt_cpu_share: float = 1.0
    warm_prompt: bool = True  # compile the prompt kernels and measure this machine's rates at load
    # staged prompt experts copied straight from the checkpoint's page-locked mapping (engine/gpu/prefill/direct.py):
    # "auto" = on Linux, locking at most the RAM less 16 GiB; "on" = no limit; "off" = pack into pinned buffers
    stage_direct: Literal["auto", "on", "off"] = "auto"
    prefill_tiles: str = ""  # prompt kernel tiles, e.g. "gemm_m=64,gemm_p=32" (device sweeps; "" = the defaults)
    # RAM residency of the expert store (engine/residency)
    ram_budget_gib: float = 0.0  # RAM for store pages; 0 = auto (what is free minus headroom)
    warmup: bool = True  # read the store into RAM in the background after load
    mlock_gib: float = 0.0  # lock this much of the hottest store in RAM (Linux mlock; Windows soft minimum)

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> SettingsError:
            return SettingsError(f"setting {name}={getattr(self, name)!r}: {why}")

        if self.backend not in ("auto", "cpu", "gpu", "reference"):
            raise bad("backend", "must be auto, cpu, gpu or reference")
        if self.stage_direct not in ("auto", "on", "off"):
            raise bad("stage_direct", "must be auto, on or off")
        if self.decode_lane not in ("auto", "on", "off"):
            raise bad("decode_lane", "must be auto, on or off")
        if self.dtype not in ("bfloat16", "float32"):
            raise bad("dtype", "must be bfloat16 or float32")
        if not 0 <= self.cpu_threads <= 256:
            raise bad("cpu_threads", "must be between 0 (auto) and 256")
        if not 16 <= self.context <= 131072:
            raise bad("context", "must be between 16 and 131072 tokens")
        if not 0 < self.vram_budget_gib <= 1024:
            raise bad("vram_budget_gib", "must be a positive number of GiB")
        if self.pool_gib < 0 or self.pool_gib > self.vram_budget_gib:
            raise bad("pool_gib", f"must be between 0 (auto) and the VRAM budget ({self.vram_budget_gib} GiB)")
        if self.static_slots < -1:
            raise bad("static_slots", "must be -1 (auto) or >= 0")
        if not 0 <= self.scratch_slots <= 64:
            raise bad("scratch_slots", "must be between 0 and 64")
        if not 0 <= self.lookahead_slots <= 64:
            raise bad("lookahead_slots", "must be between 0 and 64")
        if not 0 <= self.refresh_every <= 4096:
            raise bad("refresh_every", "must be between 0 (frozen) and 4096")
        if not 0 <= self.refresh_m <= 1024:
            raise bad("refresh_m", "must be between 0 and 1024")
        if not 0 <= self.fill_tokens <= 131072:
            raise bad("fill_tokens", "must be between 0 (off) and 131072")
        if not 0 <= self.prefill_weight <= 1024:
            raise bad("prefill_weight", "must be between 0 and 1024")
        if not 16 <= self.prompt_block <= 16384:
            raise bad("prompt_block", "must be between 16 and 16384")
        if type(self.early_poll_ns) is not int or not 0 <= self.early_poll_ns <= 100_000:
            raise bad("early_poll_ns", "must be a whole number of nanoseconds between 0 and 100000")
        for flag in ("gpu_prefill", "warm_prompt", "early_launch", "decode_lane_split", "decode_lane_beside",
                     "decode_lane_native", "decode_lane_pull", "decode_lane_batch", "decode_native_layer",
                     "decode_native_early", "decode_front_end_wait"):
            if not isinstance(getattr(self, flag), bool):
                raise bad(flag, "must be true or false")
        if self.prompt_split not in ("auto", "fixed"):
            raise bad("prompt_split", "must be auto or fixed")
        if not 0.1 <= self.prompt_cpu_share <= 1.0:
            raise bad("prompt_cpu_share", "must be between 0.1 and 1.0")
        if self.kv_ring < 0:
            raise bad("kv_ring", "must be >= 0")
        if not 0 <= self.ram_budget_gib <= 65536:
            raise bad("ram_budget_gib", "must be between 0 (auto) and 65536 GiB")
        if not isinstance(self.warmup, bool):
            raise bad("warmup", "must be true or false")
        if not 0 <= self.mlock_gib <= 65536:
            raise bad("mlock_gib", "must be between 0 (off) and 65536 GiB")
        if self.ram_budget_gib and self.mlock_gib > self.ram_budget_gib:
            raise bad("mlock_gib", f"must not exceed the RAM budget ({self.ram_budget_gib} GiB)")

    def threads(self) -> int:
        if self.cpu_threads:
            return self.cpu_threads
        return max(1, min(8, physical_cores()))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineSettings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise SettingsError(f"unknown settings: {', '.join(unknown)}")
        return cls(**d)


# The design doc's selected launcher profile (--kv-ring 256 --scratch 6 --pool 6.05; it had no lookahead).
OPTIMIZED = EngineSettings(pool_gib=6.05, kv_ring=256, scratch_slots=6, lookahead_slots=0, refresh_every=8,
                           refresh_m=16, prefill_weight=16.0)

"""Tile sizes of the prompt kernels, one place for the GPU and the interpreter tests.

Every tile size is a Triton constexpr. The GPU defaults were chosen offline for sm_90 at the
120b shape among configurations that compile without register spills (``python -m
bench.gpu.aot --sweep``: registers / stack per kernel, no GPU needed);
``bench/gpu/prompt_device.py`` stage ``tiles`` times those candidates on the H200, and the
fastest goes here (docs/perf-prompt.md records it). The ``prefill_tiles`` setting overrides
(``with_overrides``, applied by the runner).
Under TRITON_INTERPRET=1 the cost is per program, so the interpreter uses few, large tiles.

Consumer cards (sm_86/89/120) have 99 KiB of shared memory per block instead of 227 KiB and
their ptxas allocates registers differently: the sm_90 GEMM tiles spill there. ``for_config``
therefore picks per architecture from ``CANDIDATES`` (each compiled spill-free for the archs it
lists, docs/perf-gpu.md) the first whose shared memory fits the device's real opt-in limit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...config import ModelConfig


def pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class PrefillTiles:
    attn_m: int = 16  # query tokens per attention program (x the padded GQA group = rows)
    attn_n: int = 64  # keys per attention step
    attn_warps: int = 8  # 4 warps spill at 128 rows x head_dim 64 (aot.py: 255 regs + stack)
    attn_stages: int = 2
    gemm_m: int = 64  # token rows per expert GEMM tile (design doc: 64 beat 16)
    gemm_p: int = 64  # gate/up pairs per gate_up program
    gemm_n: int = 64  # output columns per down program
    gemm_k: int = 128  # reduction step (elements; codes are half as many bytes); H200, 13k-token layer:
    # 57.2 ms at k=128 vs 102.4 ms at k=64 (prompt_device stage tiles, 2026-11-29); 241 regs, no spills
    gemm_warps: int = 8  # no spills at 64x64x128 (aot.py; 4 warps at 64x64x64: 255 regs)
    gemm_stages: int = 3
    bf16_dot: bool = True  # GPU: bf16 tensor-core dots (operands are bf16-exact); interpreter: fp32

    @classmethod
    def for_config(cls, cfg: ModelConfig, interpret: bool = False,
                   limits: DeviceLimits | None = None) -> PrefillTiles:
        """``limits``: the device's (default: the current CUDA device's, read at run time)."""
        if interpret:
            return cls(attn_m=16, attn_n=64, gemm_m=32, gemm_p=min(64, pow2(cfg.intermediate_size)),
                       gemm_n=min(64, pow2(cfg.hidden_size)), gemm_k=64, bf16_dot=False)
        limits = limits or DeviceLimits.current()
        return cls.for_device(limits) if limits is not None else cls()

    @classmethod
    def for_device(cls, limits: DeviceLimits) -> PrefillTiles:
        """The first candidate compiled spill-free for this architecture whose shared memory
        fits the device's opt-in limit; never one that does not fit."""
        family = limits.family()
        for over, spill_free, smem in CANDIDATES:
            if family in spill_free and smem[family] <= limits.smem_per_block:
                return replace(cls(), **over)  # type: ignore[arg-type]
        raise ValueError(f"no prompt tile configuration fits sm_{limits.arch} with "
                         f"{limits.smem_per_block} B of shared memory per block")

    def with_overrides(self, spec: str) -> PrefillTiles:
        """``"name=value,..."`` -> a copy with those fields changed (ints; bf16_dot takes 0/1)."""
        kw: dict[str, int | bool] = {}
        for item in filter(None, (s.strip() for s in spec.split(","))):
            name, _, value = item.partition("=")
            if name not in self.__dataclass_fields__:
                raise ValueError(f"unknown prompt tile {name!r}")
            kw[name] = bool(int(value)) if name == "bf16_dot" else int(value)
        return replace(self, **kw)  # type: ignore[arg-type]

    def check(self, cfg: ModelConfig) -> None:
        """tl.dot needs every dimension >= 16 and tl.arange powers of two."""
        for name in ("attn_m", "attn_n", "gemm_m", "gemm_p", "gemm_n", "gemm_k"):
            v = getattr(self, name)
            if v < 1 or v & (v - 1):
                raise ValueError(f"prompt tile {name}={v} must be a power of two")
        if self.gemm_k < 32 or self.gemm_k % 32:
            raise ValueError("gemm_k must be a multiple of 32 (one MXFP4 block)")
        if cfg.hidden_size % 32 or cfg.intermediate_size % 32:
            raise ValueError("hidden and intermediate sizes must be multiples of 32")


@dataclass(frozen=True)
class DeviceLimits:
    """What one program may use on a CUDA device: compute capability x10 and the shared memory
    a block can opt in to (bytes, ``cudaDevAttrMaxSharedMemoryPerBlockOptin``)."""

    arch: int
    smem_per_block: int

    def family(self) -> int:
        """The compiled architecture whose table applies (sm_80 takes the sm_86 tiles: same
        register file, more shared memory; sm_100 the sm_90 ones)."""
        if self.arch >= 120:
            return 120
        if self.arch >= 90:
            return 90
        return 89 if self.arch == 89 else 86

    @classmethod
    def current(cls) -> DeviceLimits | None:
        try:
            import torch
        except ImportError:
            return None
        if not torch.cuda.is_available():
            return None
        dev = torch.cuda.current_device()
        p = torch.cuda.get_device_properties(dev)
        smem = getattr(p, "shared_memory_per_block_optin", None)  # torch >= 2.6 on CUDA
        if smem is None:
            try:  # Triton asks the driver for the same attribute
                from triton.runtime import driver

                smem = driver.active.utils.get_device_properties(dev)["max_shared_mem"]
            except Exception:  # no Triton: the 48 KiB every block gets without opting in
                smem = p.shared_memory_per_block
        return cls(p.major * 10 + p.minor, int(smem))


# The devices' opt-in limits (CUDA programming guide, compute capabilities table).
SM86 = DeviceLimits(86, 101376)  # RTX 30xx (the design's RTX 3080 Ti): 99 KiB
SM89 = DeviceLimits(89, 101376)  # RTX 40xx: 99 KiB
SM90 = DeviceLimits(90, 232448)  # H100/H200: 227 KiB
SM120 = DeviceLimits(120, 101376)  # RTX 50xx: 99 KiB

# (overrides of the defaults, archs where every prompt kernel compiles without spills, shared
# memory in bytes per arch of the largest kernel), in order of preference (H200 time first).
# MEASURED with ``python -m bench.gpu.aot --arch N`` (Triton 3.9); docs/perf-gpu.md has the table;
# tests/engine/gpu/prefill/test_prefill_compile.py recompiles each arch's choice.
CANDIDATES: list[tuple[dict[str, int], frozenset[int], dict[int, int]]] = [
    # the sm_90 defaults (64x64x128, 8 warps): spill 144-3632 B on sm_86/89/120
    ({}, frozenset({90}), {90: 36864}),
    # consumer cards: k=32 halves the dequantized operands, 4 warps keep ptxas at <= 255 regs
    ({"gemm_m": 64, "gemm_p": 32, "gemm_n": 64, "gemm_k": 32, "gemm_warps": 4, "gemm_stages": 3},
     frozenset({86, 89, 120}), {86: 24576, 89: 24576, 120: 24576}),
]

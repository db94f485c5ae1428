"""Compile the prompt kernels for a GPU architecture without a GPU, and report their resources.

    python -m bench.gpu.aot [--arch 90] [--preset 120b-shape] [--sweep] [--json]

Triton's wheel carries ptxas and cuobjdump, so the whole pipeline (TTIR -> PTX -> cubin)
runs on any machine. Per kernel the report gives registers per thread, stack bytes (spills
go there) and shared memory. Used to pick spill-free tile sizes offline and, in CI, to
check that the GPU path compiles at all (the interpreter tests never run the compiler).
Must run without TRITON_INTERPRET (the kernels must be real JIT functions).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from engine.config import ModelConfig
from engine.gpu.layout import ExpertLayout
from engine.gpu.prefill.tiles import PrefillTiles, pow2

ATTN_SIG = {"q_ptr": "*bf16", "kb_ptr": "*bf16", "vb_ptr": "*bf16", "kc_ptr": "*bf16", "vc_ptr": "*bf16",
            "sinks_ptr": "*bf16", "o_ptr": "*bf16", "start": "i32", "base": "i32", "T": "i32", "scale": "fp32"}
GATE_UP_SIG = {"pool_ptr": "*u8", "x_ptr": "*bf16", "order_ptr": "*i32", "tiles_ptr": "*i32", "act_ptr": "*bf16",
               "slot_bytes": "i32", "limit": "fp32", "alpha": "fp32", "tile0": "i32"}
DOWN_SIG = {"pool_ptr": "*u8", "act_ptr": "*bf16", "order_ptr": "*i32", "w_ptr": "*bf16", "tiles_ptr": "*i32",
            "out_ptr": "*bf16", "slot_bytes": "i32", "tile0": "i32"}
# candidates for --sweep: (field overrides); each is compiled and its resources reported
SWEEP = [
    {"attn_m": 16, "attn_n": 64, "attn_warps": 8}, {"attn_m": 16, "attn_n": 32, "attn_warps": 8},
    {"attn_m": 8, "attn_n": 32, "attn_warps": 4}, {"attn_m": 32, "attn_n": 32, "attn_warps": 8},
    {"gemm_m": 64, "gemm_p": 64, "gemm_n": 64, "gemm_k": 64, "gemm_warps": 8},
    {"gemm_m": 64, "gemm_p": 32, "gemm_n": 32, "gemm_k": 64, "gemm_warps": 4},
    {"gemm_m": 128, "gemm_p": 64, "gemm_n": 64, "gemm_k": 64, "gemm_warps": 8},
    {"gemm_m": 64, "gemm_p": 128, "gemm_n": 128, "gemm_k": 64, "gemm_warps": 8},
    {"gemm_m": 64, "gemm_p": 64, "gemm_n": 64, "gemm_k": 128, "gemm_warps": 8},
    # consumer cards (sm_86/89/120): the first without spills there (engine/gpu/prefill/tiles.py)
    {"gemm_m": 64, "gemm_p": 32, "gemm_n": 64, "gemm_k": 32, "gemm_warps": 4, "gemm_stages": 3},
]


def _resources(kernel: Any) -> dict[str, int]:
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(kernel.asm["cubin"])
        path = f.name
    try:
        out = subprocess.run([str(tool), "--dump-resource-usage", path], capture_output=True, text=True,
                             check=True).stdout
    finally:
        os.unlink(path)
    line = next(s for s in out.splitlines() if "REG:" in s)
    fields = dict(item.split(":", 1) for item in line.split() if ":" in item)
    return {"regs": int(fields["REG"]), "stack": int(fields["STACK"]), "shared": int(kernel.metadata.shared)}


def compile_kernels(cfg: ModelConfig, tiles: PrefillTiles, arch: int = 90,
                    only: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Compile the three prompt kernels (attention full + sliding, gate_up, down) for ``arch``
    (``only``: just the kernels of those names)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("unset TRITON_INTERPRET to compile for a GPU")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from engine.gpu.prefill.kernels.attention import prompt_attn_kernel
    from engine.gpu.prefill.kernels.moe_gemm import moe_down_kernel, moe_gate_up_kernel

    tiles.check(cfg)
    target = GPUTarget("cuda", arch, 32)
    off = ExpertLayout.for_config(cfg).kernel_offsets()
    report = []

    def build(name: str, fn: Any, sig: dict[str, str], consts: dict[str, Any], warps: int, stages: int) -> None:
        if only is not None and name not in only:
            return
        full_sig = dict(sig) | {k: "constexpr" for k in consts}
        k = triton.compile(ASTSource(fn, full_sig, consts), target=target,
                           options={"num_warps": warps, "num_stages": stages})
        report.append({"kernel": name, **_resources(k)})

    attn = {"NH": cfg.num_attention_heads, "NKV": cfg.num_key_value_heads, "G": cfg.gqa_group,
            "GP": pow2(cfg.gqa_group), "D": cfg.head_dim, "BLOCK_M": tiles.attn_m, "BLOCK_N": tiles.attn_n,
            "BF16_DOT": tiles.bf16_dot}
    build("attention_full", prompt_attn_kernel, ATTN_SIG, attn | {"RING": 16384, "WINDOW": 0}, tiles.attn_warps,
          tiles.attn_stages)
    build("attention_sliding", prompt_attn_kernel, ATTN_SIG, attn | {"RING": 256, "WINDOW": cfg.sliding_window},
          tiles.attn_warps, tiles.attn_stages)
    h, i = cfg.hidden_size, cfg.intermediate_size
    build("gate_up", moe_gate_up_kernel, GATE_UP_SIG,
          {"H": h, "INTER": i, "TOPK": cfg.num_experts_per_tok, "OFF_GS": off["OFF_GS"], "OFF_GB": off["OFF_GB"],
           "BLOCK_M": tiles.gemm_m, "BLOCK_P": tiles.gemm_p, "BLOCK_K": tiles.gemm_k, "BF16_DOT": tiles.bf16_dot},
          tiles.gemm_warps, tiles.gemm_stages)
    build("down", moe_down_kernel, DOWN_SIG,
          {"H": h, "INTER": i, "OFF_DB": off["OFF_DB"], "OFF_DS": off["OFF_DS"], "OFF_DBIAS": off["OFF_DBIAS"],
           "BLOCK_M": tiles.gemm_m, "BLOCK_N": tiles.gemm_n, "BLOCK_K": tiles.gemm_k, "BF16_DOT": tiles.bf16_dot},
          tiles.gemm_warps, tiles.gemm_stages)
    return report


def main(argv: list[str] | None = None) -> int:
    from engine.synth import PRESETS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", type=int, default=90, help="compute capability x10 (90 = H100/H200)")
    ap.add_argument("--preset", default="120b-shape", choices=sorted(PRESETS))
    ap.add_argument("--sweep", action="store_true", help="also compile the SWEEP candidates")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    cfg = ModelConfig.from_dict(PRESETS[a.preset].config_dict())
    base = PrefillTiles()
    runs = [("default", base)] + ([(json.dumps(o), replace(base, **o)) for o in SWEEP] if a.sweep else [])  # type: ignore[arg-type]
    results = []
    for label, tiles in runs:
        rep = compile_kernels(cfg, tiles, a.arch)
        results.append({"tiles": label, "config": asdict(tiles), "kernels": rep})
        if not a.json:
            print(label, "  ".join(f"{r['kernel']}: {r['regs']} regs, {r['stack']} B stack, {r['shared']} B smem"
                                   for r in rep), flush=True)
    if a.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

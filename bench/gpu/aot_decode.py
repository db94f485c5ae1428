"""Compile the decode kernels (engine/gpu/kernels) for a GPU architecture without a GPU.

Same pipeline and report as bench/gpu/aot.py (registers, stack bytes = spills, shared
memory per kernel). The constexprs mirror engine/gpu/launch.py's ``Kernels`` for the tiles
the GPU core uses (``Tiles.for_config``: one configuration, chosen per model shape), and
the argument types mirror the buffers of engine/gpu/core.py.
"""

from __future__ import annotations

import os
from typing import Any

from engine.config import MXFP4_BLOCK, ModelConfig
from engine.gpu.launch import Tiles, cdiv, pow2
from engine.gpu.layout import ExpertLayout

P_BF16, P_F32, P_I32, P_U8 = "*bf16", "*fp32", "*i32", "*u8"
RING_FULL = 4096  # cache rows: a power of two like the real context, only used modulo


def decode_launches(cfg: ModelConfig, t: Tiles) -> list[tuple[str, str, str, dict[str, str], dict[str, Any], int]]:
    """(name, module, kernel, signature, constexprs, num_warps) for every decode launch."""
    off = ExpertLayout.for_config(cfg).kernel_offsets()
    h, i, e = cfg.hidden_size, cfg.intermediate_size, cfg.num_local_experts
    bh, bt, gp = pow2(h), pow2(cfg.num_experts_per_tok), max(16, pow2(cfg.gqa_group))
    w = t.warps
    attn_sig = {"q_ptr": P_BF16, "k_ptr": P_BF16, "v_ptr": P_BF16, "ctrl_ptr": P_I32, "m_ptr": P_F32,
                "l_ptr": P_F32, "acc_ptr": P_F32, "scale": "fp32"}
    attn = {"NKV": cfg.num_key_value_heads, "G": cfg.gqa_group, "GP": gp, "D": cfg.head_dim,
            "BLOCK_S": t.attn_block}
    comb_sig = {"m_ptr": P_F32, "l_ptr": P_F32, "acc_ptr": P_F32, "sinks_ptr": P_BF16, "o_ptr": P_BF16}
    out: list[tuple[str, str, str, dict[str, str], dict[str, Any], int]] = [
        ("start", "dense", "start_kernel",
         {"ctrl_host_ptr": P_I32, "ctrl_dev_ptr": P_I32, "embed_host_ptr": P_BF16, "resid_ptr": P_BF16},
         {"H": h, "CTRL_N": 8, "BLOCK": t.combine_block}, 4),
        ("combine", "dense", "combine_kernel", {"resid_ptr": P_BF16, "gpu_moe_ptr": P_F32, "cpu_moe_ptr": P_F32},
         {"H": h, "BLOCK": t.combine_block}, 4),
        ("combine_wait", "dense", "combine_wait_kernel",
         {"resid_ptr": P_BF16, "gpu_moe_ptr": P_F32, "cpu_moe_ptr": P_F32, "done_ptr": P_I32, "ctrl_ptr": P_I32,
          "late_ptr": P_I32},
         {"H": h, "BLOCK": t.combine_block, "MAX_POLLS": 1 << 19, "ONE": False, "NAP_NS": 0}, 4),
        ("combine_wait_nap", "dense", "combine_wait_kernel",  # early_poll_ns > 0: one program, nanosleep
         {"resid_ptr": P_BF16, "gpu_moe_ptr": P_F32, "cpu_moe_ptr": P_F32, "done_ptr": P_I32, "ctrl_ptr": P_I32,
          "late_ptr": P_I32},
         {"H": h, "BLOCK": t.combine_block, "MAX_POLLS": 1 << 18, "ONE": True, "NAP_NS": 1000}, 4),
        ("qkv_rope", "dense", "qkv_rope_kernel",
         {"x_ptr": P_BF16, "gain_ptr": P_BF16, "w_ptr": P_BF16, "b_ptr": P_BF16, "cos_ptr": P_F32, "sin_ptr": P_F32,
          "ctrl_ptr": P_I32, "q_ptr": P_BF16, "k_cache_ptr": P_BF16, "v_cache_ptr": P_BF16, "eps": "fp32"},
         {"H": h, "NQ": cfg.q_width, "NKV": cfg.kv_width, "D": cfg.head_dim, "RING": RING_FULL,
          "PAIRS": t.qkv_pairs, "BLOCK_H": bh, "BLOCK_K": t.k_block}, w),
        ("attn_split_full", "attention", "attn_split_kernel", attn_sig,
         attn | {"RING": RING_FULL, "WINDOW": 0, "NSPLIT": t.attn_split_full}, w),
        ("attn_split_sliding", "attention", "attn_split_kernel", attn_sig,
         attn | {"RING": pow2(cfg.sliding_window), "WINDOW": cfg.sliding_window, "NSPLIT": t.attn_split_sliding}, w),
        ("attn_combine_full", "attention", "attn_combine_kernel", comb_sig,
         {"D": cfg.head_dim, "NSPLIT": t.attn_split_full}, 4),
        ("attn_combine_sliding", "attention", "attn_combine_kernel", comb_sig,
         {"D": cfg.head_dim, "NSPLIT": t.attn_split_sliding}, 4),
        ("oproj", "dense", "oproj_residual_kernel",
         {"o_ptr": P_BF16, "w_ptr": P_BF16, "b_ptr": P_BF16, "resid_ptr": P_BF16},
         {"H": h, "K": cfg.q_width, "BLOCK_N": t.oproj_rows, "BLOCK_K": t.k_block}, w),
        ("router_logits", "dense", "router_logits_kernel",
         {"x_ptr": P_BF16, "gain_ptr": P_BF16, "w_ptr": P_BF16, "b_ptr": P_BF16, "logits_ptr": P_F32,
          "te_ptr": P_F32, "to_ptr": P_F32, "t_host_ptr": P_F32, "eps": "fp32"},
         {"H": h, "E": e, "BLOCK_E": t.router_rows, "BLOCK_H": bh, "BLOCK_K": t.k_block}, w),
        ("router_topk", "dense", "router_topk_kernel",
         {"logits_ptr": P_F32, "table_ptr": P_I32, "ctrl_ptr": P_I32, "route_dev_ptr": P_I32,
          "route_host_ptr": P_I32, "flag_ptr": P_I32, "layer": "i32"},
         {"E": e, "TOPK": cfg.num_experts_per_tok, "BLOCK_E": pow2(e), "BLOCK_T": bt}, 4),
        ("expert_gate_up", "experts", "expert_gate_up_kernel",
         {"pool_ptr": P_U8, "route_ptr": P_I32, "te_ptr": P_F32, "to_ptr": P_F32, "act_e_ptr": P_F32,
          "act_o_ptr": P_F32, "slot_bytes": "i32", "limit": "fp32", "alpha": "fp32"},
         {"INTER": i, "GH": h // MXFP4_BLOCK, "OFF_GS": off["OFF_GS"], "OFF_GB": off["OFF_GB"], "BLOCK_T": bt,
          "PAIRS": t.gu_pairs, "BLOCK_G": min(t.mx_groups, pow2(h // MXFP4_BLOCK))}, w),
        ("expert_down", "experts", "expert_down_kernel",
         {"pool_ptr": P_U8, "route_ptr": P_I32, "act_e_ptr": P_F32, "act_o_ptr": P_F32, "out_ptr": P_F32,
          "slot_bytes": "i32"},
         {"H": h, "INTER": i, "GI": i // MXFP4_BLOCK, "OFF_DB": off["OFF_DB"], "OFF_DS": off["OFF_DS"],
          "OFF_DBIAS": off["OFF_DBIAS"], "TOPK": cfg.num_experts_per_tok, "BLOCK_T": bt, "BLOCK_N": t.down_rows,
          "BLOCK_G": min(t.mx_groups, pow2(i // MXFP4_BLOCK))}, w),
        ("lm_head", "tail", "lm_head_kernel",
         {"x_ptr": P_BF16, "gain_ptr": P_BF16, "w_ptr": P_BF16, "ctrl_ptr": P_I32, "logits_ptr": P_F32,
          "part_val_ptr": P_F32, "part_idx_ptr": P_I32, "eps": "fp32"},
         {"H": h, "V": cfg.vocab_size, "BLOCK_V": t.lm_rows, "BLOCK_H": bh, "BLOCK_K": t.lm_k_block}, w),
        ("pick", "tail", "pick_kernel",
         {"part_val_ptr": P_F32, "part_idx_ptr": P_I32, "ctrl_ptr": P_I32, "out_dev_ptr": P_I32,
          "out_host_ptr": P_I32, "flag_ptr": P_I32},
         {"NPART": cdiv(cfg.vocab_size, t.lm_rows), "BLOCK": t.pick_block}, 4),
    ]
    return out


def compile_decode_kernels(cfg: ModelConfig, tiles: Tiles, arch: int = 90) -> list[dict[str, Any]]:
    """Compile every decode launch for ``arch``; one report row per launch."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("unset TRITON_INTERPRET to compile for a GPU")
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .aot import _resources

    target = GPUTarget("cuda", arch, 32)
    report = []
    for name, mod, fn_name, sig, consts, warps in decode_launches(cfg, tiles):
        fn = getattr(importlib.import_module(f"engine.gpu.kernels.{mod}"), fn_name)
        full_sig = dict(sig) | {k: "constexpr" for k in consts}
        k = triton.compile(ASTSource(fn, full_sig, consts), target=target, options={"num_warps": warps})
        report.append({"kernel": name, **_resources(k)})
    return report

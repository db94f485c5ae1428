"""Launch wrappers for the decode kernels, with tile sizes chosen once per model shape.

Both the GPU core (eager or captured into CUDA graphs) and the interpreter tests call these,
so a kernel is always launched with the same grid and constexprs wherever it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..config import MXFP4_BLOCK, ModelConfig
from .kernels import attention, dense, experts, tail
from .layout import ExpertLayout
from .prefill.tiles import DeviceLimits


def pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@dataclass(frozen=True)
class Tiles:
    qkv_pairs: int = 8
    k_block: int = 512  # reduction chunk of the bf16 GEMVs
    oproj_rows: int = 8
    router_rows: int = 4
    attn_block: int = 64
    attn_split_full: int = 16
    attn_split_sliding: int = 4
    gu_pairs: int = 8
    down_rows: int = 8
    mx_groups: int = 16  # MXFP4 groups (32 values) per reduction step
    lm_rows: int = 64
    lm_k_block: int = 256
    pick_block: int = 1024
    combine_block: int = 1024
    warps: int = 4

    @classmethod
    def for_config(cls, cfg: ModelConfig, interpret: bool = False, limits: DeviceLimits | None = None) -> Tiles:
        """``limits``: the device's (default: the current CUDA device's, read at run time)."""
        if interpret:
            # few, large programs: the interpreter's cost is per program, not per element
            h = pow2(cfg.hidden_size)
            return cls(qkv_pairs=pow2((cfg.q_width + 2 * cfg.kv_width) // 2), k_block=min(h, 1024),
                       oproj_rows=pow2(cfg.hidden_size), router_rows=pow2(cfg.num_local_experts),
                       attn_block=32, attn_split_full=1, attn_split_sliding=1,
                       gu_pairs=pow2(cfg.intermediate_size), down_rows=pow2(cfg.hidden_size),
                       mx_groups=pow2(max(cfg.hidden_size, cfg.intermediate_size) // MXFP4_BLOCK),
                       lm_rows=min(pow2(cfg.vocab_size), 1024), lm_k_block=min(h, 1024), pick_block=64,
                       combine_block=h, warps=4)
        limits = limits or DeviceLimits.current()
        if limits is not None and limits.family() != 90:
            # consumer ptxas (sm_86/89/120): lm_head spills at a 256 reduction step (416 B of stack
            # on sm_86), none at 64 (bench/gpu/aot_check.py, docs/perf-gpu.md); sm_90 keeps its timed tiles
            return cls(lm_k_block=64)
        return cls()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Kernels:
    """Kernel launches for one model shape. Tensor arguments may live in pinned host memory
    where the docstrings of the kernels say so (read/written zero-copy)."""

    def __init__(self, cfg: ModelConfig, tiles: Tiles, layout: ExpertLayout) -> None:
        self.cfg = cfg
        self.t = tiles
        self.layout = layout
        self.block_h = pow2(cfg.hidden_size)
        self.block_t = pow2(cfg.num_experts_per_tok)
        self.gp = max(16, pow2(cfg.gqa_group))
        self.lm_parts = cdiv(cfg.vocab_size, tiles.lm_rows)
        # the early launch's bound on a wait: ~0.5-1 s of PCIe polls, under Windows' 2 s GPU timeout
        self.wait_polls = 1 << 19
        self.poll_one = False  # one program polls the flag (set_poll)
        self.poll_nap_ns = 0

    def set_poll(self, nap_ns: int, cuda: bool) -> None:
        """How the early launch's wait polls (``EngineSettings.early_poll_ns``): 0 = every program of the waiting
        combine, back to back; > 0 = one program, sleeping ``nap_ns`` between polls (not under the interpreter,
        which runs no PTX), with the poll bound cut so the wait still gives up within about the same time."""
        self.poll_one = nap_ns > 0
        self.poll_nap_ns = nap_ns if cuda else 0
        self.wait_polls = max(1024, int((1 << 19) / (1.0 + self.poll_nap_ns / 1000.0)))  # a poll ~1 us of PCIe

    # ---- per token -----------------------------------------------------------------------
    def start(self, ctrl_host: Any, ctrl_dev: torch.Tensor, embed_host: Any, resid: torch.Tensor) -> None:
        h = self.cfg.hidden_size
        b = self.t.combine_block
        dense.start_kernel[(cdiv(h, b),)](ctrl_host, ctrl_dev, embed_host, resid, H=h, CTRL_N=dense.CTRL_SIZE,
                                          BLOCK=b)

    def combine(self, resid: torch.Tensor, gpu_moe: torch.Tensor, cpu_moe: Any, done: Any = None,
                ctrl: torch.Tensor | None = None, late: Any = None) -> None:
        """``done`` (the host's pinned flag of the previous layer) with ``ctrl`` and ``late``: wait
        for it first, at most ``wait_polls`` polls (then the step is written to ``late``)."""
        h = self.cfg.hidden_size
        b = self.t.combine_block
        if done is None:
            dense.combine_kernel[(cdiv(h, b),)](resid, gpu_moe, cpu_moe, H=h, BLOCK=b)
        else:
            dense.combine_wait_kernel[(1 if self.poll_one else cdiv(h, b),)](
                resid, gpu_moe, cpu_moe, done, ctrl, late, H=h, BLOCK=b, MAX_POLLS=self.wait_polls,
                ONE=self.poll_one, NAP_NS=self.poll_nap_ns)

    # ---- attention block -----------------------------------------------------------------
    def qkv_rope(self, resid: torch.Tensor, gain: torch.Tensor, w_qkv: torch.Tensor, b_qkv: torch.Tensor,
                 cos: torch.Tensor, sin: torch.Tensor, ctrl: torch.Tensor, q: torch.Tensor,
                 k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
        c = self.cfg
        pairs = (c.q_width + 2 * c.kv_width) // 2
        grid = (cdiv(pairs, self.t.qkv_pairs),)
        dense.qkv_rope_kernel[grid](resid, gain, w_qkv, b_qkv, cos, sin, ctrl, q, k_cache, v_cache,
                                    c.rms_norm_eps, H=c.hidden_size, NQ=c.q_width, NKV=c.kv_width, D=c.head_dim,
                                    RING=k_cache.shape[0], PAIRS=self.t.qkv_pairs, BLOCK_H=self.block_h,
                                    BLOCK_K=self.t.k_block, num_warps=self.t.warps)

    def nsplit(self, sliding: bool) -> int:
        return self.t.attn_split_sliding if sliding else self.t.attn_split_full

    def attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, ctrl: torch.Tensor,
                  sinks: torch.Tensor, window: int, scratch: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                  out: torch.Tensor) -> None:
        c = self.cfg
        ns = self.nsplit(window > 0)
        m, lsum, acc = scratch
        attention.attn_split_kernel[(c.num_key_value_heads, ns)](
            q, k_cache, v_cache, ctrl, m, lsum, acc, c.head_dim ** -0.5, NKV=c.num_key_value_heads, G=c.gqa_group,
            GP=self.gp, D=c.head_dim, RING=k_cache.shape[0], WINDOW=window, NSPLIT=ns,
            BLOCK_S=self.t.attn_block, num_warps=self.t.warps)
        attention.attn_combine_kernel[(c.num_attention_heads,)](m, lsum, acc, sinks, out, D=c.head_dim, NSPLIT=ns)

    def attn_scratch(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        c = self.cfg
        ns = max(self.t.attn_split_full, self.t.attn_split_sliding)
        n = c.num_attention_heads * ns
        return (torch.zeros(n, device=device), torch.zeros(n, device=device),
                torch.zeros(n, c.head_dim, device=device))

    def oproj(self, o: torch.Tensor, w: torch.Tensor, b: torch.Tensor, resid: torch.Tensor) -> None:
        c = self.cfg
        dense.oproj_residual_kernel[(cdiv(c.hidden_size, self.t.oproj_rows),)](
            o, w, b, resid, H=c.hidden_size, K=c.q_width, BLOCK_N=self.t.oproj_rows, BLOCK_K=self.t.k_block,
            num_warps=self.t.warps)

    # ---- router --------------------------------------------------------------------------
    def router(self, resid: torch.Tensor, gain: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
               logits: torch.Tensor, t_even: torch.Tensor, t_odd: torch.Tensor, t_host: Any,
               table_row: Any, ctrl: torch.Tensor, route_dev: torch.Tensor, route_host: Any, flags: Any,
               layer: int) -> None:
        c = self.cfg
        e = c.num_local_experts
        dense.router_logits_kernel[(cdiv(e, self.t.router_rows),)](
            resid, gain, w, b, logits, t_even, t_odd, t_host, c.rms_norm_eps, H=c.hidden_size, E=e,
            BLOCK_E=self.t.router_rows, BLOCK_H=self.block_h, BLOCK_K=self.t.k_block, num_warps=self.t.warps)
        dense.router_topk_kernel[(1,)](logits, table_row, ctrl, route_dev, route_host, flags, layer, E=e,
                                       TOPK=c.num_experts_per_tok, BLOCK_E=pow2(e), BLOCK_T=self.block_t)

    # ---- resident experts ----------------------------------------------------------------
    def experts(self, pool: torch.Tensor, route_dev: torch.Tensor, t_even: torch.Tensor, t_odd: torch.Tensor,
                act_even: torch.Tensor, act_odd: torch.Tensor, out: torch.Tensor) -> None:
        c = self.cfg
        lo = self.layout.kernel_offsets()
        sb = self.layout.slot_bytes
        i, h = c.intermediate_size, c.hidden_size
        experts.expert_gate_up_kernel[(c.num_experts_per_tok, cdiv(i, self.t.gu_pairs))](
            pool, route_dev, t_even, t_odd, act_even, act_odd, sb, c.swiglu_limit, c.swiglu_alpha,
            INTER=i, GH=h // MXFP4_BLOCK, OFF_GS=lo["OFF_GS"], OFF_GB=lo["OFF_GB"], BLOCK_T=self.block_t,
            PAIRS=self.t.gu_pairs, BLOCK_G=min(self.t.mx_groups, pow2(h // MXFP4_BLOCK)), num_warps=self.t.warps)
        experts.expert_down_kernel[(cdiv(h, self.t.down_rows),)](
            pool, route_dev, act_even, act_odd, out, sb, H=h, INTER=i, GI=i // MXFP4_BLOCK, OFF_DB=lo["OFF_DB"],
            OFF_DS=lo["OFF_DS"], OFF_DBIAS=lo["OFF_DBIAS"], TOPK=c.num_experts_per_tok, BLOCK_T=self.block_t,
            BLOCK_N=self.t.down_rows, BLOCK_G=min(self.t.mx_groups, pow2(i // MXFP4_BLOCK)), num_warps=self.t.warps)

    # ---- tail ----------------------------------------------------------------------------
    def lm_head(self, resid: torch.Tensor, gain: torch.Tensor, w: torch.Tensor, ctrl: torch.Tensor,
                logits: torch.Tensor, part_val: torch.Tensor, part_idx: torch.Tensor, token_dev: torch.Tensor,
                token_host: Any, flag: Any) -> None:
        c = self.cfg
        tail.lm_head_kernel[(self.lm_parts,)](resid, gain, w, ctrl, logits, part_val, part_idx, c.rms_norm_eps,
                                              H=c.hidden_size, V=c.vocab_size, BLOCK_V=self.t.lm_rows,
                                              BLOCK_H=self.block_h, BLOCK_K=self.t.lm_k_block,
                                              num_warps=self.t.warps)
        tail.pick_kernel[(1,)](part_val, part_idx, ctrl, token_dev, token_host, flag, NPART=self.lm_parts,
                               BLOCK=self.t.pick_block)

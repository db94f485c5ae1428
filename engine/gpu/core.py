"""The GPU core: dense weights, K/V, expert pool and every buffer the kernels touch, plus the
launch sequence of one layer and of the tail (captured into CUDA graphs on a GPU).

All buffers are allocated once, so graph replays always see the same addresses. Buffers that
the host reads or writes every token (control block, embedding row, normalized hidden state,
routing, flags, the CPU experts' output, the token id, the slot table) live in pinned host
memory and the kernels read/write them zero-copy, so no per-layer message queues behind an
admission copy on the copy engine.

On a machine without CUDA the same code runs with CPU tensors under TRITON_INTERPRET=1 (the
CI tests): "pinned" buffers are then ordinary host tensors and there are no graphs.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..reference import rope_cos_sin
from .budget import VramPlan
from .cudart import GraphLauncher
from .kernels.dense import CTRL_SIZE
from .kv import KVCache
from .launch import Kernels, Tiles
from .layout import ExpertLayout


def _host(shape: tuple[int, ...], dtype: torch.dtype, cuda: bool) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, pin_memory=cuda)


def _np(t: torch.Tensor) -> np.ndarray:
    """numpy view of a host tensor (bf16 as uint16)."""
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


def dense(ck: Checkpoint, name: str, dev: torch.device) -> torch.Tensor:
    """One bf16 weight on ``dev`` (:func:`dense_cat` of one)."""
    return dense_cat(ck, [name], dev)


def dense_cat(ck: Checkpoint, names: list[str], dev: torch.device) -> torch.Tensor:
    """Weights concatenated along their first dimension on ``dev``. To a GPU each is copied straight from the
    checkpoint's mapping into its rows: a host copy first cost the dense bytes again in fresh pages (3.1 GB at 36
    layers) before the upload. Off a GPU (the interpreted tests) the core owns a writable copy, as the mapping is
    read-only and unmapped at close."""
    src = [ck.bf16_view(n) for n in names]
    if dev.type != "cuda":
        return torch.cat(src)
    out = torch.empty((sum(t.shape[0] for t in src), *src[0].shape[1:]), dtype=torch.bfloat16, device=dev)
    row = 0
    for t in src:
        out[row:row + t.shape[0]].copy_(t)
        row += t.shape[0]
    return out


class LayerWeights:
    def __init__(self, ck: Checkpoint, i: int, dev: torch.device) -> None:
        p = f"model.layers.{i}."
        a = p + "self_attn."

        def w(name: str) -> torch.Tensor:
            return dense(ck, name, dev)

        self.in_gain = w(p + "input_layernorm.weight")
        self.w_qkv = dense_cat(ck, [a + f"{n}_proj.weight" for n in "qkv"], dev)
        self.b_qkv = dense_cat(ck, [a + f"{n}_proj.bias" for n in "qkv"], dev)
        self.sinks = w(a + "sinks")
        self.w_o = w(a + "o_proj.weight")
        self.b_o = w(a + "o_proj.bias")
        self.post_gain = w(p + "post_attention_layernorm.weight")
        self.w_router = w(p + "mlp.router.weight")
        self.b_router = w(p + "mlp.router.bias")


class GpuCore:
    def __init__(self, ck: Checkpoint, plan: VramPlan, context: int, kv_ring: int, device: torch.device,
                 interpret: bool = False, progress=None) -> None:
        cfg = ck.config
        self.cfg = cfg
        self.dev = device
        self.cuda = device.type == "cuda"
        self.layout = ExpertLayout.for_config(cfg)
        self.kern = Kernels(cfg, Tiles.for_config(cfg, interpret=interpret), self.layout)
        self.plan = plan
        n_layers, h, e = cfg.num_hidden_layers, cfg.hidden_size, cfg.num_local_experts
        bt = self.kern.block_t

        self.layers: list[LayerWeights] = []
        for i in range(n_layers):
            self.layers.append(LayerWeights(ck, i, device))
            if progress is not None:
                progress("Loading dense weights to the GPU", (i + 1) / (n_layers + 1))
        self.norm = dense(ck, "model.norm.weight", device)
        head = "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
        self.lm_head = dense(ck, head, device)
        self.embed_table = ck.array("model.embed_tokens.weight")  # host, memory-mapped (uint16 bits)

        self.kv = KVCache(cfg, context, kv_ring, device)
        cos, sin = rope_cos_sin(cfg, torch.arange(context), torch.bfloat16)
        self.cos = cos.float().contiguous().to(device)
        self.sin = sin.float().contiguous().to(device)

        self.pool = torch.zeros(max(plan.n_slots + plan.n_scratch, 1) * plan.slot_bytes, dtype=torch.uint8,
                                device=device)

        f32, i32, bf = torch.float32, torch.int32, torch.bfloat16
        # device scratch
        self.ctrl_dev = torch.zeros(CTRL_SIZE, dtype=i32, device=device)
        self.resid = torch.zeros(h, dtype=bf, device=device)
        self.q = torch.zeros(cfg.q_width, dtype=bf, device=device)
        self.attn_out = torch.zeros(cfg.q_width, dtype=bf, device=device)
        self.attn_scratch = self.kern.attn_scratch(device)
        self.router_logits = torch.zeros(e, dtype=f32, device=device)
        self.t_even = torch.zeros(h // 2, dtype=f32, device=device)
        self.t_odd = torch.zeros(h // 2, dtype=f32, device=device)
        self.route_dev = torch.zeros(3 * bt, dtype=i32, device=device)
        self.act_even = torch.zeros(cfg.num_experts_per_tok, cfg.intermediate_size // 2, dtype=f32, device=device)
        self.act_odd = torch.zeros_like(self.act_even)
        self.gpu_moe = torch.zeros(h, dtype=f32, device=device)
        self.logits = torch.zeros(cfg.vocab_size, dtype=f32, device=device)
        self.part_val = torch.zeros(self.kern.lm_parts, dtype=f32, device=device)
        self.part_idx = torch.zeros(self.kern.lm_parts, dtype=i32, device=device)
        self.token_dev = torch.zeros(1, dtype=i32, device=device)
        # pinned host (zero-copy)
        c = self.cuda
        self.ctrl_host = _host((CTRL_SIZE,), i32, c)
        self.embed_host = _host((h,), bf, c)
        self.t_host = _host((h,), f32, c)
        self.route_host = _host((n_layers, 4 * bt), i32, c)
        self.flags = _host((n_layers + 1,), i32, c)
        self.cpu_done = _host((n_layers,), i32, c)  # the host's step, once a layer's CPU experts are written
        self.late = _host((1,), i32, c)  # a step whose early-launched wait gave up (combine_wait_kernel)
        self.cpu_moe = _host((2, h), f32, c)
        self.token_host = _host((1,), i32, c)
        self.table = _host((n_layers, e), i32, c)
        self.table.fill_(-1)
        # numpy views for the host side
        self.np_ctrl = _np(self.ctrl_host)
        self.np_embed = _np(self.embed_host)
        self.np_t = _np(self.t_host)
        self.np_route = _np(self.route_host)
        self.np_flags = _np(self.flags)
        self.np_cpu_done = _np(self.cpu_done)
        self.np_late = _np(self.late)
        self.np_cpu_moe = _np(self.cpu_moe)
        self.np_token = _np(self.token_host)
        self.np_table = _np(self.table)
        self.graphs: list[torch.cuda.CUDAGraph] = []
        self.capture_s: dict[str, float] = {}  # capture_graphs' phases, seconds
        self.tail_graph: torch.cuda.CUDAGraph | None = None
        self._launcher: GraphLauncher | None = None  # bare cudaGraphLaunch of the graphs above, when available
        # early_launch: layers 1.. and the tail captured again with combine_wait_kernel first, so they can be
        # launched before the previous layer's CPU experts are done (see Decoder.step)
        self.early_graphs: list[torch.cuda.CUDAGraph] = []
        self._early_launcher: GraphLauncher | None = None
        self.experts_enabled = True

    # ---- launch sequences -----------------------------------------------------------------
    def _combine(self, i: int, wait: bool) -> None:
        """The MoE residual add of layer i - 1; ``wait``: first wait for the host's flag of that layer."""
        done = self.cpu_done[i - 1 : i] if wait else None
        self.kern.combine(self.resid, self.gpu_moe, self.cpu_moe[(i - 1) % 2], done, self.ctrl_dev, self.late)

    def launch_layer(self, i: int, wait: bool = False) -> None:
        k, lw, kv = self.kern, self.layers[i], self.kv
        if i == 0:
            k.start(self.ctrl_host, self.ctrl_dev, self.embed_host, self.resid)
        else:
            self._combine(i, wait)
        k.qkv_rope(self.resid, lw.in_gain, lw.w_qkv, lw.b_qkv, self.cos, self.sin, self.ctrl_dev, self.q,
                   kv.k[i], kv.v[i])
        k.attention(self.q, kv.k[i], kv.v[i], self.ctrl_dev, lw.sinks, kv.window_of(i), self.attn_scratch,
                    self.attn_out)
        k.oproj(self.attn_out, lw.w_o, lw.b_o, self.resid)
        k.router(self.resid, lw.post_gain, lw.w_router, lw.b_router, self.router_logits, self.t_even, self.t_odd,
                 self.t_host, self.table[i], self.ctrl_dev, self.route_dev, self.route_host[i], self.flags, i)
        if self.experts_enabled:
            k.experts(self.pool, self.route_dev, self.t_even, self.t_odd, self.act_even, self.act_odd, self.gpu_moe)

    def launch_tail(self, wait: bool = False) -> None:
        n = self.cfg.num_hidden_layers
        self._combine(n, wait)
        self.kern.lm_head(self.resid, self.norm, self.lm_head, self.ctrl_dev, self.logits, self.part_val,
                          self.part_idx, self.token_dev, self.token_host, self.flags[n:])

    # ---- CUDA graphs ----------------------------------------------------------------------
    def capture_graphs(self, early: bool = False) -> None:
        """Compile every kernel (one eager pass), then capture one graph per layer and the tail;
        ``early``: also the waiting variants of layers 1.. and the tail (``run_early``)."""
        assert self.cuda
        t0 = time.perf_counter()
        n = self.cfg.num_hidden_layers
        self.np_ctrl[:] = 0
        self.np_ctrl[1] = -1
        self.np_embed[:] = 0
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for i in range(self.cfg.num_hidden_layers):
                self.launch_layer(i)
            self.launch_tail()
            if early:  # compile the waiting combine with its flag already set
                self.np_cpu_done[:] = -1
                self.launch_tail(wait=True)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        self.graphs = []
        for i in range(self.cfg.num_hidden_layers):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                self.launch_layer(i)
            self.graphs.append(g)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            self.launch_tail()
        self.tail_graph = g
        torch.cuda.synchronize()
        self._launcher = GraphLauncher.for_graphs([*self.graphs, g], self.dev)
        t2 = time.perf_counter()
        self.early_graphs = []
        self._early_launcher = None
        if early:
            for i in range(1, n + 1):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    if i < n:
                        self.launch_layer(i, wait=True)
                    else:
                        self.launch_tail(wait=True)
                self.early_graphs.append(g)
            torch.cuda.synchronize()
            self._early_launcher = GraphLauncher.for_graphs(self.early_graphs, self.dev)
        # what a load spends here (Triton's disk cache makes the eager pass cheap after a first run)
        self.capture_s = {"eager_pass": t1 - t0, "graphs": t2 - t1, "early_graphs": time.perf_counter() - t2}

    @property
    def can_early(self) -> bool:
        """Layers can be launched ahead of the host's CPU experts (captured graphs only: eagerly,
        and in the interpreter, a waiting kernel would run before the host could raise its flag)."""
        return bool(self.early_graphs)

    def run_early(self, i: int) -> None:
        """Launch layer ``i`` (1 <= i < layers) or, at ``i == layers``, the tail: its first kernel
        waits until ``np_cpu_done[i - 1]`` holds the control block's step."""
        if self._early_launcher is not None:
            self._early_launcher.launch(i - 1)
        else:
            self.early_graphs[i - 1].replay()

    def run_layer(self, i: int) -> None:
        if self._launcher is not None:
            self._launcher.launch(i)
        elif self.graphs:
            self.graphs[i].replay()
        else:
            self.launch_layer(i)

    def run_tail(self) -> None:
        if self._launcher is not None:
            self._launcher.launch(self.cfg.num_hidden_layers)
        elif self.tail_graph is not None:
            self.tail_graph.replay()
        else:
            self.launch_tail()

    # ---- slots ----------------------------------------------------------------------------
    def slot_view(self, slot: int) -> torch.Tensor:
        sb = self.plan.slot_bytes
        return self.pool[slot * sb : (slot + 1) * sb]

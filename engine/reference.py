"""The exact gpt-oss forward pass in PyTorch — the oracle for every fast path.

Math per gpt-oss-facts.md §4 and §7: RMSNorm in fp32 with the gain applied before the
downcast; q/k/v with bias; half-split RoPE with YaRN (cos/sin computed in fp32, scaled by
the concentration, cast to the activation dtype); attention with a per-head sink logit and
the sliding window on the layers ``layer_types`` marks; GQA; router top-k then softmax over
the k; interleaved gate/up, clamp, alpha, (up + 1); down bias before the routing weight.
Runs in float32 (for checking) or bfloat16 (as the model runs). The K/V cache keeps every
position for every layer; the window is applied by the mask, as in the references.

Attention is computed in fp32 from the activation-dtype q/k/v and rounded once at its output,
as the GPU kernels do (engine/gpu/prefill/kernels/attention.py): fp32 scores, the sink as one
more logit, unnormalised weights rounded to the activation dtype before P.V, the division last.
That is HF's eager attention less its intermediate bf16 roundings of scores and probabilities
(closer to fp32, not further). For speed: bf16 products on the CPU run as fp32 GEMMs rounded once
(what a bf16 GEMM with fp32 accumulation computes; PyTorch's own bf16 CPU GEMM is ~10x slower
without AVX512-BF16), GQA shares each K/V head with its query group instead of copying it, and
a query block of a sliding layer only multiplies the keys its window can reach.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from .checkpoint import Checkpoint
from .config import ModelConfig
from .expert_cache import DequantizedExperts
from .packed_linear import PackedLinear

Check = Callable[[], None]  # raises engine.types.PromptCancelled when the prompt is stopped


class Projection(Protocol):
    """``F.linear(x, w, b)`` where the implementation applies, else None (the caller's paths run)."""

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor | None: ...


class DecodeAttention(Protocol):
    """One query row's attention (q fp32 [heads, 1, D], K/V [kv_heads, S, D] it sees, sinks, scale) ->
    fp32 [1, heads * D] before o_proj, where the implementation applies, else None."""

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor,
                 scale: float) -> torch.Tensor | None: ...


class RowOps(Protocol):
    """One decode row's rms_norm (None where it does not apply) and apply_rope in place (False where it does not)."""

    def rms_norm(self, x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor | None: ...

    def rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool: ...


class DecodeLayer(Protocol):
    """One decode row's whole layer (the model, layer, x [1, H], positions [1], cache) -> the new row, or None where
    the implementation does not apply (the per-piece path runs)."""

    def layer(self, m: ReferenceModel, i: int, x: torch.Tensor, positions: torch.Tensor,
              cache: KVCache) -> torch.Tensor | None: ...


class ExpertsFn(Protocol):
    """(layer, normalized hidden [T, H], expert ids [T, k], routing weights [T, k]) -> [T, H];
    ``check`` is called between expert groups so that a long prompt can be stopped."""

    def __call__(self, layer: int, t: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor,
                 check: Check | None = None) -> torch.Tensor: ...


def _fast_cpu_bf16(x: torch.Tensor) -> bool:
    return x.dtype == torch.bfloat16 and x.device.type == "cpu"


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b in a's dtype, accumulated in fp32 and rounded once."""
    if _fast_cpu_bf16(a):
        return torch.matmul(a.float(), b.float()).to(a.dtype)
    return torch.matmul(a, b)


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear; several bf16 CPU rows go through fp32 (one token stays a bf16 GEMV: no weight copy)."""
    if _fast_cpu_bf16(x) and x.shape[0] > 1:
        return F.linear(x.float(), w.float(), None if b is None else b.float()).to(x.dtype)
    return F.linear(x, w, b)


def cpu_has_bf16_gemm() -> bool:
    """Whether PyTorch's own bf16 CPU GEMM is the fast one here (oneDNN on AVX512-BF16 or AMX).

    There it accumulates in fp32 and rounds once, like :func:`linear`'s fp32 GEMM, only in another
    summation order (a bf16 ulp apart on ~0.02% of outputs), and it runs 2.5x faster than the fp32
    GEMM plus the weight's fp32 copy (MEASURED, 512 x 2880 x 4096 on the 2-core Zen 4 VM: 75 against
    188 ms of CPU time, plus 35 ms for the copy); without those ISAs it is ~10x slower."""
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


# fp32 scores of one query block, at most: deep in a conversation a 256-row block's scores were
# hundreds of MB, written and re-read several times (scale, mask, exp, round) at DRAM speed. At
# 8k tokens of context a 512-token follow-up took 3.4 s in 256-row blocks and 1.3 s in 16-64-row
# ones (MEASURED, 2-core VM, 64 heads); the results agree to fp32 rounding, not bit for bit.
SCORE_BYTES = 32 << 20
MIN_QUERY_ROWS = 16


def query_rows(block: int, heads: int, keys: int) -> int:
    """Query rows per attention block: ``block``, fewer where the scores of ``heads`` heads over
    ``keys`` keys would pass SCORE_BYTES (never below MIN_QUERY_ROWS)."""
    fit = SCORE_BYTES // max(1, 4 * heads * keys)
    return max(1, min(block, max(MIN_QUERY_ROWS, fit)))


def rms_norm(x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    t = x.float()
    t = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps)
    return (gain.float() * t).to(x.dtype)


def yarn_inv_freq(cfg: ModelConfig) -> tuple[list[float], float]:
    """Per-pair inverse frequencies and the attention concentration (YaRN mscale).

    The arithmetic of the openai reference and transformers (``_compute_yarn_parameters``):
    ``base ** (arange(0, d, 2) / d)``, both inverse frequencies, the ramp and the blend in
    float32; the correction range and the concentration in Python floats. (Computing in float64
    and rounding once gives 7 of the 32 values 1 ulp apart, enough to move cos/sin by 6.6e-4 at
    128k positions.) Returned as Python floats, each exactly a float32, so the reference, the
    Triton core and tests share one definition; callers build fp32 tensors from them. It lives
    here, not in engine/config.py, because it needs torch's float32 arithmetic (NumPy's pow
    differs in the last ulp) and the config must stay importable without torch (the ui).
    """
    d = cfg.head_dim
    base = cfg.rope_theta
    rs = cfg.rope_scaling
    pos_freqs = base ** (torch.arange(0, d, 2).to(dtype=torch.float32) / d)
    if rs.rope_type != "yarn" or rs.factor == 1.0:
        return (1.0 / pos_freqs).tolist(), 1.0
    orig = rs.original_max_position_embeddings

    def dim_for(rot: float) -> float:
        return d * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_for(rs.beta_fast), dim_for(rs.beta_slow)
    if rs.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (rs.factor * pos_freqs)
    ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    inv = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    return inv.tolist(), 0.1 * math.log(rs.factor) + 1.0


@functools.lru_cache(maxsize=8)
def _inv_freq(cfg: ModelConfig) -> tuple[torch.Tensor, float]:
    """yarn_inv_freq as an fp32 tensor, once per config (it was ~0.2 ms of every CPU decode token)."""
    inv, conc = yarn_inv_freq(cfg)
    return torch.tensor(inv, dtype=torch.float32), conc


def rope_cos_sin(cfg: ModelConfig, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    inv_t, conc = _inv_freq(cfg)  # cached on the CPU: follow the positions (a device reference runs on a GPU)
    ang = positions.float()[:, None] * inv_t.to(positions.device)[None, :]
    return (ang.cos() * conc).to(dtype), (ang.sin() * conc).to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, D]; cos/sin [T, D/2]; half-split (NeoX) pairing."""
    x1, x2 = x.chunk(2, dim=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def swiglu(h: torch.Tensor, limit: float, alpha: float) -> torch.Tensor:
    g, u = h[..., 0::2], h[..., 1::2]
    g = g.clamp(max=limit)
    u = u.clamp(min=-limit, max=limit)
    return g * torch.sigmoid(g * alpha) * (u + 1)


def expert_forward(t: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor,
                   limit: float, alpha: float) -> torch.Tensor:
    """One expert on tokens t [n, H]; w1 [2I, H] (out x in), w2 [H, I]."""
    h = t @ w1.t() + b1
    return swiglu(h, limit, alpha) @ w2.t() + b2


@dataclass
class KVCache:
    """Per layer K and V, [kv_heads, T, head_dim], post-RoPE, in the activation dtype.

    Each layer's tensors are views of a buffer with room to grow (doubling): appending a token
    writes it in place instead of copying the whole cache (at 14k tokens a copy was ~29 MB per
    layer per decode token). Truncating only shortens the views."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    _room: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[1]) if self.keys else 0

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``k``, ``v`` [kv_heads, n, head_dim] to ``layer``; returns its whole K and V."""
        n = k.shape[1]
        room_k, room_v, t = self.reserve(layer, n, k.dtype)
        room_k[:, t : t + n], room_v[:, t : t + n] = k, v
        return self.commit(layer, t + n)

    def reserve(self, layer: int, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The buffers behind ``layer``'s K and V with room for ``n`` more rows after its length ``t``, and ``t``:
        the caller writes rows t.. t + n - 1 (here, or the native decode in place), then :meth:`commit` shows them."""
        old_k, old_v = self.keys[layer], self.values[layer]
        t = old_k.shape[1]
        room = self._room.get(layer)
        # the buffer is reused only while the layer's tensors are still its views (a loaded or
        # assigned tensor starts a new one)
        if room is None or room[0].shape[1] < t + n or room[0].data_ptr() != old_k.data_ptr() \
                or room[1].data_ptr() != old_v.data_ptr() or room[0].dtype != dtype:
            cap = max(t + n, 2 * t, 64)
            room = (old_k.new_empty((old_k.shape[0], cap, old_k.shape[2]), dtype=dtype),
                    old_v.new_empty((old_v.shape[0], cap, old_v.shape[2]), dtype=dtype))
            room[0][:, :t], room[1][:, :t] = old_k, old_v
            self._room[layer] = room
        return room[0], room[1], t

    def commit(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``layer``'s K and V: its buffers' first ``length`` rows (after :meth:`reserve` and the writes)."""
        room = self._room[layer]
        self.keys[layer], self.values[layer] = room[0][:, :length], room[1][:, :length]
        return self.keys[layer], self.values[layer]

    def truncate(self, n: int) -> None:
        self.keys = [k[:, :n] for k in self.keys]
        self.values = [v[:, :n] for v in self.values]

    def clone(self) -> KVCache:
        return KVCache([k.clone() for k in self.keys], [v.clone() for v in self.values])


class ReferenceModel:
    """``bf16_gemm``: bf16 projections of several rows run as PyTorch's bf16 GEMM instead of the
    fp32 one (see :func:`cpu_has_bf16_gemm`): the CPU engine's speed, not the oracle's bits."""

    def __init__(self, ck: Checkpoint, dtype: torch.dtype = torch.float32, experts_fn: ExpertsFn | None = None,
                 expert_cache_bytes: int = 256 << 20, bf16_gemm: bool = False,
                 native_linear: Projection | None = None, native_attention: DecodeAttention | None = None,
                 native_rows: RowOps | None = None, native_decode: DecodeLayer | None = None) -> None:
        self.ck = ck
        self.cfg = ck.config
        self.dtype = dtype
        self.experts_fn = experts_fn
        self.bf16_gemm = bf16_gemm and dtype == torch.bfloat16
        self._packed = PackedLinear() if self.bf16_gemm else None  # one-token GEMVs too (packed_linear.py)
        # one-token bf16 projections on the native kernel (native_linear.py), before the above
        self._native = native_linear if dtype == torch.bfloat16 else None
        # one decode token's attention on the native kernel (native_attention.py): bf16 K/V read once
        self._native_attn = native_attention if dtype == torch.bfloat16 else None
        # one decode row's norms and RoPE on the native kernel (native_rows.py): no PyTorch dispatch per step
        self._rows = native_rows if dtype == torch.bfloat16 else None
        # one decode row's whole layer in two native calls where every piece above is native (native_decode.py)
        self._decode = native_decode if dtype == torch.bfloat16 else None
        self._dense: dict[str, torch.Tensor] = {}
        self._experts = DequantizedExperts(ck, dtype, expert_cache_bytes)
        self._check: Check | None = None
        self._rope_memo: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._embed_bits: np.ndarray | None = None
        self._sinks: dict[int, torch.Tensor] = {}  # per layer, fp32 [kv_heads, group, 1]: converted once

    # ---- weights ------------------------------------------------------------------------
    def w(self, name: str) -> torch.Tensor:
        t = self._dense.get(name)
        if t is None:
            # bf16: the file's own bytes (no copy: the weights once in RAM, not twice); else a converted copy
            t = self.ck.bf16_view(name) if self.dtype == torch.bfloat16 else self.ck.bf16(name).to(self.dtype)
            self._dense[name] = t
        return t

    def release(self) -> None:
        """Drop the dense weights (views of the checkpoint's mapping) and their packed copies: the RAM goes back at
        once, and the mapping can close (on Windows an open mapping keeps the model's files from being deleted)."""
        for holder in (self._native, self._decode, self._packed):  # their caches point into the weights
            forget = getattr(holder, "forget", None)
            if forget is not None:
                forget()
        self._dense.clear()
        self._sinks.clear()
        self._embed_bits = None

    def projection_weights(self) -> list[str]:
        """The weights a prompt's rows go through as bf16 GEMMs: each layer's q, k, v, o and router."""
        out = []
        for layer in range(self.cfg.num_hidden_layers):
            p = f"model.layers.{layer}."
            out += [p + f"self_attn.{n}_proj.weight" for n in "qkvo"] + [p + "mlp.router.weight"]
        return out

    def prepare(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Pack the prompt path's projections now, at load, rather than in the first prompt (which paid for packing
        1.9 GB at the 120b shape: issue 16's first request). Returns the weights packed (0 where packing does not
        apply: no bf16 GEMM on this CPU, or fp32). The head stays lazy: a prompt computes its last row only."""
        if self._packed is None:
            return 0
        names = self.projection_weights()
        for i, name in enumerate(names):
            if not self._packed.pack(self.w(name)):
                return i
            if progress is not None:
                progress(i + 1, len(names))
        return len(names)

    def linear(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        if self.bf16_gemm and x.dtype == torch.bfloat16:
            return self._projection(x, w, b)  # tries the native path first
        y = self._native(x, w, b) if self._native is not None else None
        return y if y is not None else linear(x, w, b)

    def _projection(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        """F.linear: one bf16 row on the native kernel, else through prepacked weights where packing
        applies (bf16 CPU tensors: packed_linear.py)."""
        y = self._native(x, w, b) if self._native is not None else None
        if y is None and self._packed is not None:
            y = self._packed(x, w, b)
        return y if y is not None else F.linear(x, w, b)

    def expert_weights(self, layer: int, e: int) -> tuple[torch.Tensor, ...]:
        return self._experts.get(layer, e)

    # ---- blocks -------------------------------------------------------------------------
    def attention(self, layer: int, x: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                  block: int = 0, check: Check | None = None) -> torch.Tensor:
        """Attention of ``x`` (at ``positions``, right after what ``cache`` holds) over the cache and
        itself; K/V are appended once, queries go in blocks of ``block`` (bounded score memory)."""
        cfg = self.cfg
        p = f"model.layers.{layer}.self_attn."
        T = x.shape[0]
        qkv = [(self.w(p + f"{n}_proj.weight"), self.w(p + f"{n}_proj.bias")) for n in "qkv"]
        # one decode row: q, k and v in one native call (native_linear.py), else one projection each
        many = getattr(self._native, "many", None) if T == 1 else None  # NativeLinear.many; a plain Projection has none
        got = many(x, qkv) if many is not None else None
        q, k, v = got if got is not None else [self.linear(x, w, b) for w, b in qkv]
        q = q.view(T, cfg.num_attention_heads, -1)
        k, v = k.view(T, cfg.num_key_value_heads, -1), v.view(T, cfg.num_key_value_heads, -1)
        cos, sin = self._rope(positions)
        rows = self._rows if T == 1 else None
        if rows is None or not (rows.rope(q, cos, sin) and rows.rope(k, cos, sin)):  # in place on q and k
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k_all, v_all = cache.append(layer, k.transpose(0, 1), v.transpose(0, 1))
        kvh, g, D = cfg.num_key_value_heads, cfg.gqa_group, cfg.head_dim
        # fp32 inside (exact products of the bf16 values, fp32 sums), as the GPU kernels compute;
        # head h reads K/V head h // g: each query group shares its K/V head, nothing is copied
        qf = q.transpose(0, 1).float()  # [heads, T, D]
        window = cfg.sliding_window if cfg.is_sliding(layer) else 0
        # only the keys some row can see get an fp32 copy (a sliding layer's window, not the cache)
        base = max(0, int(positions[0]) - window + 1) if window else 0
        sink = self._sinks.get(layer)
        if sink is None:
            sink = self._sinks[layer] = self.w(p + "sinks").float().view(kvh, g, 1)
        o1 = None
        if T == 1 and self._native_attn is not None:  # one decode row sees every key from base on: no mask
            o1 = self._native_attn(qf, k_all[:, base:], v_all[:, base:], sink, D ** -0.5)
        out = self._attend(qf, k_all, v_all, positions, base, window, sink, block, check) if o1 is None \
            else o1.to(self.dtype)
        return self.linear(out, self.w(p + "o_proj.weight"), self.w(p + "o_proj.bias"))

    def _attend(self, qf: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor, positions: torch.Tensor,
                base: int, window: int, sink: torch.Tensor, block: int, check: Check | None) -> torch.Tensor:
        """PyTorch attention of the query rows ``qf`` fp32 [heads, T, D] over the keys from ``base`` on, in
        query blocks of at most ``block`` rows (bounded score memory): [T, heads * D] in the activation dtype."""
        cfg = self.cfg
        T = qf.shape[1]
        kvh, g, D = cfg.num_key_value_heads, cfg.gqa_group, cfg.head_dim
        kf, vf = k_all[:, base:].float(), v_all[:, base:].float()
        step = T if block <= 0 else query_rows(block, cfg.num_attention_heads, int(positions[-1]) + 1 - base)
        outs = []
        for s in range(0, T, step):
            if check is not None and s:
                check()
            n = min(step, T - s)
            p0 = int(positions[s])
            lo = max(0, p0 - window + 1) if window else 0  # older keys are outside every row's window
            S = p0 + n - lo
            sc = torch.matmul(qf[:, s : s + n].reshape(kvh, g * n, D), kf[:, lo - base : lo - base + S].transpose(1, 2))
            sc = sc.mul_(D ** -0.5).view(kvh, g, n, S)
            if window:  # row i sees keys (p0 + i - window, p0 + i]
                kpos = torch.arange(lo, lo + S)
                qpos = torch.arange(p0, p0 + n)
                hidden = (kpos[None, :] > qpos[:, None]) | (kpos[None, :] <= qpos[:, None] - window)
                sc.masked_fill_(hidden, float("-inf"))
            else:  # every row sees all keys before the block and the block up to itself
                sc[..., S - n :].masked_fill_(torch.ones(n, n, dtype=torch.bool).triu_(1), float("-inf"))
            # softmax with the sink as one more logit: the max includes it, the sum counts it,
            # the weights stay unnormalised (rounded to the activation dtype as in the GPU
            # kernels) through P.V, and the division comes last, on [n, D] instead of [n, S]
            m = torch.maximum(sc.amax(-1), sink)
            e = sc.sub_(m[..., None]).exp_()
            denom = e.sum(-1) + torch.exp(sink - m)
            pe = e.to(self.dtype).float() if self.dtype != torch.float32 else e
            o = torch.matmul(pe.view(kvh, g * n, S), vf[:, lo - base : lo - base + S]).view(kvh, g, n, D)
            o = o.div_(denom[..., None]).view(kvh * g, n, D)
            outs.append(o.transpose(0, 1).reshape(n, -1))  # [n, heads*D]
        return (outs[0] if len(outs) == 1 else torch.cat(outs)).to(self.dtype)

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin of ``positions``, computed once per forward pass: every layer passes the same
        tensor (the YaRN frequencies and the cos/sin were ~1 ms of a CPU decode token at 4 layers)."""
        memo = self._rope_memo
        if memo is None or memo[0] is not positions:
            memo = (positions, *rope_cos_sin(self.cfg, positions, self.dtype))
            self._rope_memo = memo
        return memo[1], memo[2]

    def norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """rms_norm with the gain ``name``; one bf16 row on the native kernel where it is given."""
        gain, eps = self.w(name), self.cfg.rms_norm_eps
        y = self._rows.rms_norm(x, gain, eps) if self._rows is not None and x.shape[0] == 1 else None
        return y if y is not None else rms_norm(x, gain, eps)

    def route(self, layer: int, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = f"model.layers.{layer}.mlp.router."
        logits = self.linear(t, self.w(p + "weight"), self.w(p + "bias"))
        top, idx = torch.topk(logits, self.cfg.num_experts_per_tok, dim=-1)
        return idx, F.softmax(top, dim=-1, dtype=top.dtype)

    def experts(self, layer: int, t: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor,
                check: Check | None = None) -> torch.Tensor:
        cfg = self.cfg
        out = torch.zeros_like(t)
        for e in torch.unique(idx).tolist():
            if check is not None:
                check()
            tok, slot = torch.where(idx == e)
            w1, b1, w2, b2 = self.expert_weights(layer, e)
            y = expert_forward(t[tok], w1, b1, w2, b2, cfg.swiglu_limit, cfg.swiglu_alpha)
            out.index_add_(0, tok, (y * weights[tok, slot, None]).to(t.dtype))
        return out

    # ---- model --------------------------------------------------------------------------
    def new_cache(self) -> KVCache:
        cfg = self.cfg
        empty = torch.zeros(cfg.num_key_value_heads, 0, cfg.head_dim, dtype=self.dtype)
        n = cfg.num_hidden_layers
        return KVCache([empty] * n, [empty] * n)

    def embed(self, ids: list[int]) -> torch.Tensor:
        if self._embed_bits is None:  # a plain ndarray view: indexing a np.memmap costs ~0.1 ms a decode token
            self._embed_bits = np.asarray(self.ck.array("model.embed_tokens.weight"))
        return torch.from_numpy(self._embed_bits[ids]).view(torch.bfloat16).to(self.dtype)  # the indexing copies

    def layer(self, i: int, x: torch.Tensor, positions: torch.Tensor, cache: KVCache,
              attn_block: int = 0) -> torch.Tensor:
        """One layer over all of ``x``. With ``attn_block``, attention runs block by block (bounded
        score memory) while the MoE still sees every token at once, so each expert's weights are
        read once per layer however long the prompt is."""
        if x.shape[0] == 1 and self._decode is not None:
            y = self._decode.layer(self, i, x, positions, cache)
            if y is not None:
                return y
        p = f"model.layers.{i}."
        check = self._check
        h = self.norm(x, p + "input_layernorm.weight")
        x = x + self.attention(i, h, positions, cache, attn_block, check)
        t = self.norm(x, p + "post_attention_layernorm.weight")
        idx, weights = self.route(i, t)
        if check is not None:
            check()
        fn = self.experts_fn or self.experts
        return x + fn(i, t, idx, weights, check=check).to(x.dtype)

    def hidden(self, ids: list[int], cache: KVCache, attn_block: int = 0,
               progress: Callable[[int, int], None] | None = None) -> torch.Tensor:
        """Layer-major: every token through layer i before layer i + 1."""
        start = cache.length
        positions = torch.arange(start, start + len(ids))
        x = self.embed(ids)
        layers = self.cfg.num_hidden_layers
        for i in range(layers):
            if self._check is not None:
                self._check()
            x = self.layer(i, x, positions, cache, attn_block)
            if progress is not None:
                progress(len(ids) * (i + 1) // layers, len(ids))
        return self.norm(x, "model.norm.weight")

    @torch.inference_mode()
    def forward(self, ids: list[int], cache: KVCache | None = None, last_only: bool = False,
                attn_block: int = 0, progress: Callable[[int, int], None] | None = None,
                check: Check | None = None) -> torch.Tensor:
        """Process ``ids`` after what ``cache`` holds; returns fp32 logits [T or 1, vocab].

        ``check`` runs between layers, attention blocks and expert groups; when it raises, the
        cache is left partly extended (layer-major: some layers hold the new tokens) and the
        caller must truncate it to its earlier length (ReferenceBackend.forward does)."""
        if not ids:
            raise ValueError("forward needs at least one token")
        cache = cache if cache is not None else self.new_cache()
        self._check = check  # read by layer(): subclasses override layer() with the older signature
        try:
            h = self.hidden(ids, cache, attn_block, progress)
        finally:
            self._check = None
        if last_only:
            h = h[-1:]
        head = self.w("lm_head.weight") if not self.cfg.tie_word_embeddings else self.w("model.embed_tokens.weight")
        return self._projection(h, head).float()  # no fp32 copy of a vocab-sized head

"""One CPU decode token's layer in two native calls (``neural_decode_attn``, ``neural_decode_moe``).

The native projections, attention, norms, RoPE and experts left ~0.45 ms a layer of Python and one-row PyTorch
operations between them (views, dtype copies, the K/V append, the residual adds, each entry point's argument
checks): 1.9 ms of a 24 ms token on the 2-core VM and 1.9 of 9 ms on the H200 host at 8 threads, at 4 layers
(session 24, ``bench.kernel.cpu_decode_split``); 36 layers pay it nine times over. Here the attention half (norm,
q/k/v, RoPE, the K/V row, attention, o_proj, the residual, the second norm, the router) is one call on the bf16 row,
the router's top-k and softmax stay with PyTorch, and the experts with their residual are a second call. Each step
is the same native entry or the same bf16 rounding the glue applied, so the logits are the unfused path's, bit for
bit (tests/engine/test_native_decode.py).

It applies where the model runs every piece natively (bf16, native projections, norms, attention and experts);
anything else (a wrapper around a piece, as ``bench.kernel.cpu_decode_split`` installs to time them; a prompt's rows)
goes the unfused way.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from .native_attention import NativeAttention
from .native_linear import NativeLinear
from .native_rows import NativeRows

if TYPE_CHECKING:
    from .reference import KVCache, ReferenceModel

log = logging.getLogger(__name__)


class NativeDecode:
    """A decode row's layer on the native kernel, or None where it does not apply."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.enabled = True
        self._layers: dict[int, Any] = {}  # layer -> neural_decode_layer descriptor
        self._tables: dict[tuple[int, int], Any] = {}  # (id of the NativeExperts, layer) -> its experts' table
        self._scratch: tuple[torch.Tensor, torch.Tensor] | None = None  # the post-attention row, the router's logits

    def _give_up(self, exc: Exception) -> None:
        log.warning("native decode layer unavailable (%s); using the per-piece path", exc)
        self.enabled = False
        self.forget()

    def forget(self) -> None:
        """Drop the layer descriptors: they hold raw pointers to weights their model released."""
        self._layers.clear()
        self._tables.clear()

    def _experts(self, m: ReferenceModel) -> Any:
        """The NativeExperts behind the model's experts function, when it is that one unwrapped."""
        from .store.native_experts import NativeExperts

        owner = getattr(m.experts_fn, "__self__", None)
        fn = getattr(m.experts_fn, "__func__", None)
        return owner if isinstance(owner, NativeExperts) and fn is NativeExperts.forward else None

    def applies(self, m: ReferenceModel, x: torch.Tensor) -> Any:
        """The NativeExperts the fused layer computes with, or None where it does not apply."""
        cfg = m.cfg
        ok = (self.enabled and x.shape[0] == 1 and x.dtype == torch.bfloat16 and x.device.type == "cpu"
              and m.dtype == torch.bfloat16 and type(m._native) is NativeLinear and m._native.enabled
              and type(m._native_attn) is NativeAttention and m._native_attn.enabled
              and type(m._rows) is NativeRows and m._rows.enabled
              and cfg.hidden_size % 16 == 0 and cfg.head_dim % 16 == 0
              and (cfg.num_attention_heads * cfg.head_dim) % 16 == 0)
        return self._experts(m) if ok else None

    def _layer(self, m: ReferenceModel, i: int) -> Any:
        desc = self._layers.get(i)
        if desc is None:
            cfg, p = m.cfg, f"model.layers.{i}."
            a = p + "self_attn."

            def ptr(name: str) -> int:
                return m.w(name).data_ptr()

            desc = self.kernel.decode_layer(
                (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                 cfg.num_local_experts),
                cfg.rms_norm_eps, cfg.head_dim ** -0.5,
                (ptr(p + "input_layernorm.weight"), ptr(p + "post_attention_layernorm.weight")),
                [ptr(a + f"{n}_proj.weight") for n in "qkv"], [ptr(a + f"{n}_proj.bias") for n in "qkv"],
                (ptr(a + "o_proj.weight"), ptr(a + "o_proj.bias")),
                (ptr(p + "mlp.router.weight"), ptr(p + "mlp.router.bias")),
                m.w(a + "sinks").float().reshape(-1).numpy())
            self._layers[i] = desc
        return desc

    def layer(self, m: ReferenceModel, i: int, x: torch.Tensor, positions: torch.Tensor,
              cache: KVCache) -> torch.Tensor | None:
        """ReferenceModel.layer for one bf16 row at ``positions`` [1]: the new row, or None where this does not
        apply (the caller runs the per-piece path, which then still owns the K/V append)."""
        ex = self.applies(m, x)
        if ex is None:
            return None
        cfg = m.cfg
        t: int | None = None
        try:
            desc = self._layer(m, i)
            cos, sin = m._rope(positions)
            kc, vc, t = cache.reserve(i, 1, torch.bfloat16)
            window = cfg.sliding_window if cfg.is_sliding(i) else 0
            pos = int(positions[0])
            if pos != t:
                raise ValueError(f"position {pos} is not the cache's next row {t}")
            base = max(0, pos - window + 1) if window else 0
            table = self._tables.get((id(ex), i))
            if table is None:  # every expert's descriptor of the layer, once (the ref holds the NativeExperts)
                table = self.kernel.decode_table(ex._token_refs(i, list(range(cfg.num_local_experts)), None, None))
                table.keep.append(ex)
                self._tables[(id(ex), i)] = table
            if self._scratch is None:  # only read within this call: one pair for every layer and token
                self._scratch = (torch.empty_like(x), torch.empty(1, cfg.num_local_experts, dtype=torch.bfloat16))
            tn, logits = self._scratch
            y = x.clone()  # in place below; x stays as the caller passed it
            self.kernel.decode_attn(desc, y.data_ptr(), cos.data_ptr(), sin.data_ptr(), kc.data_ptr(),
                                    vc.data_ptr(), kc.stride(0), pos, base, tn.data_ptr(), logits.data_ptr())
            cache.commit(i, t + 1)
            top, idx = torch.topk(logits, cfg.num_experts_per_tok, dim=-1)  # as ReferenceModel.route
            w = F.softmax(top, dim=-1, dtype=top.dtype)
            self.kernel.decode_moe(ex.shape, table, idx.data_ptr(), w.data_ptr(), cfg.num_experts_per_tok,
                                   tn.data_ptr(), y.data_ptr())
        except Exception as exc:  # an optimisation: the per-piece path from now on, say why once
            self._give_up(exc)
            if t is not None:  # the layer's K/V as they were: the per-piece path appends the row itself
                cache.commit(i, t)
            return None
        return y

"""``calibrated`` routing: a synthetic text and router whose expert trace, replayed through LRU
and Belady at 430 slots (36 x 128 experts, top-4), gives the design doc's recorded-coding-trace
hit rates (0.406 and 0.632, SIMULATED there), with hot sets that drift with the text.

The mechanism is drift's (engine.synth.routing): every token's embedding carries its topic's
direction ``d_t``, and the router rows of a topic's hot experts point along it. Two changes make
the routing a function of the token id alone, so the trace can be designed offline and the
engine reproduces it:

- Embeddings are loud (rms ``EMBED_RMS``): whatever attention and the experts add to the
  residual stream (rms ~14 after 36 layers at 120b shape) is a few percent of the router input.
- Each token's non-topic part lives in a ``D``-dimensional subspace ``Q`` (``z_i = sqrt(h/D) Q c_i``)
  and the router reads only ``span(Q, d)``, so most of that noise is invisible to it.

With ``n_i = (z_i + a sqrt(h) d_t) / rho_i`` the RMS-normed token (``rho_i = sqrt(|c_i|^2/D + a^2)``),
the effective router weight ``W = (sigma/sqrt(h)) G Q^T + (boost/(a sqrt(h))) H d^T`` gives

    logit_l(i) = (sigma/sqrt(D) G_l c_i + boost H_l[:, t(i)]) / rho_i + bias_l

(``G_l`` random, ``H_l`` the 0/1 hot-set matrix, ``bias_l = -static_skew log(1 + rank)``); the
router weight written is ``W / post_attention_layernorm.weight`` so that the norm's gain cancels.
:func:`designed_routing` takes the top-k of exactly these logits.

The text (:func:`calibrated_text`) is a sequence of topic segments (log-normal lengths, topics
revisited) of Zipf-distributed topic tokens, a share of common tokens (their own topic, used
everywhere: whitespace and punctuation) and copies of recent tokens (token-level locality).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .shapes import SynthShape

SPECIALS = 21  # the synthetic tokenizer's special tokens sit at the top of the vocabulary
O200K_VOCAB, O200K_ORDINARY = 201_088, 199_998  # the real vocabulary and its first special id
TEXT_VOCAB = 32_768  # the text draws from ids below this (a conversation uses a few thousand)
COEFF_BLOCK = 4096
# rms of an embedding row: the residual stream adds rms ~14 by layer 36 at 120b shape
# (routing.moe_growth), a few percent of this, and the router sees ~1/6 of that share (span(Q, d))
EMBED_RMS = 256.0


@dataclass(frozen=True)
class CalibratedParams:
    """The knobs of the calibrated workload (recorded in SYNTHETIC.json)."""

    topics: int = 24  # text topics (+1: the common tokens' own topic)
    hot: int = 16  # hot experts per topic and layer
    boost: float = 1.5  # logit boost of a topic's hot experts
    sigma: float = 2.0  # std of the token-specific logits
    static_skew: float = 0.25  # per-layer popularity: -static_skew * log(1 + rank)
    dims: int = 64  # D: the token subspace
    embed_topic: float = 1.0  # a: topic part / token part of an embedding
    segment_median: int = 400  # tokens per topic segment (log-normal)
    segment_sigma: float = 0.8
    revisit: float = 0.5  # chance a new segment returns to one of the last 4 topics
    common_share: float = 0.15  # tokens from the common pool
    copy_share: float = 0.36  # tokens copying one of the recent ones
    copy_window: int = 4  # how far back a copy reaches (geometric, this mean)
    zipf: float = 1.1  # token frequency exponent within a pool

    def validate(self) -> None:
        for name, v in asdict(self).items():
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"calibrated routing: {name} must be a finite number >= 0 (got {v})")
        for name in ("topics", "hot", "dims", "segment_median", "copy_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"calibrated routing: {name} must be >= 1")
        for name in ("revisit", "common_share", "copy_share"):
            if getattr(self, name) > 1:
                raise ValueError(f"calibrated routing: {name} must be <= 1")
        if self.common_share + self.copy_share > 1:
            raise ValueError("calibrated routing: common_share + copy_share must be <= 1")


def _seeded(seed: int, name: str) -> np.random.Generator:
    digest = hashlib.blake2b(f"{seed}:calibrated:{name}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


class CalibratedTables:
    """The seeded pieces of calibrated routing for one shape."""

    def __init__(self, seed: int, shape: SynthShape, params: CalibratedParams | None = None) -> None:
        self.p = params or CalibratedParams()
        self.p.validate()
        self.seed = seed
        self.hidden = shape.hidden_size
        self.layers = shape.num_hidden_layers
        self.experts = shape.num_local_experts
        self.top_k = shape.num_experts_per_tok
        self.vocab = shape.vocab_size
        self.n_topics = self.p.topics + 1  # the last one is the common tokens'
        self.dims = min(self.p.dims, (self.hidden - self.n_topics) // 2)
        if self.dims < 4:
            raise ValueError(f"calibrated routing needs hidden >= {self.n_topics + 8} (got {self.hidden})")
        self.hot = min(self.p.hot, self.experts)
        self._blocks: dict[int, np.ndarray] = {}
        if self.vocab - SPECIALS < 4 * self.n_topics:
            raise ValueError(f"calibrated routing needs a vocabulary of >= {4 * self.n_topics + SPECIALS} tokens")

    # ---- tokens ------------------------------------------------------------------------------
    @cached_property
    def ordinary(self) -> int:
        """Token ids below this are ordinary text (the real o200k vocabulary's specials and reserved
        ids start at 199,998; the synthetic tokenizer's 21 specials sit at its top)."""
        return O200K_ORDINARY if self.vocab == O200K_VOCAB else self.vocab - SPECIALS

    @cached_property
    def topic(self) -> np.ndarray:
        """int16 [vocab]: every token id's topic (specials: the common topic)."""
        g = _seeded(self.seed, "topics")
        out = np.full(self.vocab, self.p.topics, dtype=np.int16)
        out[: self.ordinary] = g.permutation(np.arange(self.ordinary) % self.n_topics)
        return out

    @cached_property
    def pools(self) -> list[np.ndarray]:
        """Per topic, its token ids in Zipf rank order (a seeded order)."""
        g = _seeded(self.seed, "pools")
        n = min(self.ordinary, TEXT_VOCAB)
        ids = np.arange(n)
        return [g.permutation(ids[self.topic[:n] == t]) for t in range(self.n_topics)]

    def coefficients(self, ids: np.ndarray) -> np.ndarray:
        """float32 [n, D]: c_i of tokens ``ids``, a function of (seed, id): rows come from seeded
        blocks of COEFF_BLOCK ids, so a text needs only its own blocks."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty((len(ids), self.dims), dtype=np.float32)
        blocks = ids // COEFF_BLOCK
        for blk in np.unique(blocks).tolist():
            rows = self._blocks.get(blk)
            if rows is None:
                rows = _seeded(self.seed, f"c:{blk}").standard_normal((COEFF_BLOCK, self.dims), dtype=np.float32)
                self._blocks[blk] = rows
            sel = blocks == blk
            out[sel] = rows[ids[sel] % COEFF_BLOCK]
        return out

    @cached_property
    def basis(self) -> tuple[np.ndarray, np.ndarray]:
        """(Q [h, D], d [topics + 1, h]): orthonormal, Q orthogonal to every d."""
        g = _seeded(self.seed, "basis").standard_normal((self.hidden, self.dims + self.n_topics))
        q, _ = np.linalg.qr(g)
        return q[:, : self.dims], np.ascontiguousarray(q[:, self.dims :].T)

    # ---- routers -----------------------------------------------------------------------------
    def hot_sets(self, layer: int) -> np.ndarray:
        """[topics + 1, hot] expert ids: random per topic and layer (topics may share experts)."""
        g = _seeded(self.seed, f"hot:{layer}")
        return np.stack([g.choice(self.experts, self.hot, replace=False) for _ in range(self.n_topics)])

    def token_weights(self, layer: int) -> np.ndarray:
        """G_l [experts, D]."""
        return _seeded(self.seed, f"G:{layer}").standard_normal((self.experts, self.dims))

    def bias(self, layer: int) -> np.ndarray:
        rank = _seeded(self.seed, f"rank:{layer}").permutation(self.experts)
        return -self.p.static_skew * np.log1p(rank)

    def router_weight(self, layer: int) -> np.ndarray:
        """float64 [experts, hidden]: the effective router weight W (before the norm's gain)."""
        q, d = self.basis
        h = np.zeros((self.experts, self.n_topics))
        for t, ids in enumerate(self.hot_sets(layer)):
            h[ids, t] = 1.0
        a = max(self.p.embed_topic, 1e-6)
        return ((self.p.sigma / math.sqrt(self.hidden)) * self.token_weights(layer) @ q.T
                + (self.p.boost / (a * math.sqrt(self.hidden))) * h @ d)

    def embedding(self, ids: np.ndarray, rms: float) -> np.ndarray:
        """float32 [n, hidden]: embedding rows scaled to an rms of about ``rms``."""
        q, d = self._basis32
        ids = np.asarray(ids, dtype=np.int64)
        x = (math.sqrt(self.hidden / self.dims) * self.coefficients(ids)) @ q.T
        x += np.float32(self.p.embed_topic * math.sqrt(self.hidden)) * d[self.topic[ids].astype(np.int64)]
        x *= np.float32(rms / math.sqrt(1.0 + self.p.embed_topic**2))
        return x

    @cached_property
    def _basis32(self) -> tuple[np.ndarray, np.ndarray]:
        q, d = self.basis
        return q.astype(np.float32), d.astype(np.float32)

    # ---- tensors of the checkpoint ------------------------------------------------------------
    def embedding_rows(self, rows: slice) -> np.ndarray:
        """float32 [rows, hidden]: model.embed_tokens.weight rows."""
        return self.embedding(np.arange(rows.start, rows.stop), EMBED_RMS)

    def router_weight_written(self, layer: int, norm_gain: np.ndarray) -> np.ndarray:
        """float32 [experts, hidden]: the router weight to write, given the layer's
        post_attention_layernorm.weight (the router sees its input times that gain)."""
        return (self.router_weight(layer) / norm_gain[None, :].astype(np.float64)).astype(np.float32)

    # ---- the designed routing ----------------------------------------------------------------
    @cached_property
    def _router_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(G [layers * experts, D] scaled by sigma/sqrt(D), hot [topics + 1, layers * experts] 0/1,
        bias [layers * experts]), float32."""
        e = self.experts
        g = np.concatenate([self.token_weights(layer) for layer in range(self.layers)])
        hot = np.zeros((self.n_topics, self.layers * e), dtype=np.float32)
        for layer in range(self.layers):
            for t, ids in enumerate(self.hot_sets(layer)):
                hot[t, layer * e + ids] = 1.0
        bias = np.concatenate([self.bias(layer) for layer in range(self.layers)])
        return ((g * (self.p.sigma / math.sqrt(self.dims))).astype(np.float32), hot, bias.astype(np.float32))

    def logits(self, ids: np.ndarray) -> np.ndarray:
        """float32 [n, layers, experts]: router logits of tokens ``ids`` with the residual equal to
        their embedding (the formula in the module doc)."""
        ids = np.asarray(ids, dtype=np.int64)
        c = self.coefficients(ids)
        a = self.p.embed_topic
        inv_rho = (1.0 / np.sqrt((c.astype(np.float64) ** 2).sum(1) / self.dims + a * a)).astype(np.float32)
        g, hot, bias = self._router_parts
        z = c @ g.T
        z += np.float32(self.p.boost) * hot[self.topic[ids].astype(np.int64)]
        z *= inv_rho[:, None]
        z += bias[None, :]
        return z.reshape(len(ids), self.layers, self.experts)

    def routing_table(self, ids: np.ndarray) -> np.ndarray:
        """int64 [n, layers, k]: the top-k experts of each token, ascending."""
        import torch

        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty((len(ids), self.layers, self.top_k), dtype=np.int64)
        for s in range(0, len(ids), 4096):
            _, idx = torch.topk(torch.from_numpy(self.logits(ids[s : s + 4096])), self.top_k, dim=-1)
            out[s : s + 4096] = np.sort(idx.numpy(), axis=-1)
        return out

    def params(self) -> dict[str, Any]:
        return {**asdict(self.p), "dims_used": self.dims, "hot_used": self.hot}


def calibrated_text(tables: CalibratedTables, n: int, seed: int = 0) -> np.ndarray:
    """int64 [n] token ids: topic segments of Zipf-drawn topic tokens, common tokens and copies."""
    p = tables.p
    g = _seeded(tables.seed, f"text:{seed}")
    out = np.empty(n, dtype=np.int64)
    common = tables.pools[p.topics]
    recent: list[int] = []
    pos = 0
    while pos < n:
        length = max(8, round(p.segment_median * math.exp(p.segment_sigma * g.standard_normal())))
        if recent and g.random() < p.revisit:
            t = recent[int(g.integers(len(recent)))]
        else:
            t = int(g.integers(p.topics))
        recent = ([t] + [x for x in recent if x != t])[:4]
        pool = tables.pools[t]
        end = min(n, pos + length)
        seg_start = pos
        for i in range(pos, end):
            u = g.random()
            if u < p.common_share:
                out[i] = common[_zipf_index(g, len(common), p.zipf)]
            elif u < p.common_share + p.copy_share and i > seg_start:
                back = min(i - seg_start, int(g.geometric(1.0 / p.copy_window)))
                out[i] = out[i - back]
            else:
                out[i] = pool[_zipf_index(g, len(pool), p.zipf)]
        pos = end
    return out


def _zipf_index(g: np.random.Generator, size: int, s: float) -> int:
    """A rank in [0, size) with P(r) ~ 1/(r+1)^s (truncated Zipf by rejection)."""
    while True:
        r = int(g.zipf(s)) - 1 if s > 1 else int(g.integers(size))
        if r < size:
            return r


def designed_trace(tables: CalibratedTables, ids: np.ndarray) -> np.ndarray:
    """int64 [n, layers, k]: the routing of the token sequence ``ids`` (each distinct id's
    top-k computed once)."""
    uniq, inv = np.unique(np.asarray(ids, dtype=np.int64), return_inverse=True)
    return tables.routing_table(uniq)[inv]

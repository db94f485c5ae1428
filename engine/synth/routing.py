"""How a synthetic checkpoint routes tokens to experts: ``uniform``, ``static``, ``drift`` or
``calibrated``.

Routing is set by few tensors: the router weights and biases of every layer and, for
``drift``, the token embeddings. Every other tensor (the 61 GB of experts included) is the
same for every routing, which is what lets :func:`engine.synth.write_routing_variant` share
expert bytes between variants.

- ``uniform``: random router weights, small random biases; no expert is favoured.
- ``static``: the same plus a per-layer popularity ranking in the router bias
  (``-skew * log(1 + rank)``): a fixed hot set, whatever the text.
- ``drift``: experts are used unevenly *and* the hot set follows the text. The vocabulary is
  split into ``topics`` topics (:func:`token_topics`); every embedding of topic t gets
  ``embed_topic * sqrt(hidden) * d_t`` added (d_t orthonormal random directions), and in every
  layer the router rows of topic t's hot set (``hot`` experts; each layer deals all its
  experts out to the topics, a partition at 128 experts) get ``beta_l * d_t`` added, so a token of topic t raises those
  experts' logits by about ``boost`` = ``BOOST_PER_SKEW * skew``. ``beta_l`` grows with depth
  because the residual stream grows while the embedding's topic component stays as it was
  (the router sees the RMS-normed residual). A milder static ranking
  (``STATIC_SHARE * skew``) sits on top. Text from one part of a conversation uses some
  tokens more than others, so the window's hot set drifts with it.
- ``calibrated``: drift's mechanism made a function of the token id and tuned so that its
  designed text replays at the design doc's LRU/Belady hit rates (:mod:`engine.synth.calibrated`);
  it takes no skew.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .shapes import SynthShape

MODES = ("uniform", "static", "drift", "calibrated")
DEFAULT_SKEW = 1.5  # the strength --routing static|drift uses when --skew is not given

# drift constants (recorded in SYNTHETIC.json through RoutingSpec.params)
TOPICS = 8
EMBED_TOPIC = 1.0  # topic component norm / norm of the embedding's random part
BOOST_PER_SKEW = 2.5  # router logit boost of the token's hot set per unit of skew (base logits have std ~2)
STATIC_SHARE = 0.5  # drift's static popularity bias: STATIC_SHARE * skew * log(1 + rank)
# Residual-stream growth the router scale compensates for (see moe_growth): each attention adds
# ~ATTN_VAR to |x|^2 / hidden and each MoE ~MOE_SHARE x one expert's output variance (fits to
# the reference engine's residual stream, docs/perf-harness.md "Synthetic routing").
ATTN_VAR = 0.3
MOE_SHARE = 0.45
E2M1_RMS = 2.93  # rms of the 16 E2M1 values (random codes)


def mxfp4_scale_exponent(fan_in: int) -> int:
    """The E8M0 scale synthetic experts use (jittered by +-1): weights with std ~ 1/sqrt(fan_in),
    to the nearest power of two."""
    return 127 + round(math.log2(1.0 / (E2M1_RMS * math.sqrt(fan_in))))


def _weight_gain(fan_in: int) -> float:
    """std(weights) * sqrt(fan_in) of a synthetic expert matrix (1 would be exact)."""
    s0 = mxfp4_scale_exponent(fan_in)
    return E2M1_RMS * math.sqrt(sum(4.0 ** (s - 127) for s in (s0 - 1, s0, s0 + 1)) / 3 * fan_in)


def moe_growth(hidden: int, intermediate: int, limit: float = 7.0, alpha: float = 1.702) -> float:
    """Expected |x|^2 / hidden a MoE block adds to the residual stream: MOE_SHARE x one expert's
    output variance, integrated over N(0, gain^2) gate and up pre-activations through the
    clamped SwiGLU. At 120b shape the rounded scales make synthetic experts ~1.6x too loud and
    this is ~5.3; at hidden 256 ~0.3."""
    g1, g2 = _weight_gain(hidden), _weight_gain(intermediate)
    x = np.linspace(-12.0, 12.0, 24001) * g1
    p = np.exp(-0.5 * (x / g1) ** 2)
    p /= p.sum()
    g = np.minimum(x, limit)
    act = g / (1.0 + np.exp(-alpha * g))
    up = np.clip(x, -limit, limit) + 1.0
    expert_var = g2 * g2 * float((p * act * act).sum()) * float((p * up * up).sum())
    return MOE_SHARE * expert_var


def _seeded(seed: int, name: str) -> np.random.Generator:
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


def _id_hash(i: int, topics: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"topic:{i}".encode(), digest_size=4).digest(), "little") % topics


# Topics of single characters by class (see token_topics); the rest hash.
_SEPARATORS = set("()[]{},.:;")


def _char_topic(c: str) -> int:
    if c.isspace():
        return 0
    if "a" <= c <= "z":
        return 1
    if "A" <= c <= "Z":
        return 2
    if c.isdigit():
        return 3
    if c in _SEPARATORS:
        return 4
    if c == "_":
        return 5
    if c.isascii():
        return 6
    return 7


def token_topics(texts: list[str], vocab_size: int, topics: int = TOPICS) -> np.ndarray:
    """The topic of every token id: ``texts[i]`` is token i's decoded text ("" when none).

    The synthetic tokenizer is byte-level with ~170 merges: real text comes out as single
    characters, whitespace runs and a few short words (the rendered 13k coding conversation:
    37,853 tokens, 224 distinct ids, ordinary ones all <= 423, 86% single characters or
    whitespace runs). Hashing those ids would give every stretch of text
    nearly the same topic mix (letter frequencies hardly change), so single characters and
    whitespace runs get a topic by character class instead (whitespace; lowercase; capitals;
    digits; brackets and separators; underscore; other ASCII; non-ASCII), and code, prose and
    constant-heavy passages lean on different experts. Every other token (multi-character
    pieces, the filler tokens, specials, ids without text) gets a topic by a hash of its id.
    """
    out = np.empty(vocab_size, dtype=np.int16)
    for i in range(vocab_size):
        s = texts[i] if i < len(texts) else ""
        core = s.strip()
        if s and not core:
            out[i] = 0
        elif len(core) == 1 and topics >= 8 and "\ufffd" not in core:
            out[i] = _char_topic(core)
        else:
            out[i] = _id_hash(i, topics)
    return out


@dataclass(frozen=True)
class RoutingSpec:
    """A routing mode and its strength (``skew``)."""

    mode: str = "uniform"
    skew: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"routing must be one of {', '.join(MODES)} (got {self.mode!r})")
        if self.skew < 0 or not math.isfinite(self.skew):
            raise ValueError(f"skew must be >= 0 (got {self.skew})")
        if self.mode in ("uniform", "calibrated") and self.skew:
            raise ValueError(f"{self.mode} routing takes no skew (use --routing static or drift)")
        if self.mode in ("static", "drift") and not self.skew:
            raise ValueError(f"{self.mode} routing needs a skew > 0")

    @classmethod
    def resolve(cls, routing: str | None, skew: float | None) -> RoutingSpec:
        """``--routing`` and ``--skew`` as given: without ``--routing`` a skew > 0 means static (the
        behaviour before routing modes existed) and 0 uniform; with it, a missing skew is
        :data:`DEFAULT_SKEW` (0 for uniform)."""
        if routing is None:
            return cls("static", float(skew)) if skew else cls()
        if routing in ("uniform", "calibrated"):
            return cls(routing, float(skew or 0.0))
        return cls(routing, DEFAULT_SKEW if skew is None else float(skew))

    # ---- derived numbers -------------------------------------------------------------------
    def hot_per_topic(self, experts: int, top_k: int) -> int:
        return min(experts, max(top_k, round(experts / TOPICS)))

    def boost(self) -> float:
        return BOOST_PER_SKEW * self.skew

    def static_skew(self) -> float:
        """Strength of the log-rank popularity bias."""
        return {"uniform": 0.0, "static": self.skew, "drift": STATIC_SHARE * self.skew,
                "calibrated": 0.0}[self.mode]  # calibrated's bias comes from its own tables

    def params(self, shape: SynthShape) -> dict[str, Any]:
        """What SYNTHETIC.json records under "routing"."""
        p: dict[str, Any] = {"mode": self.mode, "skew": self.skew}
        if self.mode == "calibrated":
            from .calibrated import EMBED_RMS, CalibratedTables

            p.update(CalibratedTables(0, shape).params())
            p["embed_rms"] = EMBED_RMS
            p["text"] = "engine.synth.calibrated.calibrated_text(tables, n)"
        if self.mode == "static":
            p["router_bias"] = f"-{self.skew:g} * log(1 + rank), a per-layer random ranking"
        if self.mode == "drift":
            p.update({
                "topics": TOPICS,
                "topic_rule": "single characters and whitespace runs by character class, other ids by hash",
                "hot_experts_per_topic": self.hot_per_topic(shape.num_local_experts, shape.num_experts_per_tok),
                "router_boost_logits": self.boost(),
                "embed_topic": EMBED_TOPIC,
                "residual_growth": {"attention": ATTN_VAR,
                                    "moe": round(moe_growth(shape.hidden_size, shape.intermediate_size), 4)},
                "router_bias": f"-{self.static_skew():g} * log(1 + rank), a per-layer random ranking",
            })
        return p

    def describe(self, shape: SynthShape) -> str:
        if self.mode == "uniform":
            return "uniform (no expert favoured)"
        if self.mode == "calibrated":
            return ("calibrated (a designed text whose routing, at 120b shape, replays at LRU ~0.41 / Belady ~0.63 "
                    "at 430 slots, SIMULATED; hot sets follow the text's topic segments; decode it teacher-forced)")
        if self.mode == "static":
            return f"static (router bias -{self.skew:g}·log(1+rank): a fixed per-layer hot set)"
        hot = self.hot_per_topic(shape.num_local_experts, shape.num_experts_per_tok)
        return (f"drift (skew {self.skew:g}: {TOPICS} token topics, each with a hot set of "
                f"{hot} experts per layer boosted by ~{self.boost():g} logits, "
                f"plus router bias -{self.static_skew():g}·log(1+rank): the hot set follows the text)")


class DriftTables:
    """The seeded pieces of ``drift`` routing for one shape: topic of each token, topic
    directions, each layer's hot sets, and the per-layer router scale."""

    def __init__(self, spec: RoutingSpec, seed: int, shape: SynthShape, topics_of_tokens: np.ndarray) -> None:
        self.spec = spec
        self.seed = seed
        self.hidden = shape.hidden_size
        self.experts = shape.num_local_experts
        self.topic = topics_of_tokens
        self.hot = spec.hot_per_topic(shape.num_local_experts, shape.num_experts_per_tok)
        self.moe_growth = moe_growth(shape.hidden_size, shape.intermediate_size)

    @cached_property
    def directions(self) -> np.ndarray:
        """[TOPICS, hidden] orthonormal rows."""
        g = _seeded(self.seed, "drift:directions").standard_normal((self.hidden, TOPICS))
        q, _ = np.linalg.qr(g)
        return np.ascontiguousarray(q.T, dtype=np.float32)

    def hot_sets(self, layer: int) -> np.ndarray:
        """[TOPICS, hot] expert ids: per-layer random orders of all experts dealt out to the topics
        in turn (a fresh order each round), so every expert is hot for about as many topics as any
        other; with 128 experts and 16 per topic, each layer partitions its experts."""
        g = _seeded(self.seed, f"drift:hot:{layer}")
        rounds = -(-TOPICS * self.hot // self.experts) + 1
        deck = [int(e) for _ in range(rounds) for e in g.permutation(self.experts)]
        out = np.empty((TOPICS, self.hot), dtype=np.int64)
        pos = 0
        for t in range(TOPICS):
            chosen: list[int] = []
            while len(chosen) < self.hot:  # a set straddling two orders skips repeats
                e = deck[pos % len(deck)]
                pos += 1
                if e not in chosen:
                    chosen.append(e)
            out[t] = chosen
        return out

    def router_scale(self, layer: int) -> float:
        """beta_l: the router input of layer l has seen the embedding, l + 1 attentions and l MoE
        blocks, so its topic component is ~ a / sqrt(1 + a^2 + (l+1) ATTN_VAR + l moe) of the
        RMS-normed input."""
        a = EMBED_TOPIC
        grown = 1 + a * a + (layer + 1) * ATTN_VAR + layer * self.moe_growth
        return self.spec.boost() * math.sqrt(grown) / (a * math.sqrt(self.hidden))

    def router_delta(self, layer: int) -> np.ndarray:
        """[experts, hidden] float32 added to the router weight."""
        delta = np.zeros((self.experts, self.hidden), dtype=np.float32)
        beta = self.router_scale(layer)
        for t, ids in enumerate(self.hot_sets(layer)):
            delta[ids] += beta * self.directions[t]
        return delta

    def embed_delta(self, rows: slice) -> np.ndarray:
        """[rows, hidden] float32 added to embedding rows."""
        return (EMBED_TOPIC * math.sqrt(self.hidden)) * self.directions[self.topic[rows]]

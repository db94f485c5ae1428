"""The bytes of every synthetic tensor, produced in chunks (a 1.2 GB embedding never sits in
memory as float32 and the tiled expert pattern is written straight from its pool).

Every tensor is a function of (seed, name, shape, routing, fast) only, so shards can be
written in any order or in parallel and still come out byte-identical.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from collections.abc import Callable, Iterator
from functools import partial

import numpy as np
import torch

from ..config import ModelConfig
from .calibrated import CalibratedTables
from .routing import DriftTables, RoutingSpec, mxfp4_scale_exponent

Chunks = Iterator[np.ndarray]
CHUNK_ELEMS = 1 << 22  # normals are drawn and converted 4M at a time (the same stream as one draw)


def _rng(seed: int, name: str) -> np.random.Generator:
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bits, round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def bf16_bits_fast(x: np.ndarray) -> np.ndarray:
    """:func:`_bf16_bits` through torch's conversion: the same bits for finite values (round to
    nearest even), several times faster; synthetic tensors are always finite."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def is_routing_tensor(name: str) -> bool:
    """Tensors a routing mode writes differently: embeddings and every router."""
    return name == "model.embed_tokens.weight" or name.endswith((".mlp.router.weight", ".mlp.router.bias"))


class _Fast:
    """Seeded tiled patterns for speed-test checkpoints: one random pool, reused for every
    expert tensor from a per-tensor offset, and a pool of scale jitter."""

    def __init__(self, seed: int, pool_bytes: int = 64 << 20) -> None:
        self.pool = np.random.default_rng(seed).integers(0, 256, pool_bytes, dtype=np.uint8)
        self._jitter = np.random.default_rng([seed, 1]).integers(0, 3, 16 << 20, dtype=np.uint8)
        self._scale_pools: dict[int, np.ndarray] = {}

    @staticmethod
    def _tiled(pool: np.ndarray, n: int, off: int) -> Chunks:
        """n bytes of ``pool`` repeated, starting at ``off``: views into the pool, no copies."""
        while n > 0:
            piece = pool[off : off + n]
            yield piece
            n -= len(piece)
            off = 0

    def bytes(self, n: int, salt: int) -> Chunks:
        return self._tiled(self.pool, n, (salt * 7919) % len(self.pool))

    def scales(self, n: int, s0: int, salt: int) -> Chunks:
        pool = self._scale_pools.get(s0)
        if pool is None:
            pool = self._scale_pools[s0] = (self._jitter + np.uint8(s0 - 1)).astype(np.uint8)
        return self._tiled(pool, n, (salt * 7919) % len(pool))


def _normal(seed: int, name: str, shape: tuple[int, ...], std: float, mean: float = 0.0,
            add: Callable[[slice], np.ndarray] | None = None) -> Chunks:
    """bf16 N(mean, std) drawn row-chunk by row-chunk (the same values as one big draw);
    ``add(rows)`` gives a float32 [rows, cols] term added before rounding."""
    g = _rng(seed, name)
    cols = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    step = max(1, CHUNK_ELEMS // cols)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        x = g.standard_normal((r1 - r0) * cols, dtype=np.float32)
        x *= np.float32(std)
        if mean:
            x += np.float32(mean)
        if add is not None:
            x = (x.reshape(r1 - r0, cols) + add(slice(r0, r1))).reshape(-1)
        yield bf16_bits_fast(x)


def bf16_to_float(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _rows(shape: tuple[int, ...], make: Callable[[slice], np.ndarray]) -> Chunks:
    """bf16 rows of a 2-D tensor computed by ``make(rows)``, a chunk of rows at a time."""
    rows, cols = shape
    step = max(1, CHUNK_ELEMS // cols)
    for r0 in range(0, rows, step):
        yield bf16_bits_fast(make(slice(r0, min(rows, r0 + step))).reshape(-1))


def _calibrated(name: str, shape: tuple[int, ...], seed: int, cal: CalibratedTables) -> Callable[[], Chunks]:
    """Embeddings and routers of calibrated routing (engine.synth.calibrated)."""
    if name.endswith("embed_tokens.weight"):
        return lambda: _rows(shape, cal.embedding_rows)
    layer = int(name.split(".")[2])
    if name.endswith("router.bias"):
        return lambda: iter((_bf16_bits(cal.bias(layer).astype(np.float32)),))

    def weight() -> Chunks:
        gain_name = f"model.layers.{layer}.post_attention_layernorm.weight"
        gain = bf16_to_float(np.concatenate(list(_normal(seed, gain_name, (shape[1],), 0.1, 1.0))))
        yield bf16_bits_fast(cal.router_weight_written(layer, gain).reshape(-1))

    return weight


def _uniform_bytes(seed: int, name: str, n: int) -> Chunks:
    g = _rng(seed, name)
    step = 1 << 24  # a multiple of 4: the same bytes as one draw of n
    for a in range(0, n, step):
        yield g.integers(0, 256, min(step, n - a), dtype=np.uint8)


def producer(name: str, dtype: str, shape: tuple[int, ...], cfg: ModelConfig, seed: int, routing: RoutingSpec,
             drift: DriftTables | CalibratedTables | None, fast: _Fast | None) -> Callable[[], Chunks]:
    """A function yielding the tensor's bytes as consecutive arrays."""
    h = cfg.hidden_size
    if isinstance(drift, CalibratedTables):
        if is_routing_tensor(name):
            return _calibrated(name, shape, seed, drift)
        drift = None
    n = int(np.prod(shape, dtype=np.int64))

    def whole(make: Callable[[], np.ndarray]) -> Callable[[], Chunks]:
        return lambda: iter((make(),))

    if dtype == "U8":
        salt = zlib.crc32(name.encode())
        if name.endswith("_blocks"):
            if fast is not None:
                return lambda: fast.bytes(n, salt)
            return lambda: _uniform_bytes(seed, name, n)
        # scales: E8M0 exponents chosen so weights have std ~ 1/sqrt(fan_in) (random E2M1 codes
        # have rms ~2.93), jittered by +-1 so rows differ.
        s0 = mxfp4_scale_exponent(shape[-1] * 32)
        if fast is not None:
            return lambda: fast.scales(n, s0, salt)
        return whole(lambda: (s0 + _rng(seed, name).integers(-1, 2, n)).astype(np.uint8))
    if name.endswith("layernorm.weight") or name == "model.norm.weight":
        return lambda: _normal(seed, name, shape, 0.1, 1.0)
    if name.endswith("embed_tokens.weight"):
        add = drift.embed_delta if drift is not None else None
        return lambda: _normal(seed, name, shape, 1.0, add=add)
    if name.endswith("sinks"):
        return lambda: _normal(seed, name, shape, 1.0)
    if name.endswith("router.bias"):
        def bias() -> np.ndarray:
            e = shape[0]
            base = _rng(seed, name).standard_normal(e, dtype=np.float32) * 0.1
            skew = routing.static_skew()
            if skew:
                # Skewed popularity: a per-layer random ranking with log-rank penalties.
                rank = _rng(seed, name + ":perm").permutation(e)
                base = base - skew * np.log1p(rank).astype(np.float32)
            return _bf16_bits(base)
        return whole(bias)
    if name.endswith(".bias"):
        return lambda: _normal(seed, name, shape, 0.02)
    if name.endswith("o_proj.weight"):
        return lambda: _normal(seed, name, shape, 1.0 / math.sqrt(cfg.q_width))
    if name.endswith("router.weight"):
        if drift is not None:
            delta = partial(drift.router_delta, int(name.split(".")[2]))
            return lambda: _normal(seed, name, shape, 2.0 / math.sqrt(h), add=lambda rows: delta()[rows])
        return lambda: _normal(seed, name, shape, 2.0 / math.sqrt(h))
    return lambda: _normal(seed, name, shape, 1.0 / math.sqrt(h))  # q/k/v, lm_head


def _producer(name: str, dtype: str, shape: tuple[int, ...], cfg: ModelConfig, seed: int, skew: float,
              fast: _Fast | None) -> Callable[[], np.ndarray]:
    """The per-tensor producer of the single-module engine.synth (whole arrays; skew > 0 is
    static routing, 0 uniform), kept for callers that wrap or call it directly. The writer does
    not go through it, so replacing it does not change what a checkpoint holds."""
    make = producer(name, dtype, shape, cfg, seed, RoutingSpec.resolve(None, skew), None, fast)
    return lambda: np.concatenate([np.ascontiguousarray(c).reshape(-1) for c in make()]).reshape(shape)

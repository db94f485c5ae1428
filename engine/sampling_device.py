"""Full-vocabulary sampling where the logits are (GPU, or the CPU in tests): no sort, one host read.

The arithmetic every path shares (engine/sampling.py and engine/sampling_host.py do the same in
numpy, so a seed gives the same token on every path):

* weights: ``W = floor(exp(float64((x - max) * scale)) * 2**bits)`` as int64, with
  ``(x - max) * scale`` in fp32 and ``bits = 62 - vocab.bit_length()`` so that any sum of
  weights fits int64. Every mass below is an exact integer sum: order-free, so a histogram on
  the device, numpy on the host and atomics all agree. The fixed point moves at
  most ``vocab * 2**-bits`` (1.1e-8 at 201,088) of the top token's weight: below the resolution of
  transformers' own fp32 softmax.
* canonical order: logit descending, ties by token id (a stable sort's order); the order key is
  the fp32 bits of ``x + 0.0`` made monotone as signed int32 (-0.0 and +0.0 are one key).
* top-k keeps every token >= the k-th logit; top-p keeps a token while the mass before it (over
  the top-k set) is < ``P = ceil(top_p * Z)``, Z the top-k set's mass; min-p keeps
  ``W >= ceil(min_p * 2**bits)`` (the ratio to the top token, whose W is 2**bits).
* draw: ``r = min(floor(u * K), K - 1)`` with K the kept mass; the token is the first id, in id
  order, whose cumulative kept mass exceeds r (any fixed order gives the same distribution; id
  order needs no sort).

The top-p cut is found by a two-round radix search over the 32-bit key: a 65,536-bucket mass
histogram of the key's high half (an integer ``index_add_``: exact, so deterministic), a
``searchsorted`` for the bucket holding the cut, then the same over the low half within that
bucket; a cumulative sum over the cut's group of equal logits settles the ties by id.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

import torch

log = logging.getLogger(__name__)

HIST = 1 << 16  # buckets per radix round: two rounds resolve the 32-bit key
GRAPHS = 2  # captured CUDA graphs kept (one per device, vocabulary and setting; ~10-25 MB each)
CAPTURE_AFTER = 8  # eager tokens of a setting before its graph is captured (~0.1 s): short requests never pay it
USE_CUDA_GRAPHS = True  # replay the sampler's ~50 small kernels as one graph on CUDA

Prepared = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def weight_bits(vocab: int) -> int:
    """Fixed-point bits of the weights: vocab * 2**bits < 2**62 (int64 sums cannot overflow)."""
    return 62 - vocab.bit_length()


def top_p_bound(total: int, top_p: float) -> int:
    """P: a token is kept while the mass before it is < P (host twin of the torch expression)."""
    return int(-(-float(total) * top_p // 1))  # ceil in float64, as torch.ceil(Z.double() * p)


def min_p_bound(min_p: float, bits: int) -> int:
    return int(-(-min_p * 2.0**bits // 1))


def draw_target(total: int, u: float) -> int:
    return min(int(float(total) * u), total - 1)


def weights(x: torch.Tensor, scale32: float, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(W int64, the max logit) for fp32 logits x."""
    m = x.max()
    y = (x - m) * scale32  # fp32: exactly what numpy computes with np.float32 operands
    return torch.exp(y.double()).mul_(2.0**bits).long(), m  # .long() truncates: floor (W >= 0)


def order_key(x: torch.Tensor) -> torch.Tensor:
    """int32 key, ascending with the logit: sign-magnitude fp32 bits to two's complement."""
    b = (x + 0.0).view(torch.int32)  # + 0.0: -0.0 -> +0.0
    return b ^ ((b >> 31) & 0x7FFFFFFF)


def top_p_keep(s: torch.Tensor, w: torch.Tensor, top_p: float) -> torch.Tensor:
    """Tokens top-p keeps, given keys s and weights w (0 outside the top-k set)."""
    hi = (s >> 16) + 32768  # bucket of the high half, 0..65535 ascending
    h1 = torch.zeros(HIST, dtype=torch.int64, device=w.device).index_add_(0, hi, w)
    c1 = h1.cumsum(0)
    z = c1[-1:]
    p = torch.ceil(z.double() * top_p).long()
    # mass above bucket b is z - c1[b]; the cut's bucket is the first with that < p
    b = torch.searchsorted(c1, z - p, right=True).clamp_(max=HIST - 1)  # clamp: NaN logits (refused later)
    above = z - c1.gather(0, b)
    h2 = torch.zeros(HIST, dtype=torch.int64, device=w.device).index_add_(0, s & 0xFFFF, torch.where(hi == b, w, 0))
    c2 = h2.cumsum(0)
    l2 = torch.searchsorted(c2, c2[-1:] + above - p, right=True).clamp_(max=HIST - 1)
    before = above + c2[-1:] - c2.gather(0, l2)  # mass of the keys above the cut's key
    t = (b - 32768) * HIST + l2  # the cut's key: its group of equal logits is kept by id order
    eq = s == t
    tw = torch.where(eq, w, 0)
    return (s > t) | (eq & (tw.cumsum(0) - tw < p - before))


class DeviceSampler:
    """The sampling arithmetic for one setting, as torch ops on the logits' device. ``prepare``
    is everything that does not depend on the uniform draw (a CUDA graph can replay it);
    ``finish`` turns it and u into the token; nothing reads the device before the caller does."""

    def __init__(self, vocab: int, scale32: float, top_k: int, top_p: float, min_p: float) -> None:
        self.bits = weight_bits(vocab)
        self.scale32, self.top_k, self.top_p, self.min_p = scale32, top_k, top_p, min_p

    def prepare(self, x: torch.Tensor) -> Prepared:
        w, m = weights(x, self.scale32, self.bits)
        keep: torch.Tensor | None = None
        if self.top_k:
            kth = torch.topk(x, self.top_k, sorted=False).values.min()
            keep = x >= kth  # ties with the k-th value kept
            w = torch.where(keep, w, 0)
        if self.min_p > 0.0:
            mp = w >= min_p_bound(self.min_p, self.bits)
            keep = mp if keep is None else keep & mp
        if self.top_p < 1.0:
            tp = top_p_keep(order_key(x), w, self.top_p)
            keep = tp if keep is None else keep & tp
        c = (w if keep is None else torch.where(keep, w, 0)).cumsum(0)
        total = c[-1:]
        return c, total.double(), total - 1, (m - m != 0).reshape(1)  # m - m: NaN unless m is finite

    @staticmethod
    def finish(prep: Prepared, u: float) -> torch.Tensor:
        """[1] int64: the token, or -1 when the logits have no finite maximum."""
        c, total_d, last, bad = prep
        r = torch.minimum((total_d * u).long(), last)
        tok = torch.searchsorted(c, r, right=True)
        return torch.where(bad, -1, tok)


class _Graph:
    """One CUDA graph of DeviceSampler.prepare over a static input row."""

    def __init__(self, fn: Callable[[torch.Tensor], Prepared], x: torch.Tensor) -> None:
        self.x = x.clone()
        side = torch.cuda.Stream(device=x.device)
        side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up outside the capture: lazy init, allocator
                fn(self.x)
        torch.cuda.current_stream(x.device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: the engine's other threads may use CUDA meanwhile
        with torch.cuda.device(x.device), torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.out = fn(self.x)
        self.lock = threading.Lock()  # outputs are static: one replay + read at a time
        # once per capture: the replay must equal the eager ops bit for bit, or the graph is not used
        want = fn(self.x)
        if not all(torch.equal(a, b) for a, b in zip(self(self.x), want, strict=True)):
            raise RuntimeError("the replayed sampler graph differs from the eager ops")

    def __call__(self, x: torch.Tensor) -> Prepared:
        """Replays on x's current stream; the caller holds self.lock until it has read the outputs."""
        with torch.cuda.device(x.device):
            self.x.copy_(x)
            self.graph.replay()
        return self.out


_graphs: OrderedDict[tuple[object, ...], _Graph | None] = OrderedDict()
_uses: dict[tuple[object, ...], int] = {}  # eager tokens per setting not captured yet
_graphs_lock = threading.Lock()


def sample_device(x: torch.Tensor, scale32: float, top_k: int, top_p: float, min_p: float, u: float) -> int:
    """The token for fp32 logits x [vocab] on any device; one host read (the returned int)."""
    ds = DeviceSampler(x.numel(), scale32, top_k, top_p, min_p)
    graph = _graph_for(ds, x) if x.is_cuda and USE_CUDA_GRAPHS else None
    if graph is None:
        tok = int(ds.finish(ds.prepare(x), u))
    else:
        with graph.lock:
            tok = int(ds.finish(graph(x), u))
    if tok < 0:
        raise ValueError("the logits have no finite maximum (all -inf, or a NaN or +inf)")
    return tok


def graphs_captured() -> list[bool]:
    """For each cached setting, whether its CUDA graph was captured (benchmarks report it)."""
    with _graphs_lock:
        return [g is not None for g in _graphs.values()]


def _graph_for(ds: DeviceSampler, x: torch.Tensor) -> _Graph | None:
    key = (x.device, x.numel(), ds.scale32, ds.top_k, ds.top_p, ds.min_p)
    with _graphs_lock:
        if key in _graphs:
            _graphs.move_to_end(key)
            return _graphs[key]
        if len(_uses) > 64:
            _uses.clear()
        _uses[key] = _uses.get(key, 0) + 1
        if _uses[key] <= CAPTURE_AFTER:
            return None
        del _uses[key]
        try:
            g: _Graph | None = _Graph(ds.prepare, x)
        except Exception:  # capture unsupported here (any reason): the same ops run eagerly
            log.warning("sampler: CUDA graph capture failed, sampling eagerly", exc_info=True)
            g = None
        _graphs[key] = g
        while len(_graphs) > GRAPHS:
            _graphs.popitem(last=False)
        return g

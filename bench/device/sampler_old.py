"""The sampler as it was before the sort-free device path (engine/sampling.py at d795cfc),
kept verbatim for bench/device/sampler_bench.py's old-vs-new columns. Lab code: not imported by
the engine. Its own docstring follows.

Token sampling with transformers' semantics, fast, reproducible, on the logits' device.

Processing order (as transformers' ``generate`` builds it, with OpenAI's penalties where vLLM
puts them): logit_bias (``SequenceBiasLogitsProcessor``) -> repetition penalty
(``RepetitionPenaltyLogitsProcessor``: over the prompt and the output, a logit < 0 is multiplied,
else divided) -> frequency/presence penalties (OpenAI: ``logit -= c*frequency + (c > 0)*presence``
with c the token's count in the output so far) -> temperature -> top-k (ties with the k-th
value kept) -> top-p (keep a token while the mass before it is < top_p, renormalised over the
top-k set) -> min-p (keep p >= min_p * p_max). Temperature 0 is greedy (``torch.argmax``: ties
to the lowest id) and consumes no randomness.

Sampling is an inverse CDF over the kept tokens in descending order with one float64 uniform
per token from a per-request ``torch.Generator``, so a seed fixes the tokens whatever the path.
The fast path needs no full sort: one ``torch.topk`` of ``PRESELECT`` candidates and one
log-sum-exp over the vocabulary run where the logits are (GPU or CPU); the host finishes on
the candidates when the kept set provably ends inside them. Otherwise the same arithmetic runs
over the whole vocabulary on the device: a full stable sort when a filter cuts beyond the
candidates, or, with no filter, a cumulative sum over the tokens outside the candidates in id
order (any fixed order gives the same distribution).

Temperatures are applied as ``(logit - max) / T``: every logit gap stays finite or becomes
-inf, so tiny temperatures tend to the exact limit (uniform over the tied maxima) without NaN;
below ``GREEDY_BELOW`` (1/T overflows fp32) sampling is greedy.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

import numpy as np
import torch

from engine.logit_penalties import LogitPenalties
from engine.types import GenerationParams

PRESELECT = 256  # candidates taken by torch.topk before any full-vocabulary work
ID_BLOCK = 1024  # block of the no-filter path's two-level scan on the CPU
SKIP_AFTER_FALLBACK = 7  # tokens sent straight to the full path after one that needed it
FP32_MAX = float(np.finfo(np.float32).max)
GREEDY_BELOW = 1.0 / FP32_MAX  # ~2.9e-39: 1/T would overflow fp32


class Sampler:
    """One request's sampler; call it with the fp32 logits [vocab] of each position (on any
    device) and it returns the token id, remembering it for the penalties."""

    def __init__(self, temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None, *,
                 top_k: int = 0, min_p: float = 0.0, logit_bias: Iterable[tuple[int, float]] = (),
                 presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                 repetition_penalty: float = 1.0, prompt: Iterable[int] = ()) -> None:
        self.greedy = temperature < GREEDY_BELOW
        self.scale = 0.0 if self.greedy else min(1.0 / temperature, FP32_MAX)  # finite in fp32
        self.top_p, self.top_k, self.min_p = float(top_p), int(top_k), float(min_p)
        self.gen = torch.Generator()  # per request: the global RNG is never touched
        if seed is None:
            self.gen.seed()  # fresh entropy into this generator only
        else:
            self.gen.manual_seed(seed)
        self.penalties = LogitPenalties(logit_bias, repetition_penalty, presence_penalty, frequency_penalty, prompt)
        self.fallbacks = 0  # tokens that needed the full-vocabulary sort (telemetry, tests)
        # after a fallback the next tokens go straight to the full path (saves the topk attempt
        # when logits stay flat); either path gives the same token for the same draw
        self.skip_candidates = 0
        self._scratch: np.ndarray | None = None
        self.host_math: bool | None = None  # None: by the logits' device; False runs the device code on the CPU (tests)
        self.calls, self.seconds = 0, 0.0  # what sampling cost this request (neural bench decode)

    @classmethod
    def from_params(cls, params: GenerationParams, prompt: Iterable[int] = ()) -> Sampler:
        return cls(params.temperature, params.top_p, params.seed, top_k=params.top_k, min_p=params.min_p,
                   logit_bias=params.logit_bias, presence_penalty=params.presence_penalty,
                   frequency_penalty=params.frequency_penalty, repetition_penalty=params.repetition_penalty,
                   prompt=prompt)

    def __call__(self, logits: torch.Tensor) -> int:
        t0 = time.perf_counter()
        x = logits.reshape(-1)
        x = x if x.dtype == torch.float32 else x.float()
        # numpy on the CPU (torch's small CPU ops cost more), torch where the logits are otherwise
        host = x.device.type == "cpu" if self.host_math is None else self.host_math
        if self.penalties.active:
            x = self.penalties.apply(x, host)
        if self.greedy:  # numpy's argmax is ~40x torch's on CPU; both return the first maximum
            tok = int(np.argmax(x.numpy())) if host else int(torch.argmax(x))
        else:
            with np.errstate(over="ignore"):  # logit gaps / tiny T overflow to -inf: weight 0, as intended
                tok = self._sample(x, host)
        self.penalties.record(tok)
        self.calls += 1
        self.seconds += time.perf_counter() - t0
        return tok

    # ---- sampling ------------------------------------------------------------------------
    def _work(self, x: torch.Tensor) -> np.ndarray:
        """A float32 scratch row kept per request, so the host passes allocate no 800 KB array
        (an mmap/munmap and its page faults) per token."""
        if self._scratch is None or self._scratch.size != x.numel():
            self._scratch = np.empty(x.numel(), np.float32)
        return self._scratch

    def _sample(self, x: torch.Tensor, host: bool) -> int:
        u = float(torch.rand((), generator=self.gen, dtype=torch.float64))
        vocab = x.numel()
        k = self.top_k if 0 < self.top_k < vocab else 0
        if not k and self.top_p >= 1.0 and self.min_p <= 0.0:
            return _id_order(x, self.scale, u, host, self._work(x))
        if self.skip_candidates > 0:  # recent tokens all ran past the candidates (flat logits)
            self.skip_candidates -= 1
            return self._full(x, u, k, host)
        kk = min(vocab, max(PRESELECT, k + 1))
        if host:
            v, cand, lse, complete = _candidates_host(x, kk, self.scale, not k, self._work(x))
        else:
            v, cand, lse, complete = _candidates_device(x, kk, self.scale, not k)
        if k:  # the top-k set: every token >= the k-th value (ties kept, as in transformers)
            n_set = int(np.count_nonzero(v >= v[k - 1])) if len(v) >= k else len(v)
            if n_set >= len(v) and not complete:
                self.skip_candidates = SKIP_AFTER_FALLBACK
                return self._full(x, u, k, host)
            v, complete = v[:n_set], True
            y = (v - v[0]) * self.scale
            lse = float(np.log(np.exp(y).sum()))
        else:
            y = (v - v[0]) * self.scale
        pos = _pick_host(y, lse, self.top_p, self.min_p, u, complete)
        if pos is None:
            self.skip_candidates = SKIP_AFTER_FALLBACK
            return self._full(x, u, k, host)
        return int(cand[pos])

    def _full(self, x: torch.Tensor, u: float, k: int, host: bool) -> int:
        """The same arithmetic over the whole vocabulary in canonical order, where x lives."""
        self.fallbacks += 1
        if host:  # numpy: torch's CPU sort and scans are slow on a busy machine
            return _full_host(x.numpy(), self.scale, k, self.top_p, self.min_p, u)
        vals, ids = torch.sort(x, descending=True, stable=True)  # stable: ties by token id
        y = (vals.double() - vals[0].double()) * self.scale
        if k:
            y = torch.where(vals >= vals[k - 1], y, float("-inf"))
        p = torch.exp(y - torch.logsumexp(y, 0))
        cum = torch.cumsum(p, 0)
        n = torch.full((), y.numel(), dtype=torch.long, device=y.device)
        if self.top_p < 1.0:
            n = torch.minimum(n, ((cum - p) < self.top_p).sum())  # the first token always: cum - p = 0
        if self.min_p > 0.0:
            n = torch.minimum(n, (torch.exp(y) >= self.min_p).sum())  # y[0] = 0: always kept
        last = (n - 1).reshape(1)  # gather, not cum[n - 1]: a tensor index would sync here
        at = torch.searchsorted(cum, u * cum.gather(0, last), right=True)
        return int(ids.gather(0, torch.minimum(at, last)))  # the one sync


def _descending_order(xn: np.ndarray) -> np.ndarray:
    """Token ids by value descending, ties by id (= a stable sort), ~4x faster than numpy's
    stable argsort: one uint64 sort of (order-preserving key of the value, id)."""
    b = (xn + np.float32(0.0)).view(np.uint32)  # + 0.0: -0.0 becomes +0.0 (equal values, one key)
    k = np.where(b >> np.uint32(31), ~b, b | np.uint32(0x80000000))  # ascending as unsigned
    key = (~k).astype(np.uint64) << np.uint64(32) | np.arange(xn.size, dtype=np.uint64)
    key.sort()
    return (key & np.uint64(0xFFFFFFFF)).astype(np.int64)


def _full_host(xn: np.ndarray, scale: float, k: int, top_p: float, min_p: float, u: float) -> int:
    order = _descending_order(xn)
    v = xn[order].astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        y = (v - v[0]) * scale
        if k:
            y[v < v[k - 1]] = -np.inf
        lse = float(np.log(np.exp(y).sum()))
    pos = _pick_host(y, lse, top_p, min_p, u, complete=True)
    assert pos is not None
    return int(order[pos])


def _candidates_device(x: torch.Tensor, kk: int, scale: float,
                       need_lse: bool) -> tuple[np.ndarray, np.ndarray, float, bool]:
    """torch.topk where x lives, one transfer: (values descending, ids, lse, complete)."""
    vals, ids = torch.topk(x, kk)
    lse = torch.logsumexp((x - vals[0]) * scale, 0) if need_lse else vals.new_zeros(())
    host = torch.cat([vals.double(), ids.double(), lse.double().reshape(1)]).cpu().numpy()
    v, cand = host[:kk], host[kk : 2 * kk].astype(np.int64)
    complete = kk == x.numel()
    if not complete:  # the last group of equal values may go on past the candidates: drop it
        keep = v > v[-1]
        v, cand = v[keep], cand[keep]
    return _canonical(v, cand, float(host[-1]), complete)


def _candidates_host(x: torch.Tensor, kk: int, scale: float, need_lse: bool,
                     work: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, bool]:
    """CPU: a threshold from a strided sample, then every token above it (cheaper than topk)."""
    xn = x.numpy()
    vocab = xn.size
    stride = max(1, vocab // (8 * kk))
    sub = xn[::stride]
    r = min(sub.size, 2 * kk // stride + 1)  # about 2*kk tokens expected above the threshold
    thr = np.partition(sub, sub.size - r)[sub.size - r]
    cand = np.flatnonzero(xn >= thr)
    if not kk <= cand.size <= 32 * kk:  # unlucky sample or a sea of ties: an exact partition
        cand = np.argpartition(xn, vocab - kk)[vocab - kk :]
        thr = xn[cand].min()
        cand = np.flatnonzero(xn > thr) if kk < vocab else cand
    m = float(xn.max())
    lse = 0.0
    if need_lse:
        if not math.isfinite(m):
            raise ValueError("no token has a finite logit")
        w = np.subtract(xn, np.float32(m), out=work)
        with np.errstate(over="ignore"):  # gaps / tiny T overflow to -inf: weight 0, as intended
            lse = float(np.log(np.exp(np.multiply(w, np.float32(scale), out=w), out=w).sum(dtype=np.float64)))
    return _canonical(xn[cand].astype(np.float64), cand.astype(np.int64), lse, cand.size == vocab)


def _canonical(v: np.ndarray, cand: np.ndarray, lse: float,
               complete: bool) -> tuple[np.ndarray, np.ndarray, float, bool]:
    if len(v) and not math.isfinite(float(v.max())):
        raise ValueError("no token has a finite logit")
    order = np.lexsort((cand, -v))  # canonical order: value descending, then token id
    return v[order], cand[order], lse, complete


def _id_order(x: torch.Tensor, scale: float, u: float, host: bool, work: np.ndarray) -> int:
    """No filter: inverse CDF over the whole vocabulary in token-id order (no sort, one sync)."""
    if host:
        xn = x.numpy()
        w = np.subtract(xn, xn.max(), out=work)
        with np.errstate(over="ignore"):  # gaps / tiny T overflow to -inf: weight 0, as intended
            np.exp(np.multiply(w, np.float32(scale), out=w), out=w)
        # numpy's float32 -> float64 cumsum is slow (~2-20 ms): block sums, then one block's scan
        starts = np.arange(0, w.size, ID_BLOCK)
        cb = np.cumsum(np.add.reduceat(w, starts, dtype=np.float64))
        target = u * cb[-1]
        b = min(int(np.searchsorted(cb, target, side="right")), starts.size - 1)
        seg = w[starts[b] : starts[b] + ID_BLOCK].astype(np.float64)
        cs = (cb[b - 1] if b else 0.0) + np.cumsum(seg)
        j = min(int(np.searchsorted(cs, target, side="right")), seg.size - 1)
        if seg[j] == 0:  # float slack past the block's end: its last token with weight
            j = int(np.flatnonzero(seg)[-1])
        return int(starts[b]) + j
    w = torch.exp((x - x.max()) * scale)
    c = torch.cumsum(w, 0, dtype=torch.float64)
    return int(torch.searchsorted(c, c[-1:] * u, right=True)[0])


def _pick_host(y: np.ndarray, lse: float, top_p: float, min_p: float, u: float, complete: bool) -> int | None:
    """Inverse CDF over a descending prefix (the host twin of Sampler._full's arithmetic).
    y: float64 (logit - max) / T in canonical order; lse: log normaliser of the set they come
    from (the top-k set, or the whole vocabulary); complete: y holds that whole set. None when
    the kept set may reach past y."""
    if not len(y):
        return None
    p = np.exp(y - lse)
    cum = np.cumsum(p)
    n = y.size
    if top_p < 1.0:
        n = min(n, int(np.count_nonzero((cum - p) < top_p)))
    if min_p > 0.0:
        n = min(n, int(np.count_nonzero(np.exp(y) >= min_p)))
    cut_inside = (top_p < 1.0 and cum[-1] >= top_p) or (min_p > 0.0 and n < y.size)
    if not (complete or cut_inside):  # decide only on a cut provably inside the candidates
        return None
    pos = int(np.searchsorted(cum, u * cum[n - 1], side="right"))
    return min(pos, n - 1)

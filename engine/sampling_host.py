"""Sampling on the host (numpy): the arithmetic of engine/sampling_device.py, exactly (integer
masses), found another way: candidates above a sampled threshold when the kept set ends inside
them, else one sort of the vocabulary. numpy, not torch: torch's small CPU ops cost more."""

from __future__ import annotations

import math

import numpy as np

from .sampling_device import draw_target, min_p_bound, top_p_bound


class HostWeights:
    """Scratch rows kept per request (no 800 KB-1.6 MB allocations per token) and the weights
    ``floor(exp(float64((x - max) * scale)) * 2**bits)`` of sampling_device.weights."""

    def __init__(self) -> None:
        self.f32 = np.empty(0, np.float32)
        self.f64 = np.empty(0, np.float64)
        self.w = np.empty(0, np.int64)

    def __call__(self, xn: np.ndarray, scale32: float, bits: int) -> np.ndarray:
        if self.w.size != xn.size:
            self.f32, self.f64, self.w = np.empty_like(xn), np.empty(xn.size), np.empty(xn.size, np.int64)
        m = xn.max()
        if not math.isfinite(float(m)):
            raise ValueError("the logits have no finite maximum (all -inf, or a NaN or +inf)")
        y = np.multiply(np.subtract(xn, m, out=self.f32), np.float32(scale32), out=self.f32)
        e = np.exp(y, out=self.f64, dtype=np.float64)
        np.multiply(e, 2.0**bits, out=e)
        np.copyto(self.w, e, casting="unsafe")  # truncation: floor (e >= 0)
        return self.w


def descending_order(xn: np.ndarray) -> np.ndarray:
    """Token ids by value descending, ties by id (= a stable sort), ~4x faster than numpy's
    stable argsort: one uint64 sort of (order-preserving key of the value, id)."""
    b = (xn + np.float32(0.0)).view(np.uint32)  # + 0.0: -0.0 becomes +0.0 (equal values, one key)
    k = np.where(b >> np.uint32(31), ~b, b | np.uint32(0x80000000))  # ascending as unsigned
    key = (~k).astype(np.uint64) << np.uint64(32) | np.arange(xn.size, dtype=np.uint64)
    key.sort()
    return (key & np.uint64(0xFFFFFFFF)).astype(np.int64)


def draw_all(w: np.ndarray, u: float) -> int:
    """No filter: the inverse CDF over the whole vocabulary in id order."""
    c = np.cumsum(w)
    return int(np.searchsorted(c, draw_target(int(c[-1]), u), side="right"))


def draw_ids(ids: np.ndarray, w: np.ndarray, u: float) -> int:
    """The inverse CDF over a kept set (ids, their weights) in id order."""
    o = np.argsort(ids, kind="stable")
    c = np.cumsum(w[o])
    return int(ids[o][np.searchsorted(c, draw_target(int(c[-1]), u), side="right")])


def full_host(xn: np.ndarray, w: np.ndarray, k: int, top_p: float, min_p: float, bits: int, u: float) -> int:
    """The kept set from one sort of the vocabulary, then the id-order draw over a mask."""
    order = descending_order(xn)
    n = xn.size
    if k:
        v = xn[order]
        n = int(np.count_nonzero(v >= v[k - 1]))  # ties with the k-th value kept
    wd = w[order[:n]]
    if top_p < 1.0:
        before = np.cumsum(wd) - wd
        n = int(np.count_nonzero(before < top_p_bound(int(wd.sum()), top_p)))
    kept = order[:n]
    if min_p > 0.0:
        kept = kept[wd[:n] >= min_p_bound(min_p, bits)]
    if kept.size < 4096:
        return draw_ids(kept, w[kept], u)
    mask = np.zeros(xn.size, bool)
    mask[kept] = True
    return draw_all(np.where(mask, w, 0), u)


def candidates_host(xn: np.ndarray, kk: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """About 2*kk tokens above a threshold from a strided sample (cheaper than a top-k), in
    canonical order: (values descending, ids, complete = the whole vocabulary)."""
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
    v = xn[cand]
    order = np.lexsort((cand, -v))  # canonical order: value descending, then token id
    return v[order], cand[order], cand.size == vocab


def pick_candidates(v: np.ndarray, cand: np.ndarray, w: np.ndarray, k: int, top_p: float, min_p: float,
                    bits: int, u: float, complete: bool) -> int | None:
    """The token when the kept set provably ends inside the candidates (a canonical prefix of
    the vocabulary), else None. w: the whole vocabulary's weights."""
    if not len(v):
        return None
    wc = w[cand]
    total = int(w.sum()) if top_p < 1.0 and not k else 0  # top-p's normaliser: the top-k set's mass
    if k:
        n_set = int(np.count_nonzero(v >= v[k - 1])) if len(v) >= k else len(v)
        if n_set >= len(v) and not complete:
            return None
        wc, cand, complete = wc[:n_set], cand[:n_set], True
        total = int(wc.sum())
    n, inside = wc.size, complete
    if top_p < 1.0:
        cum = np.cumsum(wc)
        p = top_p_bound(total, top_p)
        n = int(np.count_nonzero(cum - wc < p))
        inside = inside or int(cum[-1]) >= p
    keep = np.ones(n, bool)
    if min_p > 0.0:
        bound = min_p_bound(min_p, bits)
        keep = wc[:n] >= bound
        inside = inside or int(wc[-1]) < bound
    if not inside:
        return None
    return draw_ids(cand[:n][keep], wc[:n][keep], u)

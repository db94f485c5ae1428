"""Sampling on the host (numpy): the arithmetic of engine/sampling_device.py, exactly (integer
masses): candidates above a sampled threshold when the kept set ends inside them, else the
device's radix search over the whole vocabulary (numpy's bincount for the histogram, a sort of
the cut's bucket only). numpy, not torch: torch's small CPU ops cost more."""

from __future__ import annotations

import math

import numpy as np

from .sampling_device import HIST, draw_target, min_p_bound, top_p_bound


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


def order_key(xn: np.ndarray) -> np.ndarray:
    """int32 key ascending with the logit (sampling_device.order_key)."""
    b = (xn + np.float32(0.0)).view(np.int32)  # + 0.0: -0.0 -> +0.0
    return b ^ ((b >> 31) & np.int32(0x7FFFFFFF))


def bucket_mass(bucket: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Exact int64 mass per bucket: bincount sums float64, exact below 2**53, so the weights go
    in two halves of 26 bits and below."""
    lo = np.bincount(bucket, (w & (2**26 - 1)).astype(np.float64), HIST)
    hi = np.bincount(bucket, (w >> 26).astype(np.float64), HIST)
    return (hi.astype(np.int64) << 26) + lo.astype(np.int64)


def top_p_keep(xn: np.ndarray, w: np.ndarray, top_p: float) -> np.ndarray:
    """sampling_device.top_p_keep in numpy: one radix round over the key's high half, then the
    cut's bucket (few tokens unless the logits are a sea of ties) in canonical order."""
    s = order_key(xn)
    hi = (s >> 16).astype(np.int64) + 32768
    c1 = np.cumsum(bucket_mass(hi, w))
    z = int(c1[-1])
    p = top_p_bound(z, top_p)
    b = min(int(np.searchsorted(c1, z - p, side="right")), HIST - 1)
    keep = hi > b
    idx = np.flatnonzero(hi == b)
    idx = idx[np.lexsort((idx, -s[idx].astype(np.int64)))]  # key descending, then id
    wb = w[idx]
    keep[idx[z - int(c1[b]) + np.cumsum(wb) - wb < p]] = True
    return keep


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
    """The kept set over the whole vocabulary with no sort (as on the device), then the
    id-order draw over it."""
    keep = None
    if k:
        keep = xn >= np.partition(xn, xn.size - k)[xn.size - k]  # ties with the k-th value kept
        w_in = np.where(keep, w, 0)
    else:
        w_in = w
    if min_p > 0.0:
        mp = w_in >= min_p_bound(min_p, bits)
        keep = mp if keep is None else keep & mp
    if top_p < 1.0:
        tp = top_p_keep(xn, w_in, top_p)
        keep = tp if keep is None else keep & tp
    return draw_all(w if keep is None else np.where(keep, w, 0), u)


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

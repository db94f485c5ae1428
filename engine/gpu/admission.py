"""Which experts deserve a VRAM slot, and copy-on-compute admission.

Policy (design doc, "VRAM residency and admission"): every routed (layer, expert) adds to
a decayed score (prompt tokens together count as at most ``prefill_weight`` tokens, so a
long prompt cannot flush the pool). Every ``refresh_every`` tokens the top ``refresh_m``
non-resident experts by score become *candidates*. A candidate is admitted the next time
the CPU computes it as a miss: the CPU kernel writes its bytes into a free pinned capture
buffer while reading them (no second RAM read), a copy stream uploads the buffer into a
victim slot (a free adaptive slot, else the lowest-scoring adaptive resident scoring below
the candidate), and the slot table flips only when the copy has landed. So at most
``refresh_m`` admissions happen per refresh, and ``refresh_every = 0`` freezes residency.

After a prompt the adaptive slots are re-aimed at it: the *target* is the experts its last
``fill_tokens`` tokens routed to most (:func:`rank_fill`, as many as there are adaptive slots).
Target experts not resident become *fill* keys, admitted the same way (captured when the CPU
computes them) but into a free adaptive slot or over a *stale* resident, one outside the target,
never over a resident the prompt still routes to. The first tokens of an answer (to a first
prompt, or to a follow-up that changed the subject) so find the prompt's recent experts in VRAM
instead of waiting for the refreshes, 2 candidates a token, to bring them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .pool import Key, SlotPool, SlotState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdmissionSettings:
    refresh_every: int = 8
    refresh_m: int = 16
    prefill_weight: float = 16.0
    half_life: float = 256.0  # tokens for a score to halve
    capture_buffers: int = 16


def rank_fill(tail: np.ndarray, counts: np.ndarray, skip: set[Key], n: int) -> list[Key]:
    """The ``n`` experts a prompt's last tokens routed to most (``tail``: int [tokens, layers, k]),
    ties by the lifetime ``counts``, then lower layer and expert; ``skip`` (resident or on its way)
    and experts the tail never routed to are left out."""
    layers, experts = counts.shape
    recent = np.zeros((layers, experts), dtype=np.int64)
    t = np.asarray(tail, dtype=np.int64)
    for layer in range(t.shape[1] if t.size else 0):
        np.add.at(recent[layer], t[:, layer].reshape(-1), 1)
    for key in skip:
        recent[key] = 0
    flat, life = recent.reshape(-1), counts.reshape(-1)
    order = np.lexsort((np.arange(flat.size), -life, -flat))
    return [(int(i) // experts, int(i) % experts) for i in order[:n] if flat[i] > 0]


def rank_hot_set(counts: np.ndarray, n: int) -> list[Key]:
    """The ``n`` most-routed experts over all layers (ties: lower layer, lower expert first);
    experts never routed are not ranked."""
    flat = counts.reshape(-1)
    order = np.lexsort((np.arange(flat.size), -flat))  # by count desc, then index asc
    chosen = [int(i) for i in order[:n] if flat[i] > 0]
    e = counts.shape[1]
    return [(i // e, i % e) for i in chosen]


class AdmissionPolicy:
    def __init__(self, layers: int, experts: int, settings: AdmissionSettings) -> None:
        self.s = settings
        self.scores = np.zeros((layers, experts), dtype=np.float64)
        self.counts = np.zeros((layers, experts), dtype=np.int64)  # lifetime routing (hot-set ranking)
        self._version = 0  # bumped by every change made through the policy (wanted_mask's signature)
        self._pending: set[Key] = set()
        self._fill: set[Key] = set()  # the last prompt's target experts not yet resident (Residency.plan_fill)
        self._since = 0
        self._mask = np.zeros((layers, experts), dtype=np.uint8)
        self._mask_of: tuple[int, int, int] | None = None

    @property
    def pending(self) -> set[Key]:
        return self._pending

    @pending.setter
    def pending(self, keys: set[Key]) -> None:
        self._pending = keys
        self._version += 1

    @property
    def fill(self) -> set[Key]:
        return self._fill

    @fill.setter
    def fill(self, keys: set[Key]) -> None:
        self._fill = keys
        self._version += 1

    @property
    def frozen(self) -> bool:
        return self.s.refresh_every == 0

    def observe(self, layer: int, experts: list[int] | np.ndarray, weight: float = 1.0) -> None:
        idx = np.asarray(experts, dtype=np.int64)
        np.add.at(self.scores[layer], idx, weight)
        np.add.at(self.counts[layer], idx, 1)

    def observe_token(self, layer: int, experts: list[int], weight: float = 1.0) -> None:
        """observe() for one token's few experts without numpy's per-call overhead."""
        sc, ct = self.scores[layer], self.counts[layer]
        for e in experts:
            sc[e] += weight
            ct[e] += 1

    def observe_prompt(self, routing: np.ndarray) -> None:
        """routing: int [tokens, layers, k] expert ids of a processed prompt."""
        t = routing.shape[0]
        if t == 0:
            return
        w = min(1.0, self.s.prefill_weight / t)
        for layer in range(routing.shape[1]):
            self.observe(layer, routing[:, layer].reshape(-1), w)

    def prompt_weight(self, n_tokens: int) -> float:
        return min(1.0, self.s.prefill_weight / max(1, n_tokens))

    def token_done(self, pool: SlotPool) -> bool:
        """Count a processed token; refresh the candidates when due. True if refreshed."""
        if self.frozen:
            return False
        self._since += 1
        if self._since < self.s.refresh_every:
            return False
        self.refresh(pool)
        return True

    def refresh(self, pool: SlotPool) -> list[Key]:
        self.scores *= 0.5 ** (self._since / self.s.half_life)
        self._since = 0
        cand: list[Key] = []
        if self.s.refresh_m > 0:
            flat = self.scores.reshape(-1)
            e = self.scores.shape[1]
            order = np.lexsort((np.arange(flat.size), -flat))
            for i in order:
                if flat[i] <= 0 or len(cand) >= self.s.refresh_m:
                    break
                key = (int(i) // e, int(i) % e)
                if not pool.is_tracked(key):
                    cand.append(key)
        self.pending = set(cand)
        return cand

    @property
    def has_candidates(self) -> bool:
        return bool(self.pending or self.fill)

    def wants(self, key: Key) -> bool:
        return key in self.pending or key in self.fill

    def wanted_mask(self) -> np.ndarray:
        """uint8 [layers, experts], 1 for every pending or fill key: the same array each call, brought up to date
        in place. The native decode layer (native_layer.py) hands a layer that misses one back to the Python path,
        so a key must be in it whenever :meth:`wants` holds. The sets change by assignment or :meth:`admitted`
        (each bumps a version; ids were not enough: a new set can reuse a freed one's address); a set grown in place
        is still seen by its size."""
        sig = (self._version, len(self._pending), len(self._fill))
        if sig != self._mask_of:
            self._mask[:] = 0
            for key in self.pending | self.fill:
                self._mask[key] = 1
            self._mask_of = sig
        return self._mask

    def admitted(self, key: Key) -> None:
        self._pending.discard(key)
        self._fill.discard(key)
        self._version += 1


class Copier(Protocol):
    """Moves one capture buffer into one VRAM slot, ordered after all GPU work issued so far."""

    def start(self, slot: int, buffer: int) -> object: ...

    def done(self, handle: object) -> bool: ...


@dataclass
class AdmissionStats:
    admissions: int = 0
    evictions: int = 0
    rejected: int = 0  # captured, but no slot scored low enough to give way
    landed: int = 0
    per_token: list[int] = field(default_factory=list)


class Residency:
    """Glue between the pool, the policy, the capture buffers and a copier."""

    def __init__(self, pool: SlotPool, policy: AdmissionPolicy, copier: Copier, n_buffers: int) -> None:
        self.pool = pool
        self.policy = policy
        self.copier = copier
        self.free_buffers = list(range(n_buffers))
        self.inflight: list[tuple[int, int, object]] = []  # (slot, buffer, handle)
        self.stats = AdmissionStats()
        self.stale: set[Key] = set()  # adaptive residents outside the last prompt's target (plan_fill)
        # the RAM residency manager (engine.residency), told which experts the CPU stops reading
        # (landed in VRAM) and reads again (evicted), so RAM under pressure gives up the former
        self.ram: Any = None

    def _tell_ram(self, method: str, keys: list[Key]) -> None:
        if self.ram is None or not keys:
            return
        try:
            getattr(self.ram, method)(keys)
        except Exception:  # RAM residency is an optimisation: never a reason to fail a token
            log.exception("RAM residency %s failed; no longer told about admissions", method)
            self.ram = None

    def plan_fill(self, routing: np.ndarray, tokens: int) -> int:
        """After a prompt (``routing``: int [tokens, layers, k]): aim the adaptive slots at its last
        ``tokens`` tokens (0: off). Returns the number of fill keys (target experts not resident)."""
        self.stale = set()
        self.policy.fill = set()
        n_adaptive = self.pool.n_slots - self.pool.n_static
        if self.policy.frozen or tokens <= 0 or n_adaptive <= 0:
            return 0
        static = {s.key for s in self.pool.slots if s.static and s.key is not None}
        target = set(rank_fill(np.asarray(routing)[-tokens:], self.policy.counts, static, n_adaptive))
        self.stale = {s.key for s in self.pool.slots
                      if not s.static and s.state == SlotState.RESIDENT and s.key is not None and s.key not in target}
        self.policy.fill = target - set(self.pool.where)
        return len(self.policy.fill)

    def _fill_slot(self) -> int | None:
        """A slot for a fill key: a free adaptive one, else the stale resident scoring lowest."""
        stale = [slot for key in self.stale if (slot := self.pool.where.get(key)) is not None]
        return self.pool.pick_victim(self.policy.scores, below=np.inf, among=stale)

    def may_capture(self) -> bool:
        """Whether :meth:`captures_for` can return anything now (else a layer needs no admission decision)."""
        return bool(self.free_buffers) and self.policy.has_candidates

    def captures_for(self, layer: int, misses: list[int]) -> dict[int, int]:
        """expert -> capture buffer, for this layer's misses that are admission candidates."""
        out: dict[int, int] = {}
        if not self.may_capture():  # most layers of a decode step
            return out
        for e in misses:
            key = (layer, e)
            if self.free_buffers and self.policy.wants(key) and not self.pool.is_tracked(key):
                out[e] = self.free_buffers.pop()
        return out

    def after_compute(self, layer: int, captured: dict[int, int]) -> int:
        """The CPU kernel filled these buffers: start their copies. Returns copies started."""
        started = 0
        for e, buf in captured.items():
            key = (layer, e)
            if key in self.policy.fill and key not in self.policy.pending:
                slot = self._fill_slot()
                if slot is None:
                    self.policy.fill = set()  # no free or stale slot left: the target is in
            else:
                slot = self.pool.pick_victim(self.policy.scores, below=float(self.policy.scores[key]))
            if slot is None:
                self.free_buffers.append(buf)
                self.stats.rejected += 1
                self.policy.admitted(key)  # not worth a slot now; the next refresh may retry
                continue
            evicted = self.pool.begin_copy(slot, key)
            if evicted is not None:
                self.stale.discard(evicted)
                self.stats.evictions += 1
                self._tell_ram("experts_needed", [evicted])
            self.policy.admitted(key)
            self.inflight.append((slot, buf, self.copier.start(slot, buf)))
            self.stats.admissions += 1
            started += 1
        return started

    def poll(self) -> int:
        """Flip the slot table for copies that have landed. Returns how many landed."""
        landed: list[Key] = []
        keep = []
        for slot, buf, handle in self.inflight:
            if self.copier.done(handle):
                self.pool.finish_copy(slot)
                self.free_buffers.append(buf)
                key = self.pool.slots[slot].key
                if key is not None:
                    landed.append(key)
            else:
                keep.append((slot, buf, handle))
        self.inflight = keep
        self.stats.landed += len(landed)
        self._tell_ram("experts_released", landed)
        return len(landed)

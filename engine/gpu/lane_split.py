"""How many of a decode layer's misses the copy lane (copy_lane.py) takes: the rates it compares, learned as decode
runs, and the choice: whole misses (best_split), or with decode_lane_split whole misses plus part of one more
(best_units). Pure Python, so the decision is tested on recorded rates without a GPU.

The CPU's rate comes from every layer it computes (an EMA). The lane's comes only from the layers that use it, so
one bad sample must not switch it off for good. With a running mean it could: a copy queued behind other
host-to-device traffic (say ten times its usual 0.3 ms) would lift the rate above anything the split chooses, and no
later sample would come to lower it. (Session 16's uniform decode never used the lane; whether this was why is not
known; session 18's, with these rates, used it in every run.) The lane's rate is therefore the median of its recent
samples, and a layer that keeps every miss on the CPU for a while sends one down the lane as a probe, less often while
probes keep saying the lane is slow.
"""

from __future__ import annotations

from collections import deque
from statistics import median
from typing import Any

EMA = 0.05  # weight of a new sample in the CPU's running rate
PAYS = 1.15  # the lane is kept where the two lanes together compute this much more than the CPU kernel alone
WINDOW = 9  # the lane's recent samples whose median is its rate
PROBE_FIRST, PROBE_LAST = 64, 1024  # layers without the lane before a probe: doubling after each probe, reset on use
# what the CPU's part of a split expert costs beyond its share of units, in experts: its down pass reads a piece of
# every one of the 2,880 rows, and the prefetchers fetch past each piece (bench.kernel.head_cost, 2-core VM, 2
# threads: +0.05 to +0.08 ms on 0.544 ms an expert for heads of 256 to 1,440 units, MEASURED)
PART_EXTRA = 0.12


def lane_gain(cpu_alone_ms: float, cpu_beside_ms: float, copy_ms: float) -> float:
    """Experts a millisecond of the CPU kernel beside the copies plus the copies themselves, over the kernel alone
    (each argument: ms per expert)."""
    return (1.0 / cpu_beside_ms + 1.0 / copy_ms) * cpu_alone_ms


def best_split(k: int, most: int, fixed_ms: float, cpu_ms: float, lane_ms: float) -> tuple[int, float]:
    """(m, ms): how many of a layer's ``k`` misses (at most ``most``) the lane should take, and the layer's time then:
    the least of max(CPU on k - m, lane on m), the CPU costing ``fixed_ms + j * cpu_ms`` for j > 0 experts and the
    lane ``m * lane_ms``; a tie keeps the misses on the CPU."""
    best, best_t = 0, fixed_ms + k * cpu_ms if k else 0.0
    for m in range(1, min(most, k) + 1):
        t = max(fixed_ms + (k - m) * cpu_ms if k > m else 0.0, m * lane_ms)
        if t < best_t:
            best, best_t = m, t
    return best, best_t


def best_units(k: int, width: int, free: int, fixed_ms: float, cpu_ms: float, lane_ms: float,
               inter: int) -> tuple[int, int, float]:
    """(m, units, ms) where one expert may be split by its ``inter`` gate_up units, in blocks of 32: the lane takes m
    whole misses (at most ``width``) and the last ``units`` units of one more, the CPU the rest (its fixed cost paid
    whenever it computes anything, and PART_EXTRA of an expert more for its part of a split one). A whole number of
    experts rarely balances the two sides: with 4 misses, the CPU at 0.30 ms an expert and the lane at 0.35, sending 2
    leaves the layer at 0.70 ms and 1.98 at 0.69 (CALCULATED).
    ``free``: misses the lane may take (not captures). units 0 = no split (:func:`best_split`'s answer)."""
    m, t = best_split(k, min(width, free), fixed_ms, cpu_ms, lane_ms)
    best = (m, 0, t)
    if inter < 64 or cpu_ms + lane_ms <= 0:
        return best
    x = (fixed_ms + (k + PART_EXTRA) * cpu_ms) / (cpu_ms + lane_ms)  # the share where both sides finish together
    blocks = inter // 32
    cap = min(width + 1, free, k) * blocks - 1  # at most width whole experts and part of one more
    # a sliver is not worth its copies' fixed cost (~10 us a call, which the per-expert rate leaves out)
    least = max(1, blocks // 8)
    for b_total in {min(int(x * blocks), cap), min(int(x * blocks) + 1, cap)}:  # the grid's points either side of x
        whole, b = divmod(b_total, blocks)
        if b < least or whole > width or whole + 1 > min(free, k):
            continue
        share = whole + b / blocks
        t = max(fixed_ms + (k - share + PART_EXTRA) * cpu_ms, share * lane_ms)
        if t < best[2]:
            best = (whole, b * 32, t)
    return best


class SplitRates:
    """The per-expert rates (ms) that :func:`best_split` compares, and the per-layer choice with probes."""

    def __init__(self, cpu_ms: float = 0.3, lane_ms: float = 0.3, cpu_fixed_ms: float = 0.05) -> None:
        self.cpu_fixed_ms = cpu_fixed_ms
        self.cpu_ms = cpu_ms
        self._lane: deque[float] = deque([lane_ms], maxlen=WINDOW)
        self.frozen = False  # fixed rates (bench.gpu.lane_check's forced runs, tests): no learning, no probes
        self.idle = 0  # layers with misses since the lane was last used
        self.every = PROBE_FIRST
        self.probes = 0
        self.probed = False  # the last choice was a probe (its use is timed whatever the sampling)
        self.chosen = [0, 0, 0]  # layers that sent 0, 1, 2+ misses down the lane (probes counted as 1)
        self.cpu_samples = self.lane_samples = 0
        self.split_layers = 0  # layers that split one expert's units between the two (choose_units)

    @property
    def lane_ms(self) -> float:
        return median(self._lane)

    def reset(self, cpu_ms: float, lane_ms: float) -> None:
        """Start again from these rates (the load-time check's)."""
        self.cpu_ms = cpu_ms
        self._lane.clear()
        self._lane.append(lane_ms)
        self.idle, self.every = 0, PROBE_FIRST

    def fix(self, cpu_ms: float, lane_ms: float) -> None:
        """These rates from now on, unlearned and without probes (forced runs, tests)."""
        self.reset(cpu_ms, lane_ms)
        self.frozen = True

    def observe_cpu(self, experts: float, seconds: float) -> None:
        if experts and not self.frozen:
            per = max(0.0, (1e3 * seconds - self.cpu_fixed_ms) / experts)
            self.cpu_ms += EMA * (per - self.cpu_ms)
            self.cpu_samples += 1

    def observe_lane(self, experts: float, ms: float) -> None:
        """GPU-timed copies and kernels of ``experts`` misses sent down the lane together."""
        if experts and not self.frozen:
            self._lane.append(ms / experts)
            self.lane_samples += 1

    def choose(self, k: int, most: int) -> int:
        """How many of ``k`` misses the lane takes, ``most`` of them free to go (not captures)."""
        if k <= 0 or most <= 0:
            self.probed = False
            return 0
        m, _ = best_split(k, most, self.cpu_fixed_ms, self.cpu_ms, self.lane_ms)
        m = self._probe(m)
        self.chosen[min(m, 2)] += 1
        return m

    def choose_units(self, k: int, width: int, free: int, inter: int) -> tuple[int, int]:
        """(whole misses, units of one more) the lane takes (:func:`best_units`), with :meth:`choose`'s probes."""
        if k <= 0 or free <= 0:
            self.probed = False
            return 0, 0
        m, units, _ = best_units(k, width, free, self.cpu_fixed_ms, self.cpu_ms, self.lane_ms, inter)
        if not units:
            m = self._probe(m)
        else:  # part of one more miss goes down the lane: a use
            self.record(m + 1, False)
        self.chosen[min(m + (units > 0), 2)] += 1
        if units:
            self.split_layers += 1
        return m, units

    def would_probe(self) -> bool:
        """Whether a layer whose split sends nothing down the lane sends one miss instead, as a probe: the lane has
        gone unused long enough that its rate may be stale (native_layer.py asks before its call decides)."""
        return not self.frozen and self.idle + 1 >= self.every

    def record(self, m: int, probed: bool) -> None:
        """The probe state after a layer sent ``m`` misses down the lane (1 for a probe)."""
        self.probed = probed
        if probed:  # the next probe waits twice as long
            self.idle, self.every = 0, min(2 * self.every, PROBE_LAST)
            self.probes += 1
        elif m:
            self.idle, self.every = 0, PROBE_FIRST
        elif not self.frozen:
            self.idle += 1

    def _probe(self, m: int) -> int:
        """``m``, or 1 where the lane has gone unused long enough that its rate needs measuring again."""
        probed = not m and self.would_probe()
        self.record(m, probed)
        return 1 if probed else m

    def report(self) -> dict[str, Any]:
        return {"cpu_ms": round(self.cpu_ms, 4), "lane_ms": round(self.lane_ms, 4), "cpu_fixed_ms": self.cpu_fixed_ms,
                "cpu_samples": self.cpu_samples, "lane_samples": self.lane_samples, "probes": self.probes,
                "layers_sending_0_1_2": list(self.chosen), "layers_split": self.split_layers}

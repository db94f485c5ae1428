"""Which non-resident prompt experts the CPU computes and which are staged to the GPU.

A non-resident expert with ``n`` of the layer's (token, k) pairs can go two ways, and both
run at the same time on different resources:

* the native multi-token kernel on the CPU worker reads its ``B`` bytes from RAM once per call
  of up to 16 tokens and does ``n`` tokens of arithmetic: ``B * (calls(n) * a + n * b)`` seconds;
* the staging ring packs it into pinned memory and copies it over PCIe for the grouped GEMM:
  ``B * s`` seconds of the staging pipeline, whatever ``n`` is (the GEMM itself is cheap).

The layer is done when both lanes are done, so the split that minimises the layer's time
gives the CPU the cheapest experts (fewest pairs) until its lane would outlast the staging
lane: one scan over the experts sorted by pairs. A short prompt (few pairs per expert) thus
goes mostly to the CPU, a long one mostly to the GPU, and neither is ever slower than
staging everything (the scan includes that split).

The rates ``a``, ``b``, ``s`` default to figures measured on the H200 host; the GPU backend
measures this machine's once when it loads (``PrefillRunner.calibrate``), so the split of a
given prompt is the same every time in a process and frozen-residency runs stay
bit-identical. Each prompt records its lanes' observed and predicted times (the bench prints
them); ``adaptive=True`` would fold them into the rates after each prompt. Which device
computes an expert changes the bits (fp32 CPU kernel against the bf16 GEMM), both within the
bf16 envelope the prompt path is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

CPU_CALL_TOKENS = 16  # native expert_tokens takes up to 16 tokens per pass over the expert
# beyond one pass of the kernel the GPU wins: a 64-pair group took 13 ms of CPU against 1.1 ms of staging
# (H200 host, MEASURED), and larger groups slow the packing threads they share the machine with
CPU_MAX_PAIRS = CPU_CALL_TOKENS
EMA = 0.5  # weight of the newest prompt's observation


@dataclass(frozen=True)
class SplitRates:
    """Seconds per expert byte of each lane (see the module docstring)."""

    cpu_pass: float = 1 / 60e9  # a: reading + decoding the expert once (one-token kernel, 8 threads)
    cpu_token: float = 1 / 180e9  # b: each further token's arithmetic
    stage: float = 1 / 9.7e9  # s: packing (the wall) + PCIe; MEASURED 9.7 GB/s at 8 threads, H200 host
    # s when the layer is copied straight from the registered mapping (direct.py): PCIe alone,
    # MEASURED 51.7 GB/s on the H200 host; the default leaves room for the copies' launch cost
    direct: float = 1 / 40e9

    def cpu_seconds(self, pairs: np.ndarray | int, nbytes: int) -> np.ndarray:
        n = np.asarray(pairs, dtype=np.float64)
        calls = np.ceil(n / CPU_CALL_TOKENS)
        return nbytes * (calls * self.cpu_pass + n * self.cpu_token)

    def stage_seconds(self, nbytes: int, direct: bool = False) -> float:
        return nbytes * (self.direct if direct else self.stage)


def choose_cpu(pairs: dict[int, int], nbytes: int, rates: SplitRates, can_stage: bool = True,
               max_pairs: int = CPU_MAX_PAIRS, direct: bool = False,
               cpu_share: float = 1.0) -> tuple[set[int], float, float]:
    """The non-resident experts (expert -> pairs) that the CPU should compute; ``cpu_share`` < 1
    plans the CPU lane to end before the staging lane (setting ``prompt_cpu_share``).

    Returns (CPU experts, predicted CPU lane seconds, predicted staging lane seconds)."""
    if not pairs:
        return set(), 0.0, 0.0
    experts = np.fromiter(pairs.keys(), dtype=np.int64, count=len(pairs))
    counts = np.fromiter(pairs.values(), dtype=np.int64, count=len(pairs))
    if not can_stage:  # no scratch slots: everything non-resident is the CPU's
        return set(experts.tolist()), float(rates.cpu_seconds(counts, nbytes).sum()), 0.0
    order = np.argsort(counts, kind="stable")
    experts, counts = experts[order], counts[order]
    eligible = int(np.searchsorted(counts, max_pairs, side="right"))
    cpu_lane = np.concatenate([[0.0], np.cumsum(rates.cpu_seconds(counts[:eligible], nbytes))])
    stage_lane = (len(counts) - np.arange(eligible + 1)) * rates.stage_seconds(nbytes, direct)
    best = int(np.argmin(np.maximum(cpu_lane / cpu_share, stage_lane)))  # ties: the fewest CPU experts
    return set(experts[:best].tolist()), float(cpu_lane[best]), float(stage_lane[best])


@dataclass
class SplitModel:
    """The rates, rescaled after each prompt by what its lanes really took."""

    rates: SplitRates = field(default_factory=SplitRates)
    adaptive: bool = False
    cpu_share: float = 1.0  # see choose_cpu
    cpu_predicted: float = 0.0
    cpu_observed: float = 0.0
    stage_predicted: float = 0.0
    stage_observed: float = 0.0

    def choose(self, pairs: dict[int, int], nbytes: int, can_stage: bool = True, direct: bool = False) -> set[int]:
        return choose_cpu(pairs, nbytes, self.rates, can_stage, direct=direct, cpu_share=self.cpu_share)[0]

    def observe_cpu(self, seconds: float, pairs: np.ndarray, nbytes: int) -> None:
        """One CPU job: ``pairs`` of each expert it computed, ``seconds`` it took."""
        if len(pairs):
            self.cpu_predicted += float(self.rates.cpu_seconds(pairs, nbytes).sum())
            self.cpu_observed += seconds

    def observe_stage(self, seconds: float, experts: int, nbytes: int) -> None:
        """The staging producer packed ``experts`` experts in ``seconds``."""
        if experts:
            self.stage_predicted += experts * self.rates.stage_seconds(nbytes)
            self.stage_observed += seconds

    def end_prompt(self) -> dict[str, float]:
        """This prompt's lanes, observed and predicted; folded into the rates when ``adaptive``
        (only lanes with enough work to time)."""
        seen = {"cpu_observed_s": self.cpu_observed, "cpu_predicted_s": self.cpu_predicted,
                "stage_observed_s": self.stage_observed, "stage_predicted_s": self.stage_predicted}
        r = self.rates
        if self.cpu_predicted > 1e-3 and self.cpu_observed > 0:
            f = (1 - EMA) + EMA * self.cpu_observed / self.cpu_predicted
            r = replace(r, cpu_pass=r.cpu_pass * f, cpu_token=r.cpu_token * f)
        if self.stage_predicted > 1e-3 and self.stage_observed > 0:
            r = replace(r, stage=r.stage * ((1 - EMA) + EMA * self.stage_observed / self.stage_predicted))
        if self.adaptive:
            self.rates = r
        self.cpu_predicted = self.cpu_observed = self.stage_predicted = self.stage_observed = 0.0
        return seen

    @staticmethod
    def fitted(one: float, many: float, tokens: int, stage: float, nbytes: int, direct: float = 0.0) -> SplitRates:
        """Rates from a calibration: ``one`` / ``many`` seconds for 1 / ``tokens`` tokens of one
        CPU call over an expert of ``nbytes``, ``stage`` seconds to pack one expert, ``direct``
        seconds to copy one from the registered mapping (0: not measured, the default rate)."""
        per_token = max((many - one) / max(tokens - 1, 1), 0.0) / nbytes
        per_pass = max(one / nbytes - per_token, per_token * 0.1, 1e-13)
        return SplitRates(cpu_pass=per_pass, cpu_token=max(per_token, 1e-14), stage=max(stage / nbytes, 1e-13),
                          direct=max(direct / nbytes, 1e-13) if direct > 0 else SplitRates.direct)

"""Token sampling with transformers' semantics, fast, reproducible, on the logits' device.

Processing order (as transformers' ``generate`` builds it, with OpenAI's penalties where vLLM
puts them): logit_bias (``SequenceBiasLogitsProcessor``) -> repetition penalty
(``RepetitionPenaltyLogitsProcessor``: over the prompt and the output, a logit < 0 is multiplied,
else divided) -> frequency/presence penalties (OpenAI: ``logit -= c*frequency + (c > 0)*presence``
with c the token's count in the output so far) -> temperature -> top-k (ties with the k-th
value kept) -> top-p (keep a token while the mass before it is < top_p, renormalised over the
top-k set, in descending order with ties by token id) -> min-p (keep p >= min_p * p_max).
Temperature 0 is greedy (``torch.argmax``: ties to the lowest id) and consumes no randomness.

Sampling is an inverse CDF over the kept tokens in token-id order with one float64 uniform per
token from a per-request ``torch.Generator``. Every path shares one arithmetic (integer
fixed-point weights, exact integer masses: engine/sampling_device.py states it), so a seed fixes
the tokens whatever the path:

* logits on a GPU: engine/sampling_device.py, full vocabulary, no sort: a two-round radix search
  for the top-p cut, one host read per token (replayed as a CUDA graph);
* logits on the CPU: engine/sampling_host.py in numpy: the candidates above a sampled threshold
  when the kept set provably ends inside them, else the same radix search in numpy.

Temperatures are applied as ``(logit - max) * (1/T)`` in fp32: every logit gap stays finite or
becomes -inf, so tiny temperatures tend to the exact limit (uniform over the tied maxima) without
NaN; below ``GREEDY_BELOW`` (1/T overflows fp32) sampling is greedy.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np
import torch

from .logit_penalties import LogitPenalties
from .sampling_device import sample_device, weight_bits
from .sampling_host import HostWeights, candidates_host, draw_all, full_host, pick_candidates
from .types import GenerationParams

PRESELECT = 256  # host candidates (about 2x this many) before any full-vocabulary work
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
        # 1/T rounded to fp32 once: numpy and torch then multiply by the same fp32 number
        self.scale32 = 0.0 if self.greedy else float(np.float32(min(1.0 / temperature, FP32_MAX)))
        self.top_p, self.top_k, self.min_p = float(top_p), int(top_k), float(min_p)
        self.gen = torch.Generator()  # per request: the global RNG is never touched
        if seed is None:
            self.gen.seed()  # fresh entropy into this generator only
        else:
            self.gen.manual_seed(seed)
        self.penalties = LogitPenalties(logit_bias, repetition_penalty, presence_penalty, frequency_penalty, prompt)
        self.fallbacks = 0  # host tokens that ran past the candidates to the full vocabulary (telemetry, tests)
        # after a fallback the next tokens go straight to the full path (saves the topk attempt
        # when logits stay flat); either path gives the same token for the same draw
        self.skip_candidates = 0
        self._weights = HostWeights()
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
    def _sample(self, x: torch.Tensor, host: bool) -> int:
        u = float(torch.rand((), generator=self.gen, dtype=torch.float64))
        vocab = x.numel()
        k = self.top_k if 0 < self.top_k < vocab else 0
        if not host:  # where the logits are, one read
            return sample_device(x, self.scale32, k, self.top_p, self.min_p, u)
        xn = x.numpy()
        bits = weight_bits(vocab)
        w = self._weights(xn, self.scale32, bits)
        if not k and self.top_p >= 1.0 and self.min_p <= 0.0:
            return draw_all(w, u)
        if self.skip_candidates > 0:  # recent tokens all ran past the candidates (flat logits)
            self.skip_candidates -= 1
        else:
            v, cand, complete = candidates_host(xn, min(vocab, max(PRESELECT, k + 1)))
            tok = pick_candidates(v, cand, w, k, self.top_p, self.min_p, bits, u, complete)
            if tok is not None:
                return tok
            self.skip_candidates = SKIP_AFTER_FALLBACK
        self.fallbacks += 1
        return full_host(xn, w, k, self.top_p, self.min_p, bits, u)

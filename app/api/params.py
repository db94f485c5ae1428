"""Sampling parameters shared by the three generation endpoints, and which request fields exist.

Every parameter is either applied or refused with a 400 naming it; none is dropped silently.
``top_k``, ``min_p``, ``logit_bias`` and the three penalties reach the engine's sampler through
``GenerationParams`` when the engine has those fields (else they are refused, so an older engine
never ignores them). Fields this server does not know are ignored, listed in an
``X-Neural-Warning`` header and logged (a 400 would break clients that send vendor extras).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.types import GenerationParams

from .errors import invalid
from .fields import describe, get_dict, get_float, get_int, get_stop

SEED_RANGE = (-(2**63), 2**64 - 1)
MIN_TEMPERATURE = 1e-4  # below this sampling is argmax in all but exact ties; use greedy (no 1/T overflow)
_ENGINE_FIELDS = frozenset(f.name for f in dataclasses.fields(GenerationParams))

SAMPLING_KEYS = ("temperature", "top_p", "seed", "stop", "n", "frequency_penalty", "presence_penalty", "top_k",
                 "min_p", "logit_bias", "repetition_penalty")
# accepted and without effect on a local single-user server (documented in docs/api.md)
NO_EFFECT_KEYS = ("user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier",
                  "prompt_cache_retention")
CHAT_KEYS = frozenset((*SAMPLING_KEYS, *NO_EFFECT_KEYS, "model", "messages", "tools", "tool_choice",
                       "parallel_tool_calls", "reasoning_effort", "max_tokens", "max_completion_tokens", "stream",
                       "stream_options", "logprobs", "top_logprobs", "response_format", "functions", "function_call",
                       "modalities", "audio", "prediction", "web_search_options", "verbosity"))
COMPLETION_KEYS = frozenset((*SAMPLING_KEYS, *NO_EFFECT_KEYS, "model", "prompt", "max_tokens", "stream",
                             "stream_options", "echo", "suffix", "logprobs", "best_of"))
RESPONSES_KEYS = frozenset((*SAMPLING_KEYS, *NO_EFFECT_KEYS, "model", "input", "instructions", "tools",
                            "tool_choice", "parallel_tool_calls", "reasoning", "text", "max_output_tokens", "stream",
                            "stream_options", "previous_response_id", "truncation", "include", "background",
                            "max_tool_calls", "top_logprobs", "conversation", "prompt", "client_metadata"))


def unknown_fields(body: dict[str, Any], known: frozenset[str]) -> list[str]:
    return sorted(k for k in body if k not in known)


def _engine_supports(name: str) -> None:
    if name not in _ENGINE_FIELDS:
        raise invalid(f"'{name}' is not supported by this engine version; remove it.", param=name,
                      code="unsupported_parameter")


def _logit_bias(body: dict[str, Any], vocab_size: int) -> tuple[tuple[int, float], ...]:
    raw = get_dict(body, "logit_bias", "logit_bias")
    if not raw:
        return ()
    out: list[tuple[int, float]] = []
    for key in raw:
        p = f"logit_bias.{key}"
        tok = int(key) if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) < 10 else -1
        if not 0 <= tok < vocab_size:
            raise invalid(f"'logit_bias' keys must be token ids between 0 and {vocab_size - 1}, got "
                          f"{describe(key)}.", param=p, code="invalid_value")
        bias = get_float(raw, key, p, lo=-100.0, hi=100.0)
        out.append((tok, bias))
    return tuple(out)


def sampling_params(body: dict[str, Any], max_tokens: int, vocab_size: int, *,
                    temperature_default: float = 1.0) -> GenerationParams:
    """temperature, top_p, seed, stop, top_k, min_p, logit_bias and the penalties."""
    temperature = get_float(body, "temperature", "temperature", lo=0.0, hi=2.0, default=temperature_default)
    if temperature < MIN_TEMPERATURE:
        temperature = 0.0
    top_p = get_float(body, "top_p", "top_p", lo=0.0, hi=1.0, lo_open=True, default=1.0)
    seed = get_int(body, "seed", "seed", lo=SEED_RANGE[0], hi=SEED_RANGE[1])
    n = get_int(body, "n", "n", lo=1, hi=128, default=1)
    if n != 1:
        raise invalid("'n' must be 1: the local engine produces one choice per request.", param="n",
                      code="unsupported_value")
    extra: dict[str, Any] = {}
    for key, lo, hi, neutral in (("frequency_penalty", -2.0, 2.0, 0.0), ("presence_penalty", -2.0, 2.0, 0.0),
                                 ("min_p", 0.0, 1.0, 0.0), ("repetition_penalty", 0.0, 2.0, 1.0)):
        value = get_float(body, key, key, lo=lo, hi=hi, lo_open=key == "repetition_penalty")
        if value is not None and value != neutral:
            _engine_supports(key)
            extra[key] = value
    top_k = get_int(body, "top_k", "top_k", lo=0, hi=vocab_size)
    if top_k:
        _engine_supports("top_k")
        extra["top_k"] = top_k
    bias = _logit_bias(body, vocab_size)
    if bias:
        _engine_supports("logit_bias")
        extra["logit_bias"] = bias
    return GenerationParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                            seed=None if seed is None else seed % (2**63), stop=get_stop(body), **extra)

"""The calibrated workload's trace (engine.synth.calibrated) replayed: LRU and Belady at 430 slots
against the design doc, the drift of its hot sets, and the engine's admission replayed on it."""

from __future__ import annotations

import numpy as np
import pytest

from bench.routing.policy_replay import replay_policy
from bench.routing.replay_sim import cache_rates
from engine.gpu.admission import AdmissionSettings
from engine.synth import PRESETS
from engine.synth.calibrated import CalibratedTables, calibrated_text, designed_trace

# the design doc's recorded coding trace at ~430 slots (SIMULATED there)
DOC_LRU, DOC_BELADY, TOL = 0.406, 0.632, 0.03


@pytest.fixture(scope="module")
def trace_120b() -> np.ndarray:
    tables = CalibratedTables(0, PRESETS["120b-shape"])
    return designed_trace(tables, calibrated_text(tables, 12_000))


def test_hit_rates_at_430_slots_match_the_design_doc(trace_120b):
    """One pool of 430 slots for all 36 layers (the engine's SlotPool), 12k tokens."""
    r = cache_rates(trace_120b, 128, 430)
    assert abs(r.lru - DOC_LRU) <= TOL, r
    assert abs(r.belady - DOC_BELADY) <= TOL, r


def test_uniform_routing_is_far_from_the_design_doc(trace_120b):
    """The tolerance has teeth: the same replay of uniform random routing misses it widely."""
    uniform = np.random.default_rng(0).integers(0, 128, (3000, 36, 4))
    r = cache_rates(uniform, 128, 430)
    assert r.lru < DOC_LRU - 0.2


def test_hot_set_follows_the_text(trace_120b):
    """Experts used within a 256-token window cover that window far better than an earlier
    window's hot set does: the hot set drifts with the topic segments."""
    def top(c: np.ndarray, layer: int) -> set[int]:
        counts = np.bincount(c[:, layer].ravel(), minlength=128)
        return set(np.argsort(-counts, kind="stable")[:16].tolist())

    own, other = [], []
    for w in range(4, 40, 4):
        now, before = trace_120b[w * 256 : (w + 1) * 256], trace_120b[(w - 4) * 256 : (w - 3) * 256]
        for layer in (0, 17, 35):
            own.append(np.isin(now[:, layer], sorted(top(now, layer))).mean())
            other.append(np.isin(now[:, layer], sorted(top(before, layer))).mean())
    assert np.mean(own) > np.mean(other) + 0.15


def test_policy_replay_frozen_is_the_static_set_and_adaptive_admits(trace_120b):
    short = trace_120b[:1500]
    frozen = replay_policy(short, 128, 548, prompt_tokens=1024, settings=AdmissionSettings(refresh_every=0))
    assert frozen.admissions_per_token == 0 and frozen.hit == frozen.static_hit > 0
    live = replay_policy(short, 128, 548, prompt_tokens=1024)
    assert live.admissions_per_token > 0 and live.hit > frozen.hit
    assert live.lru <= live.belady and live.hit <= live.belady
    with pytest.raises(ValueError, match="prompt_tokens"):
        replay_policy(short, 128, 548, prompt_tokens=1500)


def test_aiming_the_adaptive_slots_at_the_prompts_end_lifts_the_answers_first_tokens(trace_120b):
    """The first 128 tokens after prompts of 1k-8k tokens, 520 slots (the 36-layer plan): the fill
    (EngineSettings.fill_tokens) against the adaptive slots left empty (SIMULATED, the engine's
    Residency with copies landing by the next token): 0.218/0.211/0.276/0.199 -> 0.376/0.346/0.386/0.256."""
    for prompt in (1024, 2048, 4096, 8192):
        part = trace_120b[: prompt + 128]
        off = replay_policy(part, 128, 520, prompt_tokens=prompt, fill_tokens=0)
        on = replay_policy(part, 128, 520, prompt_tokens=prompt, fill_tokens=128)
        assert on.hit > off.hit + 0.05, (prompt, off.hit, on.hit)
        assert on.static_hit == off.static_hit  # the static half is untouched


def test_report_cli(capsys):
    from app.cli.main import main

    argv = ["synth", "--routing", "calibrated", "--report", "--preset", "small", "--experts", "32",
            "--tokens", "1200", "--slots", "40,60", "--policy-tokens", "150", "--prompt-tokens", "100"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "6 layers x 32 experts, top-4; 1200 tokens" in out
    assert out.count("one pool for all layers: LRU") == 2 and out.count(" static): policy ") == 2
    assert "per-layer quotas of 6/7" in out  # 40 slots over 6 layers
    assert main(["synth", "--routing", "drift", "--report"]) != 0
    assert "--report needs --routing calibrated" in capsys.readouterr().err
    assert main([*argv[:-6], "--slots", "0"]) != 0
    assert "--slots" in capsys.readouterr().err


def test_a_follow_up_re_aims_the_adaptive_slots():
    """Two turns (2,048-token prompt, 512-token answer, 600-token follow-up), 18 layers, 260 slots,
    the first 128 tokens of the second answer (SIMULATED): with the fill 0.228 -> 0.323 and
    0.241 -> 0.301 (text seeds 0, 1: the subject moved), 0.340 -> 0.342 and 0.370 -> 0.372 (2, 3)."""
    from dataclasses import replace

    from bench.routing.policy_replay import replay_follow_up

    shape = replace(PRESETS["120b-shape"], num_hidden_layers=18)
    gains = []
    for seed in range(4):
        tables = CalibratedTables(seed, shape)
        trace = designed_trace(tables, calibrated_text(tables, 2048 + 512 + 600 + 128))
        off = replay_follow_up(trace, 128, 260, 2048, 512, 600, fill_tokens=0)
        on = replay_follow_up(trace, 128, 260, 2048, 512, 600, fill_tokens=128)
        assert on[0] > off[0] + 0.05  # the first answer as in the test above
        gains.append(on[1] - off[1])
    assert min(gains) > -0.005 and sum(g > 0.05 for g in gains) >= 2, gains

"""The calibration's background lane (engine/gpu/prefill/calibrate.py): it is running while the
caller measures, stops when asked, and a failing lane leaves the defaults (0.0) instead of an error."""

from __future__ import annotations

import threading
import time

from engine.gpu.prefill.calibrate import BackgroundLane


def test_the_lane_runs_while_the_caller_measures_and_stops_when_asked() -> None:
    ticks: list[float] = []

    def loop(stop: threading.Event, started: threading.Event) -> float:
        started.set()
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)
        return 0.25

    lane = BackgroundLane(loop)
    t0 = time.perf_counter()
    time.sleep(0.05)  # the caller's measurement
    t1 = time.perf_counter()
    assert lane.stop() == 0.25
    assert any(t0 <= t <= t1 for t in ticks)  # the lane was busy during the measurement
    n = len(ticks)
    time.sleep(0.01)
    assert len(ticks) == n  # and stopped


def test_a_failing_lane_gives_zero_without_hanging_the_caller() -> None:
    def loop(stop: threading.Event, started: threading.Event) -> float:
        raise RuntimeError("no copy engine")

    t0 = time.perf_counter()
    lane = BackgroundLane(loop, start_timeout=5.0)
    assert time.perf_counter() - t0 < 1.0  # a failed start does not wait the timeout out
    assert lane.stop() == 0.0

"""QueuePolicy: Retry-After from measured generation times, and retried requests ahead of newcomers."""

from __future__ import annotations

from app.api.queue_policy import MAX_RETRY_AFTER, QueuePolicy


def test_retry_after_follows_the_measured_generation_time() -> None:
    p = QueuePolicy(max_waiting=2)
    for _ in range(5):
        p.record_duration(4.0)
    assert p.avg_job_s == 4.0
    # line full (2 waiting): one place frees when the running job ends (3 s left of its 4 s)
    assert p.retry_after(waiting=2, running_for=1.0, now=0.0, key=None) == 3
    p2 = QueuePolicy(max_waiting=0)
    p2.record_duration(30.0)
    assert p2.retry_after(0, 0.0, 0.0, None) == 30
    p2.record_duration(500.0)
    assert p2.retry_after(0, 0.0, 0.0, None) == MAX_RETRY_AFTER


def test_a_retried_request_gets_the_freed_place_before_a_newcomer() -> None:
    p = QueuePolicy(max_waiting=1)
    assert not p.admit(waiting=1, key="early", now=0.0)  # line full: refused ...
    p.retry_after(1, 0.0, 0.0, "early")  # ... with a reservation
    # a place frees up; a newcomer arriving first is refused because the place is reserved
    assert not p.admit(waiting=0, key="late", now=1.0)
    p.retry_after(0, 0.0, 1.0, "late")
    assert p.admit(waiting=0, key="early", now=2.0)  # the earlier client, retrying, gets it
    assert p.admit(waiting=0, key="late", now=3.0)  # next place: the later one


def test_reservations_expire_when_their_client_never_returns() -> None:
    p = QueuePolicy(max_waiting=1)
    p.retry_after(1, 0.0, 0.0, "gone")
    assert not p.admit(0, "new", now=1.0)
    assert p.admit(0, "new", now=10_000.0)

"""Per-endpoint replay summaries: weighted decode rates, medians and ratios (hand-computed)."""

from __future__ import annotations

import pytest

from bench.harness.replay import Endpoint, RequestRecord, chat_url, prepare_body
from bench.harness.replay_report import replay_table, summarize_replay


def rec(endpoint: str, session: int, idx: int, tokens: int, seconds: float, ttft: float, wall: float,
        ok: bool = True, answer: str = "h") -> RequestRecord:
    return RequestRecord(session=session, endpoint=endpoint, request_index=idx, http_status=200 if ok else 500,
                         ok=ok, error=None if ok else "HTTP 500", ttft_s=ttft if ok else None,
                         wall_s=wall if ok else None, timed_tokens=tokens, timed_s=seconds,
                         decode_tps=tokens / seconds if seconds else None, token_source="usage",
                         completion_tokens=tokens + 1, prompt_tokens=100, cached_tokens=0, deltas=tokens + 1,
                         finish_reason="length", answer_sha256=answer, request_sha256="r", response_sha256="s",
                         request_file="f", response_file="g")


def test_weighted_rates_medians_and_ratios():
    records = [
        # A: two sessions of two requests
        rec("A", 0, 0, 511, 25.0, 10.0, 36.0), rec("A", 0, 1, 511, 20.0, 1.0, 21.0),
        rec("A", 3, 0, 511, 25.0, 12.0, 38.0), rec("A", 3, 1, 200, 10.0, 2.0, 12.0),
        # B: one failed request (excluded everywhere except the counts)
        rec("B", 1, 0, 511, 50.0, 40.0, 91.0), rec("B", 1, 1, 511, 40.0, 4.0, 45.0),
        rec("B", 2, 0, 511, 50.0, 44.0, 95.0), rec("B", 2, 1, 0, 0.0, 0.0, 0.0, ok=False),
    ]
    s = summarize_replay(records, ["A", "B"])
    a, b = s["endpoints"]["A"], s["endpoints"]["B"]
    assert a["decode_tps"] == pytest.approx((511 * 3 + 200) / 80.0)  # 1733 / 80 = 21.6625
    assert a["decode_tps_followups"] == pytest.approx(711 / 30.0)
    assert a["ttft_median_s"] == pytest.approx(6.0)  # median of 1, 2, 10, 12
    assert a["ttft_first_median_s"] == pytest.approx(11.0)
    assert a["wall_median_s"] == pytest.approx(28.5)
    assert (a["requests"], a["failed"], a["sessions"]) == (4, 0, 2)
    assert b["decode_tps"] == pytest.approx(1533 / 140.0)
    assert b["decode_tps_followups"] == pytest.approx(511 / 40.0)
    assert (b["requests"], b["failed"]) == (4, 1)
    assert b["ttft_median_s"] == pytest.approx(40.0)
    r = s["ratios_vs_baseline"]["B"]
    assert r["decode_tps"] == pytest.approx((1533 / 140.0) / (1733 / 80.0))
    assert r["ttft_median_s"] == pytest.approx(40.0 / 6.0)
    assert s["baseline"] == "A" and "A" not in s["ratios_vs_baseline"]
    table = replay_table(s)
    assert "21.66" in table and "B / A" in table


def test_answers_repeat_flag():
    same = [rec("A", 0, 0, 10, 1.0, 1.0, 2.0, answer="x"), rec("A", 1, 0, 10, 1.0, 1.0, 2.0, answer="x")]
    differ = [rec("A", 0, 0, 10, 1.0, 1.0, 2.0, answer="x"), rec("A", 1, 0, 10, 1.0, 1.0, 2.0, answer="y")]
    assert summarize_replay(same, ["A"])["endpoints"]["A"]["answers_repeat"] is True
    assert summarize_replay(differ, ["A"])["endpoints"]["A"]["answers_repeat"] is False


def test_endpoint_parsing_and_urls():
    assert Endpoint.parse("neural=http://127.0.0.1:8080") == Endpoint("neural", "http://127.0.0.1:8080/v1/chat/completions")
    assert chat_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    assert chat_url("http://h:1/v1/chat/completions") == "http://h:1/v1/chat/completions"
    for bad in ("noequals", "=http://x", "a=ftp://x", "a b=http://x"):
        with pytest.raises(ValueError):
            Endpoint.parse(bad)


def test_prepare_body_sets_sampling_and_streaming_and_keeps_the_original():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7,
            "stream": False, "stream_options": {"foo": 1}}
    assert prepare_body(body)["temperature"] == 1.0  # as the app and the API ship
    out = prepare_body(body, model="other", nonce="s1", temperature=0, seed=7)
    assert out["temperature"] == 0 and out["seed"] == 7 and out["stream"] is True
    assert out["stream_options"] == {"foo": 1, "include_usage": True}
    assert out["model"] == "other"
    assert out["messages"][0]["content"] == "[s1]\nhi"
    assert body["messages"][0]["content"] == "hi" and body["temperature"] == 0.7

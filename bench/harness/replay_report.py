"""Per-endpoint summary of a replay and the ratios between endpoints.

Decode rates are weighted (sum of timed tokens / sum of timed seconds over the answers), not
medians of per-answer rates, so a long answer counts for more than a short one. Times to
first token and client wall times are medians with their spread. Ratios are CALCULATED from
the unrounded figures, each endpoint against the first one named.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .replay import RequestRecord
from .stats import ratio, summarize, weighted_rate

RATIO_METRICS = ("decode_tps", "decode_tps_followups", "ttft_median_s", "ttft_first_median_s", "wall_median_s")


def _timed(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.ok and r.timed_s > 0 and r.timed_tokens > 0]


def endpoint_summary(records: Sequence[RequestRecord]) -> dict[str, Any]:
    ok = [r for r in records if r.ok]
    timed = _timed(records)
    follow = [r for r in timed if r.request_index > 0]
    ttft = summarize([r.ttft_s for r in ok if r.ttft_s is not None])
    first = summarize([r.ttft_s for r in ok if r.request_index == 0 and r.ttft_s is not None])
    wall = summarize([r.wall_s for r in ok if r.wall_s is not None])
    answers: dict[int, set[str]] = {}
    for r in ok:
        answers.setdefault(r.request_index, set()).add(r.answer_sha256 or "")
    return {
        "sessions": len({r.session for r in records}),
        "requests": len(records),
        "failed": len(records) - len(ok),
        "decode_tps": weighted_rate([r.timed_tokens for r in timed], [r.timed_s for r in timed]),
        "decode_tps_followups": weighted_rate([r.timed_tokens for r in follow], [r.timed_s for r in follow]),
        "timed_tokens": sum(r.timed_tokens for r in timed),
        "timed_s": sum(r.timed_s for r in timed),
        "completion_tokens": sum(r.completion_tokens or 0 for r in ok),
        "ttft_s": ttft,
        "ttft_median_s": ttft["median"],
        "ttft_first_s": first,
        "ttft_first_median_s": first["median"],
        "wall_s": wall,
        "wall_median_s": wall["median"],
        "token_sources": sorted({r.token_source for r in ok}),
        # one hash per request index when every session gave the same visible answer
        "answers_repeat": all(len(h) == 1 for h in answers.values()) if answers else None,
        "answer_sha256": {str(i): sorted(h) for i, h in sorted(answers.items())},
    }


def summarize_replay(records: Sequence[RequestRecord], names: Sequence[str]) -> dict[str, Any]:
    measured = [r for r in records if not r.warmup]
    per = {n: endpoint_summary([r for r in measured if r.endpoint == n]) for n in names}
    base = names[0]
    ratios = {n: {m: ratio(per[n][m], per[base][m]) for m in RATIO_METRICS} for n in names[1:]}
    return {"endpoints": per, "baseline": base, "ratios_vs_baseline": ratios}


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def replay_table(summary: dict[str, Any]) -> str:
    per = summary["endpoints"]
    lines = [f"{'endpoint':<14} {'ok/all':>7} {'decode tok/s':>13} {'follow-ups':>11} {'TTFT med s':>11} "
             f"{'TTFT q0 s':>10} {'wall med s':>11}  same answers"]
    for name, s in per.items():
        lines.append(f"{name:<14} {s['requests'] - s['failed']:>3}/{s['requests']:<3} "
                     f"{_f(s['decode_tps'], '{:.2f}'):>13} {_f(s['decode_tps_followups'], '{:.2f}'):>11} "
                     f"{_f(s['ttft_median_s'], '{:.3f}'):>11} {_f(s['ttft_first_median_s'], '{:.3f}'):>10} "
                     f"{_f(s['wall_median_s'], '{:.3f}'):>11}  {s['answers_repeat']}")
    base = summary["baseline"]
    for name, r in summary["ratios_vs_baseline"].items():
        lines.append(f"{name} / {base}: decode {_f(r['decode_tps'], '{:.3f}x')}, follow-ups "
                     f"{_f(r['decode_tps_followups'], '{:.3f}x')}, TTFT {_f(r['ttft_median_s'], '{:.3f}x')}, "
                     f"first TTFT {_f(r['ttft_first_median_s'], '{:.3f}x')}, wall {_f(r['wall_median_s'], '{:.3f}x')}"
                     " (CALCULATED; >1 means larger: faster decode, slower TTFT/wall)")
    lines.append("decode = weighted timed tokens / timed seconds (first to last output delta); "
                 "TTFT q0 = first request of each session")
    return "\n".join(lines)

"""Time to first text of a conversation's follow-ups, and of the same conversation fully cached, against a running
server: what a client waits for besides the model's own prompt work.

    python -m bench.harness.host_ttft URL [--requests FILE] [--rounds 3] [--max-tokens 8] [--json]

URL is the server's base, e.g. http://127.0.0.1:8080. The shipped coding conversation's requests
(bench/data/coding-13k.jsonl) are sent streamed with ``max_tokens`` 8 (temperature 1, seed 0): the
first once untimed (its whole prompt), then each round the follow-ups in order and the first again.
That repeat finds every token in the server's cache, so its time to first text is the host's share
(HTTP, the size check, rendering, the prefix match, the first few decode steps): the yardstick for
work done per request outside the prompt pass. `neural bench replay` times whole answers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from .context_tokens import REQUESTS_FILE
from .stream_meter import StreamMeter


def first_text_s(base: str, body: dict[str, Any], max_tokens: int, timeout: float = 600.0) -> float:
    """Seconds from sending ``body`` (streamed) to its first output delta."""
    body = {**body, "stream": True, "max_tokens": max_tokens, "temperature": 1.0, "seed": 0}
    req = urllib.request.Request(base.rstrip("/") + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    meter = StreamMeter(started=t0)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        while True:
            chunk = r.read1(65536)
            if not chunk:
                break
            meter.feed(chunk, time.perf_counter())
    meter.close(time.perf_counter())
    if meter.error or meter.first is None:
        raise RuntimeError(f"no output from {base}: {meter.error or 'the stream carried no text'}")
    return meter.first - t0


def run(base: str, bodies: list[dict[str, Any]], rounds: int, max_tokens: int) -> dict[str, Any]:
    if len(bodies) < 2:
        raise ValueError("the requests file needs a first request and at least one follow-up")
    first = first_text_s(base, bodies[0], max_tokens)
    times: dict[str, list[float]] = {f"q{i}": [] for i in range(1, len(bodies))}
    times["q0 cached"] = []
    for _ in range(rounds):
        for i in range(1, len(bodies)):
            times[f"q{i}"].append(first_text_s(base, bodies[i], max_tokens))
        times["q0 cached"].append(first_text_s(base, bodies[0], max_tokens))
    return {"url": base, "max_tokens": max_tokens, "rounds": rounds, "q0_first_s": round(first, 4),
            "ttft_ms_MEASURED": {k: [round(1e3 * x, 1) for x in v] for k, v in times.items()},
            "median_ms": {k: round(1e3 * statistics.median(v), 1) for k, v in times.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.harness.host_ttft", description=__doc__.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("--requests", type=Path, default=REQUESTS_FILE)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.rounds < 1 or a.max_tokens < 1:
        p.error("--rounds and --max-tokens must be >= 1")
    try:
        bodies = [json.loads(line) for line in a.requests.read_text(encoding="utf-8").splitlines() if line.strip()]
        r = run(a.url, bodies, a.rounds, a.max_tokens)
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(r))
        return 0
    print(f"{r['url']}: first request {r['q0_first_s']:.2f} s (untimed warm-up); time to first text, ms, "
          f"{r['rounds']} rounds (MEASURED):")
    for k, v in r["ttft_ms_MEASURED"].items():
        print(f"  {k:10s} median {r['median_ms'][k]:8.1f}   {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

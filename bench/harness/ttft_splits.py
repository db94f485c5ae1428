"""The prompt split behind the time-to-first-token table of a device call (bench/device/session8.sh,
session10.sh): ``python -m bench.harness.ttft_splits OUT`` prints, for every ``neural bench prompt
--json`` report in OUT (oldest first), the split's calibration and, per prompt length, the runs and
the split's main terms of the prompt and of its follow-up. Reports named ``ab-<i>-<config>`` (an A/B
of configurations in fresh processes) are also summed up per configuration."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

KEYS = ("wall", "gpu_copies", "gpu_copies_ahead", "cpu_jobs", "cpu_wait", "launch", "cpu_experts", "direct_experts",
        "ahead_experts", "ahead_used", "lane_cpu_observed_s", "lane_cpu_predicted_s")


def main(argv: list[str] | None = None) -> int:
    out = Path((argv if argv is not None else sys.argv[1:])[0])
    by_cfg: dict[str, list[float]] = {}
    for f in sorted(out.glob("*.json"), key=lambda p: p.stat().st_mtime):
        try:
            r = json.loads(f.read_text())
        except ValueError:
            print(f.name, "unreadable")
            continue
        if "results" not in r:
            continue
        print(f.stem, "calibration", {k: round(v, 4) for k, v in r.get("split_calibration", {}).items()})
        for row in r.get("results", []):
            if "prompt_tokens" not in row:  # a decode report in the same folder
                continue
            fu = row.get("followup") or {}
            for tag, sp, runs in (("first", row.get("prompt_split", {}), row.get("runs_s", [])),
                                  ("follow", fu.get("prompt_split", {}), fu.get("runs_s", []))):
                print(f.stem, row["prompt_tokens"], tag, [round(x, 3) for x in runs],
                      {k: round(sp.get(k, 0), 3) for k in KEYS})
                if f.stem.startswith("ab-"):
                    by_cfg.setdefault(f"{f.stem.rsplit('-', 1)[1]} {tag}", []).extend(runs)
    if by_cfg:
        print("\nA/B by configuration (fresh processes), seconds:")
        for k in sorted(by_cfg):
            v = by_cfg[k]
            print(f"  {k}: runs {[round(x, 3) for x in v]} median {statistics.median(v):.3f} "
                  f"mean {statistics.mean(v):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

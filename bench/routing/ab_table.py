"""The table of an engine-settings A/B(/C/D) on calibrated decode (bench/device/cal_ab.sh): one row per run in the
order they ran, each configuration's mean, and each mean against A's.

    python -m bench.routing.ab_table OUT_DIR "A settings" "B settings" ["C settings" ["D settings"]]

Runs are OUT_DIR/<letter>-<n>.json, as bench.routing.calibrated_tg writes them; a file that does not parse is a
row saying so.
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys

LETTERS = "abcd"
HEAD = ("| run | tok/s | VRAM hit | ms a token: wall / cpu / lane start (of it the split) / lane wait / gpu wait / "
        "launch | lane experts a token | native layers (yields) a token | split CPU / lane ms an expert |")


def _row(name: str, d: dict) -> str:
    ph, sp = d["phases_ms"], d.get("lane_split") or {}
    return (f"| {name} | {d['tok_s_MEASURED']:.2f} | {d['vram_hit_rate_MEASURED']:.3f} | {ph['wall']:.2f} / "
            f"{ph['cpu']:.2f} / {ph.get('lane_start', 0):.2f} ({ph.get('lane_decide', 0):.2f}) / "
            f"{ph.get('lane_wait', 0):.2f} / {ph['gpu_wait']:.2f} / {ph['launch']:.2f} | "
            f"{d.get('lane_experts_per_token')} | {d.get('native_layers_per_token')} "
            f"({d.get('native_yields_per_token')}) | "
            f"{sp.get('cpu_ms')} / {sp.get('lane_ms')} |")


def table(out: str, settings: list[str]) -> str:
    """``settings``: the configurations' settings, A first (an empty string: the defaults)."""
    if not 2 <= len(settings) <= len(LETTERS):
        raise ValueError(f"2 to {len(LETTERS)} configurations, got {len(settings)}")
    letters = LETTERS[: len(settings)]
    lines = ["; ".join(f"{k.upper()}: {s or '(defaults)'}" for k, s in zip(letters, settings, strict=True))
             + "; calibrated decode, 18 layers, 12 GiB plan's slots, 8 threads", "", HEAD,
             "|---|---:|---:|---|---:|---:|---|"]
    got: dict[str, list[float]] = {k: [] for k in letters}
    files = glob.glob(os.path.join(out, f"[{letters}]-*.json"))
    for f in sorted(files, key=lambda p: (os.path.getmtime(p), p)):  # in the order they ran
        name = os.path.basename(f)[:-5]
        try:
            with open(f) as fh:
                d = json.load(fh)
            lines.append(_row(name, d))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            lines.append(f"| {name} | failed: {exc} | | | | | | |")
            continue
        got[name[0]].append(float(d["tok_s_MEASURED"]))
    lines.append("")
    for k in letters:
        if got[k]:
            lines.append(f"{k.upper()}: mean {statistics.mean(got[k]):.2f} tok/s over {len(got[k])} runs "
                         f"{[round(v, 2) for v in got[k]]} (MEASURED)")
    for k in letters[1:]:
        if got["a"] and got[k]:
            lines.append(f"{k.upper()} / A: {statistics.mean(got[k]) / statistics.mean(got['a']):.3f} "
                         "(CALCULATED from the means)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3:
        print("usage: python -m bench.routing.ab_table OUT_DIR A B [C [D]]", file=sys.stderr)
        return 2
    print(table(args[0], [a for a in args[1:]]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The time-to-first-token table of one device call (bench/device/ttft.sh): ``python -m
bench.harness.ttft_table OUT`` reads OUT/*.json (``neural bench prompt --json``) and prints
markdown, one row per (run set, prompt length), with the follow-up and the split's main terms."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ORDER = ("first-ever", "auto", "fixed", "auto-fresh")


def _f(x: Any, nd: int = 2) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def rows(name: str, report: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if report.get("bench", "prompt") != "prompt" or any("prompt_tokens" not in r for r in report.get("results", [])):
        return out  # a decode report in the same folder
    for r in report.get("results", []):
        sp = r.get("prompt_split", {})
        fu = r.get("followup") or {}
        fsp = fu.get("prompt_split", {})
        runs = " / ".join(_f(x) for x in r.get("runs_s", []))
        fruns = " / ".join(_f(x) for x in fu.get("runs_s", []))
        out.append(
            f"| {name} | {_f(report.get('load_s'), 1)} | {r['prompt_tokens']:,} | {runs} | "
            f"{_f(r['tokens_per_s']['median'], 0)} | {fruns or '—'} | "
            f"{int(sp.get('cpu_experts', 0))} / {int(sp.get('staged_experts', 0))} | "
            f"{_f(sp.get('cpu_jobs'))} / {_f(sp.get('pack'))} | "
            f"{_f(sp.get('cpu_wait'))} / {_f(sp.get('stage_wait'))} | "
            f"{int(fsp.get('cpu_experts', 0))} / {int(fsp.get('staged_experts', 0))} |")
    return out


def table(out_dir: Path) -> str:
    lines = ["| run set | load s | prompt | TTFT s (runs in order) | tok/s | follow-up of 600, s | "
             "CPU / staged experts | CPU jobs / pack s | waited CPU / stage s | follow-up CPU / staged |",
             "|---|---:|---:|---|---:|---|---|---|---|---|"]
    names = [n for n in ORDER if (out_dir / f"{n}.json").is_file()]
    names += sorted(p.stem for p in out_dir.glob("*.json") if p.stem not in ORDER and p.stem != "suite")
    for name in names:
        try:
            report = json.loads((out_dir / f"{name}.json").read_text())
        except (OSError, ValueError) as exc:
            lines.append(f"| {name} | unreadable: {exc} |")
            continue
        lines += rows(name, report)
    check = out_dir / "check" / "results.json"
    if check.is_file():
        c = json.loads(check.read_text()).get("stages", {}).get("check", {})
        lg = c.get("logits", {})
        lines.append("")
        lines.append(f"check (2 layers, 120b experts, vs fp32 reference): pass={c.get('pass')}, logits max / mean "
                     f"rel L2 {_f(lg.get('rel_l2_max'), 4)} / {_f(lg.get('rel_l2_mean'), 4)} (bf16 reference "
                     f"{_f(lg.get('bf16_ref_rel_l2_max'), 4)} / {_f(lg.get('bf16_ref_rel_l2_mean'), 4)}), top-1 "
                     f"{_f(lg.get('top1_agreement'), 3)}, one block bit-identical: "
                     f"{c.get('one_block', {}).get('bit_identical')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print(table(Path(args[0] if args else ".")))
    return 0


if __name__ == "__main__":
    sys.exit(main())

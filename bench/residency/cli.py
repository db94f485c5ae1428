"""Command line of the RAM-residency benchmarks: ``python -m bench.residency.cli prepare|one|run|suite``.

See residency_bench.py for the scenarios and suite.py for the one bounded device call.
"""

from __future__ import annotations

import argparse
import os
import sys

from .residency_bench import SCENARIOS, common_args, one, prepare, run
from .suite import suite, suite_args


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.residency.cli", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="write a synthetic 120b-shape checkpoint (+ store) with fewer layers")
    p.add_argument("--out", required=True)
    p.add_argument("--preset", default="120b-shape")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--store", default="packed", choices=["packed", "raw", "none"],
                   help="none for the GPU backend, which reads the checkpoint's experts")
    p.add_argument("--skew", type=float, default=1.5, help="routing skew of the router bias (0 = uniform)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-fsync", dest="fsync", action="store_false")
    p = sub.add_parser("one", help="one scenario in this process (used by run and suite)")
    p.add_argument("--scenario", required=True)
    p.add_argument("--partial", default=None, help="rewrite this JSON file after every step")
    p.add_argument("--close-timeout-s", type=float, default=20.0)
    common_args(p)
    p = sub.add_parser("run", help="every scenario, each in a fresh process")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--timeout-s", type=float, default=1800.0, help="per scenario process")
    p.add_argument("--out", default=None, help="JSON results file")
    p.add_argument("--md", default=None, help="markdown table file")
    common_args(p)
    p = sub.add_parser("suite", help="the whole device benchmark in one bounded call (see bench_suite.py)")
    suite_args(p)
    args = ap.parse_args(argv)
    return {"prepare": prepare, "one": one, "run": run, "suite": suite}[args.cmd](args)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: a stuck non-daemon thread must not hold a device process

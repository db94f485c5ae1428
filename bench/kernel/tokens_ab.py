"""A/B of the multi-token kernel between two builds of native/, alternated in fresh processes.

    python bench/kernel/tokens_ab.py OTHER_ROOT [--base ROOT] [--threads 1,2] [--tokens 1,2,4,8,16] [--pairs 2]

OTHER_ROOT is a directory holding another ``native/`` package with its extension built in place
(e.g. ``git worktree add /tmp/old 6ad8bda && cd /tmp/old && python native/build_native.py``).
Each run is a separate process that imports ``native`` from its root (this checkout or
OTHER_ROOT) and runs ``bench.kernel.tokens_bench.run_tokens_bench`` on the same store, so both
builds are measured by the same code; one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
sys.path[:0] = [{native_root!r}, {root!r}]
import native.kernel
from bench.kernel.tokens_bench import run_tokens_bench
r = run_tokens_bench({tokens!r}, threads={threads}, path={store!r}, seconds={seconds}, isa={isa!r})
d = r.as_dict()
d["native"] = native.kernel.__file__
print(json.dumps(d))
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("other_root")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--tokens", default="1,2,4,8,16")
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--isa", default="auto", help="kernel table: auto, avx512, avx512bf16, avx2, scalar")
    p.add_argument("--store", default="/dev/shm/neural-tokens-ab.nstore", help="synthetic store (written if absent)")
    p.add_argument(
        "--base",
        default=str(ROOT),
        help="root of the build to compare against (default: this checkout); a build made with CFLAGS set "
        "replaces Python's own flags, so compare two such builds with each other, not with pip's",
    )
    a = p.parse_args(argv)
    tokens = [int(t) for t in a.tokens.split(",")]
    for threads in (int(t) for t in a.threads.split(",")):
        for _ in range(a.pairs):
            for native_root in (a.other_root, a.base):
                code = CHILD.format(
                    native_root=native_root,
                    root=str(ROOT),
                    tokens=tokens,
                    threads=threads,
                    store=a.store,
                    seconds=a.seconds,
                    isa=a.isa,
                )
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                d = json.loads(out.stdout.strip().splitlines()[-1])
                d["root"] = native_root
                print(json.dumps(d), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``neural logits``: the [T, vocab] float32 logits of one forward pass (conformance checks)."""

from __future__ import annotations

import argparse

from .common import add_engine_arguments, fail, load_engine

NAME = "logits"
HELP = "Write the float32 logits [T, vocab] of one forward pass over the given ids to a .npy file."


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_engine_arguments(p)
    p.add_argument("--ids", required=True, help="comma-separated token ids, e.g. 1,2,3")
    p.add_argument("--out", required=True, help="output .npy file")
    p.set_defaults(dtype="float32")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    try:
        ids = [int(x) for x in args.ids.split(",") if x.strip()]
    except ValueError:
        return fail(f"--ids must be comma-separated integers, got {args.ids!r}")
    if not ids:
        return fail("--ids is empty")
    eng = load_engine(args)
    vocab = eng.config.vocab_size
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        return fail(f"token ids out of range [0, {vocab}): {bad[:5]}")
    logits = eng.logits(ids)
    np.save(args.out, np.asarray(logits, dtype=np.float32))
    print(f"wrote {args.out}: {len(ids)} x {vocab} float32")
    return 0

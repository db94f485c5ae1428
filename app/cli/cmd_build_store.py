"""``neural build-store``: repack a checkpoint's experts into a memory-mapped expert store."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

NAME = "build-store"
HELP = "Repack the MXFP4 experts of a checkpoint into one aligned, checksummed store file (raw or packed)."

SHAPE_120B = (2880, 2880)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", help="gpt-oss checkpoint folder (Hugging Face layout)")
    p.add_argument("--format", default="packed", choices=["raw", "packed"],
                   help="raw: byte-exact repack; packed: lossless 4-bit scale rows (about 3%% smaller)")
    p.add_argument("--out", default=None, help="store file (default: MODEL_DIR/experts-<format>.nstore)")
    p.add_argument("--no-verify", action="store_true", help="skip re-reading the store against the checkpoint")
    p.add_argument("--verify-only", action="store_true",
                   help="do not build: check an existing store's checksums and compare it with the checkpoint")


def stderr_progress(label: str) -> Callable[[int, int], None]:
    """A one-line progress bar on stderr (redrawn at most 5 times a second)."""
    t0 = time.perf_counter()
    last = [0.0]

    def tick(done: int, total: int) -> None:
        now = time.perf_counter()
        if now - last[0] < 0.2 and done < total:
            return
        last[0] = now
        frac = done / total if total else 1.0
        bar = "#" * int(30 * frac)
        rate = done / max(now - t0, 1e-9)
        eta = (total - done) / rate if rate > 0 else 0.0
        print(f"\r{label} [{bar:<30}] {100 * frac:5.1f}% {done}/{total}  eta {eta:5.0f} s", end="",
              file=sys.stderr, flush=True)
        if done >= total:
            print(file=sys.stderr)

    return tick


def size_report(hidden: int, intermediate: int) -> list[str]:
    from engine.store.format import RecordLayout

    lines = []
    for fmt in ("raw", "packed"):
        lay = RecordLayout.build(hidden, intermediate, fmt)
        lines.append(f"  {fmt:6s}: {lay.payload_bytes:>12,} B codes+scales per expert, "
                     f"{lay.fixed_bytes:>12,} B record with biases (64-B aligned)")
    return lines


def run(args: argparse.Namespace) -> int:
    from engine.checkpoint import Checkpoint, CheckpointError
    from engine.store.format import StoreError
    from engine.store.reader import ExpertStore, default_store_path
    from engine.store.writer import build_store

    from .common import fail

    try:
        ck = Checkpoint.open(args.model_dir)
    except CheckpointError as exc:
        return fail(str(exc))
    cfg = ck.config
    out = Path(args.out) if args.out else default_store_path(ck.model_dir, args.format)
    print(f"expert bytes at this checkpoint's shape (hidden {cfg.hidden_size}, intermediate "
          f"{cfg.intermediate_size}):")
    print("\n".join(size_report(cfg.hidden_size, cfg.intermediate_size)))
    print("at the gpt-oss-120b shape (hidden 2880, intermediate 2880):")
    print("\n".join(size_report(*SHAPE_120B)))
    try:
        if not args.verify_only:
            t0 = time.perf_counter()
            summary = build_store(ck, out, args.format, progress=stderr_progress(f"build {args.format}"))
            dt = time.perf_counter() - t0
            print(f"wrote {summary.path}: {summary.records} experts, {summary.file_bytes / 2**30:.3f} GiB "
                  f"in {dt:.1f} s; {summary.fallback_rows} fallback scale rows")
            if args.no_verify:
                return 0
        with ExpertStore.open(out) as store:
            store.check_matches(ck)
            bad = store.verify(progress=stderr_progress("checksums"))
            if bad:
                return fail(f"{out}: {len(bad)} corrupt record(s), first (layer, expert) = {bad[0]}; rebuild the store")
            diff = store.verify_against_checkpoint(ck, progress=stderr_progress("compare"))
            if diff:
                return fail(f"{out}: {len(diff)} record(s) differ from the checkpoint, first (layer, expert) = "
                            f"{diff[0]}; rebuild the store")
            print(f"verified {out}: checksums match and every expert equals the checkpoint ({store.fmt})")
    except StoreError as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"{out}: {exc.strerror or exc}")
    return 0

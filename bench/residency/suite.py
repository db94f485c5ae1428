"""The residency benchmark as one bounded call on the device machine (issue 10's must-show).

    python -m bench.residency.cli suite --out $OUT            # GPU, ~4 minutes
    bash bench/device/residency.sh                               # the same, plus wheels/native build

Steps, each recorded in ``$OUT/residency.json`` as soon as it ends (a kill still leaves data):

1. **place and probe** — a directory on a disk file system (never tmpfs: its pages cannot be
   dropped), its free space, and a 512 MiB probe file: write+fsync rate, whether
   POSIX_FADV_DONTNEED really empties the cache there (mincore), and the cold read rate.
2. **layers** — ``--layers auto`` picks the most layers of the 120b shape (2..6 by default) whose
   estimated time fits the budget, from the probe and the constants below; the disk must hold it.
3. **prepare** (child) writes the checkpoint with skewed routing on disk and fsyncs it; no
   expert store (the GPU backend reads the checkpoint's experts). In parallel, the **canary**
   (child) writes a 2-layer copy of the shapes to /dev/shm and runs the ``warm`` scenario on it:
   it fills the shared Triton cache (~/.triton/cache) so the measured processes do not JIT, and
   it tells whether the layer-major GPU prompt path works here — if it fell back to token by
   token (or died or hung in its first turn), the scenarios run with ``NEURAL_GPU_PREFILL=0`` and
   1024-token prompts instead of failing the same way each time.
4. **scenarios**, each a fresh process with its own timeout, in priority order, skipped when the
   time left cannot hold one: ``warm`` (reference; the hot set it saves in the shared
   NEURAL_CACHE_DIR is restored before every later process, which loads it into the static VRAM
   slots and ranks its warm-up plan by its routing counts, as after a restart),
   ``cold-nowarm``, ``cold-warm``, ``cold-warm-now+trim`` (the pressure case), ``cold-warm-now``.
   Timeout per process: 2.5x its estimate (at least 60 s; the first one also gets the JIT time
   when the canary did not finish), never past the suite's deadline.

Outputs (<= 8 files): ``residency.json``, ``residency.md`` (also printed last), ``suite.log``
(every child's stderr). Numbers are never invented: a step that did not run says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .residency_bench import (
    EXIT_NO_GPU,
    GIB,
    _fmt_md,
    common_args,
    dontneed,
    kill_children,
    last_json,
    one_argv,
    parse_scenario,
    run_child,
    write_json_atomic,
)

DEFAULT_SCENARIOS = "warm,cold-nowarm,cold-warm,cold-warm-now+trim,cold-warm-now"
NO_DROP_FS = {"tmpfs", "ramfs", "devtmpfs", "squashfs", "proc", "sysfs"}

# Time model for --layers auto (seconds; CALCULATED guesses, deliberately pessimistic, see
# docs/perf-residency.md): the writer's dense part and per layer (measured 7.5 s + 4.6 s/layer on
# the 2-core development VM, 0.38 GB/s of experts; the H200 host wrote 0.37 GB/s per process in
# bench/device/run.sh), one scenario process without its cold reads (python + torch +
# CUDA + load + graph capture + 3 turns), and the cold read efficiency of page-fault-driven
# reads against the probe's sequential read.
T_DENSE, T_LAYER, T_PROCESS, FAULT_READ_EFF = 10.0, 5.0, 15.0, 0.6
# JIT of every Triton kernel in the canary (a guess): on the H200, the first GpuBackend of
# bench/device/run.sh (decode kernels, graph capture, 12 layers, timing loops) took
# 12.5-15.9 s in all, and the first process of bench/harness/suite.py (18 layers: load, both kernel
# sets, an 8k-token prompt, timed decode) 24.7 s against 32.7 s for the next, which decoded longer.
T_CANARY_COMPILE = 25.0
FALLBACK_PROMPT_TOKENS = 1024  # token-by-token prompts (NEURAL_GPU_PREFILL=0) are ~100x slower


def suite_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="results folder ($OUT on the device)")
    p.add_argument("--dir", default="", help="disk folder for the checkpoint (default: first usable of "
                   "~/neural-res, /var/tmp/neural-res, /tmp/neural-res)")
    p.add_argument("--layers", default="auto", help="layers of the 120b shape, or auto (from the disk probe)")
    p.add_argument("--min-layers", type=int, default=2)
    p.add_argument("--max-layers", type=int, default=6)
    p.add_argument("--preset", default="120b-shape")
    p.add_argument("--skew", type=float, default=1.5, help="routing skew of the synthetic router (0 = uniform)")
    p.add_argument("--budget-s", type=float, default=225.0, help="wall seconds for the whole suite")
    p.add_argument("--scenarios", default=DEFAULT_SCENARIOS)
    p.add_argument("--scenario-timeout-s", type=float, default=0.0,
                   help="per scenario process (default: 2.5x its estimate, at least 60 s)")
    p.add_argument("--min-scenario-s", type=float, default=25.0, help="do not start a scenario with less left")
    p.add_argument("--canary", default="auto", choices=["auto", "on", "off"],
                   help="auto: on for the GPU backends (fills the Triton cache, checks the prompt path)")
    p.add_argument("--canary-layers", type=int, default=2,
                   help="2 covers both attention kinds; the layer index only specializes the tiny router kernel")
    p.add_argument("--canary-dir", default="/dev/shm/neural-res-canary")
    p.add_argument("--canary-timeout-s", type=float, default=110.0)
    p.add_argument("--probe-mib", type=int, default=512)
    p.add_argument("--keep", action="store_true", help="keep the checkpoint afterwards (default: delete it)")
    common_args(p, model=False)
    p.set_defaults(backend="gpu", pool_gib="auto36")


# ---- helpers -------------------------------------------------------------------------------
class Suite:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.budget_s
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.log_path = self.out / "suite.log"
        self.logf = open(self.log_path, "a", buffering=1)  # noqa: SIM115 - children append to it too
        self.report: dict[str, Any] = {"argv": sys.argv, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                                       "budget_s": args.budget_s, "steps": {}, "scenarios": []}
        self.lock = threading.Lock()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def say(self, msg: str) -> None:
        line = f"[{self.elapsed():6.1f}s] {msg}"
        print(line, file=sys.stderr, flush=True)
        with self.lock:
            self.logf.write(line + "\n")

    def save(self) -> None:
        with self.lock:
            self.report["elapsed_s"] = round(self.elapsed(), 1)
            write_json_atomic(self.out / "residency.json", self.report)
            (self.out / "residency.md").write_text(render_md(self.report))

    def step(self, name: str, value: Any) -> None:
        with self.lock:
            self.report["steps"][name] = value
        self.save()


def mount_of(path: Path) -> tuple[str, str]:
    """(mount point, file system type) holding ``path`` (longest matching /proc/mounts entry)."""
    best = ("/", "?")
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    target = str(path.resolve())
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
            best = (mnt, parts[2])
    return best


def disk_probe(folder: Path, mib: int) -> dict[str, Any]:
    """Write ``mib`` MiB (+fsync), drop them with POSIX_FADV_DONTNEED, check with mincore, read them back."""
    from engine.residency.regions import Mapping, Region
    from engine.residency.resident import StoreResidency

    chunk = 8 << 20
    n = max(1, (mib << 20) // chunk)
    block = bytearray(os.urandom(chunk))
    path = folder / f".probe-{os.getpid()}"
    r: dict[str, Any] = {"bytes": n * chunk}
    try:
        t0 = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for i in range(n):
                block[:8] = i.to_bytes(8, "little")  # no two chunks alike (dedup-proof)
                os.write(fd, block)
            os.fsync(fd)
        finally:
            os.close(fd)
        r["write_GBps"] = n * chunk / 1e9 / (time.perf_counter() - t0)
        fd = os.open(path, os.O_RDONLY)
        try:
            dontneed(fd)
        finally:
            os.close(fd)
        with Mapping.open(path) as m:
            r["resident_after_drop"] = StoreResidency(m, [Region(0, 0, 0, m.size)]).refresh() / (n * chunk)
        t0 = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        try:
            while os.read(fd, chunk):
                pass
        finally:
            os.close(fd)
        r["read_GBps"] = n * chunk / 1e9 / (time.perf_counter() - t0)
    finally:
        path.unlink(missing_ok=True)
    return r


def checkpoint_sizes(preset: str, layers: int) -> tuple[int, int]:
    """(checkpoint bytes, expert bytes) of ``preset`` cut to ``layers`` layers."""
    import numpy as np

    from engine.checkpoint import expected_tensors
    from engine.config import ModelConfig
    from engine.synth import shape_with

    cfg = ModelConfig.from_dict(shape_with(preset, num_hidden_layers=layers).config_dict())
    size = {"U8": 1, "BF16": 2, "F32": 4}
    total = sum(int(np.prod(shp)) * size[dt] for dt, shp in expected_tensors(cfg).values())
    return total, layers * cfg.num_local_experts * cfg.expert_bytes()


def estimate_s(preset: str, layers: int, probe: dict[str, Any], scenarios: list[str], canary: bool) -> float:
    """Seconds the rest of the suite should take at ``layers`` (the time model above)."""
    total, experts = checkpoint_sizes(preset, layers)
    write = max(0.05, float(probe.get("write_GBps", 0.2)))
    prepare = T_DENSE + T_LAYER * layers + total / 1e9 / write
    if canary:
        prepare = max(prepare, T_DENSE + T_LAYER * 2 + T_PROCESS + T_CANARY_COMPILE)
    return prepare + sum(scenario_estimate_s(sc, experts, probe) for sc in scenarios)


def scenario_estimate_s(scenario: str, expert_bytes: int, probe: dict[str, Any]) -> float:
    """One scenario process: fixed cost, plus reading the experts back from disk when cold."""
    read = max(0.05, float(probe.get("read_GBps", 0.2))) * FAULT_READ_EFF
    return T_PROCESS + (expert_bytes / 1e9 / read if scenario.startswith("cold") else 0.0)


def choose_folder(s: Suite) -> tuple[Path, dict[str, Any]]:
    a = s.args
    cands = [Path(a.dir)] if a.dir else [Path.home() / "neural-res", Path("/var/tmp/neural-res"),
                                         Path("/tmp/neural-res")]
    need, _ = checkpoint_sizes(a.preset, a.min_layers if a.layers == "auto" else int(a.layers))
    tried = []
    fallback: tuple[Path, dict[str, Any]] | None = None
    for c in cands:
        info: dict[str, Any] = {"dir": str(c)}
        try:
            c.mkdir(parents=True, exist_ok=True)
            info["mount"], info["fs"] = mount_of(c)
            info["free_bytes"] = shutil.disk_usage(c).free
        except OSError as exc:
            info["error"] = str(exc)
            tried.append(info)
            continue
        if info["fs"] in NO_DROP_FS and not a.dir:
            info["skipped"] = "file system keeps pages in RAM"
            tried.append(info)
            continue
        if info["free_bytes"] < need + GIB:
            info["skipped"] = f"needs {(need + GIB) / GIB:.1f} GiB free"
            tried.append(info)
            continue
        try:
            info["probe"] = disk_probe(c, a.probe_mib)
        except OSError as exc:
            info["error"] = f"probe: {exc}"
            tried.append(info)
            continue
        tried.append(info)
        if info["probe"]["resident_after_drop"] < 0.5:
            return c, {"chosen": info, "tried": tried}
        if fallback is None:
            fallback = (c, info)
        s.say(f"{c}: POSIX_FADV_DONTNEED left {info['probe']['resident_after_drop']:.0%} resident; trying another")
    if fallback is not None:
        return fallback[0], {"chosen": fallback[1], "tried": tried, "warning": "page cache drop ineffective here"}
    raise RuntimeError(f"no usable disk folder: {json.dumps(tried)}")


def env_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "platform": sys.platform}
    from engine.residency.budget import MemoryInfo

    try:
        m = MemoryInfo.now()
        facts["ram_total_gib"], facts["ram_available_gib"] = round(m.total / GIB, 1), round(m.available / GIB, 1)
    except Exception as exc:  # psutil missing and no /proc/meminfo: record, do not fail
        facts["ram"] = f"unknown ({exc})"
    with_torch = "torch" in sys.modules
    facts["torch_imported_by_suite"] = with_torch
    return facts


# ---- the suite -----------------------------------------------------------------------------
class Terminated(Exception):
    pass


def _on_term(signum: int, _frame: Any) -> None:
    kill_children()  # they run in their own sessions: a killed suite must not leave a GPU process behind
    raise Terminated(f"signal {signum}")


def suite(args: argparse.Namespace) -> int:
    s = Suite(args)
    old = signal.signal(signal.SIGTERM, _on_term)
    try:
        return _suite(s)
    except (Exception, KeyboardInterrupt) as exc:
        kill_children()
        import traceback

        s.report["error"] = f"{type(exc).__name__}: {exc}"
        s.say(f"suite failed: {exc}\n{traceback.format_exc()}")
        s.save()
        print(render_md(s.report))
        return 1
    finally:
        signal.signal(signal.SIGTERM, old)
        s.logf.close()


def _suite(s: Suite) -> int:
    a = s.args
    scenarios = [x for x in a.scenarios.split(",") if x]
    for sc in scenarios:
        parse_scenario(sc)
    canary = a.canary == "on" or (a.canary == "auto" and a.backend in ("gpu", "gpu-interpret"))
    s.report["env"] = env_facts()
    s.say(f"suite: backend {a.backend}, scenarios {scenarios}, budget {a.budget_s:.0f} s")

    folder, place = choose_folder(s)
    probe = place["chosen"].get("probe", {})
    s.step("place", place)
    s.say(f"folder {folder} ({place['chosen'].get('fs')}): write {probe.get('write_GBps', 0):.2f} GB/s, "
          f"cold read {probe.get('read_GBps', 0):.2f} GB/s, resident after drop "
          f"{probe.get('resident_after_drop', 1):.0%}")

    if a.layers == "auto":
        free = place["chosen"]["free_bytes"] - GIB
        layers = a.min_layers
        estimates = {}
        for n in range(a.min_layers, a.max_layers + 1):
            est = estimate_s(a.preset, n, probe, scenarios, canary)
            estimates[n] = round(est, 1)
            if est <= 0.85 * s.left() and checkpoint_sizes(a.preset, n)[0] <= free:
                layers = n
        s.step("layers", {"chosen": layers, "auto": True, "estimate_s": estimates, "left_s": round(s.left(), 1),
                          "preset": a.preset, "skew": a.skew})
    else:
        layers = int(a.layers)
        s.step("layers", {"chosen": layers, "auto": False, "preset": a.preset, "skew": a.skew,
                          "estimate_s": {layers: round(estimate_s(a.preset, layers, probe, scenarios, canary), 1)}})
    total, experts = checkpoint_sizes(a.preset, layers)
    s.say(f"{layers} layers: checkpoint {total / GIB:.2f} GiB, experts {experts / GIB:.2f} GiB")

    model = folder / f"{a.preset}-L{layers}-skew{a.skew:g}"
    cache = folder / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    py = sys.executable
    mod = "bench.residency.cli"

    # canary (thread: prepare to /dev/shm, then the warm scenario there) next to the real prepare
    canary_result: dict[str, Any] = {}
    canary_dir = Path(a.canary_dir)

    def run_canary() -> None:
        t_end = time.monotonic() + a.canary_timeout_s
        c_layers = min(layers, a.canary_layers)
        shutil.rmtree(canary_dir, ignore_errors=True)
        rc, out, secs = run_child([py, "-m", mod, "prepare", "--out", str(canary_dir), "--layers", str(c_layers),
                                   "--preset", a.preset, "--store", "none", "--skew", str(a.skew), "--no-fsync"],
                                  t_end - time.monotonic(), stderr=s.logf)
        canary_result["prepare"] = {"rc": rc, "seconds": round(secs, 1), **(last_json(out) or {})}
        if rc != 0:
            s.say(f"canary prepare failed (rc {rc})")
            return
        env = dict(os.environ, NEURAL_CACHE_DIR=str(canary_dir / "cache"))
        partial = canary_dir / "one.json"
        rc, out, secs = run_child(one_argv(a, "warm", str(canary_dir), str(partial)), t_end - time.monotonic(),
                                  env=env, stderr=s.logf)
        r = last_json(out) or _read_json(partial) or {}
        r.update(rc=rc, wall_s=round(secs, 1), status=_status(rc))
        canary_result["run"] = r
        s.say(f"canary: {_status(rc)} in {secs:.1f} s (load {r.get('load_s', 0):.1f} s, prefill "
              f"{[t.get('prefill_path') for t in r.get('turns', [])]})")

    cthread = threading.Thread(target=run_canary, name="canary", daemon=True)
    if canary:
        cthread.start()
    t_prep = time.monotonic()
    rc, out, secs = run_child([py, "-m", mod, "prepare", "--out", str(model), "--layers", str(layers),
                               "--preset", a.preset, "--store", "none", "--skew", str(a.skew)],
                              max(30.0, s.left() - a.min_scenario_s), stderr=s.logf)
    prep = {"rc": rc, "seconds": round(secs, 1), **(last_json(out) or {})}
    s.step("prepare", prep)
    if rc != 0:
        raise RuntimeError(f"prepare failed (rc {rc}); see suite.log")
    s.say(f"prepare: {prep.get('checkpoint_bytes', 0) / GIB:.2f} GiB written in {prep.get('write_s', 0):.1f} s, "
          f"fsync {prep.get('fsync_s', 0):.1f} s")

    env = dict(os.environ, NEURAL_CACHE_DIR=str(cache))
    sargs = argparse.Namespace(**vars(a))
    compiled = False  # whether the canary filled the Triton cache
    if canary:
        cthread.join(max(0.0, a.canary_timeout_s - (time.monotonic() - t_prep)) + 5.0)
        shutil.rmtree(canary_dir, ignore_errors=True)  # /dev/shm is RAM: give it back before measuring
        s.step("canary", dict(canary_result) or {"status": "did not finish"})
        run = canary_result.get("run", {})
        if run.get("rc") == EXIT_NO_GPU:
            s.report["error"] = f"canary: {run.get('error', 'GPU backend not used')}; scenarios not run"
            s.say(s.report["error"])
            s.save()
            print(render_md(s.report))
            return 1
        compiled, token_path = canary_verdict(run)
        paths = [t.get("prefill_path") for t in run.get("turns", [])]
        if token_path:
            env["NEURAL_GPU_PREFILL"] = "0"
            sargs.prompt_tokens = min(a.prompt_tokens, FALLBACK_PROMPT_TOKENS)
            s.say(f"the layer-major prompt path failed in the canary ({run.get('status')}, paths {paths}): "
                  f"scenarios use NEURAL_GPU_PREFILL=0 and {sargs.prompt_tokens}-token prompts")
    s.report["scenario_env"] = {k: env[k] for k in ("NEURAL_CACHE_DIR", "NEURAL_GPU_PREFILL") if k in env}
    s.report["scenario_prompt_tokens"] = sargs.prompt_tokens

    abort = ""
    hot_set: dict[str, bytes] | None = None
    for i, sc in enumerate(scenarios):
        left = s.left()
        entry: dict[str, Any] = {"scenario": sc}
        if abort or left < a.min_scenario_s:
            entry.update(status="skipped", reason=abort or f"{left:.0f} s left")
            s.report["scenarios"].append(entry)
            s.say(f"{sc}: skipped ({entry['reason']})")
            s.save()
            continue
        if hot_set is not None:  # every later process starts from the first one's hot set, not its
            for old_file in cache.glob("hotset-*.npy"):  # predecessor's (each re-saves it at close)
                old_file.unlink()
            for name, data in hot_set.items():
                (cache / name).write_bytes(data)
        est = scenario_estimate_s(sc, experts, probe) + (0.0 if compiled or i else T_CANARY_COMPILE)
        timeout = min(left - 2.0, a.scenario_timeout_s or max(60.0, 2.5 * est))
        partial = folder / f"one-{sc}.json"
        partial.unlink(missing_ok=True)
        s.say(f"{sc}: start (timeout {timeout:.0f} s)")
        rc, out, secs = run_child(one_argv(sargs, sc, str(model), str(partial)), timeout, env=env, stderr=s.logf)
        r = last_json(out) or _read_json(partial) or {}
        r.update(scenario=sc, status=_status(rc), rc=rc, wall_s=round(secs, 1))
        if rc == EXIT_NO_GPU:
            abort = r.get("error", "GPU backend not used")
        if hot_set is None:
            hot_set = {p.name: p.read_bytes() for p in cache.glob("hotset-*.npy")}
            s.report["hot_set_files"] = sorted(hot_set)
        s.report["scenarios"].append(r)
        s.save()
        s.say(f"{sc}: {r['status']} in {secs:.1f} s")
    if not a.keep:
        shutil.rmtree(model, ignore_errors=True)
    s.save()
    md = render_md(s.report)
    print(md)
    ok = all(r.get("status") == "ok" for r in s.report["scenarios"])
    return 0 if ok else 1


def canary_verdict(run: dict[str, Any]) -> tuple[bool, bool]:
    """(the Triton cache is filled, the scenarios should use token-by-token prompts) from the
    canary's result: token-by-token when its first prompt fell back, or when it loaded and then
    died or hung before finishing its first turn."""
    paths = [t.get("prefill_path") for t in run.get("turns", [])]
    fell_back = bool(paths) and paths[0] == "token-by-token"
    stuck_in_prompt = run.get("rc") != 0 and "load_s" in run and not paths
    return run.get("status") == "ok", fell_back or stuck_in_prompt


def _status(rc: int | None) -> str:
    return "ok" if rc == 0 else "timeout" if rc is None else f"exit {rc}"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads(path.read_text())
        return obj if isinstance(obj, dict) else None
    except (OSError, ValueError):
        return None


# ---- markdown ------------------------------------------------------------------------------
def _g(b: Any) -> str:
    return f"{b / GIB:.2f} GiB" if isinstance(b, int | float) else "?"


def render_md(rep: dict[str, Any]) -> str:
    steps = rep.get("steps", {})
    place = steps.get("place", {}).get("chosen", {})
    probe = place.get("probe", {})
    lay = steps.get("layers", {})
    prep = steps.get("prepare", {})
    env = rep.get("env", {})
    lines = [f"## RAM residency benchmark ({rep.get('started', '?')}, {rep.get('elapsed_s', 0):.0f} s of "
             f"{rep.get('budget_s', 0):.0f})", ""]
    if rep.get("error"):
        lines += [f"**error:** {rep['error']}", ""]
    lines.append(f"- machine: {env.get('cpus', '?')} CPUs, RAM {env.get('ram_total_gib', '?')} GiB "
                 f"({env.get('ram_available_gib', '?')} available), Python {env.get('python', '?')}")
    if place:
        lines.append(f"- disk: {place.get('dir')} on {place.get('fs')} ({place.get('mount')}), "
                     f"write+fsync {probe.get('write_GBps', 0):.2f} GB/s, cold sequential read "
                     f"{probe.get('read_GBps', 0):.2f} GB/s, resident after fadvise drop "
                     f"{probe.get('resident_after_drop', 1):.0%} (probe {probe.get('bytes', 0) >> 20} MiB)")
    if steps.get("place", {}).get("warning"):
        lines.append(f"- **warning:** {steps['place']['warning']}")
    if lay:
        lines.append(f"- model: synthetic {lay.get('preset')}, {lay.get('chosen')} of 36 layers "
                     f"({'auto' if lay.get('auto') else 'set'}; estimated s by layers {lay.get('estimate_s')}), "
                     f"routing skew {lay.get('skew')}")
    if prep:
        lines.append(f"- prepare: {_g(prep.get('checkpoint_bytes'))} written in {prep.get('write_s', 0):.1f} s, "
                     f"fsync {prep.get('fsync_s', 0):.1f} s (rc {prep.get('rc')})")
    can = steps.get("canary")
    if can:
        run = can.get("run", {})
        lines.append(f"- canary (Triton JIT + prompt-path check, /dev/shm): {run.get('status', 'not run')}, "
                     f"load {run.get('load_s', 0):.1f} s, first prompt {_turn(run, 0, 'prompt_s'):.2f} s, "
                     f"prefill paths {[t.get('prefill_path') for t in run.get('turns', [])]}, wall "
                     f"{run.get('wall_s', 0)} s")
    if rep.get("scenario_env"):
        lines.append(f"- scenario env: {rep['scenario_env']}; prompt tokens asked {rep.get('scenario_prompt_tokens')}; "
                     f"hot set from the first scenario: {rep.get('hot_set_files', 'n/a')}")
    scen = rep.get("scenarios", [])
    if scen:
        with_budget = [r for r in scen if r.get("ram_budget")]  # a cold scenario's (warm holds everything)
        first: dict[str, Any] = next((r for r in with_budget if str(r.get("scenario", "")).startswith("cold")),
                                     with_budget[0] if with_budget else {})
        if first:
            lines.append(f"- {first.get('ram_budget')}; source {first.get('source')}; "
                         f"VRAM plan: {first.get('vram_plan', 'n/a')}")
        lines += ["", "| scenario | status | wall s | load s | warm-up wait s | experts in RAM after drop | "
                  "plan | static VRAM experts | hot set loaded |", "|---|---|---|---|---|---|---|---|---|"]
        for r in scen:
            drop = r.get("drop", {})
            after = (f"{drop['resident_after'] / max(1, drop['expert_bytes']):.1%}" if drop else "n/a")
            lines.append(f"| {r.get('scenario')} | {r.get('status')}{' ' + r['reason'] if r.get('reason') else ''}"
                         f"{' — ' + r['error'] if r.get('error') else ''} | {r.get('wall_s', '')} | "
                         f"{_f(r.get('load_s'))} | {_f(r.get('warm_s'))} | {after} | {_g(r.get('plan_bytes'))} | "
                         f"{r.get('static_vram_experts', '')} | {r.get('hot_set_loaded', '')} |")
        lines += ["", _fmt_md([r for r in scen if r.get("turns")]).rstrip(), ""]
        lines += ["| scenario | turn | prompt major faults | prompt path | peak VRAM reserved in prompt | "
                  "worst decode step faults | store in RAM after trim |", "|---|---|---|---|---|---|---|"]
        for r in scen:
            sb = max(1, r.get("store_bytes", 1))
            for t in r.get("turns", []):
                v = t.get("vram_boundary", {})
                trim = f"{t['resident_after_trim'] / sb:.0%}" if "resident_after_trim" in t else ""
                lines.append(f"| {r.get('scenario')} | {t.get('turn')} | {t.get('prompt_major_faults', '')} | "
                             f"{t.get('prefill_path', '')} | {_g(v.get('peak_reserved_prompt'))} | "
                             f"{t.get('worst_step_faults', '')} | {trim} |")
    lines += ["", "Faults per token are process-wide over each answer (its first token included) minus the "
              "warm-up thread's own; decode tok/s and faults are for the layers above (36-layer model: "
              "tok/s × layers/36, faults × 36/layers, CALCULATED). Raw data: residency.json.", ""]
    return "\n".join(lines)


def _turn(r: dict[str, Any], i: int, key: str) -> float:
    turns = r.get("turns", [])
    return float(turns[i].get(key, 0.0)) if len(turns) > i else 0.0


def _f(x: Any) -> str:
    return f"{x:.1f}" if isinstance(x, int | float) else ""

"""Sampler cost per token at the real vocabulary (201,088), on the CPU or where the logits are (CUDA).

    python -m bench.device.sampler_bench --device cuda      # the H200 run: graph vs eager
    python -m bench.device.sampler_bench --device cpu --threads 1 [--device-code]

Two logit shapes: "peaked" (a few strong tokens over a Gaussian floor, like a trained model's
next-token distribution) and "flat" (N(0, 1): the synthetic checkpoints' random weights, where
top-p 0.9 keeps ~90% of the vocabulary). Samplers: "new" (the engine's: on CUDA the sort-free
path replayed as a CUDA graph) and, on CUDA, "new-eager" (the same ops without the graph). The
previous sampler (torch.topk candidates, a full stable sort when the kept set ran past them) was
timed beside them once, in the same run: bench/results/h200-session6/call4-sampler-cuda.json
("old"; its code is in git history at 5243089, bench/device/sampler_old.py).
Each setting: median of ``--repeats`` blocks of ``--tokens`` calls, in ms
per token; "+greedy" subtracts that sampler's greedy time. CUDA timings include the host read
(each call ends in one synchronising int()). On CUDA the new paths' tokens are also checked
against the host (numpy) path on the same logits and seed: they must be identical.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

import engine.sampling_device as sampling_device
from engine.sampling import Sampler

VOCAB = 201_088
SETTINGS: dict[str, dict[str, object]] = {
    "greedy": {"temperature": 0.0},
    "T=1": {"temperature": 1.0},
    "T=1 top_p=0.9": {"temperature": 1.0, "top_p": 0.9},
    "T=1 top_k=50 top_p=0.9 min_p=0.05": {"temperature": 1.0, "top_k": 50, "top_p": 0.9, "min_p": 0.05},
    "T=1 top_p=0.9 + penalties/bias": {"temperature": 1.0, "top_p": 0.9, "repetition_penalty": 1.1,
                                       "presence_penalty": 0.5, "frequency_penalty": 0.5,
                                       "logit_bias": ((5, 2.0), (9, -100.0))},
}


def logits_rows(kind: str, n: int, device: str) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(n):
        if kind == "flat":
            x = torch.randn(VOCAB, generator=g)
        else:
            x = torch.randn(VOCAB, generator=g) * 2.0
            x[torch.randint(0, VOCAB, (20,), generator=g)] += 14.0
        rows.append(x.to(device))
    return rows


def make(name: str, device_code: bool = False) -> Sampler:
    kw = SETTINGS[name]
    prompt = list(range(0, 200_000, 97)) if "penalties" in name else []
    s = Sampler(seed=1, prompt=prompt, **kw)  # type: ignore[arg-type]
    if device_code:
        s.host_math = False  # the device code (torch) on the CPU
    return s


def time_one(s: Sampler, rows: list[torch.Tensor], tokens: int, repeats: int,
             sync: Callable[[], None]) -> dict[str, float]:
    for i in range(sampling_device.CAPTURE_AFTER + 4):
        s(rows[i % len(rows)])  # warm-up (CUDA kernels, allocator, graph capture)
    blocks = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for i in range(tokens):
            s(rows[i % len(rows)])
        blocks.append(1e3 * (time.perf_counter() - t0) / tokens)
    return {"ms_per_token": statistics.median(blocks), "min": min(blocks),
            "full_sorts_per_token": s.fallbacks / max(s.calls, 1)}


def same_tokens(name: str, rows: list[torch.Tensor], n: int) -> dict[str, bool]:
    """The new sampler on the device (graph and eager) against the host path: same seed, same rows."""
    host = make(name)
    want = [host(x.cpu()) for x in rows[:n]]
    out = {}
    for graphs in (True, False):
        sampling_device.USE_CUDA_GRAPHS = graphs
        s = make(name)
        for i in range(sampling_device.CAPTURE_AFTER + 1):  # to the capture, then a fresh sampler
            s(rows[i % len(rows)])
        s = make(name)
        out["graph" if graphs else "eager"] = [s(x) for x in rows[:n]] == want
        if graphs:
            out["graph captured"] = sampling_device.graphs_captured()[-1:] == [True]
    sampling_device.USE_CUDA_GRAPHS = True
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--check-tokens", type=int, default=8, help="tokens compared with the host path (CUDA)")
    ap.add_argument("--device-code", action="store_true", help="on the CPU: time the device code (torch), not numpy")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    impls = ("new", "new-eager") if cuda else ("new",)
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    checks: dict[str, dict[str, dict[str, bool]]] = {}
    for kind in ("peaked", "flat"):
        rows = logits_rows(kind, 16, args.device)
        out[kind], checks[kind] = {}, {}
        for impl in impls:
            sampling_device.USE_CUDA_GRAPHS = impl != "new-eager"
            out[kind][impl] = {name: time_one(make(name, args.device_code), rows, args.tokens, args.repeats, sync)
                               for name in SETTINGS}
        sampling_device.USE_CUDA_GRAPHS = True
        if cuda:
            checks[kind] = {name: same_tokens(name, rows, args.check_tokens) for name in SETTINGS if name != "greedy"}
    if args.json:
        print(json.dumps({"device": args.device, "threads": args.threads, "vocab": VOCAB, "results": out,
                          "same_tokens_as_host": checks}, indent=2))
        return
    print(f"sampler ms/token, vocab {VOCAB}, device {args.device}, {args.threads} torch thread(s); "
          f"median of {args.repeats} x {args.tokens}")
    for kind, by_impl in out.items():
        for name in SETTINGS:
            cells = []
            for impl, res in by_impl.items():
                r, g = res[name], res["greedy"]["ms_per_token"]
                cells.append(f"{impl} {r['ms_per_token']:7.3f} ({r['ms_per_token'] - g:+7.3f})")
            print(f"  {kind:6s} {name:36s} " + "  ".join(cells))
        for name, ok in checks[kind].items():
            print(f"  {kind:6s} {name:36s} same tokens as the host path: "
                  + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in ok.items()))


if __name__ == "__main__":
    main()

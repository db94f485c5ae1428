"""Sampler cost per token at the real vocabulary (201,088), on the CPU or where the logits are (CUDA).

    python -m bench.device.sampler_bench --device cpu --threads 1
    python -m bench.device.sampler_bench --device cuda

Two logit shapes: "peaked" (a few strong tokens over a Gaussian floor, like a trained model's
next-token distribution) and "flat" (N(0, 1): the synthetic checkpoints' random weights, where
top-p 0.9 keeps ~90% of the vocabulary and needs the full sort). Each setting: median of
``--repeats`` blocks of ``--tokens`` calls, in ms per token; the "+greedy" column subtracts the
greedy sampler's time. The CUDA timings include the transfer and the host work (each call ends
in a synchronising int()).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for kind in ("peaked", "flat"):
        rows = logits_rows(kind, 16, args.device)
        out[kind] = {}
        for name, kw in SETTINGS.items():
            prompt = list(range(0, 200_000, 97)) if "penalties" in name else []
            s = Sampler(seed=1, prompt=prompt, **kw)  # type: ignore[arg-type]
            for x in rows[:4]:
                s(x)  # warm-up (CUDA kernels, allocator)
            blocks = []
            for _ in range(args.repeats):
                sync()
                t0 = time.perf_counter()
                for i in range(args.tokens):
                    s(rows[i % len(rows)])
                blocks.append(1e3 * (time.perf_counter() - t0) / args.tokens)
            out[kind][name] = {"ms_per_token": statistics.median(blocks), "min": min(blocks),
                               "full_sorts_per_token": s.fallbacks / s.calls}
    if args.json:
        print(json.dumps({"device": args.device, "threads": args.threads, "vocab": VOCAB, "results": out}, indent=2))
        return
    print(f"sampler ms/token, vocab {VOCAB}, device {args.device}, {args.threads} torch thread(s); "
          f"median of {args.repeats} x {args.tokens}")
    for kind, res in out.items():
        g = res["greedy"]["ms_per_token"]
        for name, r in res.items():
            print(f"  {kind:6s} {name:36s} {r['ms_per_token']:8.3f} (min {r['min']:.3f})  "
                  f"+greedy {r['ms_per_token'] - g:+8.3f}  full sorts/token {r['full_sorts_per_token']:.2f}")


if __name__ == "__main__":
    main()

"""Where a CPU-engine decode token goes: the native kernels, their bytes, and everything else.

    python -m bench.kernel.cpu_decode_split CKPT [--threads 2] [--tokens 48] [--depth 8] [--separate-qkv] [--isa ISA]
                                              [--json]

Loads CKPT on the CPU engine (the shipping path: native experts, native one-token projections and
attention, bf16), decodes ``--tokens`` teacher-forced tokens plainly (the tok/s a user gets) and
through the shipped generation loop (Engine.complete at temperature 0, as `neural bench decode`:
what the sampler, the detokenizer and the events add) in the order plain, loop, loop, plain (means
reported, each printed), once with each native entry point timed (the split: the per-piece path,
as the wrappers send each layer), once more on the shipped fused layer with only the layer and its
two native calls timed (the Python around them, and the time outside the layers), and reads the
checkpoint's expert bytes with the same thread team once with each ISA's read loop (the DRAM
probe: the best of them). It prints ms per token and GB/s per part, the bytes a token must read,
and the floor those bytes set at the probe's rate (CALCULATED): the time no arrangement of the
same arithmetic can beat on this machine.
``--separate-qkv`` runs q, k and v as one native call each (as before ``neural_linear_bf16_n``),
the baseline of an A/B in one build.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import defaultdict
from typing import Any

import numpy as np

from bench.kernel.read_probe import probe_each_isa
from native.kernel import KernelError


def _kind(name: str) -> str:
    if name.endswith("lm_head.weight") or name.endswith("embed_tokens.weight"):
        return "head"
    return name.split(".")[-2]  # q_proj, k_proj, v_proj, o_proj, router


def _through_generate(eng: Any, be: Any, prompt: list[int], tokens: int) -> dict[str, float]:
    """``tokens`` tokens through the shipped generation loop (Engine.complete: the sampler at temperature 0, the
    detokenizer, the events) after ``prompt``, as `neural bench decode` runs it; the time a token spends in the
    backend's forward apart from the rest (what the loop adds to the plain forwards)."""
    from bench.harness.engine_bench import stops_biased_away
    from engine.types import Done, GenerationParams

    params = GenerationParams(max_tokens=tokens + 1, temperature=0.0, seed=0, logit_bias=stops_biased_away(eng))
    inner = be.forward
    spent = [0.0, 0]
    me = threading.get_ident()  # the loop's thread; the prompt runs on the engine's prompt thread

    def forward(ids: list[int], *args: Any, **kw: Any) -> Any:
        a = time.perf_counter()
        y = inner(ids, *args, **kw)
        if threading.get_ident() == me:  # the decode's forwards, not the prompt's
            spent[0] += time.perf_counter() - a
            spent[1] += 1
        return y

    be.forward = forward
    try:
        done = next(ev for ev in eng.complete(list(prompt), params) if isinstance(ev, Done))
    finally:
        del be.forward  # the instance attribute: the class's method again
    if done.finish_reason == "error":
        raise RuntimeError(f"decode failed: {done.error}")
    n = max(spent[1], 1)
    s = eng.last_sampler
    return {"ms_per_token": 1e3 * done.usage.decode_seconds / n, "forward_ms": 1e3 * spent[0] / n,
            "outside_ms": 1e3 * (done.usage.decode_seconds - spent[0]) / n,
            "sampler_ms": 1e3 * s.seconds / max(s.calls, 1)}


def _fused_pass(model: Any, be: Any, ids: list[int]) -> dict[str, float] | None:
    """Decode ``ids`` on the shipped path with NativeDecode.layer and its two native calls timed: the Python around
    the calls a layer, and what a token spends outside the layers (embedding, final norm, head). None where the
    fused layer is not the model's (then the split above is the shipped path)."""
    nd = getattr(model, "_decode", None)
    if nd is None or not getattr(nd, "enabled", False):
        return None
    k = nd.kernel
    spent = {"native": 0.0, "layer": 0.0, "layers": 0.0, "moe": 0.0}
    attn, moe, layer = k.decode_attn, k.decode_moe, nd.layer

    def timed(f: Any, total: str, count: str | None) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            a = time.perf_counter()
            try:
                return f(*args, **kw)
            finally:
                spent[total] += time.perf_counter() - a
                if count:
                    spent[count] += 1
        return call

    k.decode_attn, k.decode_moe = timed(attn, "native", None), timed(moe, "native", "moe")
    nd.layer = timed(layer, "layer", "layers")
    try:
        t0 = time.perf_counter()
        for t in ids:
            be.forward([t])
        total = time.perf_counter() - t0
    finally:  # the instance attributes go: the class's methods again
        del k.decode_attn, k.decode_moe, nd.layer
    n = len(ids)
    return {"ms_per_token": 1e3 * total / n, "fused_layers_per_token": spent["moe"] / n,
            "native_ms_per_token": 1e3 * spent["native"] / n,
            "glue_us_per_layer": 1e6 * (spent["layer"] - spent["native"]) / max(spent["layers"], 1),
            "outside_layers_ms_per_token": 1e3 * (total - spent["layer"]) / n}


def run(ckpt: str, threads: int, tokens: int, depth: int = 8, separate_qkv: bool = False,
        isa: str | None = None, spin_us: int | None = None) -> dict[str, Any]:
    import torch

    from engine.session import Engine
    from engine.settings import EngineSettings

    eng = Engine.load(ckpt, EngineSettings(backend="cpu", cpu_threads=threads))
    be: Any = eng.backend
    model = getattr(be, "model", None)
    if getattr(be, "name", "") != "cpu-native" or model is None or model._native is None:
        eng.close()
        raise ValueError("the native CPU engine did not load (see `neural doctor`); nothing to split")
    experts_fn, native = model.experts_fn, model._native
    kernel, cfg = native.kernel, model.cfg
    if isa is not None:  # the process-wide kernel: every native call of the engine uses this ISA's table
        try:
            kernel.set_isa(isa)
        except Exception:
            eng.close()
            raise
    if spin_us is not None:  # how long the team's workers spin for the next job before they sleep (default 200)
        kernel.set_spin_us(spin_us)
    if separate_qkv:  # a projection without many(): the reference runs q, k and v one call each
        model._native = lambda x, w, b=None: native(x, w, b)
    feed = [int(i) for i in np.random.default_rng(0).integers(100, min(cfg.vocab_size, 30000), 4 * tokens + depth)]
    be.forward(feed[:depth])  # the prompt; every dense weight is loaded from here on
    for t in feed[depth : depth + tokens]:  # warm: first touch of the experts' pages is not decode
        be.forward([t])
    def plain() -> float:
        t0 = time.perf_counter()
        for t in feed[depth + tokens : depth + 2 * tokens]:
            be.forward([t])
        return (time.perf_counter() - t0) / tokens

    # plain, loop, loop, plain: a drifting machine (or pages still being touched) weighs on both alike; session 25
    # read the loop's forwards 1.1 ms slower than plain ones on the H200 host, once, in the order plain, loop
    p1 = plain()
    loops = [_through_generate(eng, be, feed[:depth], tokens) for _ in range(2)]
    p2 = plain()
    plain_s = (p1 + p2) / 2
    loop: dict[str, Any] = {k: (loops[0][k] + loops[1][k]) / 2 for k in loops[0]}
    loop["plain_ms_each"] = [round(1e3 * p1, 3), round(1e3 * p2, 3)]
    loop["loop_ms_each"] = [round(x["ms_per_token"], 3) for x in loops]
    loop["loop_forward_ms_each"] = [round(x["forward_ms"], 3) for x in loops]

    names = {id(w): n for n, w in model._dense.items()}
    spent: dict[str, float] = defaultdict(float)
    nbytes: dict[str, float] = defaultdict(float)
    record = int(experts_fn.__self__.record_bytes)

    class Linear:  # the projections, timed: one call each, or q, k and v together (NativeLinear.many)
        def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor | None:
            return self.many(x, [(w, b)], one=True)

        def many(self, x: torch.Tensor, pairs: list[tuple[torch.Tensor, torch.Tensor | None]],
                 one: bool = False) -> Any:
            if separate_qkv and not one:
                return None
            a = time.perf_counter()
            y = native(x, *pairs[0]) if one else native.many(x, pairs)
            k = "qkv_proj" if len(pairs) == 3 else _kind(names.get(id(pairs[0][0]), "other.linear"))
            spent[k] += time.perf_counter() - a
            nbytes[k] += sum(w.numel() * 2 + (0 if b is None else b.numel() * 2) for w, b in pairs)
            return y

    def experts(layer: int, t: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor, **kw: Any) -> torch.Tensor:
        a = time.perf_counter()
        y = experts_fn(layer, t, idx, weights, **kw)
        spent["experts"] += time.perf_counter() - a
        nbytes["experts"] += len(set(idx.reshape(-1).tolist())) * record
        return y

    attn = model._native_attn

    def attention(*args: Any) -> Any:
        a = time.perf_counter()
        y = attn(*args)
        spent["attention"] += time.perf_counter() - a
        return y

    model._native, model.experts_fn, model._native_attn = Linear(), experts, attention
    try:
        t0 = time.perf_counter()
        for t in feed[depth + 2 * tokens : depth + 3 * tokens]:
            be.forward([t])
        split_s = (time.perf_counter() - t0) / tokens
    finally:
        model._native, model.experts_fn, model._native_attn = native, experts_fn, attn
    fused = _fused_pass(model, be, feed[depth + 3 * tokens : depth + 4 * tokens])
    arrays = [model.ck.array(f"model.layers.{i}.mlp.experts.gate_up_proj_blocks") for i in range(cfg.num_hidden_layers)]
    probes = probe_each_isa(kernel, [(arr, arr.nbytes) for arr in arrays])
    probe = max(probes.values())
    eng.close()
    parts = {k: {"ms_per_token": 1e3 * v / tokens, "MB_per_token": nbytes[k] / tokens / 1e6,
                 "GB_s": nbytes[k] / v / 1e9 if v > 0 and nbytes[k] else None} for k, v in spent.items()}
    native_s = sum(spent.values()) / tokens
    token_bytes = sum(nbytes.values()) / tokens
    return {"ckpt": ckpt, "threads": threads, "tokens": tokens, "depth": depth, "isa": kernel.isa, "spin_us": spin_us,
            "tok_s_MEASURED": 1.0 / plain_s, "ms_per_token_MEASURED": 1e3 * plain_s,
            "ms_per_token_split": 1e3 * split_s, "generate": loop, "parts": parts, "separate_qkv": separate_qkv,
            "other_ms_per_token": 1e3 * (split_s - native_s),
            # the split's wrappers send each layer the per-piece way (engine/native_decode.py does not go around
            # them); the shipped fused layer's glue is measured in a pass of its own (subtracting the parts from
            # the plain run mixed two windows of a machine whose memory rate moves: 10 ms against 3.1 measured)
            "fused": fused,
            "MB_per_token": token_bytes / 1e6, "probe_GB_s_MEASURED": probe / 1e9,
            "probe_GB_s_by_isa": {k: v / 1e9 for k, v in probes.items()},
            "floor_ms_CALCULATED": 1e3 * token_bytes / probe, "floor_tok_s_CALCULATED": probe / token_bytes}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kernel.cpu_decode_split", description=__doc__.split("\n\n")[0])
    p.add_argument("ckpt")
    p.add_argument("--threads", type=int, default=2, help="the native team (the CPU engine's threads)")
    p.add_argument("--tokens", type=int, default=48, help="decode tokens per phase (warm, plain, split)")
    p.add_argument("--depth", type=int, default=8, help="prompt tokens before the decode (the context's depth)")
    p.add_argument("--separate-qkv", action="store_true", help="q, k and v one native call each (the old path)")
    p.add_argument("--isa", help="the kernel's ISA table (e.g. avx2 on an AVX-512 machine); default: the best")
    p.add_argument("--spin-us", type=int, help="the team's spin before its workers sleep (the kernel's default: 200)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.spin_us is not None and a.spin_us < 0:
        p.error("--spin-us must be >= 0")
    if a.tokens < 1 or a.threads < 1 or a.depth < 1:
        p.error("--tokens, --threads and --depth must be >= 1")
    try:
        r = run(a.ckpt, a.threads, a.tokens, a.depth, a.separate_qkv, a.isa, a.spin_us)
    except (ValueError, OSError, KernelError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(r))
        return 0
    print(f"{r['ckpt']}: {r['threads']} threads, {r['isa']}, depth {r['depth']}; {r['tok_s_MEASURED']:.2f} tok/s "
          f"({r['ms_per_token_MEASURED']:.2f} ms/token; {r['ms_per_token_split']:.2f} with the timers) MEASURED")
    g = r["generate"]
    print(f"through Engine.complete (temperature 0): {1e3 / g['ms_per_token']:.2f} tok/s ({g['ms_per_token']:.2f} "
          f"ms/token: forward {g['forward_ms']:.2f}, the rest {g['outside_ms']:.2f}, of it the sampler "
          f"{g['sampler_ms']:.2f}) MEASURED; in order: plain {g['plain_ms_each'][0]}, loop {g['loop_ms_each']} "
          f"(forwards {g['loop_forward_ms_each']}), plain {g['plain_ms_each'][1]} ms/token")
    for k, v in sorted(r["parts"].items(), key=lambda kv: -kv[1]["ms_per_token"]):
        rate = f"{v['GB_s']:6.1f} GB/s" if v["GB_s"] else "     -     "
        print(f"  {k:10s} {v['ms_per_token']:7.3f} ms  {v['MB_per_token']:7.1f} MB  {rate}")
    print(f"  {'other':10s} {r['other_ms_per_token']:7.3f} ms  (Python and PyTorch between the native calls, per-piece "
          f"path)")
    f = r["fused"]
    if f:
        print(f"the shipped fused layer, one more pass: {f['ms_per_token']:.2f} ms/token, "
              f"{f['fused_layers_per_token']:.1f} fused layers a token; their two native calls "
              f"{f['native_ms_per_token']:.2f} ms, the Python around them {f['glue_us_per_layer']:.1f} us a layer; "
              f"outside the layers (embedding, final norm, head) {f['outside_layers_ms_per_token']:.2f} ms MEASURED")
    each = ", ".join(f"{k} {v:.1f}" for k, v in r["probe_GB_s_by_isa"].items())
    print(f"bytes per token {r['MB_per_token']:.1f} MB; DRAM probe {r['probe_GB_s_MEASURED']:.1f} GB/s "
          f"(best of {each}): floor "
          f"{r['floor_ms_CALCULATED']:.2f} ms = {r['floor_tok_s_CALCULATED']:.1f} tok/s (CALCULATED)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

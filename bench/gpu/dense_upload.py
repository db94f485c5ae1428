"""The GPU core's dense weights to the GPU, the old way against the new, mirrored in one process (issue 16: load
time, what every launch waits for): A copies each weight out of the checkpoint's mapping on the host, then uploads
it (``Checkpoint.bf16(...).to(dev)``); B uploads from the mapping itself (``engine.gpu.core.dense_cat``). Each round
drops the uploads before the next; the checkpoint's pages are in the page cache after the first pass, as they are
for a launch that follows another.

    python -m bench.gpu.dense_upload CKPT [--rounds 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from engine.checkpoint import Checkpoint
from engine.gpu.core import dense_cat


def names(ck: Checkpoint) -> list[list[str]]:
    cfg = ck.config
    out: list[list[str]] = []
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        out.append([a + f"{n}_proj.weight" for n in "qkv"])
        out.append([a + f"{n}_proj.bias" for n in "qkv"])
        out += [[p + "input_layernorm.weight"], [a + "sinks"], [a + "o_proj.weight"], [a + "o_proj.bias"],
                [p + "post_attention_layernorm.weight"], [p + "mlp.router.weight"], [p + "mlp.router.bias"]]
    out.append(["model.norm.weight"])
    out.append(["model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"])
    return out


def old_way(ck: Checkpoint, group: list[str], dev: torch.device) -> torch.Tensor:
    return torch.cat([ck.bf16(n) for n in group]).to(dev).contiguous()


def new_way(ck: Checkpoint, group: list[str], dev: torch.device) -> torch.Tensor:
    return dense_cat(ck, group, dev)


def timed(fn, ck: Checkpoint, groups: list[list[str]], dev: torch.device) -> tuple[float, list[torch.Tensor]]:
    torch.cuda.synchronize()
    t = time.perf_counter()
    held = [fn(ck, g, dev) for g in groups]
    torch.cuda.synchronize()
    return time.perf_counter() - t, held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ckpt")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dev = torch.device("cuda")
    ck = Checkpoint.open(args.ckpt)
    groups = names(ck)
    nbytes = sum(ck.bf16_view(n).numel() * 2 for g in groups for n in g)
    res: dict[str, list[float]] = {"old": [], "new": []}
    first_s, _ = timed(old_way, ck, groups, dev)  # untimed pass: the file's pages in the page cache
    same = True
    for _ in range(args.rounds):
        for way in ("old", "new", "new", "old"):
            s, held = timed(old_way if way == "old" else new_way, ck, groups, dev)
            res[way].append(s)
            if way == "new":
                ref = [old_way(ck, g, dev) for g in groups[:4] + groups[-2:]]
                same &= all(torch.equal(a, b) for a, b in zip(ref, held[:4] + held[-2:], strict=True))
            del held
            torch.cuda.empty_cache()
    ck.close()
    out = {"bytes": nbytes, "first_pass_s": first_s, "bit_identical": same,
           **{f"{k}_s": v for k, v in res.items()},
           **{f"{k}_median_s": statistics.median(v) for k, v in res.items()},
           **{f"{k}_GBps": nbytes / statistics.median(v) / 1e9 for k, v in res.items()}}
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:16s} {v}")


if __name__ == "__main__":
    main()

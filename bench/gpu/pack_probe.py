"""Where the staging ring's packing time goes (GPU machine): ``python3 -m bench.gpu.pack_probe CKPT``.

Packs the same random experts of a 120b-shape checkpoint several ways and prints GB/s of expert
bytes: the ring as the prompt path runs it (first touch of the pages in this process, then the
same experts again), after filling the page tables (MADV_POPULATE_READ), with the native
streaming copy, with more threads; next to a plain memcpy between anonymous buffers and a read
probe of the mapping, and the CPU multi-token kernel alone and while the ring packs.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.checkpoint import Checkpoint
from engine.gpu.layout import SLOT_PARTS, ExpertLayout
from engine.gpu.prefill.staging import StagingRing


def pack_rate(ck: Checkpoint, lay: ExpertLayout, keys: list[tuple[int, int]], threads: int,
              stream: bool) -> float:
    ring = StagingRing(ck, lay, 4, pinned=torch.cuda.is_available(), pack_threads=threads, stream_copy=stream)
    t0 = time.perf_counter()
    for layer, e in keys:
        ring.submit(layer, [e])
        _, _, buf = ring.take()
        ring.give_back(buf, None)
    dt = time.perf_counter() - t0
    ring.close()
    return len(keys) * lay.payload_bytes / dt / 1e9


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    ck = Checkpoint.open(Path(args[0]))
    cfg = ck.config
    lay = ExpertLayout.for_config(cfg)
    rng = np.random.default_rng(0)
    all_keys = [(layer, e) for layer in range(cfg.num_hidden_layers) for e in range(cfg.num_local_experts)]
    picks = [all_keys[int(i)] for i in rng.permutation(len(all_keys))]
    n = int(args[1]) if len(args) > 1 else 120
    sets = [picks[i * n : (i + 1) * n] for i in range(8)]
    out: dict[str, Any] = {"experts_per_set": n, "expert_mb": lay.payload_bytes / 1e6}
    out["ring_8t_first_touch"] = pack_rate(ck, lay, sets[0], 8, False)
    out["ring_8t_again"] = pack_rate(ck, lay, sets[0], 8, False)
    out["ring_16t_first_touch"] = pack_rate(ck, lay, sets[1], 16, False)
    out["ring_8t_stream_first_touch"] = pack_rate(ck, lay, sets[2], 8, True)
    out["ring_8t_stream_again"] = pack_rate(ck, lay, sets[2], 8, True)
    from native.kernel import load_kernel

    k = load_kernel()
    t0 = time.perf_counter()
    populated = 0
    for layer, e in sets[3]:
        for part in SLOT_PARTS:
            a = np.ascontiguousarray(ck.expert_arrays(layer, e)[part]).reshape(-1).view(np.uint8)
            populated += int(k.advise(a, a.nbytes, "populate"))
    out["populate_gbps"] = n * lay.payload_bytes / (time.perf_counter() - t0) / 1e9
    out["populate_applied"] = populated
    out["ring_8t_after_populate"] = pack_rate(ck, lay, sets[3], 8, False)
    a = np.ones(1 << 30, dtype=np.uint8)
    b = np.empty_like(a)
    np.copyto(b, a)
    t0 = time.perf_counter()
    np.copyto(b, a)
    out["memcpy_1t_anon_gbps"] = a.nbytes / (time.perf_counter() - t0) / 1e9
    # the CPU multi-token kernel (16 tokens) alone, then while the ring packs other experts
    from engine.store.native_experts import NativeExperts

    cpu = NativeExperts(cfg, ck, kernel=k, threads=8)
    x = rng.standard_normal((16, cfg.hidden_size)).astype(np.float32)
    w = np.ones(16, dtype=np.float32)
    y = np.empty_like(x)

    def cpu_rate(keys: list[tuple[int, int]]) -> float:
        t0 = time.perf_counter()
        for layer, e in keys:
            k.expert_tokens(cpu.shape, cpu.ref(layer, e), x, w, y)
        return len(keys) * lay.payload_bytes / (time.perf_counter() - t0) / 1e9

    cpu_rate(sets[4][:4])
    out["cpu16_alone_gbps"] = cpu_rate(sets[4])
    res: dict[str, float] = {}
    th = threading.Thread(target=lambda: res.setdefault("ring", pack_rate(ck, lay, sets[6], 8, False)))
    th.start()
    out["cpu16_while_packing_gbps"] = cpu_rate(sets[5])
    th.join()
    out["ring_8t_while_cpu_gbps"] = res["ring"]
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

import json
from pathlib import Path

from bench.gpu.kernel_profile import kernels_of, summarize


def test_the_chain_runs_from_the_combine_end_to_the_topk_end_and_counts_idle_gaps(tmp_path: Path) -> None:
    seq = [("combine_wait_kernel", 0, 10), ("qkv_rope_kernel", 12, 5), ("attn_split_kernel", 20, 4),
           ("attn_combine_kernel", 24, 1), ("oproj_residual_kernel", 27, 3), ("router_logits_kernel", 30, 2),
           ("router_topk_kernel", 33, 2), ("expert_gate_up_kernel", 36, 6), ("expert_down_kernel", 43, 3),
           ("start_kernel", 100, 1), ("qkv_rope_kernel", 102, 5), ("attn_split_kernel", 107, 4),
           ("attn_combine_kernel", 111, 1), ("oproj_residual_kernel", 112, 3), ("router_logits_kernel", 115, 2),
           ("router_topk_kernel", 117, 2)]
    ev = [{"cat": "kernel", "name": f"{n}(args)", "ts": t, "dur": d} for n, t, d in seq]
    ev.append({"cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 0, "dur": 1})
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    ks = kernels_of(p)
    assert len(ks) == len(seq) and ks[0][0] == "combine_wait_kernel"
    s = summarize(ks)
    assert s["combine_to_topk"]["n"] == 2
    assert s["combine_to_topk"]["mean_us"] == (25 + 18) / 2  # 10 -> 35 and 101 -> 119
    assert s["idle_gaps_in_chain"]["mean_us"] == (2 + 3 + 0 + 2 + 0 + 1 + 1 + 0 + 0 + 0 + 0 + 0) / 2
    assert s["experts_after_topk"] == {"n": 1, "mean_us": 11.0, "p50_us": 11.0}
    assert s["kernels"]["qkv_rope_kernel"]["count"] == 2

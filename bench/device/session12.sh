#!/usr/bin/env bash
# Session 12's GPU-machine call (repo root, carry [".whl", ".ab"]; .ab/old = `git archive c90e5f5
# app engine native bench`): the decode step's host work, old tree (A) against the checkout (B):
#   1. what the image offers for the bare graph launch (PyTorch's raw_cuda_graph_exec, the raw
#      stream query, libcudart's cudaGraphLaunch);
#   2. decode_ab.sh: calibrated, uniform and skewed routing at 18 layers, A B B A, $REPEATS runs,
#      every phase per token (launch, gpu_wait, cpu, admission, tail);
#   3. bench.gpu.launch_check on the uniform checkpoint: the bare launch against replay(), bit
#      identity of every token's logits and host microseconds per launch.
#   usage: [BUDGET_S=540] [REPEATS=3] bash bench/device/session12.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=bench/device/env.sh
. bench/device/env.sh
# decode_ab.sh leaves only its table and results.tgz in $OUT: this call's own files wait in $S12
S12=/tmp/neural-s12
mkdir -p "$S12"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; lscpu | grep -E "Model name|^CPU\(s\)"; free -g; } \
  >"$S12/machine.txt" 2>&1
"$PY" - <<'PY' | tee "$S12/launch_support.txt"
import torch
from engine.gpu import cudart
rt = cudart.runtime()
print("torch", torch.__version__, "raw_cuda_graph_exec", hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph_exec"),
      "raw stream query", hasattr(torch._C, "_cuda_getCurrentRawStream"),
      "cudaGraphLaunch", bool(rt and rt.can_launch_graphs))
PY
ROUTINGS=${ROUTINGS:-calibrated,uniform,skewed} REPEATS=${REPEATS:-3} BUDGET_S=$(( ${BUDGET_S:-540} - 70 )) \
  bash bench/device/decode_ab.sh
echo "== launch_check ($(( $(date +%s) - T0 )) s)"
l=$(left)
[ "$l" -gt 30 ] && timeout "$(( l - 10 ))" "$PY" -m bench.gpu.launch_check /dev/shm/neural-ab/synth-18l 48 \
  >"$S12/launch_check.json" 2>"$S12/launch_check.err"
echo "launch_check exited $?"
tail -c 1500 "$S12/launch_check.json"
tail -5 "$S12/launch_check.err"
cp "$S12"/* "$OUT"/
echo "done ($(( $(date +%s) - T0 )) s)"

#!/usr/bin/env bash
# The one call on the GPU machine for the hybrid decode path (issue 4): set up Python deps
# carried as wheels (.whl/: cffi, pycparser), build the native CPU expert kernel in place,
# then run bench.gpu.gpu_decode (correctness, determinism, speed, core floor).
# Usage (device tool, repo root, carry [".whl"]):  bash bench/device/run.sh [--layers 12 ...]
# Results: $OUT/results.json, $OUT/summary.txt, $OUT/run.log, $OUT/machine.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/neural-out}
mkdir -p "$OUT"
. bench/device/env.sh  # wheels, PYTHONPATH, native kernel
{ nvidia-smi; lscpu | head -25; free -g; df -h /dev/shm; } >"$OUT/machine.txt" 2>&1
python3 -m bench.gpu.gpu_decode run --out "$OUT" "$@" 2>&1 | tee "$OUT/run.log"

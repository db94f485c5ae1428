#!/usr/bin/env bash
# The one call on the GPU machine for the hybrid decode path (issue 4): set up Python deps
# carried as wheels (.whl/: cffi, pycparser), build the native CPU expert kernel in place,
# then run engine.bench.gpu_decode (correctness, determinism, speed, core floor).
# Usage (device tool, repo root, carry [".whl"]):  bash engine/bench/device_run.sh [--layers 12 ...]
# Results: $OUT/results.json, $OUT/summary.txt, $OUT/run.log, $OUT/machine.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/neural-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c "import native._neural_native" 2>/dev/null; then
  python3 -c "from native.build_native import ffibuilder; ffibuilder.compile(tmpdir='.', verbose=False)" \
    >"$OUT/native_build.log" 2>&1 || echo "native build failed (native_build.log); CPU misses fall back to PyTorch"
fi
{ nvidia-smi; lscpu | head -25; free -g; df -h /dev/shm; } >"$OUT/machine.txt" 2>&1
python3 -m engine.bench.gpu_decode run --out "$OUT" "$@" 2>&1 | tee "$OUT/run.log"

#!/usr/bin/env bash
# The GPU machine's one call (device tool, repo root, carry [".whl"]): install the carried
# wheels (cffi, pycparser), build the native CPU kernel, check the GPU prompt path against the
# reference at the 120b expert shape (bench.gpu.prompt_device, CHECK_LAYERS layers), then the
# performance suite (bench.harness.suite: synthetic checkpoints, decode and prompt benchmarks,
# the table last). Arguments go to the suite, e.g. --layers 18.
#   CHECK_LAYERS=0 skips the check; SUITE=0 skips the suite.
# Results in $OUT: machine.txt, native_build.log, check/results.json, suite.json, suite.log, table.md
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/neural-out}
mkdir -p "$OUT"
. bench/device/env.sh  # wheels, PYTHONPATH, native kernel
{ nvidia-smi; lscpu | head -25; free -g; df -h /dev/shm /tmp; } >"$OUT/machine.txt" 2>&1
if [ "${CHECK_LAYERS:-2}" != 0 ]; then
  timeout "${CHECK_TIMEOUT:-150}" python3 -m bench.gpu.prompt_device run --out "$OUT/check" \
    --layers "${CHECK_LAYERS:-2}" --stages env,synth,check,tiles --ckpt-dir /dev/shm/neural-check 2>&1 | tail -n 30
  rm -rf /dev/shm/neural-check
fi
if [ "${SUITE:-1}" != 0 ]; then
  python3 -m bench.harness.suite --out "$OUT" "$@"
fi

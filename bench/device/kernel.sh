#!/usr/bin/env bash
# The one call on the GPU machine's host for the native CPU expert kernel (issue 3): C self-test
# (every ISA path bit-identical, both input modes), the native tests, `neural bench kernel` at
# 8 and 16 threads (auto-chosen loop and the vdpbf16ps loop, bf16 inputs; fp32 inputs at 8) and
# 1 thread (FORCED=0 skips the forced-loop, fp32 and prefetch runs); with VARIANTS=1 also the inner-loop study (bench/kernel/kernel_variants.c sweep).
# Usage (device tool, repo root, carry [".whl"]):  bash bench/device/kernel.sh
# Results: $OUT/kernel.txt (one "bench NAME: {json}" line per benchmark).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/neural-out}
mkdir -p "$OUT"
. bench/device/env.sh  # wheels, PYTHONPATH, native kernel
STORE=/dev/shm/neural-kernel-store.bin
bench() {  # name, then arguments of `neural bench kernel`
  local name=$1
  shift
  echo "bench $name: $(python3 -m app.cli.main bench kernel --json --path "$STORE" "$@" 2>/dev/null)"
}
{
  grep -m1 "model name" /proc/cpuinfo; nproc
  cc -O2 -ffp-contract=off -std=gnu11 -pthread native/selftest.c native/neural_experts.c native/neural_isa.c \
     native/neural_team.c -lm -o /tmp/neural-selftest && /tmp/neural-selftest
  python3 -m pytest -q -p no:cacheprovider tests/native 2>&1 | tail -3
  for t in 8 16; do
    bench "$t-auto" --threads "$t"
    [ "${FORCED:-1}" = 1 ] && bench "$t-avx512bf16" --threads "$t" --isa avx512bf16
  done
  [ "${FORCED:-1}" = 1 ] && bench "8-auto-fp32" --threads 8 --inputs fp32
  [ "${FORCED:-1}" = 1 ] && bench "8-auto-pf4096" --threads 8 --prefetch 4096
  bench "1-auto" --threads 1
  if [ "${VARIANTS:-0}" = 1 ]; then
    gcc -O2 -fopenmp -ffp-contract=off bench/kernel/kernel_variants.c -o /tmp/kv -lm
    for t in 8 16; do /tmp/kv "$t" 2 2 sweep; done
  fi
  rm -f "$STORE"
} >"$OUT/kernel.txt" 2>&1
cat "$OUT/kernel.txt"

#!/usr/bin/env bash
# Kernel versions side by side in one call on the GPU machine's host (the machine's memory
# bandwidth varies between calls, so only runs of the same call are compared): builds
# bench/kernel/kernel_bench.c against the native/ of each tree given (default: .kbench/*/native, carried) and of this
# checkout, then alternates them ROUNDS times at each thread count.
# Usage (device tool, repo root, carry [".kbench"]): bash bench/device/kernel_ab.sh [THREADS...]
# Results: $OUT/ab.txt, one "NAME THREADS {json}" line per run.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/neural-out}
mkdir -p "$OUT"
build() {  # name, native dir
  cc -O2 -ffp-contract=off -std=gnu11 -pthread -I"$2" bench/kernel/kernel_bench.c "$2/neural_experts.c" "$2/neural_isa.c" \
     "$2/neural_team.c" -lm -o "/tmp/kb-$1"
}
names=()
for d in .kbench/*/native; do
  n=$(basename "$(dirname "$d")")
  build "$n" "$d" && names+=("$n")
done
build head native && names+=(head)
threads=("$@")
[ ${#threads[@]} -eq 0 ] && threads=(8 16)
{
  for t in "${threads[@]}"; do
    for r in $(seq "${ROUNDS:-3}"); do
      for n in "${names[@]}"; do echo "$n $t $(/tmp/kb-"$n" "$t" 2 3)"; done
    done
  done
} | tee "$OUT/ab.txt"

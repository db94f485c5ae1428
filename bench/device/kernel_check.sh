#!/usr/bin/env bash
# One call on the GPU machine's host for the native CPU expert kernel (issues 16 and 19): build the
# module (env.sh: carried wheels, Python 3.12, no cffi in the image), the C self-test (prints the
# result hash: 24263efd75882d3f on every platform), the native tests (AVX-512 and AVX-512 BF16
# paths run here, not on the AVX2 dev VM), then in one run:
#   - `neural bench kernel` (one-token kernel vs. a same-run DRAM probe) at 8 and 16 threads,
#     store in /dev/shm; at 8 threads also with --advise huge / populate, and from a store file on
#     disk (page cache mapping instead of tmpfs), and the C harness (anonymous memory) for the
#     mmap-vs-anonymous gap;
#   - `neural bench kernel --tokens 1,2,4,8,16` (the prompt path's multi-token kernel: ms per
#     group and GB/s) at 8 and 16 threads, auto loop, and at 8 threads the other AVX-512 loop;
#   - bench/kernel/dot_rate.c (each ISA's loops with the data in L1, and the peak FMA rate: the
#     compute ceilings) and bench/kernel/copy_align.c (the staging copy vs memcpy by alignment);
#   - the dense GEMV with its next-group prefetch off and on (bench.kernel.gemv_isa --prefetch-ab) and one
#     decode token's attention per ISA (bench.kernel.attention_bench), at 8 and 16 threads (session 23's
#     changes, measured until then only on the 2-core VM).
# Usage (device tool, repo root, carry [".whl"]):  bash bench/device/kernel_check.sh
# Results: $OUT/kernel_check.txt (one "bench NAME: {json}" line per benchmark), $OUT/native_build.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/neural-out}
mkdir -p "$OUT"
. bench/device/env.sh  # wheels, PYTHONPATH, native kernel
SHM=/dev/shm/neural-kcheck-store.bin
DISK=${DISK_STORE:-/tmp/neural-kcheck-store.bin}
SECS=${SECS:-3}
GIB=${GIB:-2}
bench() {  # name, then arguments of `neural bench kernel`
  local name=$1
  shift
  echo "bench $name: $(python3 -m app.cli.main bench kernel --json --seconds "$SECS" --store-gib "$GIB" "$@" 2>&1 | tail -1)"
}
{
  date -u; grep -m1 "model name" /proc/cpuinfo; nproc
  grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  for f in enabled shmem_enabled defrag; do
    echo "thp $f: $(cat /sys/kernel/mm/transparent_hugepage/$f 2>/dev/null)"
  done
  uname -r
  cc -O2 -ffp-contract=off -std=gnu11 -pthread native/selftest.c native/neural_experts.c native/neural_isa.c \
     native/neural_team.c -lm -o /tmp/neural-selftest && /tmp/neural-selftest
  python3 -m pytest -q -p no:cacheprovider tests/native 2>&1 | tail -3
  python3 -c "from native.kernel import load_kernel as l; k = l(); print('isas', k.available_isas(), 'best', k.best_isa())"
  for t in 8 16; do bench "one-token-$t" --threads "$t" --path "$SHM"; done
  for a in huge populate; do bench "one-token-8-advise-$a" --threads 8 --path "$SHM" --advise "$a"; done
  bench "one-token-8-diskfile" --threads 8 --path "$DISK"
  cc -O2 -ffp-contract=off -std=gnu11 -pthread -Inative bench/kernel/kernel_bench.c native/neural_experts.c \
     native/neural_isa.c native/neural_team.c -lm -o /tmp/neural-kbench && echo "c-harness-8: $(/tmp/neural-kbench 8 "$GIB" "$SECS" 2>&1 | tail -3 | tr '\n' ' ')"
  cc -O2 -ffp-contract=off -std=gnu11 -Inative bench/kernel/dot_rate.c native/neural_isa.c -lm -o /tmp/neural-dot-rate \
    && /tmp/neural-dot-rate 1
  cc -O2 -std=gnu11 -pthread -Inative bench/kernel/copy_align.c native/neural_experts.c native/neural_isa.c \
     native/neural_team.c -lm -o /tmp/neural-copy-align && /tmp/neural-copy-align 256
  for t in 8 16; do bench "tokens-$t" --threads "$t" --path "$SHM" --tokens 1,2,4,8,16; done
  other=$(python3 -c "from native.kernel import load_kernel as l; k = l(); b = k.best_isa(); print('avx512' if b == 'avx512bf16' else ('avx512bf16' if 'avx512bf16' in k.available_isas() else ''))")
  [ -n "$other" ] && bench "tokens-8-$other" --threads 8 --path "$SHM" --tokens 1,2,4,8,16 --isa "$other"
  bench "tokens-8-fp32" --threads 8 --path "$SHM" --tokens 4,16 --inputs fp32
  python3 -m bench.kernel.gemv_isa --prefetch-ab avx512 --threads 8,16
  python3 -m bench.kernel.attention_bench --isas avx2,avx512,avx512bf16 --keys 4096 --threads 1,8,16 --calls 40
  rm -f "$SHM" "$DISK"
  date -u
} >"$OUT/kernel_check.txt" 2>&1
cat "$OUT/kernel_check.txt"

#!/usr/bin/env bash
# The CPU engine on the H200 machine's host (Intel, AVX-512 BF16), repo root, carry [".whl", ".peer"] (~7 min):
#   a. the one-token projections' GEMV (session 29: one row's stream, four fma chains) from DRAM at 8 and 16
#      threads, its prefetch off against on, and the two AVX-512 tables (the same bits; Intel's dot4 differs only);
#   b. CPU-only decode against llama.cpp's CPU build, 4-layer 120b shape, vocab 8192, 8 threads, depth 0, twice
#      (N L L N each; session 25 read 1.25x with the one-chain GEMV, session 31 1.51x on the H100 machine's host; the
#      first set has 300 s, as 200 left its llama.cpp build 50 s there and it ran out);
#   c. where a token goes (cpu_decode_split) and `neural bench kernel` at 8 threads, 1, 4 and 16-token groups too
#      (the prompt lane's multi-token rate: 45 GFLOP/s a thread at 16 tokens in session 18's calibration, 185 on
#      the Zen 4 VM), the vdpbf16ps loop's groups (same bits) at 8 threads and the fp32 one's at 16;
#   d. a fresh process's first 100-token prompt against its second (session 30: the dense weights on the mapping,
#      the projections packed at load; appended to split-d8.txt).
#   e. the fused decode layer's glue with the team's spin off (split-spin0.txt).
# GEMV=0 skips a (session25_probe.sh runs b and c this way).
# $OUT: gemv.txt, d0-1/, d0-2/ (peer_decode.sh outputs), split-d8.txt, split-spin0.txt, kernel.txt, lscpu.txt
set -uo pipefail
cd "$(dirname "$0")/../.."
. bench/device/env.sh >/dev/null 2>&1  # wheels, native build, $PY, $OUT
lscpu | grep -E "Model name|^CPU\(s\)|Thread|NUMA node\(s\)|Flags" | cut -c1-300 >"$OUT/lscpu.txt"
if [ "${GEMV:-1}" != 0 ]; then
  {
    timeout 100 "$PY" -m bench.kernel.gemv_isa --prefetch-ab avx512 --rows 16384 --cols 2880 --threads 8,16
    timeout 60 "$PY" -m bench.kernel.gemv_isa --isas avx512,avx512bf16 --rows 16384 --cols 2880 --threads 8
  } >"$OUT/gemv.txt" 2>&1
  tail -12 "$OUT/gemv.txt"
fi
export LLAMA_DIR=/tmp/llama-cpu
for i in 1 2; do
  env PEER_CPU=1 LAYERS=4 ROUTINGS=uniform THREADS=8 SYNTH_ARGS="--vocab 8192" BUDGET_S=$((i == 1 ? 300 : 200)) bash bench/device/peer_decode.sh >"/tmp/d0-$i.log" 2>&1
  mkdir -p "$OUT/d0-$i" && mv "$OUT/table.md" "$OUT/peer.log" "$OUT/results.tgz" "$OUT/d0-$i/" 2>/dev/null
  tail -4 "$OUT/d0-$i/table.md"
done
timeout 90 "$PY" -m bench.kernel.cpu_decode_split /dev/shm/neural-peer/synth-4l --threads 8 --tokens 64 >"$OUT/split-d8.txt" 2>&1
kern() {  # neural bench kernel on one 4 GiB store in /dev/shm, progress lines dropped
  timeout 70 "$PY" -m app.cli.main bench kernel --path /dev/shm/neural-kstore --store-gib 4 "$@" 2>&1 | tr "\r" "\n" \
    | grep -v "synthetic store"
}
{
  kern --threads 8 --seconds 1.5 --rounds 3
  kern --threads 8 --tokens 1,2,3,4,16 --seconds 1 --rounds 2  # 2-3: the row quads (session 32)
  kern --threads 8 --tokens 2,4,16 --isa avx512bf16 --seconds 1 --rounds 2
  kern --threads 16 --tokens 16 --seconds 1 --rounds 2
} >"$OUT/kernel.txt"
# e. the fused decode layer's Python (glue) with the team's workers sleeping at once (--spin-us 0) against their 200 us
#    spin: session 32 read 192 us a layer here against 44 on the 2-core VM; if spinning workers share cores with the
#    caller, the glue falls with spin 0 (and the native calls' wake-ups rise). The register/tile threshold (session 32's
#    step e: tiles win above 20 tokens on this host) is settled.
timeout 90 "$PY" -m bench.kernel.cpu_decode_split /dev/shm/neural-peer/synth-4l --threads 8 --tokens 64 --spin-us 0 \
  >"$OUT/split-spin0.txt" 2>&1
grep -E "fused layer|tok/s \(" "$OUT/split-spin0.txt"
timeout 120 "$PY" -m app.cli.main bench prompt /dev/shm/neural-peer/synth-4l --backend cpu --threads 8 --tokens 100 \
  --warmup 0 --repeats 2 --check-tokens 0 >>"$OUT/split-d8.txt" 2>&1
cat "$OUT/split-d8.txt" "$OUT/kernel.txt" | tail -24

#!/usr/bin/env bash
# session 25 call 1, repo root, carry [".whl", ".peer"] (~6 min):
#   a. bench.gpu.zero_copy_probe: can a kernel pull an expert pair from the registered mapping at the DMA's rate, and
#      what does issuing each cost in host time (the copy lane's queueing, 1.1-2.1 ms a token in session 24)?
#   b. the CPU engine (with the fused decode layer, a83b677..e8bb052, never measured on this host) against llama.cpp's
#      CPU build, 4-layer 120b shape, vocab 8192, 8 threads, depth 0, twice (N L L N each), then the split and the kernel.
# $OUT: probe.txt, d0-1/, d0-2/ (peer_decode.sh outputs), split-d8.txt, kernel.txt, lscpu.txt
set -uo pipefail
cd "$(dirname "$0")/../.."
. bench/device/env.sh >/dev/null 2>&1  # wheels, native build, $PY, $OUT
timeout 90 "$PY" -m bench.gpu.zero_copy_probe --mib 1024 >"$OUT/probe.txt" 2>&1 || echo "probe exited $?" >>"$OUT/probe.txt"
grep SUMMARY "$OUT/probe.txt" || tail -5 "$OUT/probe.txt"
export LLAMA_DIR=/tmp/llama-cpu
for i in 1 2; do
  env PEER_CPU=1 LAYERS=4 ROUTINGS=uniform THREADS=8 SYNTH_ARGS="--vocab 8192" BUDGET_S=200 bash bench/device/peer_decode.sh >"/tmp/d0-$i.log" 2>&1
  mkdir -p "$OUT/d0-$i" && mv "$OUT/table.md" "$OUT/peer.log" "$OUT/results.tgz" "$OUT/d0-$i/" 2>/dev/null
  tail -4 "$OUT/d0-$i/table.md"
done
lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)|Flags" | cut -c1-300 >"$OUT/lscpu.txt"
timeout 90 "$PY" -m bench.kernel.cpu_decode_split /dev/shm/neural-peer/synth-4l --threads 8 --tokens 64 >"$OUT/split-d8.txt" 2>&1
timeout 60 "$PY" -m app.cli.main bench kernel --threads 8 --store-gib 4 --seconds 1.5 --rounds 3 >"$OUT/kernel.txt" 2>&1
cat "$OUT/split-d8.txt" "$OUT/kernel.txt" | tail -16

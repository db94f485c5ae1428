#!/usr/bin/env bash
# session 25 call 1, repo root, carry [".whl", ".peer"] (~6 min):
#   a. bench.gpu.zero_copy_probe: can a kernel pull an expert pair from the registered mapping at the DMA's rate, and
#      what does issuing each cost in host time (the copy lane's queueing, 1.1-2.1 ms a token in session 24)?
#   b. the CPU engine (with the fused decode layer, a83b677..e8bb052, never measured on this host) against llama.cpp's
#      CPU build, 4-layer 120b shape, vocab 8192, 8 threads, depth 0, twice (N L L N each), then the split and the kernel.
# $OUT: probe.txt, d0-1/, d0-2/ (peer_decode.sh outputs), split-d8.txt, kernel.txt, lscpu.txt (b: cpu_host.sh)
set -uo pipefail
cd "$(dirname "$0")/../.."
. bench/device/env.sh >/dev/null 2>&1  # wheels, native build, $PY, $OUT
timeout 90 "$PY" -m bench.gpu.zero_copy_probe --mib 1024 >"$OUT/probe.txt" 2>&1 || echo "probe exited $?" >>"$OUT/probe.txt"
grep SUMMARY "$OUT/probe.txt" || tail -5 "$OUT/probe.txt"
GEMV=0 bash bench/device/cpu_host.sh  # b

#!/usr/bin/env bash
# session 20 call 2: the CPU engine against llama.cpp's CPU build on the H200 host, 8 threads, 4-layer 120b shape, vocab 8192
# usage: repo root, carry [".whl", ".peer"]: bash bench/device/session20_cpu.sh (~8 min); $OUT: d0/, d4096/ (peer_decode.sh outputs), lscpu.txt, split-d8.txt, split-d4096.txt
export LLAMA_DIR=/tmp/llama
env PEER_CPU=1 LAYERS=4 ROUTINGS=uniform THREADS=8 SYNTH_ARGS="--vocab 8192" BUDGET_S=280 bash bench/device/peer_decode.sh >/tmp/d0.log 2>&1
mkdir -p $OUT/d0 && mv $OUT/table.md $OUT/peer.log $OUT/results.tgz $OUT/d0/ 2>/dev/null
env PEER_CPU=1 LAYERS=4 ROUTINGS=uniform THREADS=8 SYNTH_ARGS="--vocab 8192" DEPTH=4096 BUDGET_S=200 bash bench/device/peer_decode.sh >/tmp/d4096.log 2>&1
mkdir -p $OUT/d4096 && mv $OUT/table.md $OUT/peer.log $OUT/results.tgz $OUT/d4096/ 2>/dev/null
. bench/device/env.sh >/dev/null 2>&1
lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)|Flags" | cut -c1-300 > $OUT/lscpu.txt
timeout 100 $PY -m bench.kernel.cpu_decode_split /dev/shm/neural-peer/synth-4l --threads 8 --tokens 32 > $OUT/split-d8.txt 2>&1
timeout 80 $PY -m bench.kernel.cpu_decode_split /dev/shm/neural-peer/synth-4l --threads 8 --tokens 32 --depth 4096 > $OUT/split-d4096.txt 2>&1
cat $OUT/lscpu.txt | head -3; tail -8 $OUT/d0/table.md; tail -8 $OUT/d4096/table.md; cat $OUT/split-d8.txt $OUT/split-d4096.txt | tail -26

#!/usr/bin/env bash
# Packing and the CPU kernel on the GPU machine's host (one device call, repo root, carry [".whl"]):
# bench.gpu.pack_probe on a 12-layer 120b-shape checkpoint, then the native tests (AVX-512 paths).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/neural-out}
mkdir -p "$OUT"
. bench/device/env.sh
export NEURAL_O200K_DIR=$PWD/.o200k
CK=/dev/shm/neural-probe
python3 -m app.cli.main synth --preset 120b-shape --layers 12 --seed 1 --jobs 8 --fast --out "$CK" >"$OUT/synth.txt" 2>&1 \
  || { tail "$OUT/synth.txt"; exit 1; }
timeout 240 python3 -m bench.gpu.pack_probe "$CK" 120 | tee "$OUT/pack_probe.json"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/native -x 2>&1 | tail -4

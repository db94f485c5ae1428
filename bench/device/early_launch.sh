#!/usr/bin/env bash
# The early launch (EngineSettings.early_launch) on the GPU machine, one call (repo root, carry [".whl"]):
#   1. bench.gpu.launch_check on an 18-layer 120b-shape checkpoint: the logits of 48 tokens bit-identical across
#      replay(), the bare launch and the early launch, host microseconds per launch and GPU wait per layer;
#   2. decode_ab.sh with both sides the checkout, A with --set early_launch=false, B with early_launch=true, A B B A
#      on calibrated, uniform and skewed routing at 18 layers (every phase per token).
# The default went on (session 13) because 1 said bit_identical and 2 showed the time outside the CPU experts down;
# run it again after a change to the decode step or its kernels.
#   usage: [BUDGET_S=540] [REPEATS=3] bash bench/device/early_launch.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=bench/device/env.sh
. bench/device/env.sh
S=/tmp/neural-early
mkdir -p "$S"
CK=/dev/shm/neural-ab/synth-18l
[ -f "$CK/SYNTHETIC.json" ] || timeout 200 "$PY" -m app.cli.main synth --preset 120b-shape --layers 18 --seed 1 \
  --jobs 8 --fast --out "$CK" >"$S/synth.txt" 2>&1 || { tail "$S/synth.txt"; exit 1; }
echo "== launch_check ($(( $(date +%s) - T0 )) s)"
timeout 120 "$PY" -m bench.gpu.launch_check "$CK" 48 >"$S/launch_check.json" 2>"$S/launch_check.err"
echo "launch_check exited $?"
tail -c 2000 "$S/launch_check.json"
tail -5 "$S/launch_check.err"
A_TREE=. A_SET="early_launch=false" B_SET="early_launch=true" ROUTINGS=${ROUTINGS:-calibrated,uniform,skewed} REPEATS=${REPEATS:-3} \
  BUDGET_S=$(( ${BUDGET_S:-540} - ($(date +%s) - T0) )) bash bench/device/decode_ab.sh
cp "$S"/* "$OUT"/
echo "done ($(( $(date +%s) - T0 )) s)"

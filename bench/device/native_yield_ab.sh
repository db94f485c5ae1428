#!/usr/bin/env bash
# The native decode layer under adaptive residency (session 28: a layer that misses an admission candidate is handed
# back to Python; before, every layer took the Python path while candidates existed), one call, repo root, carry
# [".whl"], ~8 min on the 18-layer 120b shape, 12 GiB, 8 threads:
#   a. bench.gpu.lane_check (frozen residency) with decode_native_layer and with it plus decode_front_end_wait: the
#      forced lane's and the lane-off logits must hash as with neither (session 28 call 1: c0152e143bac3d64 /
#      fd15e0e87ba77968);
#   b. cal_ab.sh, A: defaults, B: decode_native_layer, C: B + decode_front_end_wait, A B C C B A x ROUNDS (2).
# $OUT: all.tgz (lane-check-*.json, setup.log, cal_ab.sh's files) and table.md
set -uo pipefail
cd "$(dirname "$0")/../.."
export BUDGET_S=${BUDGET_S:-560}
. bench/device/env.sh >/dev/null 2>&1  # $OUT, $T0, $PY, left(), cal_checkpoints
cal_checkpoints "$OUT/setup.log"
check() {  # NAME SETTINGS...: the lane check's hashes and runs, one line
  local name=$1
  shift
  timeout 90 "$PY" -m bench.gpu.lane_check /dev/shm/neural-peer/synth-18l 24 "$@" \
    >"$OUT/lane-check-$name.json" 2>>"$OUT/setup.log"
  tail -1 "$OUT/lane-check-$name.json" | "$PY" -c "import json,sys; d=json.loads(sys.stdin.read()); print('$name', d.get('forced_sha256'), d.get('off_sha256'), d.get('forced_bit_identical'), d.get('off_bit_identical'), d.get('native_layers'), d.get('native_yields'), [(r['mode'], r['step_ms']) for r in d.get('runs', [])])"
}
check native decode_native_layer=true
check front decode_native_layer=true decode_front_end_wait=true
echo "[$(( $(date +%s) - T0 )) s] lane checks done: each hash must be c0152e143bac3d64 / fd15e0e87ba77968"
A="" B="decode_native_layer=true" C="decode_native_layer=true decode_front_end_wait=true" ROUNDS=${ROUNDS:-2} T0=$T0 \
  bash bench/device/cal_ab.sh 2>&1 | tail -22
(cd "$OUT" && tar czf all.tgz ./*.json ./*.log ./*.txt 2>/dev/null && rm -f ./*.json ./*.log ./*.txt)

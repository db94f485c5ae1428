#!/usr/bin/env bash
# The decode layer's host path, the settings built without device time (sessions 26-27), in one call: repo root,
# carry [".whl"], ~8-9 min on the 18-layer 120b shape, 12 GiB, 8 threads:
#   a. neural doctor (its direct-copy probe on a real GPU), bench.gpu.batch_copy_probe (the lane's queueing as one
#      cudaMemcpyBatchAsync against its 2-D copies: host time warm and cold, GPU time, bytes) and
#      bench.gpu.wait_value_probe (the front-end's wake on a host flag);
#   b. bench.gpu.lane_check with each setting on (the forced lane's logits must hash as with it off):
#      decode_lane_batch, decode_native_layer, both;
#   c. cal_ab.sh, A: defaults, B: decode_lane_batch, C: decode_native_layer, D: both, A B C D D C B A x ROUNDS (1).
#   usage: [ROUNDS=1] [EXTRA="decode_lane_beside=true"] bash bench/device/host_path_ab.sh
# $OUT: all.tgz (the probes, lane-check-*.json, setup.log, cal_ab.sh's files) and table.md
set -uo pipefail
cd "$(dirname "$0")/../.."
export BUDGET_S=${BUDGET_S:-560}
. bench/device/env.sh >/dev/null 2>&1  # $OUT, $T0, $PY, left(), cal_checkpoints
EXTRA=${EXTRA:-}
# neural doctor's direct-copy probe on a real GPU (its line must read ok on Linux)
timeout 60 "$PY" -m app.cli.main doctor >"$OUT/doctor.txt" 2>&1; grep -A1 "Direct copies" "$OUT/doctor.txt"
timeout 90 "$PY" -m bench.gpu.batch_copy_probe >"$OUT/batch_copy.txt" 2>&1 || echo "batch_copy_probe exited $?"
grep -v SUMMARY "$OUT/batch_copy.txt" | tail -6
timeout 60 "$PY" -m bench.gpu.wait_value_probe >"$OUT/wait_value.txt" 2>&1 || echo "wait_value_probe exited $?"
tail -1 "$OUT/wait_value.txt"
cal_checkpoints "$OUT/setup.log"
check() {  # NAME SETTINGS...: the lane check's hashes and runs, one line
  local name=$1
  shift
  # shellcheck disable=SC2086  # EXTRA is a list of key=value words
  timeout 90 "$PY" -m bench.gpu.lane_check /dev/shm/neural-peer/synth-18l 24 "$@" $EXTRA \
    >"$OUT/lane-check-$name.json" 2>>"$OUT/setup.log"
  tail -1 "$OUT/lane-check-$name.json" | "$PY" -c "import json,sys; d=json.loads(sys.stdin.read()); print('$name', d.get('verdict'), d.get('forced_sha256'), d.get('off_sha256'), d.get('ready_layers'), d.get('forced_bit_identical'), d.get('off_bit_identical'), d.get('native_layers'), [(r['mode'], r['step_ms'], r['lane_ms']) for r in d.get('runs', [])])"
}
check off
check batch decode_lane_batch=true
check native decode_native_layer=true
check both decode_lane_batch=true decode_native_layer=true
echo "[$(( $(date +%s) - T0 )) s] lane checks done: each hash must equal off's"
A="$EXTRA" B="$EXTRA decode_lane_batch=true" C="$EXTRA decode_native_layer=true" \
  D="$EXTRA decode_lane_batch=true decode_native_layer=true" ROUNDS=${ROUNDS:-1} T0=$T0 \
  bash bench/device/cal_ab.sh 2>&1 | tail -26
(cd "$OUT" && tar czf all.tgz ./*.json ./*.log ./*.txt 2>/dev/null && rm -f ./*.json ./*.log ./*.txt)

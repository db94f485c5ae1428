#!/usr/bin/env bash
# session 25 call 3, repo root, carry [".whl"] (~7 min): the copy lane's queueing in one native call
# replaced by the lane's own pull kernel (decode_lane_pull, engine/gpu/kernels/pull.py) against the runtime's copies,
# on the 18-layer 120b shape, 12 GiB, 8 threads:
#   a. (skipped) the probe;
#   b. bench.gpu.lane_check with decode_lane_pull=false, then =true: the forced lane runs' logits must hash the same;
#   c. cal_ab.sh A="decode_lane_pull=false" B="decode_lane_pull=true", ROUNDS rounds (3: A B B A x3).
# $OUT: all.tgz (lane-check-{dma,pull}.json, setup.log and cal_ab.sh's files: warm.json, a-N.json, b-N.json, table.md,
# cal.log; one file: the device tool brings back at most eight)
set -uo pipefail
cd "$(dirname "$0")/../.."
export BUDGET_S=${BUDGET_S:-540}
. bench/device/env.sh >/dev/null 2>&1  # $OUT, $T0, $PY, left(), cal_checkpoints
cal_checkpoints "$OUT/setup.log"
for v in false true; do
  name=$([ $v = true ] && echo pull || echo dma)
  timeout 90 "$PY" -m bench.gpu.lane_check /dev/shm/neural-peer/synth-18l 24 "decode_lane_pull=$v" \
    >"$OUT/lane-check-$name.json" 2>>"$OUT/setup.log"
  tail -1 "$OUT/lane-check-$name.json" | "$PY" -c "import json,sys; d=json.loads(sys.stdin.read()); print('$name', d.get('verdict'), d.get('forced_sha256'), d.get('off_sha256'), d.get('ready_layers'), d.get('direct_error'), d.get('forced_bit_identical'), d.get('off_bit_identical'), [(r['mode'], r['step_ms'], r['lane_ms']) for r in d.get('runs', [])])"
done
echo "[$(( $(date +%s) - T0 )) s] lane checks done"
A="decode_lane_pull=false" B="decode_lane_pull=true" ROUNDS=${ROUNDS:-3} T0=$T0 bash bench/device/cal_ab.sh 2>&1 | tail -22
(cd "$OUT" && tar czf all.tgz ./*.json ./*.log ./table.md 2>/dev/null && rm -f ./*.json ./*.log)

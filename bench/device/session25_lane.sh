#!/usr/bin/env bash
# session 25 call 2, repo root, carry [".whl"] (~7 min): the copy lane's queueing in one native call
# (decode_lane_native, native/neural_lane.c) against the Python queueing, on the 18-layer 120b shape, 12 GiB, 8 threads:
#   a. bench.gpu.zero_copy_probe again (its first run stored bytes through a byte view: the pull's rate was read-only);
#   b. bench.gpu.lane_check with decode_lane_native=false, then =true: the forced lane runs' logits must hash the same;
#   c. cal_ab.sh A="decode_lane_native=false" B="decode_lane_native=true", ROUNDS rounds (3: A B B A x3).
# $OUT: probe.txt, lane-check-{py,native}.json, and cal_ab.sh's files (warm.json, a-N.json, b-N.json, table.md, cal.log)
set -uo pipefail
cd "$(dirname "$0")/../.."
export BUDGET_S=${BUDGET_S:-540}
. bench/device/env.sh >/dev/null 2>&1  # $OUT, $T0, $PY, left(), cal_checkpoints
timeout 60 "$PY" -m bench.gpu.zero_copy_probe --mib 1024 >"$OUT/probe.txt" 2>&1 || echo "probe exited $?" >>"$OUT/probe.txt"
grep SUMMARY "$OUT/probe.txt" || tail -3 "$OUT/probe.txt"
cal_checkpoints "$OUT/setup.log"
for v in false true; do
  name=$([ $v = true ] && echo native || echo py)
  timeout 90 "$PY" -m bench.gpu.lane_check /dev/shm/neural-peer/synth-18l 24 "decode_lane_native=$v" \
    >"$OUT/lane-check-$name.json" 2>>"$OUT/setup.log"
  tail -1 "$OUT/lane-check-$name.json" | "$PY" -c "import json,sys; d=json.loads(sys.stdin.read()); print('$name', d.get('verdict'), d.get('forced_sha256'), d.get('off_sha256'), [(r['mode'], r['step_ms'], r['lane_ms']) for r in d.get('runs', [])])"
done
echo "[$(( $(date +%s) - T0 )) s] lane checks done"
A="decode_lane_native=false" B="decode_lane_native=true" ROUNDS=${ROUNDS:-3} T0=$T0 bash bench/device/cal_ab.sh 2>&1 | tail -22

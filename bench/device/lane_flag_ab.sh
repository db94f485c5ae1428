#!/usr/bin/env bash
# A boolean copy-lane setting A/B on the 18-layer 120b shape, 12 GiB, 8 threads, one call, repo root, carry [".whl"]
# (~7 min; session 25 ran it for decode_lane_native (call 2, with PROBE=1) and decode_lane_pull (call 3)):
#   a. with PROBE=1, bench.gpu.zero_copy_probe (host time of the lane's runtime calls; DMA against a pull kernel),
#      bench.gpu.wait_value_probe (a stream memory wait's wake against a launch; copies beside it) and
#      bench.gpu.batch_copy_probe (the lane's queueing as one cudaMemcpyBatchAsync against its 2-D copies);
#   b. bench.gpu.lane_check with FLAG=false, then FLAG=true: the forced lane runs' logits must hash the same;
#   c. cal_ab.sh A="FLAG=false" B="FLAG=true", ROUNDS rounds (3: A B B A x3).
#   usage: FLAG=decode_lane_pull [PROBE=1] [ROUNDS=3] bash bench/device/lane_flag_ab.sh
# $OUT: all.tgz (probe.txt, lane-check-{false,true}.json, setup.log and cal_ab.sh's files: warm.json, a-N.json,
# b-N.json, table.md, cal.log; one file: the device tool brings back at most eight) and table.md
set -uo pipefail
cd "$(dirname "$0")/../.."
FLAG=${FLAG:?FLAG=<a boolean engine setting>, e.g. decode_lane_pull}
export BUDGET_S=${BUDGET_S:-540}
. bench/device/env.sh >/dev/null 2>&1  # $OUT, $T0, $PY, left(), cal_checkpoints
if [ "${PROBE:-0}" = 1 ]; then
  timeout 60 "$PY" -m bench.gpu.zero_copy_probe --mib 1024 >"$OUT/probe.txt" 2>&1 || echo "probe exited $?" >>"$OUT/probe.txt"
  grep SUMMARY "$OUT/probe.txt" || tail -3 "$OUT/probe.txt"
  # the front-end's wake on a host flag (cuStreamWaitValue32) against the host's launch, and beside copies
  timeout 60 "$PY" -m bench.gpu.wait_value_probe >"$OUT/wait_value.txt" 2>&1 || echo "wait_value_probe exited $?"
  tail -1 "$OUT/wait_value.txt"
  # the lane's queueing as one cudaMemcpyBatchAsync against its 2-D copies: host time warm and cold, GPU time, bytes
  timeout 90 "$PY" -m bench.gpu.batch_copy_probe >"$OUT/batch_copy.txt" 2>&1 || echo "batch_copy_probe exited $?"
  grep -v SUMMARY "$OUT/batch_copy.txt" | tail -6
fi
cal_checkpoints "$OUT/setup.log"
for v in false true; do
  timeout 90 "$PY" -m bench.gpu.lane_check /dev/shm/neural-peer/synth-18l 24 "$FLAG=$v" \
    >"$OUT/lane-check-$v.json" 2>>"$OUT/setup.log"
  tail -1 "$OUT/lane-check-$v.json" | "$PY" -c "import json,sys; d=json.loads(sys.stdin.read()); print('$FLAG=$v', d.get('verdict'), d.get('forced_sha256'), d.get('off_sha256'), d.get('ready_layers'), d.get('direct_error'), d.get('forced_bit_identical'), d.get('off_bit_identical'), d.get('native_layers'), [(r['mode'], r['step_ms'], r['lane_ms']) for r in d.get('runs', [])])"
done
echo "[$(( $(date +%s) - T0 )) s] lane checks done"
A="$FLAG=false" B="$FLAG=true" ROUNDS=${ROUNDS:-3} T0=$T0 bash bench/device/cal_ab.sh 2>&1 | tail -22
(cd "$OUT" && tar czf all.tgz ./*.json ./*.log ./*.txt 2>/dev/null && rm -f ./*.json ./*.log ./probe.txt ./wait_value.txt \
  ./batch_copy.txt)

#!/usr/bin/env bash
# The decode copy lane (engine/gpu/copy_lane.py) on the H200 host, one device call (repo root, carry [".whl"]):
# 1. bench.gpu.lane_check on the 18-layer calibrated checkpoint: lane off / forced / forced / off, bits and the
#    logits' difference, and the load-time check's verdict on this host;
# 2. decode_ab.sh with A = decode_lane=off (or A_SET), B = decode_lane=auto (the default), calibrated and uniform,
#    A B B A.
#   usage: [BUDGET_S=430] [CHECK_ONLY=1] [LANE_CKPT=DIR] [LANE_SET="key=value ..."] [A_SET="key=value ..."]
#          [B_EXTRA="key=value ..."] bash bench/device/lane.sh      results: $OUT/lane_check.json, $OUT/ab/table.md
#   LANE_SET: engine settings for lane_check (e.g. early_poll_ns=1000: "forced" then runs beside gentle early
#   launches); B_EXTRA: added to B's settings in the A/B (e.g. early_poll_ns=1000: the lane and early launches);
#   A_SET: A's settings (e.g. A_SET=decode_lane=auto B_EXTRA=decode_lane_split=true: whole experts against the
#   split one, both with the lane)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUDGET_S=${BUDGET_S:-430}
# shellcheck source=bench/device/env.sh
. bench/device/env.sh
CK=/dev/shm/neural-ab/synth-18l
CKC=$CK-calibrated
[ -f "$CK/SYNTHETIC.json" ] || timeout 200 "$PY" -m app.cli.main synth --preset 120b-shape --layers 18 \
  --seed 1 --jobs 8 --fast --out "$CK" >"$OUT/synth.txt" 2>&1 || { tail "$OUT/synth.txt"; exit 1; }
[ -n "${LANE_CKPT:-}" ] || [ -f "$CKC/SYNTHETIC.json" ] || timeout 120 "$PY" -m app.cli.main synth --like "$CK" --routing calibrated \
  --out "$CKC" >>"$OUT/synth.txt" 2>&1 || { tail "$OUT/synth.txt"; exit 1; }
echo "== lane_check ($(( $(date +%s) - T0 )) s)"
# shellcheck disable=SC2086  # LANE_SET: several KEY=VALUE words
timeout 150 "$PY" -m bench.gpu.lane_check "${LANE_CKPT:-$CKC}" 32 ${LANE_SET:-} >"$OUT/lane_check.json" 2>"$OUT/lane_check.err" \
  || echo "lane_check exited $?"
cat "$OUT/lane_check.json"
grep -iE "error|Traceback|lane" "$OUT/lane_check.err" | tail -5
[ "${CHECK_ONLY:-0}" = 1 ] && { echo "done ($(( $(date +%s) - T0 )) s)"; exit 0; }
echo "== decode A/B ($(( $(date +%s) - T0 )) s, $(left) s left)"
mkdir -p "$OUT/ab"
OUT=$OUT/ab A_TREE=. A_SET="${A_SET:-decode_lane=off}" B_SET="decode_lane=auto ${B_EXTRA:-}" ROUTINGS=calibrated,uniform \
  BUDGET_S=$(( $(left) - 5 )) bash bench/device/decode_ab.sh >/dev/null 2>&1
cat "$OUT/ab/table.md"
grep -h "lane" "$OUT"/ab/ab.log 2>/dev/null | tail -3
echo "done ($(( $(date +%s) - T0 )) s)"

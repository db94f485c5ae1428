#!/usr/bin/env bash
# Engine settings A/B on calibrated GPU decode, one call, repo root, carry [".whl"]: an 18-layer 120b-shape checkpoint
# and its calibrated variant in /dev/shm, one untimed process (Triton's cache filled, as an installed app has it),
# then bench.routing.calibrated_tg in fresh processes in the mirrored order A B B A, repeated ROUNDS times (2:
# A B B A A B B A), each as peer_decode.sh runs it (12 GiB plan's slots per layer, 8 threads, 2,048-token prompt,
# 16 untimed, 128 timed). No llama.cpp: a ratio to it comes from another call (CALCULATED across leases).
#   usage: A="decode_lane_beside=true" B="decode_lane_beside=true decode_lane_split=true" bash bench/device/cal_ab.sh
#   C and D (optional) add configurations: A B C D D C B A a round; the table gives each mean against A's.
# ~70 s of setup, then ~17 s a run (session 21's calls). $OUT: warm.json, a-N.json, b-N.json, table.md, cal.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=bench/device/env.sh
NATIVE_LOG=/tmp/cal_native_build.log . bench/device/env.sh  # sets $OUT, $T0, $PY, left()
LOG=$OUT/cal.log
A=${A:-}
B=${B:-}
ROUNDS=${ROUNDS:-2}
export NEURAL_CACHE_DIR=/tmp/cal-ab-cache
cal_checkpoints "$LOG"  # $CK, $CKC
POOL=$(scaled_pool 18)
echo "[$(( $(date +%s) - T0 )) s] checkpoints ready, pool_gib $POOL; A: $A; B: $B; C: ${C-(none)}; D: ${D-(none)}" | tee -a "$LOG"
cal() {  # NAME SETTINGS...
  local name=$1 sets=() kv l
  shift
  for kv in "$@"; do sets+=(--set "$kv"); done
  l=$(left)
  [ "$l" -lt 30 ] && { echo "skip $name: ${l}s left" | tee -a "$LOG"; return; }
  rm -f "$NEURAL_CACHE_DIR"/hotset-*.npy  # each run ranks its own hot set; the Triton cache stays
  # shellcheck disable=SC2068  # the settings are key=value words
  timeout $(( l < 150 ? l : 150 )) "$PY" -m bench.routing.calibrated_tg "$CKC" --depth 2048 --warmup 16 --tokens 128 \
    --backend gpu --budget-gib 12 --threads 8 --context 16384 --set "pool_gib=$POOL" ${sets[@]+"${sets[@]}"} \
    >"$OUT/$name.json" 2>>"$LOG"
  echo "[$(( $(date +%s) - T0 )) s] $name exited $?" | tee -a "$LOG"
}
# shellcheck disable=SC2086  # A..D are lists of key=value words
cal warm $A
# the configurations in use: A and B, then C and D where set (an empty value is the defaults)
LET=(a b); SETS=("$A" "$B")
[ -n "${C+x}" ] && { LET+=(c); SETS+=("$C"); }
[ -n "${D+x}" ] && [ -n "${C+x}" ] && { LET+=(d); SETS+=("$D"); }
for r in $(seq 1 "$ROUNDS"); do  # mirrored: A B (C D) then (D C) B A
  for i in "${!LET[@]}"; do cal "${LET[$i]}-$((2 * r - 1))" ${SETS[$i]}; done
  for ((i = ${#LET[@]} - 1; i >= 0; i--)); do cal "${LET[$i]}-$((2 * r))" ${SETS[$i]}; done
done
"$PY" -m bench.routing.ab_table "$OUT" "${SETS[@]}" | tee "$OUT/table.md"

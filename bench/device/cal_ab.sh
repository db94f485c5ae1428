#!/usr/bin/env bash
# Engine settings A/B on calibrated GPU decode, one call, repo root, carry [".whl"]: an 18-layer 120b-shape checkpoint
# and its calibrated variant in /dev/shm, one untimed process (Triton's cache filled, as an installed app has it),
# then bench.routing.calibrated_tg in fresh processes in the mirrored order A B B A, repeated ROUNDS times (2:
# A B B A A B B A), each as peer_decode.sh runs it (12 GiB plan's slots per layer, 8 threads, 2,048-token prompt,
# 16 untimed, 128 timed). No llama.cpp: a ratio to it comes from another call (CALCULATED across leases).
#   usage: A="decode_lane_beside=true" B="decode_lane_beside=true decode_lane_split=true" bash bench/device/cal_ab.sh
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
echo "[$(( $(date +%s) - T0 )) s] checkpoints ready, pool_gib $POOL; A: $A; B: $B" | tee -a "$LOG"
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
# shellcheck disable=SC2086  # A and B are lists of key=value words
cal warm $A
for r in $(seq 1 "$ROUNDS"); do
  # shellcheck disable=SC2086
  cal "a-$((2 * r - 1))" $A; cal "b-$((2 * r - 1))" $B; cal "b-$((2 * r))" $B; cal "a-$((2 * r))" $A
done
"$PY" - "$OUT" "$A" "$B" <<'PY' | tee "$OUT/table.md"
import glob, json, os, statistics, sys
out, a, b = sys.argv[1:4]
print(f"A: {a or '(defaults)'}; B: {b or '(defaults)'}; calibrated decode, 18 layers, 12 GiB plan's slots, 8 threads")
print()
print("| run | tok/s | VRAM hit | ms a token: wall / cpu / lane start (of it the split) / lane wait / gpu wait / launch | lane experts a token | native layers a token | split CPU / lane ms an expert |")
print("|---|---:|---:|---|---:|---:|---|")
got = {"a": [], "b": []}
for f in sorted(glob.glob(f"{out}/[ab]-*.json"), key=os.path.getmtime):  # in the order they ran
    name = os.path.basename(f)[:-5]
    try:
        d = json.load(open(f))
    except (OSError, ValueError) as exc:
        print(f"| {name} | failed: {exc} | | | | |")
        continue
    ph, sp = d["phases_ms"], d["lane_split"] or {}
    got[name[0]].append(d["tok_s_MEASURED"])
    print(f"| {name} | {d['tok_s_MEASURED']:.2f} | {d['vram_hit_rate_MEASURED']:.3f} | {ph['wall']:.2f} / {ph['cpu']:.2f} / "
          f"{ph.get('lane_start', 0):.2f} ({ph.get('lane_decide', 0):.2f}) / {ph.get('lane_wait', 0):.2f} / {ph['gpu_wait']:.2f} / {ph['launch']:.2f} | "
          f"{d.get('lane_experts_per_token')} | {d.get('native_layers_per_token')} | "
          f"{sp.get('cpu_ms')} / {sp.get('lane_ms')} |")
print()
for k in "ab":
    if got[k]:
        print(f"{k.upper()}: mean {statistics.mean(got[k]):.2f} tok/s over {len(got[k])} runs {[round(v, 2) for v in got[k]]} (MEASURED)")
if got["a"] and got["b"]:
    print(f"B / A: {statistics.mean(got['b']) / statistics.mean(got['a']):.3f} (CALCULATED from the means)")
PY

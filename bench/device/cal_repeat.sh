#!/usr/bin/env bash
# Is the first Neural process of a lease slower at calibrated decode? (session 20: in peer_decode.sh's call the
# first calibrated run learned a CPU rate of 0.364 ms an expert, the last 0.240, and ran 71.66 against 84.44 tok/s.)
# One call, repo root, carry [".whl"]: an 18-layer 120b-shape checkpoint and its calibrated variant in /dev/shm,
# then bench.routing.calibrated_tg RUNS times (4), each a fresh process as peer_decode.sh runs it (12 GiB plan's
# slots per layer, 8 threads, 2,048-token prompt, 16 untimed, 128 timed); run 1 starts with an empty Triton cache.
# ~190 s after the machine starts (CALCULATED from session 20's call 1 timeline). $OUT: cal-N.json, table.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=bench/device/env.sh
NATIVE_LOG=/tmp/cal_native_build.log . bench/device/env.sh  # sets $OUT, $T0, $PY, scaled_pool
LOG=$OUT/cal.log
RUNS=${RUNS:-4}
export NEURAL_CACHE_DIR=/tmp/cal-repeat-cache
rm -rf "$NEURAL_CACHE_DIR"
cal_checkpoints "$LOG"  # $CK, $CKC
POOL=$(scaled_pool 18)
echo "[$(( $(date +%s) - T0 )) s] checkpoints ready, pool_gib $POOL" | tee -a "$LOG"
for i in $(seq 1 "$RUNS"); do
  rm -f "$NEURAL_CACHE_DIR"/hotset-*.npy  # each run ranks its own hot set; the Triton cache stays after run 1
  timeout 150 "$PY" -m bench.routing.calibrated_tg "$CKC" --depth 2048 --warmup 16 --tokens 128 --backend gpu \
    --budget-gib 12 --threads 8 --context 16384 --set "pool_gib=$POOL" >"$OUT/cal-$i.json" 2>>"$LOG"
  echo "[$(( $(date +%s) - T0 )) s] cal-$i exited $?" | tee -a "$LOG"
done
"$PY" - "$OUT" "$RUNS" <<'PY' | tee "$OUT/table.md"
import json, sys
out, runs = sys.argv[1], int(sys.argv[2])
print("| run | tok/s | VRAM hit | prompt s (with load) | eager pass s | ms a token: wall / cpu / lane | split CPU / lane ms an expert | check CPU alone ms |")
print("|---|---:|---:|---:|---:|---|---|---:|")
for i in range(1, runs + 1):
    try:
        d = json.load(open(f"{out}/cal-{i}.json"))
    except (OSError, ValueError) as exc:
        print(f"| cal-{i} | failed: {exc} | | | | | | |")
        continue
    ph, sp, ck, lp = d["phases_ms"], d["lane_split"] or {}, d["lane_check"] or {}, d["load_phases_s"]
    print(f"| cal-{i} | {d['tok_s_MEASURED']:.2f} | {d['vram_hit_rate_MEASURED']:.3f} | {d['prompt_s']} | "
          f"{lp.get('eager_pass')} | {ph['wall']} / {ph['cpu']} / {ph.get('lane')} | {sp.get('cpu_ms')} / {sp.get('lane_ms')} | "
          f"{ck.get('cpu_ms_alone')} |")
PY

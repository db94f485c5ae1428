#!/usr/bin/env bash
# GPU decode, two versions of the tree A/B in one device call (repo root, carry [".whl", ".ab"]):
# .ab/old holds the other version (`git archive REV app engine native bench | tar -x -C .ab/old`),
# the repo root is the new one. 18-layer 120b-shape checkpoint (uniform) and its skewed variant
# (`synth --like --routing static --skew 1.5`) in /dev/shm, Neural GPU at 12 GiB with the pool scaled
# to the 36-layer plan's slots per layer (as peer_decode.sh), 8 threads, `neural bench decode`
# tg128 greedy, 1 warm-up + 2 runs, fresh process each, in the order A B B A per routing.
#   usage: [ROUTINGS=skewed,uniform] [LAYERS=18] bash bench/device/decode_ab.sh
# $OUT: table.md (tok/s, hit rate and every phase in ms per token for each run) and results.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=bench/device/env.sh
. bench/device/env.sh
LAYERS=${LAYERS:-18}
ROUTINGS=${ROUTINGS:-skewed,uniform}
LOG=$OUT/ab.log
CK=/dev/shm/neural-ab/synth-${LAYERS}l
CKS=$CK-skewed
export NEURAL_CACHE_DIR=/tmp/neural-ab-cache
cp native/_neural_native*.so .ab/old/native/ 2>/dev/null || echo "no native build to share" | tee -a "$LOG"
[ -f "$CK/SYNTHETIC.json" ] || timeout 200 "$PY" -m app.cli.main synth --preset 120b-shape --layers "$LAYERS" \
  --seed 1 --jobs 8 --fast --out "$CK" >"$OUT/synth.txt" 2>&1 || { tail "$OUT/synth.txt"; exit 1; }
[ -f "$CKS/SYNTHETIC.json" ] || timeout 120 "$PY" -m app.cli.main synth --like "$CK" --routing static --skew 1.5 \
  --out "$CKS" >>"$OUT/synth.txt" 2>&1
echo "checkpoints ready ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
POOL=$(scaled_pool "$LAYERS")
run() {  # NAME TREE CKPT
  local l
  l=$(left)
  [ "$l" -lt 40 ] && { echo "skip $1: ${l}s left" | tee -a "$LOG"; return; }
  rm -f "$NEURAL_CACHE_DIR"/hotset-*.npy
  echo "== $1 ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
  (root=$PWD; cd "$2" && PYTHONPATH="$PWD:$root:/tmp/site" timeout "$(( l < 120 ? l : 120 ))" "$PY" -m app.cli.main bench decode "$3" \
    --backend gpu --budget-gib 12 --threads 8 --context 16384 --depth 0 --tokens 128 --temperature 0 --repeats 2 --warmup 1 \
    --set "pool_gib=$POOL" --json) >"$OUT/$1.json" 2>>"$LOG" || echo "$1 exited $?" | tee -a "$LOG"
}
for r in ${ROUTINGS//,/ }; do
  ck=$CK
  [ "$r" = skewed ] && ck=$CKS
  run "$r-A1" .ab/old "$ck"; run "$r-B1" . "$ck"; run "$r-B2" . "$ck"; run "$r-A2" .ab/old "$ck"
done
"$PY" - "$OUT" <<'PY' | tee "$OUT/table.md"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("| run | tok/s (median) | runs | hit | phases ms per token |\n|---|---:|---|---:|---|")
for f in sorted(out.glob("*.json"), key=lambda p: p.stat().st_mtime):
    try:
        row = json.loads(f.read_text())["results"][0]
        s = row["sampling"][0]["tokens_per_s"]
        ph = ", ".join(f"{k} {v:.3f}" for k, v in row["phases_ms"].items())
        print(f"| {f.stem} | {s['median']:.2f} | {[round(x, 2) for x in s['runs']]} | "
              f"{row['vram_hit_rate']['median']:.3f} | {ph} |")
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        print(f"| {f.stem} | - | - | - | no result ({e!r}) |")
PY
echo "done ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
(cd "$OUT" && tar czf /tmp/ab-results.tgz --exclude=results.tgz . && find . -mindepth 1 ! -name table.md -delete \
  && mv /tmp/ab-results.tgz results.tgz)

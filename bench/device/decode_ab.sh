#!/usr/bin/env bash
# GPU decode, two versions of the tree A/B in one device call (repo root, carry [".whl", ".ab"]):
# .ab/old holds the other version (`git archive REV app engine native bench | tar -x -C .ab/old`),
# the repo root is the new one. When the two native/ sources differ, each tree builds its own
# extension (else the new build is shared). 18-layer 120b-shape checkpoint (uniform), its skewed
# variant (`synth --like --routing static --skew 1.5`) and its calibrated variant (`--routing
# calibrated`) in /dev/shm, Neural GPU at 12 GiB with the pool scaled to the 36-layer plan's slots
# per layer (as peer_decode.sh), 8 threads, fresh process each, in the order A B B A per routing:
# uniform and skewed through `neural bench decode` (tg$TOKENS greedy, 1 warm-up + $REPEATS runs),
# calibrated through bench.routing.calibrated_tg (teacher-forced, $CAL_DEPTH prompt, 16 warm-up,
# $TOKENS timed). With CALL_COST=1 first: bench/kernel/call_cost.c against each tree's native/,
# A B B A at 8 threads, gaps 0/100/400 us (the fixed cost of a one-token kernel call).
#   usage: [ROUTINGS=skewed,uniform,calibrated] [LAYERS=18] [TOKENS=128] [REPEATS=2] [CALL_COST=1]
#          [A_TREE=.ab/old] [A_SET="key=value ..."] [B_SET="key=value ..."] bash bench/device/decode_ab.sh
# A_TREE=. with A_SET/B_SET compares two settings of the checkout (each side runs with its --set values), e.g.
# A_TREE=. A_SET="early_launch=false" B_SET="early_launch=true" (no .ab needed).
# $OUT: table.md (tok/s, hit rate and every phase in ms per token for each run), call_cost.txt and results.tgz.
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
TOKENS=${TOKENS:-128}
REPEATS=${REPEATS:-2}
CAL_DEPTH=${CAL_DEPTH:-2048}
CKC=$CK-calibrated
A_TREE=${A_TREE:-.ab/old}
if [ "$A_TREE" = . ]; then
  :
elif cmp -s <(cat native/neural_*.[ch]) <(cat "$A_TREE"/native/neural_*.[ch]); then
  cp native/_neural_native*.so "$A_TREE"/native/ 2>/dev/null || echo "no native build to share" | tee -a "$LOG"
else
  (cd "$A_TREE" && "$PY" -c "from native.build_native import ffibuilder; ffibuilder.compile(tmpdir='.', verbose=False)") \
    >"$OUT/native_build_old.log" 2>&1 && echo "old tree: its own native build" | tee -a "$LOG" \
    || echo "old tree: native build FAILED" | tee -a "$LOG"
fi
if [ "${CALL_COST:-0}" = 1 ]; then
  for t in old new; do
    d=native; [ $t = old ] && d=.ab/old/native
    cc -O2 -ffp-contract=off -std=gnu11 -pthread -I$d bench/kernel/call_cost.c $d/neural_experts.c $d/neural_isa.c \
      $d/neural_team.c -lm -o /tmp/callcost-$t || echo "call_cost build $t failed" | tee -a "$LOG"
  done
  { for t in old new new old; do echo "$t $(/tmp/callcost-$t 8 2 1 0,100,400)"; done
    echo "new-spin1000 $(/tmp/callcost-new 8 2 1 400 1000)"; } | tee "$OUT/call_cost.txt"
fi
[ -f "$CK/SYNTHETIC.json" ] || timeout 200 "$PY" -m app.cli.main synth --preset 120b-shape --layers "$LAYERS" \
  --seed 1 --jobs 8 --fast --out "$CK" >"$OUT/synth.txt" 2>&1 || { tail "$OUT/synth.txt"; exit 1; }
[ -f "$CKS/SYNTHETIC.json" ] || timeout 120 "$PY" -m app.cli.main synth --like "$CK" --routing static --skew 1.5 \
  --out "$CKS" >>"$OUT/synth.txt" 2>&1
[[ ",$ROUTINGS," == *",calibrated,"* ]] && { [ -f "$CKC/SYNTHETIC.json" ] || timeout 120 "$PY" -m app.cli.main synth \
  --like "$CK" --routing calibrated --out "$CKC" >>"$OUT/synth.txt" 2>&1; }
echo "checkpoints ready ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
POOL=$(scaled_pool "$LAYERS")
run() {  # NAME TREE CKPT [--set key=value ...]
  local l extra=("${@:4}")
  l=$(left)
  [ "$l" -lt 40 ] && { echo "skip $1: ${l}s left" | tee -a "$LOG"; return; }
  rm -f "$NEURAL_CACHE_DIR"/hotset-*.npy
  echo "== $1 ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
  local cmd=(-m app.cli.main bench decode "$3" --backend gpu --budget-gib 12 --threads 8 --context 16384 --depth 0
    --tokens "$TOKENS" --temperature 0 --repeats "$REPEATS" --warmup 1 --set "pool_gib=$POOL" "${extra[@]}" --json)
  [ "$3" = "$CKC" ] && cmd=(-m bench.routing.calibrated_tg "$3" --depth "$CAL_DEPTH" --warmup 16 --tokens "$TOKENS"
    --backend gpu --budget-gib 12 --threads 8 --context 16384 --set "pool_gib=$POOL" "${extra[@]}")
  (root=$PWD; cd "$2" && PYTHONPATH="$PWD:$root:/tmp/site" timeout "$(( l < 120 ? l : 120 ))" "$PY" "${cmd[@]}") \
    >"$OUT/$1.json" 2>>"$LOG" || echo "$1 exited $?" | tee -a "$LOG"
}
for r in ${ROUTINGS//,/ }; do
  ck=$CK
  [ "$r" = skewed ] && ck=$CKS
  [ "$r" = calibrated ] && ck=$CKC
  aset=() bset=()
  for kv in ${A_SET:-}; do aset+=(--set "$kv"); done
  for kv in ${B_SET:-}; do bset+=(--set "$kv"); done
  run "$r-A1" "$A_TREE" "$ck" "${aset[@]}"; run "$r-B1" . "$ck" "${bset[@]}"; run "$r-B2" . "$ck" "${bset[@]}"
  run "$r-A2" "$A_TREE" "$ck" "${aset[@]}"
done
"$PY" - "$OUT" <<'PY' | tee "$OUT/table.md"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("| run | tok/s (median) | runs | hit | phases ms per token |\n|---|---:|---|---:|---|")
for f in sorted(out.glob("*.json"), key=lambda p: p.stat().st_mtime):
    try:
        text = f.read_text().strip()
        d = json.loads(text if text.startswith("{\n") else text.splitlines()[-1])
        if "tok_s_MEASURED" in d:  # calibrated_tg: one timed window
            runs, hit, phases = [d["tok_s_MEASURED"]], d["vram_hit_rate_MEASURED"], d.get("phases_ms", {})
        else:
            row = d["results"][0]
            runs, hit, phases = row["sampling"][0]["tokens_per_s"]["runs"], row["vram_hit_rate"]["median"], row["phases_ms"]
        med = sorted(runs)[len(runs) // 2] if len(runs) % 2 else sum(sorted(runs)[len(runs) // 2 - 1:][:2]) / 2
        ph = ", ".join(f"{k} {v:.3f}" for k, v in phases.items())
        if "tok_s_with_warmup_MEASURED" in d:
            ph += f"; with the warm-up tokens {d['tok_s_with_warmup_MEASURED']:.2f} tok/s"
        print(f"| {f.stem} | {med:.2f} | {[round(x, 2) for x in runs]} | {hit:.3f} | {ph} |")
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        print(f"| {f.stem} | - | - | - | no result ({e!r}) |")
PY
echo "done ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
(cd "$OUT" && tar czf /tmp/ab-results.tgz --exclude=results.tgz . && find . -mindepth 1 ! -name table.md -delete \
  && mv /tmp/ab-results.tgz results.tgz)

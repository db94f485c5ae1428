#!/usr/bin/env bash
# Direct copies from the registered checkpoint mapping (issue 16), one GPU-machine call (repo root,
# carry [".whl", ".o200k"]), 36 layers, 12 GiB, 8 threads:
#   1. bits: the same 600-token prompt with direct copies and with the packing ring (bench.gpu.direct_check)
#   2. TTFT, mirrored: direct (default) / ring (stage_direct=off) / ring / direct, 600 and 3,000 tokens,
#      then direct at 13,000 with a 600-token follow-up, and direct with the measured split (auto)
#   3. the shipped 13k coding conversation through `neural serve` (real o200k tokenizer, follow-ups)
# Results in $OUT: *.json, direct.log, table.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
. bench/device/env.sh
export NEURAL_O200K_DIR=$PWD/.o200k NEURAL_CACHE_DIR=/tmp/neural-direct-cache
CK=/dev/shm/neural-direct/uniform
[ -f "$CK/SYNTHETIC.json" ] || python3 -m app.cli.main synth --preset 120b-shape --layers 36 --seed 1 \
  --jobs 8 --fast --out "$CK" >"$OUT/synth.txt" 2>&1 || { tail "$OUT/synth.txt"; exit 1; }
echo "synth done at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/direct.log"
timeout 120 python3 -m bench.gpu.direct_check "$CK" 600 >"$OUT/direct_check.txt" 2>>"$OUT/direct.log" \
  || echo "direct_check exited $?" | tee -a "$OUT/direct.log"
grep -E "identical|layers_ready|locked|\"s\"|error" "$OUT/direct_check.txt"
run() {  # name, timeout, neural bench prompt args...
  local name=$1 t=$2; shift 2
  local l; l=$(left)
  [ "$l" -lt 40 ] && { echo "skip $name: ${l}s left" | tee -a "$OUT/direct.log"; return; }
  [ "$t" -gt "$l" ] && t=$l
  echo "== $name ($(( $(date +%s) - T0 )) s)" | tee -a "$OUT/direct.log"
  timeout "$t" python3 -m app.cli.main bench prompt "$CK" --backend gpu --budget-gib 12 --threads 8 \
    --warmup 0 --json "$@" >"$OUT/$name.json" 2>>"$OUT/direct.log" || echo "$name exited $?" | tee -a "$OUT/direct.log"
}
P=(--tokens 600,3000 --repeats 1)
run direct-1 70 "${P[@]}"
run ring-1 70 "${P[@]}" --set stage_direct=off
run ring-2 70 "${P[@]}" --set stage_direct=off
run direct-2 70 "${P[@]}"
run direct-13k 80 --tokens 13000 --repeats 1 --followup 600
run direct-auto 70 "${P[@]}" --set prompt_split=auto
if [ "$(left)" -gt 120 ]; then
  python3 -m app.cli.main serve "$CK" --backend gpu --budget-gib 12 --threads 8 --port 8099 \
    --log-file "$OUT/api.log" >"$OUT/serve.log" 2>&1 &
  SERVE=$!
  for _ in $(seq 60); do curl -sf http://127.0.0.1:8099/health >/dev/null && break; sleep 1; done
  echo "server up $(( $(date +%s) - T0 )) s" | tee -a "$OUT/direct.log"
  timeout $(( $(left) - 15 )) python3 -m app.cli.main bench replay --endpoint neural=http://127.0.0.1:8099 --rounds 1 \
    --out "$OUT/replay" --json >"$OUT/replay-api.txt" 2>"$OUT/replay.err" || echo "replay exited $?"
  kill "$SERVE"; wait "$SERVE" 2>/dev/null
fi
python3 -m bench.harness.ttft_table "$OUT" | tee "$OUT/table.md"
python3 -c "import json,sys; r=json.load(open('$OUT/replay-api.txt')); print(json.dumps(r)[:1200])" 2>/dev/null
echo "done at $(( $(date +%s) - T0 )) s"

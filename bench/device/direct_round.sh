#!/usr/bin/env bash
# Direct copies with the measured split (the defaults), one GPU-machine call (repo root, carry
# [".whl", ".o200k"]), 36 layers, 12 GiB, 8 threads; results in $OUT (*.json, round.log, table.md):
#   1. first-ever: a fresh Triton cache, one 600-token prompt in a fresh process (cold)
#   2. mirrored: defaults (6 scratch slots) / 12 scratch slots / 12 / defaults; 600 and 3,000 tokens,
#      each with a 600-token follow-up
#   3. 13,000 tokens with a 600-token follow-up
#   4. the shipped 13k coding conversation through `neural serve` (real o200k tokenizer, follow-ups)
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
. bench/device/env.sh
export NEURAL_O200K_DIR=$PWD/.o200k NEURAL_CACHE_DIR=/tmp/neural-direct-round-cache
rm -rf "$NEURAL_CACHE_DIR"
CK=/dev/shm/neural-direct/uniform
synth_120b "$CK"
echo "synth done at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/round.log"
run() {  # name, timeout, neural bench prompt args...
  bench_run "$1" "$2" "$OUT/round.log" prompt "$CK" --backend gpu --budget-gib 12 --threads 8 --warmup 0 "${@:3}"
}
run first-ever 100 --tokens 600 --repeats 1
P=(--tokens 600,3000 --repeats 1 --followup 600)
run defaults-1 70 "${P[@]}"
run scratch12-1 70 "${P[@]}" --set scratch_slots=12
run scratch12-2 70 "${P[@]}" --set scratch_slots=12
run defaults-2 70 "${P[@]}"
run defaults-13k 70 --tokens 13000 --repeats 1 --followup 600
[ "$(left)" -gt 100 ] && serve_replay "$CK" $(( $(left) - 10 ))
python3 -m bench.harness.ttft_table "$OUT" | tee "$OUT/table.md"
python3 - "$OUT/replay-api.txt" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    print("replay unreadable", exc); raise SystemExit
for name, e in r.get("summary", {}).get("endpoints", {}).items():
    print("replay", name, "ttft", json.dumps(e.get("ttft_s")), "decode tps", e.get("decode_tps"))
for row in r.get("requests", r.get("results", []))[:8]:
    print(json.dumps(row)[:300])
PY
echo "done at $(( $(date +%s) - T0 )) s"

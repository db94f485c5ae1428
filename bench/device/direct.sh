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
synth_120b "$CK"
echo "synth done at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/direct.log"
timeout 120 python3 -m bench.gpu.direct_check "$CK" 600 >"$OUT/direct_check.txt" 2>>"$OUT/direct.log" \
  || echo "direct_check exited $?" | tee -a "$OUT/direct.log"
grep -E "identical|layers_ready|locked|\"s\"|error" "$OUT/direct_check.txt"
run() {  # name, timeout, neural bench prompt args...
  bench_run "$1" "$2" "$OUT/direct.log" prompt "$CK" --backend gpu --budget-gib 12 --threads 8 --warmup 0 "${@:3}"
}
P=(--tokens 600,3000 --repeats 1)
run direct-1 70 "${P[@]}"
run ring-1 70 "${P[@]}" --set stage_direct=off
run ring-2 70 "${P[@]}" --set stage_direct=off
run direct-2 70 "${P[@]}"
run direct-13k 80 --tokens 13000 --repeats 1 --followup 600
run direct-auto 70 "${P[@]}" --set prompt_split=auto
[ "$(left)" -gt 120 ] && serve_replay "$CK" $(( $(left) - 15 ))
python3 -m bench.harness.ttft_table "$OUT" | tee "$OUT/table.md"
python3 -c "import json,sys; r=json.load(open('$OUT/replay-api.txt')); print(json.dumps(r)[:1200])" 2>/dev/null
echo "done at $(( $(date +%s) - T0 )) s"

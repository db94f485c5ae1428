#!/usr/bin/env bash
# Session 7's GPU-machine call for time to first token and the decode A/B (repo root, carry
# [".whl", ".o200k"]), 36 layers, 12 GiB, 8 threads:
#   1. bits: direct copies (2-D runtime copies per wave) vs the packing ring (bench.gpu.direct_check)
#   2. TTFT with the defaults, first runs of the process included (--warmup 0): 600 / 3,000 with a
#      600-token follow-up (2 repeats), 13,000 with a follow-up
#   3. the shipped 13k coding conversation through `neural serve` (real tokenizer; access log: prompt_s)
#   4. decode, torch intra-op threads 8 vs 16, mirrored (8 16 16 8), T=0, depth 0
#   5. `neural bench kernel` at 8 threads against its same-run DRAM probe
# Results in $OUT; the tables print last.
set -uo pipefail
cd "$(dirname "$0")/../.."
. bench/device/env.sh
export NEURAL_O200K_DIR=$PWD/.o200k NEURAL_CACHE_DIR=/tmp/neural-s7-cache
CK=/dev/shm/neural-s7/uniform
synth_120b "$CK"
LOG=$OUT/final.log
echo "synth done ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
timeout 110 "$PY" -m bench.gpu.direct_check "$CK" 600 >"$OUT/direct_check.txt" 2>>"$LOG" || echo "direct_check exited $?" | tee -a "$LOG"
grep -E "identical|layers_ready|cudart|\"s\"" "$OUT/direct_check.txt"
gpu() { bench_run "$1" "$2" "$LOG" "${@:3}" --backend gpu --budget-gib 12 --threads 8; }
gpu ttft-1 80 prompt "$CK" --tokens 600,3000 --repeats 2 --followup 600 --warmup 0
gpu ttft-13k 60 prompt "$CK" --tokens 13000 --repeats 1 --followup 600 --warmup 0
[ "$(left)" -gt 260 ] && serve_replay "$CK" 120 && grep "access" "$OUT/api.log" | sed 's/.*access: //'
i=0
for tt in 8 16 16 8; do
  i=$((i + 1))
  gpu "decode-t$tt-$i" 50 decode "$CK" --tokens 64 --depth 0 --temperature 0 --repeats 2 --warmup 1 --torch-threads "$tt"
done
[ "$(left)" -gt 40 ] && timeout 35 "$PY" -m app.cli.main bench kernel --threads 8 --seconds 1 --rounds 3 --json \
  >"$OUT/kernel.json" 2>>"$LOG"
"$PY" -m bench.harness.ttft_table "$OUT" | tee "$OUT/table.md"
"$PY" - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for f in sorted(out.glob("decode-t*.json")):
    try:
        r = json.loads(f.read_text())
    except ValueError:
        print(f.name, "unreadable"); continue
    for row in r.get("results", []):
        for s in row.get("sampling", []):
            tps = s.get("tokens_per_s", {})
            print(f.stem, "tok/s median", round(tps.get("median", 0), 2), "runs", [round(x, 2) for x in tps.get("runs", [])])
try:
    k = json.loads((out / "kernel.json").read_text())
    print("kernel:", json.dumps(k)[:1200])
except (OSError, ValueError) as exc:
    print("kernel unreadable:", exc)
PY
echo "done ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"

#!/usr/bin/env bash
# Session 7's GPU-machine call for time to first token and the decode A/B (repo root, carry
# [".whl", ".o200k"]), 36 layers, 12 GiB, 8 threads:
#   1. bits: direct copies (2-D runtime copies per wave) vs the packing ring (bench.gpu.direct_check)
#   2. TTFT with the defaults, first runs of the process included (--warmup 0): 600 / 3,000 with a
#      600-token follow-up (2 repeats), 13,000 with a follow-up
#   3. the shipped 13k coding conversation through `neural serve` (real tokenizer; access log: prompt_s)
#   4. decode, torch intra-op threads 8 vs 16, mirrored (8 16 16 8), T=0, depth 0
#   5. `neural bench kernel` at 8 threads against its same-run DRAM probe
# PARTS (default check,ttft,replay,decode,kernel) picks the steps. Results in $OUT (one
# results.tgz: the device returns at most 8 files); the tables print last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. bench/device/env.sh
export NEURAL_O200K_DIR=$PWD/.o200k NEURAL_CACHE_DIR=/tmp/neural-s7-cache
CK=/dev/shm/neural-s7/uniform
synth_120b "$CK"
LOG=$OUT/final.log
PARTS=${PARTS:-check,ttft,replay,decode,kernel}
echo "synth done ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
part check && direct_check "$CK" 110 "$LOG"
gpu() { bench_run "$1" "$2" "$LOG" "${@:3}" --backend gpu --budget-gib 12 --threads 8; }
part ttft && gpu ttft-1 80 prompt "$CK" --tokens 600,3000 --repeats 2 --followup 600 --warmup 0
part ttft && gpu ttft-13k 60 prompt "$CK" --tokens 13000 --repeats 1 --followup 600 --warmup 0
part replay && [ "$(left)" -gt 140 ] && serve_replay "$CK" 120 && grep "access" "$OUT/api.log" | sed 's/.*access: //'
i=0
part decode && for tt in 8 16 16 8; do
  i=$((i + 1))
  gpu "decode-t$tt-$i" 50 decode "$CK" --tokens 64 --depth 0 --temperature 0 --repeats 2 --warmup 1 --torch-threads "$tt"
done
part kernel && [ "$(left)" -gt 40 ] && timeout 35 "$PY" -m app.cli.main bench kernel --threads 8 --seconds 1 --rounds 3 --json \
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
for f in sorted(out.glob("ttft-*.json")):
    try:
        r = json.loads(f.read_text())
    except ValueError:
        continue
    print(f.stem, "calibration", {k: round(v, 4) for k, v in r.get("split_calibration", {}).items()})
    for row in r.get("results", []):
        for tag, sp in (("first", row.get("prompt_split", {})), ("follow", (row.get("followup") or {}).get("prompt_split", {}))):
            print(f.stem, row["prompt_tokens"], tag, {k: round(sp.get(k, 0), 3) for k in ("wall", "gpu_copies", "cpu_jobs",
                  "cpu_wait", "lane_cpu_observed_s", "lane_cpu_predicted_s", "launch", "cpu_experts", "direct_experts")})
try:
    k = json.loads((out / "kernel.json").read_text())
    print("kernel:", json.dumps(k)[:1200])
except (OSError, ValueError) as exc:
    print("kernel unreadable:", exc)
PY
echo "done ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
(cd "$OUT" && tar czf /tmp/results.tgz --exclude=results.tgz . && find . -mindepth 1 -delete && mv /tmp/results.tgz .)

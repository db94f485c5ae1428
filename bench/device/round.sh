#!/usr/bin/env bash
# Prompt split A/B (mirrored), a 13k follow-up, and decode with the shipping sampler on uniform and
# calibrated routing, in one GPU-machine call (repo root, carry [".whl", ".o200k"]), 36 layers,
# 12 GiB, 8 threads. Results in $OUT: *.json, round.log, table.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
. bench/device/env.sh
export NEURAL_O200K_DIR=$PWD/.o200k NEURAL_CACHE_DIR=/tmp/neural-round-cache
ROOT=/dev/shm/neural-round
[ -f "$ROOT/uniform/SYNTHETIC.json" ] || python3 -m app.cli.main synth --preset 120b-shape --layers 36 --seed 1 \
  --jobs 8 --fast --out "$ROOT/uniform" >"$OUT/synth.txt" 2>&1 || { tail "$OUT/synth.txt"; exit 1; }
python3 -m app.cli.main synth --like "$ROOT/uniform" --routing calibrated --out "$ROOT/calibrated" >>"$OUT/synth.txt" 2>&1 \
  || echo "calibrated variant failed" | tee -a "$OUT/round.log"
echo "synth done at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/round.log"
run() {  # name, timeout, neural bench args...
  local name=$1 t=$2; shift 2
  local l; l=$(left)
  [ "$l" -lt 30 ] && { echo "skip $name: ${l}s left" | tee -a "$OUT/round.log"; return; }
  [ "$t" -gt "$l" ] && t=$l
  echo "== $name ($(( $(date +%s) - T0 )) s)" | tee -a "$OUT/round.log"
  timeout "$t" python3 -m app.cli.main bench "$@" --backend gpu --budget-gib 12 --threads 8 --json \
    >"$OUT/$name.json" 2>>"$OUT/round.log" || echo "$name exited $?" | tee -a "$OUT/round.log"
}
P=(prompt "$ROOT/uniform" --tokens 600,3000 --repeats 1 --warmup 0)
run auto-1 80 "${P[@]}"
run fixed-1 80 "${P[@]}" --set prompt_split=fixed
run fixed-2 80 "${P[@]}" --set prompt_split=fixed
run auto-2 80 "${P[@]}"
run followup-13k 90 prompt "$ROOT/uniform" --tokens 13000 --repeats 1 --warmup 0 --followup 600
D=(--tokens 128 --depth 0 --temperature 0,1 --top-p 0.9 --repeats 2 --warmup 1)
[ -f "$ROOT/calibrated/SYNTHETIC.json" ] && run decode-calibrated 120 decode "$ROOT/calibrated" "${D[@]}"
run decode-uniform 120 decode "$ROOT/uniform" "${D[@]}"
timeout 60 python3 -m bench.device.sampler_bench --device cuda --json >"$OUT/sampler_cuda.json" 2>>"$OUT/round.log"
python3 -m bench.harness.ttft_table "$OUT" | tee "$OUT/table.md"
python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for name in ("decode-calibrated", "decode-uniform"):
    p = out / f"{name}.json"
    if not p.is_file():
        continue
    try:
        r = json.loads(p.read_text())
    except ValueError:
        print(name, "unreadable"); continue
    for row in r.get("results", []):
        for s in row.get("sampling", []):
            print(name, "depth", row["depth"], "T", s.get("temperature"), "top_p", s.get("top_p"),
                  "tok/s", round(s.get("tokens_per_s", {}).get("median", 0), 2),
                  "sample_ms", s.get("sample_ms_per_token", {}).get("median"), "over_greedy_ms", s.get("sample_over_greedy_ms"),
                  "full_sorts", s.get("sampler_full_sorts"), "hit", (row.get("vram_hit_rate") or {}).get("median"))
for name in ("auto-1", "fixed-1", "fixed-2", "auto-2"):
    p = out / f"{name}.json"
    if p.is_file():
        try:
            print(name, "calibration", json.loads(p.read_text()).get("split_calibration"))
        except ValueError:
            pass
PY

#!/usr/bin/env bash
# One GPU-machine call (repo root, carry [".whl", ".o200k"]), 36 layers, 12 GiB, 8 threads:
#   1. the shipped 13k coding conversation through `neural serve` with the real o200k tokenizer
#      (`neural bench replay`: TTFT of the first request of a fresh server and of each follow-up)
#   2. calibrated routing, teacher-forced (bench.routing.calibrated_decode): engine defaults, then
#      the replay's best policy (137 static, refresh every token, 8 admissions)
#   3. `neural bench kernel` at 8 threads (one-token ratio to the same-run probe, multi-token groups)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/neural-out}
mkdir -p "$OUT"
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
. bench/device/env.sh
export NEURAL_O200K_DIR=$PWD/.o200k NEURAL_CACHE_DIR=/tmp/neural-final-cache
ROOT=/dev/shm/neural-final
python3 -m app.cli.main synth --preset 120b-shape --layers 36 --seed 1 --jobs 8 --fast --out "$ROOT/uniform" \
  >"$OUT/synth.txt" 2>&1 || { tail "$OUT/synth.txt"; exit 1; }
echo "synth $(el) s"
serve_replay "$ROOT/uniform" 200
echo "replay $(el) s"
python3 -m app.cli.main synth --like "$ROOT/uniform" --routing calibrated --out "$ROOT/calibrated" >>"$OUT/synth.txt" 2>&1
echo "calibrated written $(el) s"
i=0
for s in "" "--set static_slots=137 --set refresh_every=1 --set refresh_m=8"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  timeout 100 python3 -m bench.routing.calibrated_decode "$ROOT/calibrated" --depth 2048 --tokens 384 \
    --budget-gib 12 --threads 8 --json $s >"$OUT/calibrated-$i.json" 2>>"$OUT/calibrated.err" || echo "calibrated $i exited $?"
done
echo "calibrated decode $(el) s"
timeout 90 python3 -m app.cli.main bench kernel --threads 8 --tokens 1,4,16 --seconds 1 --rounds 3 --json \
  >"$OUT/kernel8.json" 2>>"$OUT/kernel.err" || echo "kernel exited $?"
echo "kernel $(el) s"
python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
def load(name):
    try:
        return json.loads((out / name).read_text())
    except Exception as exc:
        return {"error": str(exc)}
r = load("replay-api.txt")
print("replay:", json.dumps(r)[:1500])
for i in (1, 2):
    print(f"calibrated-{i}:", json.dumps(load(f"calibrated-{i}.json"))[:700])
print("kernel8:", json.dumps(load("kernel8.json"))[:900])
PY

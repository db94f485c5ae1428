#!/usr/bin/env bash
# Session 6's closing GPU-machine call (repo root, carry [".whl", ".o200k"]), 36 layers, 12 GiB, 8 threads:
#   1. bits: direct copies (per wave) vs the packing ring, same prompt (bench.gpu.direct_check)
#   2. TTFT with the defaults: 600 / 3,000 with a 600-token follow-up (2 repeats), 13,000 + follow-up
#   3. the shipped 13k coding conversation through `neural serve` (real tokenizer; access log: prompt_s)
#   4. the sampler: bench.device.sampler_bench on CUDA, then `neural bench decode` at T=0 and T=1 top-p 0.9
#   5. prompt tiles on the H200 as a stand-in for consumer cards (prompt_device tiles stage, 4 layers)
# Results in $OUT; the tables print last.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
. bench/device/env.sh
export NEURAL_O200K_DIR=$PWD/.o200k NEURAL_CACHE_DIR=/tmp/neural-final6-cache
CK=/dev/shm/neural-final6/uniform
synth_120b "$CK"
log() { echo "$* ($(( $(date +%s) - T0 )) s)" | tee -a "$OUT/final.log"; }
log "synth done"
timeout 100 python3 -m bench.gpu.direct_check "$CK" 600 >"$OUT/direct_check.txt" 2>>"$OUT/final.log" || log "direct_check exited $?"
grep -E "identical|layers_ready|\"s\"" "$OUT/direct_check.txt"
run() {  # name, timeout, neural bench args...
  bench_run "$1" "$2" "$OUT/final.log" "${@:3}" --backend gpu --budget-gib 12 --threads 8
}
run ttft-1 70 prompt "$CK" --tokens 600,3000 --repeats 2 --followup 600 --warmup 0
run ttft-13k 60 prompt "$CK" --tokens 13000 --repeats 1 --followup 600 --warmup 0
if [ "$(left)" -gt 200 ]; then
  serve_replay "$CK" 120
  grep "access" "$OUT/api.log" | sed 's/.*access: //'
fi
timeout 60 python3 -m bench.device.sampler_bench --device cuda --json >"$OUT/sampler_cuda.txt" 2>>"$OUT/final.log" \
  || log "sampler_bench exited $?"
run decode 130 decode "$CK" --tokens 128 --depth 0,8192 --temperature 0,1 --top-p 0.9 --repeats 2 --warmup 1
if [ "$(left)" -gt 70 ]; then
  log "== tiles"
  timeout $(( $(left) - 15 )) python3 -m bench.gpu.prompt_device run --out "$OUT/tiles" --stages env,synth,tiles \
    --layers 4 --ckpt-dir /dev/shm/neural-tiles >>"$OUT/final.log" 2>&1 || log "tiles exited $?"
fi
python3 -m bench.harness.ttft_table "$OUT" | tee "$OUT/table.md"
python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError) as exc:
        print(name, "unreadable:", exc); return None
r = load("decode.json")
for row in (r or {}).get("results", []):
    for s in row.get("sampling", []):
        print("decode depth", row.get("depth"), "T", s.get("temperature"), "top_p", s.get("top_p"),
              "tok/s", round(s.get("tokens_per_s", {}).get("median", 0), 2), "sample_ms", s.get("sample_ms_per_token", {}).get("median"),
              "over_greedy_ms", s.get("sample_over_greedy_ms"), "full_sorts", s.get("sampler_full_sorts"))
s = load("sampler_cuda.txt")
print("sampler:", json.dumps(s)[:1500] if s else None)
t = load("tiles/results.json")
if t:
    tl = t.get("stages", {}).get("tiles", {})
    for g in tl.get("gemm", []):
        print("gemm", json.dumps(g["tiles"]), round(g["ms"], 2), "ms", round(g["tflops"], 1), "TFLOP/s")
    print("best", tl.get("best_gemm"))
PY
log "done"

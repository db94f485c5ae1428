#!/usr/bin/env bash
# Session 10's GPU-machine call for time to first token (repo root, carry [".whl", ".o200k"]), 36
# layers, 12 GiB, 8 threads, the shipped settings unless said; first measurement of session 9's
# CPU-lane kernel (small token groups in registers) and API parser (no header hold-back) there:
#   1. cold: a first-ever process (empty Triton cache) runs a 600-token prompt twice + a 600-token
#      follow-up each (`neural bench prompt --warmup 0`): cold and warm figures from one process
#   2. the CPU share inside one process (bench.gpu.lookahead_ab, 28 lookahead slots, shares
#      INPROC_CONFIGS, mirrored rounds): 600 / follow-up 600 / follow-up 400
#   3. 3,000 and 13,000-token prompts (+ 600-token follow-ups), a fresh process each
#   4. the shipped 13k coding conversation through `neural serve` (real o200k tokenizer, temperature 1)
#   5. (PARTS=sampler) the shipping sampler's cost inside `neural bench decode`: greedy, temperature 1
#      and temperature 1 + top-p 0.9, 64 tokens at depth 0
# PARTS (default cold,inproc,long,replay) picks the steps. Results in $OUT: results.tgz, table.md.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=bench/device/env.sh
. bench/device/env.sh
export NEURAL_O200K_DIR=$PWD/.o200k NEURAL_CACHE_DIR=/tmp/neural-s10-cache
rm -rf "$NEURAL_CACHE_DIR"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-300; free -g; } >"$OUT/machine.txt" 2>&1
CK=/dev/shm/neural-s10/uniform
synth_120b "$CK"
LOG=$OUT/final.log
PARTS=${PARTS:-cold,inproc,long,replay}
echo "synth done ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
gpu() { bench_run "$1" "$2" "$LOG" "${@:3}" --backend gpu --budget-gib 12 --threads 8; }
part cold && gpu cold-600 90 prompt "$CK" --tokens 600 --repeats 2 --followup 600 --warmup 0
part inproc && INPROC_TIMEOUT=240 inproc_ab "$CK" "${INPROC_CONFIGS:-28@0.9,28@1.0,28@0.8}" "$LOG"
part long && gpu long-3k 50 prompt "$CK" --tokens 3000 --repeats 2 --followup 600 --warmup 0
part long && gpu long-13k 55 prompt "$CK" --tokens 13000 --repeats 1 --followup 600 --warmup 0
part sampler && gpu sampler 90 decode "$CK" --tokens 64 --depth 0 --temperature 0,1 --top-p 1,0.9 --repeats 2 \
  --warmup 1
part replay && [ "$(left)" -gt 140 ] && serve_replay "$CK" "$(( $(left) - 15 ))" && grep "access" "$OUT/api.log" | sed 's/.*access: //'
"$PY" -m bench.harness.ttft_table "$OUT" | tee "$OUT/table.md"
"$PY" -m bench.harness.ttft_splits "$OUT" | tee -a "$OUT/table.md"
"$PY" - "$OUT" <<'PY' | tee -a "$OUT/table.md"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
try:
    s = json.loads((out / "replay-api.txt").read_text())["summary"]["endpoints"]["neural"]
    print("replay TTFT runs (first, follow-ups):", [round(x, 3) for x in s["ttft_s"]["runs"]],
          "decode tok/s", round(s["decode_tps"], 2))
except (OSError, ValueError, KeyError) as e:
    print("replay: no summary", e)
try:
    for s in json.loads((out / "sampler.json").read_text())["results"][0]["sampling"]:
        print(f"sampler T={s['temperature']} top_p={s['top_p']}: {s['tokens_per_s']['median']:.2f} tok/s, "
              f"sampler {s['sample_ms_per_token']['median']:.3f} ms/token, sampler over greedy "
              f"{s.get('sample_over_greedy_ms')} ms, token over greedy {s.get('ms_per_token_over_greedy')} ms")
except (OSError, ValueError, KeyError, IndexError) as e:
    print("sampler: no result", e)
PY
echo "done ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
(cd "$OUT" && tar czf /tmp/results.tgz --exclude=results.tgz . && find . -mindepth 1 ! -name table.md -delete && mv /tmp/results.tgz .)

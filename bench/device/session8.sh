#!/usr/bin/env bash
# Session 8's GPU-machine call for time to first token (repo root, carry [".whl", ".o200k"]), 36
# layers, 12 GiB, 8 threads, each run set a fresh process:
#   1. bits: direct copies, direct + lookahead, packing ring, mirrored, no CPU experts (bench.gpu.direct_check)
#   2. the lookahead A/B, 600 tokens + a 600-token follow-up, --warmup 0, in the order
#      A B D C C D B A: A lookahead_slots=0 (session 7), B the default (16), D 28 slots,
#      C the default with prompt_cpu_share=0.9
#   3. the default at 3,000 and 13,000 (+ follow-ups)
#   4. the shipped 13k coding conversation through `neural serve` (real tokenizer; access log: prompt_s)
#   5. (PARTS=inproc) the lookahead / CPU share A/B inside one process (bench.gpu.lookahead_ab: the
#      process-to-process spread of call 1 was larger than the effect), INPROC_CONFIGS
# PARTS (default check,ab,long,replay) picks the steps; AB_SETS overrides the A/B order. Results in
# $OUT as one results.tgz (the device returns at most 8 files); the tables print last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=bench/device/env.sh
. bench/device/env.sh
export NEURAL_O200K_DIR=$PWD/.o200k NEURAL_CACHE_DIR=/tmp/neural-s8-cache
CK=/dev/shm/neural-s8/uniform
synth_120b "$CK"
LOG=$OUT/final.log
PARTS=${PARTS:-check,ab,long,replay}
echo "synth done ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
part check && direct_check "$CK" 150 "$LOG"
gpu() { bench_run "$1" "$2" "$LOG" "${@:3}" --backend gpu --budget-gib 12 --threads 8; }
set_of() {  # the --set flags of an A/B configuration
  case $1 in
    A) echo "--set lookahead_slots=0" ;;
    B) echo "" ;;
    D) echo "--set lookahead_slots=28" ;;
    C) echo "--set prompt_cpu_share=0.9" ;;
  esac
}
i=0
if part ab; then
  for cfg in ${AB_SETS:-A B D C C D B A}; do
    i=$((i + 1))
    # shellcheck disable=SC2046  # the flags are words
    gpu "ab-$i-$cfg" 45 prompt "$CK" --tokens 600 --repeats 2 --followup 600 --warmup 0 $(set_of "$cfg")
  done
fi
part long && gpu long-3k 45 prompt "$CK" --tokens 3000 --repeats 2 --followup 600 --warmup 0
part long && gpu long-13k 50 prompt "$CK" --tokens 13000 --repeats 1 --followup 600 --warmup 0
part inproc && INPROC_TIMEOUT=300 inproc_ab "$CK" "${INPROC_CONFIGS:-0,16,28,16@0.9,28@0.9,0@0.9}" "$LOG"
part replay && [ "$(left)" -gt 140 ] && serve_replay "$CK" 120 && grep "access" "$OUT/api.log" | sed 's/.*access: //'
"$PY" -m bench.harness.ttft_table "$OUT" | tee "$OUT/table.md"
"$PY" -m bench.harness.ttft_splits "$OUT" | tee -a "$OUT/table.md"
echo "done ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
(cd "$OUT" && tar czf /tmp/results.tgz --exclude=results.tgz . && find . -mindepth 1 -delete && mv /tmp/results.tgz .)

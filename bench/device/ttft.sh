#!/usr/bin/env bash
# Time to first token on the GPU machine in one call (issue 16): what a user waits for before the
# first token, cold and warm, short and long prompts and follow-ups, 36 layers, 12 GiB, 8 threads.
# Usage (device tool, repo root, carry [".whl"]): bash bench/device/ttft.sh
#   1. wheels + native kernel (env.sh); a 36-layer 120b-shape checkpoint (uniform routing) in /dev/shm
#   2. first-ever: a fresh Triton cache, one 600-token prompt in a fresh process (compiles the kernels)
#   3. auto split: 600 / 3,000 / 13,000-token prompts, 2 runs each + a 600-token follow-up of each
#   4. fixed split (<= 16 pairs to the CPU, the old rule): the same lengths, 1 run + follow-up (FIXED=0 skips)
#   5. auto again in a fresh process (its first 600-token prompt: cold process, warm kernel cache)
#   6. the dense weights' upload, the old host copy against the mapping (bench.gpu.dense_upload)
#   7. the prompt path against the fp32 reference at the 120b expert shape (2 layers), if time is left
# Results in $OUT: *.json (neural bench prompt --json), dense_upload.txt, table.md (printed last), logs.tgz (ttft.log,
# synth.txt, machine.txt, check/).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
. bench/device/env.sh  # wheels, PYTHONPATH, native kernel
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; lscpu | grep -E "Model name|^CPU\(s\)|Thread|NUMA node0"; free -g; } >"$OUT/machine.txt" 2>&1
LAYERS=${LAYERS:-36}
CK=/dev/shm/neural-ttft/uniform
export NEURAL_CACHE_DIR=/tmp/neural-ttft-cache  # hot set + Triton cache: fresh for this call
export NEURAL_O200K_DIR=$PWD/.o200k  # the real tokenizer, built here and carried (python -m engine.synth.o200k .o200k)
rm -rf "$NEURAL_CACHE_DIR"
shm_keep "${CK%/*}"  # only this script's checkpoints in RAM
[ -f "$CK/SYNTHETIC.json" ] || python3 -m app.cli.main synth --preset 120b-shape --layers "$LAYERS" --seed 1 \
  --jobs 8 --fast --out "$CK" >"$OUT/synth.txt" 2>&1 || { echo "synth failed"; tail "$OUT/synth.txt"; exit 1; }
echo "synth done at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/ttft.log"
bench() {  # name, timeout, neural bench prompt args...
  bench_run "$1" "$2" "$OUT/ttft.log" prompt "$CK" --backend gpu --budget-gib 12 --threads 8 --warmup 0 "${@:3}"
}
bench first-ever 120 --tokens 600 --repeats 1
bench auto 200 --tokens 600,3000,13000 --repeats 2 --followup 600
[ "${FIXED:-1}" = 1 ] && bench fixed 150 --tokens 600,3000,13000 --repeats 1 --followup 600 --set prompt_split=fixed
bench auto-fresh 90 --tokens 600 --repeats 2
if [ "$(left)" -gt 60 ]; then  # the dense weights' upload at load: host copy first (old) against from the mapping
  timeout 50 python3 -m bench.gpu.dense_upload "$CK" --rounds 2 >"$OUT/dense_upload.txt" 2>&1 || echo "dense_upload exited $?"
  cat "$OUT/dense_upload.txt"
fi
if [ "$(left)" -gt 100 ]; then
  echo "== check ($(( $(date +%s) - T0 )) s)" | tee -a "$OUT/ttft.log"
  timeout $(( $(left) - 10 )) python3 -m bench.gpu.prompt_device run --out "$OUT/check" --layers 2 \
    --stages env,synth,check --ckpt-dir /dev/shm/neural-check >>"$OUT/ttft.log" 2>&1 || echo "check exited $?"
  tail -5 "$OUT/ttft.log"  # the check's verdict or its error (session 31's gave neither: its log did not come back)
  rm -rf /dev/shm/neural-check
fi
python3 -m bench.harness.ttft_table "$OUT" | tee "$OUT/table.md"
# at most 8 files come back from a call: the logs and the check's folder in one archive
(cd "$OUT" && tar czf logs.tgz --remove-files ttft.log synth.txt machine.txt check 2>/dev/null)

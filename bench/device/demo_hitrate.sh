#!/usr/bin/env bash
# VRAM hit rate of the demo model against a random-weight model of exactly its shape, as
# `neural bench decode` measures it on the GPU backend (issue #11). One call on a Linux machine
# with one NVIDIA GPU (python3 with torch, triton, transformers), from the repo root; the device
# tool needs carry [".whl"] (cffi, pycparser, platformdirs wheels for the native kernel build):
#
#   bash bench/device/demo_hitrate.sh [--retrain] [--slots 16,32] [--static 0,-1]
#        [--depth 256] [--tokens 256] [--repeats 3] [--no-held-out] [--cpu]
#
#   --retrain  first retrain the demo with early stopping into $WORK/demo-new (about 2-3.5 min on
#              an H200; the model comes back as demo-new-model.tar.gz) and bench it too
#   --slots    expert slots of the pool (default 16,32 = 25% and 50% of the demo's 64 experts)
#   --static   static_slots values (default 0,-1: all slots adaptive, and the engine default of half
#              the pool static, calibrated on the context — the configuration slot_replay.py simulates)
#   --no-held-out  routing statistics on the bench's tokens only (skips rebuilding the stdlib corpus)
#   --cpu      plumbing check without a GPU: --backend cpu, short runs (no hit rate: no VRAM slots)
#
# Results in $OUT (default /tmp/neural-hitrate), few files so that they all come back from the
# device tool: summary.md (the tables), summary.json, run.log, results.tar.gz (bench/LABEL--slotsN--
# staticS.json and .log with the engine's plan line, machine.txt, timings.txt, demo-new/ logs and
# report) and, with --retrain, demo-new-model.tar.gz (the retrained model folder). Checkpoints and
# caches stay in $WORK (default: a fresh folder under /tmp).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/neural-hitrate}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
WORK=${WORK:-$(mktemp -d /tmp/neural-hitrate-work.XXXXXX)}
exec > >(tee -a "$OUT/run.log") 2>&1
RETRAIN=0 CPU=0 HELD_OUT=1 SLOTS=16,32 STATIC=0,-1 DEPTH=256 TOKENS=256 REPEATS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --retrain) RETRAIN=1 ;;
    --cpu) CPU=1 ;;
    --no-held-out) HELD_OUT=0 ;;
    --slots) SLOTS=$2; shift ;;
    --static) STATIC=$2; shift ;;
    --depth) DEPTH=$2; shift ;;
    --tokens) TOKENS=$2; shift ;;
    --repeats) REPEATS=$2; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
BACKEND=gpu EXPECT=gpu-hybrid
if [ "$CPU" = 1 ]; then
  BACKEND=cpu EXPECT=cpu-native
  [ "$RETRAIN" = 1 ] && { echo "--retrain needs the GPU; ignored with --cpu" >&2; RETRAIN=0; }
fi
mkdir -p "$WORK/bench"
export PYTHONUNBUFFERED=1
T0=$SECONDS
stamp() { echo "$1: $((SECONDS - T0)) s" | tee -a "$WORK/timings.txt"; }
: >"$WORK/timings.txt"
pack() {  # whatever exists when the script ends, also after a failure
  local items=()
  for f in bench machine.txt timings.txt native_build.log demo-new/train_log.jsonl demo-new/report.json \
           demo-new/train.out; do
    [ -e "$WORK/$f" ] && items+=("$f")
  done
  [ ${#items[@]} -gt 0 ] && tar -czf "$OUT/results.tar.gz" -C "$WORK" "${items[@]}"
  [ -f "$WORK/demo-new/model/config.json" ] && tar -czf "$OUT/demo-new-model.tar.gz" -C "$WORK/demo-new" model
  echo "results in $OUT: $(cd "$OUT" && echo *)"
}
trap pack EXIT

NATIVE_LOG="$WORK/native_build.log" . bench/device/env.sh  # wheels, PYTHONPATH, native kernel
{ command -v nvidia-smi >/dev/null && nvidia-smi; lscpu | head -25; free -g
  "$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  "$PY" -c "import triton; print('triton', triton.__version__)"; git log -1 --format='commit %H %s'; } >"$WORK/machine.txt" 2>&1
if [ "$CPU" = 0 ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "no CUDA device visible; use --cpu for a plumbing check" >&2; exit 1
fi
stamp setup

DEMO=resources/demo-model
MODELS="demo=$DEMO"
if [ "$RETRAIN" = 1 ]; then
  mkdir -p "$WORK/demo-new"
  # the bundled run's schedule (step count fitted to 4.5 min), stopped by the held-out loss
  "$PY" -m app.cli.main train-demo --out "$WORK/demo-new" --steps 20000 --minutes "${RETRAIN_MINUTES:-4.5}" \
    --device cuda --eval-every 50 --patience-evals 4 >"$WORK/demo-new/train.out" 2>&1
  rc=$?
  tail -n 3 "$WORK/demo-new/train_log.jsonl" 2>/dev/null | cut -c1-400
  if [ $rc = 0 ] && [ -f "$WORK/demo-new/model/config.json" ]; then
    MODELS="$MODELS demo-new=$WORK/demo-new/model"
  else
    echo "retraining failed (rc $rc, see demo-new/train.out); benching the bundled demo only" >&2
  fi
  stamp retrain
fi
"$PY" -m bench.demo_training.hitrate twin --model "$DEMO" --out "$WORK/random-demo-shape" --seed 0 || exit 1
MODELS="$MODELS random=$WORK/random-demo-shape"
stamp twin

for m in $MODELS; do
  label=${m%%=*} dir=${m#*=}
  for n in ${SLOTS//,/ }; do
    for s in ${STATIC//,/ }; do
      pool=$("$PY" -m bench.demo_training.hitrate pool-gib --model "$dir" --slots "$n" --static "$s") || exit 1
      name="$label--slots$n--static$s"
      # a fresh hot-set cache per run: one run's saved routing counts must not seed the next
      NEURAL_LOG=INFO NEURAL_CACHE_DIR="$WORK/cache/$name" "$PY" -m app.cli.main bench decode "$dir" \
        --backend "$BACKEND" --json --ids --depth "$DEPTH" --tokens "$TOKENS" --warmup 0 --repeats "$REPEATS" \
        --set pool_gib="$pool" --set static_slots="$s" >"$WORK/bench/$name.json" 2>"$WORK/bench/$name.log" \
        || { echo "bench failed: $name (bench/$name.log)"; tail -n 5 "$WORK/bench/$name.log"; }
      grep -h "tok/s" "$WORK/bench/$name.log" | sed "s/^/$name /"
      stamp "bench $name"
    done
  done
done

HELD_OUT_FLAG=""
[ "$HELD_OUT" = 0 ] && HELD_OUT_FLAG=--no-held-out
"$PY" -m bench.demo_training.hitrate summarize --bench-dir "$WORK/bench" --out "$OUT/summary.json" \
  --expect-backend "$EXPECT" $HELD_OUT_FLAG | tee "$OUT/summary.md"
rc=${PIPESTATUS[0]}
stamp total
exit "$rc"

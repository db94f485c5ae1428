#!/usr/bin/env bash
# Neural's CPU prompt (or, with MODE=decode, its CPU decode) against llama.cpp's CPU build on the
# same model shape, mirrored (A B B A).
#
#   [MODE=decode] bench/peer/prompt_vs_llama_cpp.sh [WORKDIR] [THREADS] [TOKENS]
#
# WORKDIR (default /tmp/neural-peer) gets: the llama.cpp build (build_llama_cpp.sh), a synthetic
# 4-layer gpt-oss-120b-shape checkpoint with vocab 8192 (neural synth --fast: random MXFP4 bytes,
# same bytes per expert as the real model), its GGUF written by llama.cpp's own converter
# (convert_synth_gguf.py), then llama-bench pp$TOKENS and `neural bench prompt --tokens $TOKENS`
# in the order llama, neural, neural, llama, each a fresh process with one warm-up run.
# MODE=decode: llama-bench tg$TOKENS against `neural bench decode --tokens $TOKENS --depth $DEPTH
# --temperature 0` (greedy, as llama-bench's generation is timed without sampling); DEPTH (default 0)
# tokens of context first, as llama-bench -d. CKPT (and GGUF, default "$CKPT.gguf") name another pair, e.g. the
# real model's bytes a token: `neural synth --preset 120b-shape --layers 36 --experts 8 --fast --out DIR`, its GGUF
# written with convert_synth_gguf.py beforehand (the line below builds only the default 4-layer pair).
# With NEURAL_BEFORE set (another `neural` command, e.g. a wrapper running an older checkout) the
# order is llama, before, neural, neural, before, llama: both comparisons mirrored in one window.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=${1:-/tmp/neural-peer}
THREADS=${2:-2}
TOKENS=${3:-512}
MODE=${MODE:-prompt}
DEPTH=${DEPTH:-0}
PY=${PY:-$REPO/.venv/bin/python}
NEURAL=${NEURAL:-$REPO/.venv/bin/neural}
CKPT=${CKPT:-$WORK/synth-120b-shape-4l}
GGUF=${GGUF:-$CKPT.gguf}

[ -x "$WORK/build/bin/llama-bench" ] || PY=$PY "$HERE/build_llama_cpp.sh" "$WORK"
[ -f "$CKPT/config.json" ] || [ "$CKPT" != "$WORK/synth-120b-shape-4l" ] || "$NEURAL" synth --preset 120b-shape --layers 4 --vocab 8192 --fast --out "$CKPT"
[ -f "$GGUF" ] || "$PY" "$HERE/convert_synth_gguf.py" "$WORK/src/vendor/llama.cpp" "$CKPT" "$GGUF"

llama() {
  echo "== llama.cpp $MODE $TOKENS, $THREADS threads"
  if [ "$MODE" = decode ]; then
    "$WORK/build/bin/llama-bench" -m "$GGUF" -p 0 -n "$TOKENS" -d "$DEPTH" -t "$THREADS" -r 2 -o md
  else
    "$WORK/build/bin/llama-bench" -m "$GGUF" -p "$TOKENS" -n 0 -t "$THREADS" -r 2 -o md
  fi
}
neural() {
  local cmd=${1:-$NEURAL}
  echo "== neural CPU $MODE $TOKENS, $THREADS threads ($cmd)"
  if [ "$MODE" = decode ]; then
    "$cmd" bench decode "$CKPT" --backend cpu --threads "$THREADS" --torch-threads "$THREADS" \
      --tokens "$TOKENS" --depth "$DEPTH" --temperature 0 --repeats 2 --warmup 1
  else
    "$cmd" bench prompt "$CKPT" --backend cpu --threads "$THREADS" --torch-threads "$THREADS" \
      --tokens "$TOKENS" --repeats 2 --warmup 1 --check-tokens 0
  fi
}
date -u
uptime  # the load: on a shared machine say it next to the figures
if [ -n "${NEURAL_BEFORE:-}" ]; then
  llama; neural "$NEURAL_BEFORE"; neural; neural; neural "$NEURAL_BEFORE"; llama
else
  llama; neural; neural; llama
fi
uptime

#!/usr/bin/env bash
# Neural's GPU decode against llama.cpp's CUDA build on the same synthetic model, mirrored
# (Neural, llama.cpp, llama.cpp, Neural), in ONE device call: repo root, carry [".whl", ".peer"]
# (.peer/ written here by bench/peer/trim_llama_src.sh: llama-src.tar.gz and the converter's
# wheels in whl/; .o200k is not needed: the synthetic checkpoint carries its own tokenizer).
#   a. .peer/llama-src.tar.gz unpacked to $LLAMA_DIR and llama-bench built with CUDA (sm_90) in
#      the background at once (cuBLAS from torch's nvidia wheels when the toolkit has none);
#   b. meanwhile: env.sh (wheels, native kernel), an $LAYERS-layer 120b-shape checkpoint (uniform
#      routing) in /dev/shm, .peer/whl installed to /tmp/peer-site, and the GGUF written by
#      llama.cpp's own converter (bench/peer/convert_synth_gguf.py: bf16, MXFP4 experts kept);
#   c. 128 decode tokens at depth 0, greedy, 8 threads, 1 warm-up + 2 runs each: Neural GPU at a
#      12 GiB budget with the pool scaled to the 36-layer plan's expert slots per layer (as the
#      18-layer suite: bench.harness.suite.scaled_pool_gib), llama-bench -ngl 99 -ncmoe $NCMOE -fa $PEER_FA;
#      then llama-bench pp512 once if time is left.
# VRAM rule for llama.cpp: at 36 layers -ncmoe 31 fits 12 GiB (5 layers' experts on the GPU); at L
# layers ceil(5*L/36) layers' experts go on the GPU: NCMOE = L - ceil(5*L/36) (18 -> 15, 3 of 18 =
# 16.7% of expert bytes; Neural's pool holds 274 of 2304 expert slots = 11.9%: rounded for llama.cpp).
# Env: LAYERS (18), NCMOE, BUDGET_S (570), BUILD_JOBS (14), THREADS (8), PEER_CPU=1 (CPU llama.cpp,
# Neural --backend cpu: the local plumbing check), SYNTH_ARGS (extra synth flags, e.g. --vocab 8192),
# PEER_WHL (.peer/whl: the converter's cp312 wheels), CK_ROOT (/dev/shm/neural-peer), LLAMA_DIR (/tmp/llama; a llama-bench already built there is reused).
# $OUT (8 files at most): peer.log, build.log, table.md, neural-1/2.json, llama-1/2.json, llama-pp512.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
export T0
OUT=${OUT:-/tmp/neural-out}
mkdir -p "$OUT"
LOG=$OUT/peer.log
LAYERS=${LAYERS:-18}
NCMOE=${NCMOE:-$(( LAYERS - (5 * LAYERS + 35) / 36 ))}
THREADS=${THREADS:-8}
PEER_CPU=${PEER_CPU:-0}
export PEER_FA=${PEER_FA:-off}  # off: no FlashAttention kernels to compile (82 of 120 template files), so the build fits the call; depth 0 decode barely uses attention
LLAMA_DIR=${LLAMA_DIR:-/tmp/llama}
CK_ROOT=${CK_ROOT:-/dev/shm/neural-peer}
CK=$CK_ROOT/synth-${LAYERS}l
GGUF=$CK_ROOT/synth-${LAYERS}l.gguf
LB=$LLAMA_DIR/build/bin/llama-bench
BACKEND=gpu
[ "$PEER_CPU" = 1 ] && BACKEND=cpu
log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$LOG"; }

# --- a. llama.cpp build, in the background ------------------------------------------------------
# cuda_args: the toolkit's cuBLAS if it has one, else the one torch ships (nvidia/*/include + lib);
# libcuda.so.1 named outright (toolkits without stubs have no libcuda.so), else no VMM pool.
cuda_args() {
  echo -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
  if ! ls /usr/local/cuda*/include/cublas_v2.h /usr/include/cublas_v2.h >/dev/null 2>&1; then
    local d
    d=$(python3 -c "
import glob, os, sys
roots = [os.path.join(p, 'nvidia') for p in sys.path if p]
hits = [h for r in roots for h in glob.glob(os.path.join(r, '*', 'include', 'cublas_v2.h'))]
print(os.path.dirname(os.path.dirname(hits[0])) if hits else '')")
    if [ -n "$d" ]; then
      echo "-DCUDA_cublas_LIBRARY=$(ls "$d"/lib/libcublas.so* | head -1)" \
        "-DCUDA_cublasLt_LIBRARY=$(ls "$d"/lib/libcublasLt.so* | head -1)" \
        "-DCMAKE_CUDA_FLAGS=-I$d/include" "-DCMAKE_CXX_FLAGS=-I$d/include"
      echo "$d/lib" >"$LLAMA_DIR/cublas_libdir"
    fi
  fi
  local drv
  drv=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
  if [ -n "$drv" ]; then echo "-DCUDA_cuda_driver_LIBRARY=$drv"; else echo -DGGML_CUDA_NO_VMM=ON; fi
}
build_llama() {
  set -e
  local extra=()
  # shellcheck disable=SC2207  # one flag per word; the paths hold no spaces
  [ "$PEER_CPU" = 1 ] || extra=($(cuda_args))
  echo "extra cmake args: ${extra[*]}"
  cmake -S "$LLAMA_DIR/llama.cpp" -B "$LLAMA_DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DGGML_CUDA_FA="$([ "$PEER_FA" = on ] && echo ON || echo OFF)" "${extra[@]}"
  timeout $(( ${BUDGET_S:-570} - 150 )) cmake --build "$LLAMA_DIR/build" --target llama-bench -j "${BUILD_JOBS:-14}"
}
log "layers $LAYERS, llama.cpp -ncmoe $NCMOE, backend $BACKEND, build $([ -x "$LB" ] && echo reused || echo started)"
if [ -x "$LB" ]; then
  BPID=
else
  mkdir -p "$LLAMA_DIR"
  tar xzf .peer/llama-src.tar.gz -C "$LLAMA_DIR"
  { (build_llama); echo "build exited $?"; } >"$OUT/build.log" 2>&1 &
  BPID=$!
fi

# --- b. checkpoint and GGUF -------------------------------------------------------------------
NATIVE_LOG=/tmp/peer_native_build.log . bench/device/env.sh
[ -f "$CK/SYNTHETIC.json" ] || timeout 200 "$PY" -m app.cli.main synth --preset 120b-shape --layers "$LAYERS" \
  --seed 1 --jobs 8 --fast ${SYNTH_ARGS:-} --out "$CK" 2>&1 | tr '\r' '\n' | grep -v "GiB *$" | tail -3 >>"$LOG"
log "synth done: $(du -sh "$CK" | cut -f1)"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/peer-site "${PEER_WHL:-.peer/whl}"/*.whl \
  >>"$LOG" 2>&1 || log "converter wheels failed to install"
if [ ! -f "$GGUF" ] && [ "$(left)" -gt 180 ]; then
  # THP: torch's big temporaries in 2 MiB pages (half the converter's time was page faults)
  timeout $(( $(left) - 120 )) env PYTHONPATH=/tmp/peer-site THP_MEM_ALLOC_ENABLE=1 "$PY" \
    bench/peer/convert_synth_gguf.py "$LLAMA_DIR/llama.cpp" "$CK" "$GGUF.part" >/tmp/peer_convert.log 2>&1 \
    && mv "$GGUF.part" "$GGUF" || { log "convert exited $?"; tail -5 /tmp/peer_convert.log >>"$LOG"; }
  rm -f "$GGUF.part"
fi
log "gguf: $(du -sh "$GGUF" 2>/dev/null | cut -f1)"
if [ -n "$BPID" ]; then
  while kill -0 "$BPID" 2>/dev/null && [ "$(left)" -gt 100 ]; do sleep 2; done
  log "build: $(tail -1 "$OUT/build.log")"
fi
CUBLAS_DIR=$(cat "$LLAMA_DIR/cublas_libdir" 2>/dev/null)
export LD_LIBRARY_PATH="${CUBLAS_DIR:+$CUBLAS_DIR:}${LD_LIBRARY_PATH:-}"

# --- c. the mirrored runs ----------------------------------------------------------------------
POOL=$("$PY" -c "from bench.harness.suite import scaled_pool_gib as s; p, why = s($LAYERS, 12.0, 16384, {}); print(f'{p:.6f}')")
log "Neural pool_gib $POOL (36-layer plan's slots per layer, scaled to $LAYERS layers)"
VRAM_PID=
vram_watch() {  # sample the GPU's used memory while a run lasts; max printed by vram_stop
  rm -f /tmp/peer_vram
  command -v nvidia-smi >/dev/null || return 0
  (while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits >>/tmp/peer_vram 2>/dev/null; sleep 1; done) &
  VRAM_PID=$!
}
vram_stop() {
  [ -n "$VRAM_PID" ] && kill "$VRAM_PID" 2>/dev/null
  wait "$VRAM_PID" 2>/dev/null
  VRAM_PID=
  [ -f /tmp/peer_vram ] && log "$1: peak GPU memory used $(sort -n /tmp/peer_vram | tail -1) MiB"
}
neural() {
  [ -f "$CK/SYNTHETIC.json" ] || { log "skip $1: no checkpoint"; return; }
  vram_watch
  bench_run "$1" 150 "$LOG" decode "$CK" --backend "$BACKEND" --budget-gib 12 --threads "$THREADS" \
    --context 16384 --tokens 128 --depth 0 --temperature 0 --repeats 2 --warmup 1 --set "pool_gib=$POOL"
  vram_stop "$1"
}
llama() {
  local name=$1 l t
  shift
  [ -x "$LB" ] && [ -f "$GGUF" ] || { log "skip $name: no llama-bench or GGUF"; return; }
  l=$(left)
  [ "$l" -lt 40 ] && { log "skip $name: ${l}s left"; return; }
  t=$(( l < 150 ? l : 150 ))
  log "== $name"
  vram_watch
  timeout "$t" "$LB" -m "$GGUF" -t "$THREADS" -ngl 99 -ncmoe "$NCMOE" -fa "$PEER_FA" -r 2 -o json "$@" \
    >"$OUT/$name.json" 2>>"$LOG" || log "$name exited $?"
  vram_stop "$name"
}
neural neural-1
llama llama-1 -p 0 -n 128
llama llama-2 -p 0 -n 128
neural neural-2
[ "$(left)" -gt 60 ] && llama llama-pp512 -p 512 -n 0

"$PY" - "$OUT" "$LAYERS" "$NCMOE" "$POOL" <<'PY' | tee "$OUT/table.md" | tee -a "$LOG"
import json, os, pathlib, statistics, sys
out, layers, ncmoe, pool = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
def load(name):
    try:
        return json.loads((out / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
def neural(name):
    r = load(name)
    try:
        s = r["results"][0]["sampling"][0]["tokens_per_s"]
        return s["median"], f"median of runs {[round(x, 2) for x in s['runs']]}"
    except (TypeError, KeyError, IndexError):
        return None, "no result"
def llama(name):
    r = load(name)
    try:
        return r[0]["avg_ts"], f"mean of samples {[round(x, 2) for x in r[0]['samples_ts']]}"
    except (TypeError, KeyError, IndexError):
        return None, "no result"
rows = [("neural-1", *neural("neural-1")), ("llama-1", *llama("llama-1")),
        ("llama-2", *llama("llama-2")), ("neural-2", *neural("neural-2"))]
print(f"decode tg128, depth 0, {layers} layers; Neural pool_gib {pool}; llama.cpp -ngl 99 -ncmoe {ncmoe} -fa {os.environ.get('PEER_FA', 'off')}\n")
print("| run | tok/s | detail |\n|---|---:|---|")
for name, ts, detail in rows:
    print(f"| {name} | {'-' if ts is None else f'{ts:.2f}'} | {detail[:120]} |")
n = [ts for name, ts, _ in rows if name.startswith("neural") and ts]
m = [ts for name, ts, _ in rows if name.startswith("llama") and ts]
if n and m:
    print(f"\nNeural mean {statistics.mean(n):.2f} tok/s, llama.cpp mean {statistics.mean(m):.2f} tok/s: "
          f"ratio {statistics.mean(n) / statistics.mean(m):.2f}x (MEASURED, {layers} layers)")
pp, d = llama("llama-pp512")
if pp:
    print(f"llama.cpp pp512: {pp:.1f} tok/s ({d})")
PY
log "done"

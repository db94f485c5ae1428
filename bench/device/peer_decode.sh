#!/usr/bin/env bash
# Neural's GPU decode against llama.cpp's CUDA build on the same synthetic model, mirrored, on
# CALIBRATED and uniform routing, in ONE device call: repo root, carry [".whl", ".peer"]
# (.peer/ written here by bench/peer/trim_llama_src.sh: llama-src.tar.gz and the converter's
# wheels in whl/; .o200k is not needed: the synthetic checkpoint carries its own tokenizer).
#   usage: [LAYERS=18] [ROUTINGS=calibrated,uniform] [DEPTH=0] bash bench/device/peer_decode.sh
#   ROUTINGS may add skewed (a `synth --like --routing static --skew 1.5` variant, `neural bench decode` as
#   uniform) and calpolicy (the calibrated run with the engine settings in CAL_POLICY, e.g. a smaller static
#   part and a refresh every token); the order is cal, calpolicy, uni, skew, llama, llama, skew, uni,
#   calpolicy, cal. unipolicy: the uniform run with the settings in UNI_POLICY (e.g. UNI_POLICY="decode_lane=off"),
#   beside uniform in the same order.
#   a. .peer/llama-src.tar.gz unpacked to $LLAMA_DIR and llama-bench built with CUDA (sm_90) in
#      the background at once (cuBLAS from torch's nvidia wheels when the toolkit has none);
#   b. meanwhile: env.sh (wheels, native kernel), an $LAYERS-layer 120b-shape checkpoint (uniform
#      routing) in /dev/shm, .peer/whl installed to /tmp/peer-site, the GGUF written by llama.cpp's
#      own converter (bench/peer/convert_synth_gguf.py: bf16, MXFP4 experts kept), and its
#      calibrated-routing variant (`synth --like`: expert shards hard-linked, only the shard with
#      the embeddings and routers rewritten, ~1.1 GiB, 7 s here);
#   c. in the order neural-cal-1, neural-uni-1, llama-1, llama-2, neural-uni-2, neural-cal-2, 8
#      threads each, Neural GPU at a 12 GiB budget with the pool scaled to the 36-layer plan's
#      expert slots per layer (as the 18-layer suite: bench.harness.suite.scaled_pool_gib):
#      - neural-uni: `neural bench decode` tg128 at depth $DEPTH, greedy, 1 warm-up + 2 runs;
#      - neural-cal: bench.routing.calibrated_tg, TEACHER-FORCED over the calibrated text (its
#        routing is a function of the token ids, so greedy decoding would walk a short cycle):
#        the text's first $CAL_DEPTH tokens as the prompt, $CAL_WARMUP untimed, $CAL_TOKENS timed;
#      - llama-bench -ngl 99 -ncmoe $NCMOE -fa $PEER_FA tg128 (-d $DEPTH), 1 warm-up + 2 runs,
#        on the UNIFORM GGUF only: its decode reads each token's k experts of every CPU layer in
#        full whichever they are (and llama-bench feeds random token ids), so its speed does not
#        depend on the routing; the calibrated ratio = Neural calibrated / llama.cpp of this call;
#      then llama-bench pp512 once if time is left. A run is skipped when fewer than 40 s of
#      BUDGET_S are left; every Neural run starts without a saved hot set (each ranks its own).
# CAL_DEPTH 2048: >= 64 is required (the static hot set is ranked at the first decode step after
# 64 tokens), and the hit rate of a 128-token window depends on where it sits in the text (topic
# segments of median 400 tokens): after a 512-token prompt the window gives 0.230, after 1024
# 0.340, after 2048 0.365, against 0.361 over 4096 tokens (SIMULATED with bench.routing.policy_replay
# at 18 layers, 274 slots, 16 warm-up tokens); 2048 is also the prompt of session 5's measured
# calibrated decode and of perf-residency.md's replay. Its prompt costs < 1 s on the H200, and
# attention over 2k tokens of K/V in VRAM is microseconds against ~20 ms a token (CALCULATED), so
# the depth does not bias the comparison with the depth-0 uniform and llama.cpp runs.
# VRAM rule for llama.cpp: at 36 layers -ncmoe 31 fits 12 GiB (5 layers' experts on the GPU); at L
# layers ceil(5*L/36) layers' experts go on the GPU: NCMOE = L - ceil(5*L/36) (18 -> 15, 3 of 18 =
# 16.7% of expert bytes; Neural's pool holds 274 of 2304 expert slots = 11.9%: rounded for llama.cpp).
# Expected timeline at 18 layers (CALCULATED from session 7's call: synth 36 s, GGUF 142 s, build
# 249 s, a first Neural process 44 s (load ~36 s of it), later ones 24 s, llama-bench 13-15 s,
# pp512 17 s): calibrated variant ~150 s (inside the build wait), neural-cal-1 ~295 s (load ~36 s,
# 144 tokens ~3 s), neural-uni-1 ~320, llama-1 ~335, llama-2 ~348, neural-uni-2 ~372, neural-cal-2
# ~393, pp512 ~410, done ~415 s of BUDGET_S 570. DEPTH=D adds about D/130 s per llama-bench tg run
# (its depth prompt once per run, at pp ~130 tok/s) and < 1 s per Neural run: DEPTH=2048 ~450 s.
# Env: LAYERS (18), ROUTINGS (calibrated,uniform: which Neural rows run; llama.cpp always runs),
# WARM_NEURAL (0; 1: an untimed calibrated process before the mirrored runs), DEPTH (0), CAL_DEPTH (2048),
# CAL_WARMUP (16), CAL_TOKENS (128), NCMOE, BUDGET_S (570),
# BUILD_JOBS (14), THREADS (8), PEER_CPU=1 (CPU llama.cpp, Neural --backend cpu: the local
# plumbing check), SYNTH_ARGS (extra synth flags, e.g. --vocab 8192), PEER_WHL (.peer/whl: the
# converter's cp312 wheels), CK_ROOT (/dev/shm/neural-peer), LLAMA_DIR (/tmp/llama; a llama-bench
# already built there is reused), NEURAL_CACHE_DIR (/tmp/neural-peer-cache: Triton kernels kept).
# $OUT (3 files): table.md, peer.log and results.tgz (everything: both, build.log, neural-cal-1/2,
# neural-uni-1/2, llama-1/2, llama-pp512 .json).
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
ROUTINGS=${ROUTINGS:-calibrated,uniform}
DEPTH=${DEPTH:-0}
CAL_DEPTH=${CAL_DEPTH:-2048}
CAL_WARMUP=${CAL_WARMUP:-16}
CAL_TOKENS=${CAL_TOKENS:-128}
export ROUTINGS CAL_DEPTH CAL_WARMUP CAL_TOKENS  # read by the table
export NEURAL_CACHE_DIR=${NEURAL_CACHE_DIR:-/tmp/neural-peer-cache}
PEER_CPU=${PEER_CPU:-0}
export PEER_FA=${PEER_FA:-off}  # off: no FlashAttention kernels to compile (82 of 120 template files), so the build fits the call; depth 0 decode barely uses attention
LLAMA_DIR=${LLAMA_DIR:-/tmp/llama}
CK_ROOT=${CK_ROOT:-/dev/shm/neural-peer}
CK=$CK_ROOT/synth-${LAYERS}l
CKC=$CK_ROOT/synth-${LAYERS}l-calibrated
CKS=$CK_ROOT/synth-${LAYERS}l-skewed
CAL_POLICY=${CAL_POLICY:-static_slots=65 refresh_every=1 refresh_m=8}
export CAL_POLICY
GGUF=$CK_ROOT/synth-${LAYERS}l.gguf
LB=$LLAMA_DIR/build/bin/llama-bench
BACKEND=gpu
[ "$PEER_CPU" = 1 ] && BACKEND=cpu
log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$LOG"; }
has() { case ",$ROUTINGS," in *",$1,"*) return 0 ;; esac; return 1; }

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
      # shellcheck disable=SC2012  # library names hold no odd characters
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
log "layers $LAYERS, routings $ROUTINGS, depth $DEPTH (calibrated $CAL_DEPTH), llama.cpp -ncmoe $NCMOE, backend $BACKEND, build $([ -x "$LB" ] && echo reused || echo started)"
if [ -x "$LB" ]; then
  BPID=
else
  mkdir -p "$LLAMA_DIR"
  tar xzf .peer/llama-src.tar.gz -C "$LLAMA_DIR"
  { (build_llama); echo "build exited $?"; } >"$OUT/build.log" 2>&1 &
  BPID=$!
fi

# --- b. checkpoint and GGUF -------------------------------------------------------------------
# shellcheck source=bench/device/env.sh
NATIVE_LOG=/tmp/peer_native_build.log . bench/device/env.sh
shm_keep "$CK_ROOT"  # only this script's checkpoints in RAM
# shellcheck disable=SC2086  # SYNTH_ARGS: several flags, split on purpose
[ -f "$CK/SYNTHETIC.json" ] || timeout 200 "$PY" -m app.cli.main synth --preset 120b-shape --layers "$LAYERS" \
  --seed 1 --jobs 8 --fast ${SYNTH_ARGS:-} --out "$CK" 2>&1 | tr '\r' '\n' | grep -v "GiB *$" | tail -3 >>"$LOG"
log "synth done: $(du -sh "$CK" | cut -f1)"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/peer-site "${PEER_WHL:-.peer/whl}"/*.whl \
  >>"$LOG" 2>&1 || log "converter wheels failed to install"
if [ ! -f "$GGUF" ] && [ "$(left)" -gt 180 ]; then
  # shellcheck disable=SC2015  # a failed mv is logged as a failed convert: either way no GGUF
  # THP: torch's big temporaries in 2 MiB pages (half the converter's time was page faults)
  timeout $(( $(left) - 120 )) env PYTHONPATH=/tmp/peer-site THP_MEM_ALLOC_ENABLE=1 "$PY" \
    bench/peer/convert_synth_gguf.py "$LLAMA_DIR/llama.cpp" "$CK" "$GGUF.part" >/tmp/peer_convert.log 2>&1 \
    && mv "$GGUF.part" "$GGUF" || { log "convert exited $?"; tail -5 /tmp/peer_convert.log >>"$LOG"; }
  rm -f "$GGUF.part"
fi
log "gguf: $(du -sh "$GGUF" 2>/dev/null | cut -f1)"
if has calibrated && [ -f "$CK/SYNTHETIC.json" ] && [ ! -f "$CKC/SYNTHETIC.json" ]; then
  timeout 120 "$PY" -m app.cli.main synth --like "$CK" --routing calibrated --out "$CKC" 2>&1 \
    | tr '\r' '\n' | grep -v "GiB *$" | tail -2 >>"$LOG"
  log "calibrated variant: $([ -f "$CKC/SYNTHETIC.json" ] && echo written || echo FAILED)"
fi
if has skewed && [ -f "$CK/SYNTHETIC.json" ] && [ ! -f "$CKS/SYNTHETIC.json" ]; then
  timeout 120 "$PY" -m app.cli.main synth --like "$CK" --routing static --skew 1.5 --out "$CKS" 2>&1 \
    | tr '\r' '\n' | grep -v "GiB *$" | tail -2 >>"$LOG"
  log "skewed variant: $([ -f "$CKS/SYNTHETIC.json" ] && echo written || echo FAILED)"
fi
if [ -n "$BPID" ]; then
  while kill -0 "$BPID" 2>/dev/null && [ "$(left)" -gt 100 ]; do sleep 2; done
  log "build: $(tail -1 "$OUT/build.log")"
fi
CUBLAS_DIR=$(cat "$LLAMA_DIR/cublas_libdir" 2>/dev/null)
export LD_LIBRARY_PATH="${CUBLAS_DIR:+$CUBLAS_DIR:}${LD_LIBRARY_PATH:-}"

# --- c. the mirrored runs ----------------------------------------------------------------------
POOL=$(scaled_pool "$LAYERS")
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
fresh() { rm -f "$NEURAL_CACHE_DIR"/hotset-*.npy; }  # no saved hot set: each run ranks its own
neural_uni() {  # NAME [CKPT [KEY=VALUE...]]
  local ck=${2:-$CK} sets=() kv
  for kv in "${@:3}"; do sets+=(--set "$kv"); done
  [ -f "$ck/SYNTHETIC.json" ] || { log "skip $1: no checkpoint"; return; }
  fresh
  vram_watch
  bench_run "$1" 150 "$LOG" decode "$ck" --backend "$BACKEND" --budget-gib 12 --threads "$THREADS" \
    --context 16384 --tokens 128 --depth "$DEPTH" --temperature 0 --repeats 2 --warmup 1 --set "pool_gib=$POOL" \
    "${sets[@]}"
  vram_stop "$1"
}
neural_cal() {  # NAME [KEY=VALUE...]: bench_run's pattern for bench.routing.calibrated_tg
  local name=$1 l t sets=()
  shift
  for kv in "$@"; do sets+=(--set "$kv"); done
  [ -f "$CKC/SYNTHETIC.json" ] || { log "skip $name: no calibrated checkpoint"; return; }
  l=$(left)
  [ "$l" -lt 40 ] && { log "skip $name: ${l}s left"; return; }
  t=$(( l < 150 ? l : 150 ))
  log "== $name"
  fresh
  vram_watch
  timeout "$t" "$PY" -m bench.routing.calibrated_tg "$CKC" --depth "$CAL_DEPTH" --warmup "$CAL_WARMUP" \
    --tokens "$CAL_TOKENS" --backend "$BACKEND" --budget-gib 12 --threads "$THREADS" --context 16384 \
    --set "pool_gib=$POOL" "${sets[@]}" >"$OUT/$name.json" 2>>"$LOG" || log "$name exited $?"
  vram_stop "$name"
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
TG=(-p 0 -n 128)
[ "$DEPTH" -gt 0 ] && TG+=(-d "$DEPTH")
# WARM_NEURAL=1: one untimed calibrated process first (neural-warm.json, outside the table), so that every timed
# Neural run finds the Triton cache the app keeps on disk after its first launch. Session 20's
# bench/device/cal_repeat.sh: four fresh processes of one lease ran 66.28, 77.75, 81.39, 84.72 tok/s; the first,
# with an empty cache, was the slowest by far, and the later ones still rose (cause not known).
[ "${WARM_NEURAL:-0}" = 1 ] && has calibrated && neural_cal neural-warm
# shellcheck disable=SC2086  # CAL_POLICY: several KEY=VALUE words
{
has calibrated && neural_cal neural-cal-1
has calpolicy && neural_cal neural-calpolicy-1 $CAL_POLICY
has uniform && neural_uni neural-uni-1
has unipolicy && neural_uni neural-unipolicy-1 "$CK" $UNI_POLICY
has skewed && neural_uni neural-skew-1 "$CKS"
llama llama-1 "${TG[@]}" ${LLAMA_ARGS:-}
llama llama-2 "${TG[@]}" ${LLAMA_ARGS:-}
has skewed && neural_uni neural-skew-2 "$CKS"
has unipolicy && neural_uni neural-unipolicy-2 "$CK" $UNI_POLICY
has uniform && neural_uni neural-uni-2
has calpolicy && neural_cal neural-calpolicy-2 $CAL_POLICY
has calibrated && neural_cal neural-cal-2
}
[ "$(left)" -gt 60 ] && llama llama-pp512 -p 512 -n 0

"$PY" - "$OUT" "$LAYERS" "$NCMOE" "$POOL" "$DEPTH" "$BACKEND" <<'PY' | tee "$OUT/table.md" | tee -a "$LOG"
import json, os, pathlib, statistics, sys
out, layers, ncmoe, pool, depth, backend = pathlib.Path(sys.argv[1]), *sys.argv[2:]
env = os.environ.get
def load(name):
    try:
        return json.loads((out / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
def lane(on, check, split, per_token):  # the decode copy lane's line of `neural bench decode`'s table
    from bench.harness.report import lane_line
    line = lane_line({"decode_lane": {"on": on, "check": check, "split": split}})
    if line is None:
        return "; copy lane off (no load check)"
    return "; " + line + (f"; {per_token:.1f} lane experts/token" if per_token is not None else "")
def uniform(name):  # neural bench decode: median of the timed runs, hit rate median
    r = load(name)
    try:
        row = r["results"][0]
        s = row["sampling"][0]["tokens_per_s"]
        hit = (row.get("vram_hit_rate") or {}).get("median")
        dl = r.get("decode_lane") or {}
        return s["median"], hit, (f"median of runs {[round(x, 2) for x in s['runs']]}, depth {row['depth']}"
                                  + lane(dl.get("on"), dl.get("check"), dl.get("split"),
                                         (row.get("phases_ms") or {}).get("lane_experts")))
    except (TypeError, KeyError, IndexError):
        return None, None, "no result"
def calibrated(name):  # bench.routing.calibrated_tg: one timed window
    r = load(name)
    try:
        d = (f"{r['backend']}, teacher-forced tokens {r['depth'] + r['warmup']}..{r['depth'] + r['warmup'] + r['tokens']} "
             f"of the text (prompt {r['depth']}, {r['prompt_s']} s with load)")
        if "routing_as_designed" in r:
            d += f", routing as designed {r['routing_as_designed']:.3f}, slots {r['slots']} ({r['static_slots']} static)"
        if "tok_s_with_warmup_MEASURED" in r:
            d += f", {r['tok_s_with_warmup_MEASURED']:.2f} tok/s with the warm-up tokens"
        d += lane(r.get("lane_split") is not None, r.get("lane_check"), r.get("lane_split"),
                  r.get("lane_experts_per_token"))
        if backend == "gpu" and r["backend"] != "GpuBackend":
            d = "NOT ON THE GPU: " + d
        return r["tok_s_MEASURED"], r.get("vram_hit_rate_MEASURED"), d
    except (TypeError, KeyError):
        return None, None, "no result"
def llama(name):
    r = load(name)
    try:
        return r[0]["avg_ts"], None, f"mean of samples {[round(x, 2) for x in r[0]['samples_ts']]}, depth {r[0]['n_depth']}"
    except (TypeError, KeyError, IndexError):
        return None, None, "no result"
kind = {"neural-cal": calibrated, "neural-calpolicy": calibrated, "neural-uni": uniform,
        "neural-unipolicy": uniform, "neural-skew": uniform, "llama": llama}
routings = env("ROUTINGS", "").split(",")
names = {"cal": "calibrated", "calpolicy": "calpolicy", "uni": "uniform", "unipolicy": "unipolicy", "skew": "skewed"}
order = [n for n in ("neural-cal-1", "neural-calpolicy-1", "neural-uni-1", "neural-unipolicy-1", "neural-skew-1",
                     "llama-1", "llama-2", "neural-skew-2", "neural-unipolicy-2", "neural-uni-2", "neural-calpolicy-2",
                     "neural-cal-2")
         if n.startswith("llama") or names[n.split("-")[1]] in routings]
rows = [(n, *kind[n.rsplit("-", 1)[0]](n)) for n in order]
print(f"decode, {layers} layers, backend {backend}; Neural pool_gib {pool}; llama.cpp -ngl 99 -ncmoe {ncmoe} "
      f"-fa {env('PEER_FA', 'off')}; tg128 at depth {depth} on uniform routing (Neural and llama.cpp)"
      + (f"; Neural on calibrated routing teacher-forced over its text ({env('CAL_TOKENS')} tokens after a "
         f"{env('CAL_DEPTH')}-token prompt and {env('CAL_WARMUP')} untimed)" if "calibrated" in routings else "") + "\n")
print("| run | tok/s | VRAM hit rate | detail |\n|---|---:|---:|---|")
for name, ts, hit, detail in rows:
    print(f"| {name} | {'-' if ts is None else f'{ts:.2f}'} | {'-' if hit is None else f'{hit:.3f}'} | {detail[:700]} |")
def group(prefix):
    return [(ts, hit) for name, ts, hit, _ in rows if name.startswith(prefix) and ts]
m = [ts for ts, _ in group("llama")]
print()
if m:
    print(f"llama.cpp {statistics.mean(m):.2f} tok/s (mean of {[round(x, 2) for x in m]}), uniform GGUF only: its decode "
          "reads each token's k experts of every CPU layer in full, whichever they are, so its speed does not depend on "
          "the routing; both ratios below are to this figure")
for prefix, label in (("neural-cal-", "calibrated"), ("neural-calpolicy", f"calibrated, {env('CAL_POLICY')}"),
                      ("neural-uni-", "uniform"), ("neural-unipolicy", f"uniform, {env('UNI_POLICY')}"),
                      ("neural-skew", "skewed (static, skew 1.5)")):
    g = group(prefix)
    if not g:
        continue
    n = statistics.mean(ts for ts, _ in g)
    hits = [round(h, 3) for _, h in g if h is not None]
    line = f"Neural {label} {n:.2f} tok/s (mean of {[round(ts, 2) for ts, _ in g]}; VRAM hit rate {hits or '-'})"
    if m:
        line += f": ratio {n / statistics.mean(m):.2f}x llama.cpp (MEASURED, {layers} layers)"
    print(line)
pp = load("llama-pp512")
if pp:
    print(f"llama.cpp pp512: {pp[0]['avg_ts']:.1f} tok/s (mean of samples {[round(x, 2) for x in pp[0]['samples_ts']]})")
PY
log "done"
# $OUT returns 8 files at most: all of it in results.tgz, the table and the log beside it
TGZ=$(mktemp /tmp/peer-results.XXXXXX)
(cd "$OUT" && tar czf "$TGZ" --exclude=results.tgz . && find . -mindepth 1 ! -name table.md ! -name peer.log -delete \
  && mv "$TGZ" results.tgz && chmod 644 results.tgz)

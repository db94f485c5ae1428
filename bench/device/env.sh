# shellcheck shell=bash
# Sourced by the device scripts (repo root, device tool, carry [".whl"]): install the Python
# wheels carried in .whl/ (cffi, pycparser, platformdirs, llguidance: the device image lacks them;
# bench/device/wheels.sh downloads them) into /tmp/site, put the repo on PYTHONPATH and build the
# native CPU expert kernel in place.
# Sets $OUT (default /tmp/neural-out; the build log goes to $NATIVE_LOG, default $OUT/native_build.log),
# $T0 and left() (seconds left of BUDGET_S, default 570); $PY defaults to python3.
PY=${PY:-python3}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/neural-out}
mkdir -p "$OUT"
T0=${T0:-$(date +%s)}
left() { echo $(( ${BUDGET_S:-570} - ($(date +%s) - T0) )); }  # seconds left of the call's budget
if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || echo "wheel install failed"
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c "import native._neural_native" 2>/dev/null; then
  "$PY" -c "from native.build_native import ffibuilder; ffibuilder.compile(tmpdir='.', verbose=False)" \
    >"${NATIVE_LOG:-$OUT/native_build.log}" 2>&1 || echo "native build failed (native_build.log); CPU experts fall back to PyTorch"
fi
# shm_keep DIR: remove every other /dev/shm/neural-* folder. Another script's checkpoints left in /dev/shm (RAM) on a
# warm machine starve this one's: session 31's GGUF converter (peer_decode.sh) and session 32's 36-layer synth
# (ttft.sh) were killed beside them.
shm_keep() {
  local d
  for d in /dev/shm/neural-*; do [ -e "$d" ] && [ "$d" != "$1" ] && rm -rf "$d"; done
}
# bench_run NAME TIMEOUT LOG ARGS...: `neural bench ARGS... --json` into $OUT/NAME.json (stderr to LOG),
# skipped when fewer than 40 s of the call's budget are left, its timeout cut to what is left.
bench_run() {
  local name=$1 t=$2 logf=$3 l
  shift 3
  l=$(left)
  [ "$l" -lt 40 ] && { echo "skip $name: ${l}s left" | tee -a "$logf"; return; }
  [ "$t" -gt "$l" ] && t=$l
  echo "== $name ($(( $(date +%s) - T0 )) s)" | tee -a "$logf"
  timeout "$t" "$PY" -m app.cli.main bench "$@" --json >"$OUT/$name.json" 2>>"$logf" || echo "$name exited $?" | tee -a "$logf"
}
# part STEP: whether STEP is in the comma list $PARTS (the call scripts' step switch)
part() { [[ ",${PARTS:-}," == *",$1,"* ]]; }
# direct_check CKPT TIMEOUT LOG: bench.gpu.direct_check on a 600-token prompt into $OUT/direct_check.txt,
# its verdicts printed (bit identity of direct copies, the lookahead and the ring)
direct_check() {
  timeout "$2" "$PY" -m bench.gpu.direct_check "$1" 600 >"$OUT/direct_check.txt" 2>>"$3" \
    || echo "direct_check exited $?" | tee -a "$3"
  grep -E "identical|layers_ready|cudart|ahead_slots|\"s\"" "$OUT/direct_check.txt"
}
# serve_replay CKPT TIMEOUT: `neural serve` on CKPT (GPU, 12 GiB, 8 threads, port 8099, access log in
# $OUT/api.log), the shipped coding conversation replayed through it (`neural bench replay`, JSON in
# $OUT/replay-api.txt), then the server stopped.
serve_replay() {
  "$PY" -m app.cli.main serve "$1" --backend gpu --budget-gib 12 --threads 8 --port 8099 \
    --log-file "$OUT/api.log" >"$OUT/serve.log" 2>&1 &
  local pid=$!
  for _ in $(seq 60); do curl -sf http://127.0.0.1:8099/health >/dev/null && break; sleep 1; done
  echo "server up ($(( $(date +%s) - T0 )) s)"
  timeout "$2" "$PY" -m app.cli.main bench replay --endpoint neural=http://127.0.0.1:8099 --rounds 1 \
    --out "$OUT/replay" --json >"$OUT/replay-api.txt" 2>"$OUT/replay.err" || echo "replay exited $?"
  kill "$pid"
  wait "$pid" 2>/dev/null
}
# synth_120b DIR: the 36-layer 120b-shape checkpoint (uniform routing) in DIR unless it is there; exits on failure.
synth_120b() {
  [ -f "$1/SYNTHETIC.json" ] || "$PY" -m app.cli.main synth --preset 120b-shape --layers 36 --seed 1 \
    --jobs 8 --fast --out "$1" >"$OUT/synth.txt" 2>&1 || { tail "$OUT/synth.txt"; exit 1; }
}
# inproc_ab CKPT CONFIGS LOG: bench.gpu.lookahead_ab (lookahead slots / CPU share configurations
# alternated inside one process, $INPROC_ROUNDS mirrored rounds) into $OUT/lookahead_ab.txt, its
# summary printed and kept in $OUT/inproc.md
inproc_ab() {
  echo "== inproc ($(( $(date +%s) - T0 )) s)" | tee -a "$3"
  timeout "${INPROC_TIMEOUT:-300}" "$PY" -m bench.gpu.lookahead_ab "$1" --rounds "${INPROC_ROUNDS:-4}" \
    --configs "$2" --json >"$OUT/lookahead_ab.txt" 2>>"$3" || echo "lookahead_ab exited $?" | tee -a "$3"
  "$PY" -c "
import json, sys
r = json.load(open(sys.argv[1]))
print(r['plan']); print('load', round(r['load_s'], 1), 'layers ready', r['layers_ready'], r['calibration'])
for k in sorted(r['summary']):
    v = r['summary'][k]; print(f\"{k:24s} median {v['median']:.3f} mean {v['mean']:.3f} {v['runs']}\")
" "$OUT/lookahead_ab.txt" 2>&1 | tee "$OUT/inproc.md"
}
# scaled_pool LAYERS: pool_gib for an L-layer run with the 36-layer 12 GiB plan's expert slots per layer
# (bench.harness.suite.scaled_pool_gib), so that fewer layers keep the real machine's residency
scaled_pool() {
  "$PY" -c "from bench.harness.suite import scaled_pool_gib as s; p, why = s($1, 12.0, 16384, {}); print(f'{p:.6f}')"
}
# cal_checkpoints LOG: the 18-layer 120b-shape checkpoint ($CK) and its calibrated-routing variant ($CKC) in
# /dev/shm, written unless already there (cal_repeat.sh, cal_ab.sh)
cal_checkpoints() {
  CK=/dev/shm/neural-peer/synth-18l
  CKC=$CK-calibrated
  [ -f "$CK/SYNTHETIC.json" ] || timeout 200 "$PY" -m app.cli.main synth --preset 120b-shape --layers 18 --seed 1 \
    --jobs 8 --fast --out "$CK" >>"$1" 2>&1
  [ -f "$CKC/SYNTHETIC.json" ] || timeout 120 "$PY" -m app.cli.main synth --like "$CK" --routing calibrated \
    --out "$CKC" >>"$1" 2>&1
}

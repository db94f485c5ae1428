# Sourced by the device scripts (repo root, device tool, carry [".whl"]): install the Python
# wheels carried in .whl/ (cffi, pycparser, platformdirs: the device image lacks them) into
# /tmp/site, put the repo on PYTHONPATH and build the native CPU expert kernel in place.
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

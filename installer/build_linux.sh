#!/usr/bin/env bash
# Build the Linux one-folder bundle dist/neural/ with PyInstaller, then run its headless self-test.
#
#   installer/build_linux.sh            # uses `python` from PATH (activate the venv first)
#   PYTHON=/path/to/python installer/build_linux.sh
#
# Needs: `pip install -e '.[build]'` (or `pip install '.[build]'`) done, which also compiles the
# native expert kernel. NEURAL_BUNDLE_TRITON=0 leaves the Triton GPU kernels out (smaller).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}

"$PYTHON" - <<'PY'
import importlib.util, sys
missing = [m for m in ("PyInstaller", "native._neural_native", "torch", "PySide6") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"build_linux.sh: missing {', '.join(missing)}: run `pip install -e '.[build]'` with a C compiler present")
PY
# The demo model is committed; this rewrites it only if it is missing.
"$PYTHON" -c "from app.core.models import demo_model_dir; print('demo model:', demo_model_dir())"

start=$(date +%s)
"$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath dist --workpath build/pyinstaller installer/neural.spec
took=$(( $(date +%s) - start ))
echo "bundle: dist/neural built in ${took} s, $(du -sh dist/neural | cut -f1)"

if [ "${NEURAL_SKIP_SELFTEST:-0}" != "1" ]; then
  # Run from another directory so nothing resolves against the source tree by accident.
  root=$(pwd)
  (cd /tmp && "$root/dist/neural/neural" --self-test)
fi

#!/usr/bin/env bash
# Screenshots of the real app under Xvfb: main window (a chat with code and a streamed answer),
# the residency panel while generating, the preferences dialog, the dark theme, the Get a model page.
# Usage: scripts/screenshots.sh [--out DIR] [--model DIR]      (default out: ./screenshots, git-ignored)
# Needs: apt-get install xvfb libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 libxkbcommon-x11-0 (see .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in .venv/bin/python /work/venv/bin/python python3; do
    if [ -x "$cand" ] || command -v "$cand" >/dev/null 2>&1; then PY="$cand"; break; fi
  done
fi
export QT_QPA_PLATFORM=xcb
if [ -n "${DISPLAY:-}" ]; then
  exec "$PY" scripts/screenshots.py "$@"
fi
command -v xvfb-run >/dev/null || { echo "xvfb-run not found: apt-get install xvfb" >&2; exit 2; }
exec xvfb-run -a -s "-screen 0 1600x1000x24" "$PY" scripts/screenshots.py "$@"

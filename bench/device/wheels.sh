#!/usr/bin/env bash
# The wheels the device scripts carry in .whl/ (env.sh installs them there): what the project imports that the
# device image (Python 3.12, torch, triton, numpy, no pip index) lacks. Session 24's first call failed at
# `neural synth` for want of llguidance (engine/grammar, imported by the CLI).
#   usage (repo root, on this machine): bash bench/device/wheels.sh   -> .whl/*.whl; then carry [".whl"]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
mkdir -p .whl
"$PY" -m pip download -q --only-binary :all: --no-deps --python-version "${PYVER:-3.12}" \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d .whl cffi pycparser platformdirs llguidance
ls .whl

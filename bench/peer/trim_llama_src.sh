#!/usr/bin/env bash
# What the GPU machine (no internet, no pip index) needs for bench/device/peer_decode.sh, in .peer/:
# 1. a trimmed llama.cpp source tarball small enough to carry:
# only what CMake needs to configure and build llama-bench (CPU and CUDA backends) and what
# convert_hf_to_gguf.py imports (conversion/, gguf-py/). The rest (docs, models' vocab files, tests,
# examples, the web UI, the server, the other ggml backends' sources) is left out; the other
# backends are only add_subdirectory'd when their GGML_<NAME> option is on, so CMake never looks.
# 2. .peer/whl: the wheels (cp$PYVER, manylinux x86_64) of what the converter imports besides torch and
# numpy for gpt-oss (transformers at the project's pin and the modules its import chain loads; the
# rest of transformers' declared deps -- typer, rich, pydantic, hf-xet... -- are never imported by it).
#
#   bench/peer/trim_llama_src.sh [WORKDIR] [OUT]
#
# WORKDIR (default /tmp/neural-peer): the unpacked llama-cpp-python sdist in WORKDIR/src (the same one
# build_llama_cpp.sh uses; downloaded from PyPI when absent). OUT (default .peer/llama-src.tar.gz in
# the repo; .peer/ is gitignored): the tarball, whose top folder is llama.cpp/.
set -euo pipefail
VERSION=0.3.36
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${1:-/tmp/neural-peer}
OUT=${2:-$REPO/.peer/llama-src.tar.gz}
PY=${PY:-python3}
PYVER=${PYVER:-3.12}  # the device's python
WHEELS="transformers==5.24.0 tokenizers==0.23.3 huggingface-hub==2.4.0 httpx2==2.16.2 httpcore2==2.16.2
  anyio==4.16.0 h11==0.16.0 idna==3.20 truststore==0.10.5 filelock==4.3.1 fsspec==2026.9.0 packaging==26.4
  pyyaml==6.0.4 regex==2026.11.19 safetensors==0.8.0 tqdm==4.70.1 typing-extensions==4.16.0"
mkdir -p "$WORK" "$(dirname "$OUT")"
if [ ! -d "$WORK/src/vendor/llama.cpp" ]; then
  (cd "$WORK" && "$PY" -m pip download --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d .)
  mkdir -p "$WORK/src" && tar xzf "$WORK/llama_cpp_python-$VERSION.tar.gz" -C "$WORK/src" --strip-components=1
fi
L=llama.cpp
ex=(
  # top-level folders neither CMake (with tests/examples/server/app off) nor the converter reads
  "$L/docs" "$L/models" "$L/tests" "$L/examples" "$L/pocs" "$L/media" "$L/benches" "$L/.github"
  "$L/.devops" "$L/ci" "$L/skills" "$L/app" "$L/requirements" "$L/scripts" "$L/grammars"
  # tools only built with LLAMA_BUILD_SERVER (the web UI alone is 8.5 MB)
  "$L/tools/ui" "$L/tools/server" "$L/tools/cli"
  # httplib is only for common's downloads (LLAMA_BUILD_COMMON adds it: keep it) -- nothing else in vendor/ is optional
)
for b in blas cann et hexagon hip metal musa opencl openvino rpc sycl virtgpu vulkan webgpu zdnn zendnn; do
  ex+=("$L/ggml/src/ggml-$b")
done
args=()
for e in "${ex[@]}"; do args+=(--exclude="$e"); done
tar czf "$OUT" -C "$WORK/src/vendor" "${args[@]}" --exclude='__pycache__' --exclude='*.pyc' "$L"
echo "$OUT: $(du -m "$OUT" | cut -f1) MiB ($(tar tzf "$OUT" | wc -l) entries)"
WHL=$(dirname "$OUT")/whl
# shellcheck disable=SC2086  # one requirement per word
"$PY" -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp --no-deps \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d "$WHL" $WHEELS
echo "$WHL: $(du -sm "$WHL" | cut -f1) MiB ($(ls "$WHL" | wc -l) wheels)"

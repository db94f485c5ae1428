#!/usr/bin/env bash
# Build llama.cpp's CPU llama-bench from llama-cpp-python's sdist (PyPI), GGML_NATIVE=ON, outside the repo.
# Usage: bench/peer/build_llama_cpp.sh [WORKDIR]   (default /tmp/neural-peer; never inside the repository)
# Result: WORKDIR/build/bin/llama-bench and WORKDIR/src/vendor/llama.cpp/gguf-py (the matching gguf writer).
set -euo pipefail
VERSION=0.3.36
WORK=${1:-/tmp/neural-peer}
JOBS=${JOBS:-2}
PY=${PY:-python3}
mkdir -p "$WORK"
cd "$WORK"
if [ ! -d src ]; then
  "$PY" -m pip download --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d .
  mkdir src && tar xzf "llama_cpp_python-$VERSION.tar.gz" -C src --strip-components=1
fi
cmake -S src/vendor/llama.cpp -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF
nice -n 10 cmake --build build --target llama-bench -j "$JOBS"
echo "built: $WORK/build/bin/llama-bench"

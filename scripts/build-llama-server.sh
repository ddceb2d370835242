#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the sources vendored in the llama-cpp-python sdist (the version
# pinned in scripts/setup.sh), for any AVX2 CPU (GGML_NATIVE=OFF: the native build's AMX path crashes
# on these machines), with no network access at run time (no prebuilt web UI, no OpenSSL/curl).
# Usage: scripts/build-llama-server.sh DEST   (~12 min on 2 cores)
set -euo pipefail
DEST=${1:?usage: build-llama-server.sh DEST}
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
PY=${PYTHON:-python3}
# A finished build is kept outside the checkout, keyed by this script (flags, version) and the CPU
# architecture, so a fresh clone on the same machine (CI) installs it in a second instead of 12 minutes.
CACHE=${SKILLOS_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/skillos/build}
KEY=$( (cat "$0"; echo "$VERSION $(uname -m)") | sha256sum | cut -c1-16)
CACHED="$CACHE/llama-server-$KEY"
if [ -x "$CACHED" ] && "$CACHED" --version >/dev/null 2>&1; then
  install -m 755 "$CACHED" "$DEST"
  echo "==> llama-server from the build cache ($CACHED)"
  exit 0
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "==> building llama-server from llama-cpp-python $VERSION's vendored llama.cpp"
# the sdist of llama-cpp-python only (its build requirements may come as wheels: a local index for the
# image builds, deploy/pyindex.py, holds wheels of them, not sdists)
"$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary llama-cpp-python \
  "llama-cpp-python==$VERSION" -d "$WORK"
tar xzf "$WORK"/llama_cpp_python-"$VERSION".tar.gz -C "$WORK"
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
  -DBUILD_SHARED_LIBS=OFF >"$WORK/cmake.log" 2>&1 || { tail -30 "$WORK/cmake.log"; exit 1; }
cmake --build "$WORK/build" --target llama-server -j "$(nproc)" >"$WORK/build.log" 2>&1 \
  || { tail -40 "$WORK/build.log"; exit 1; }
install -m 755 "$WORK/build/bin/llama-server" "$DEST"
mkdir -p "$CACHE" && install -m 755 "$WORK/build/bin/llama-server" "$CACHED.tmp" && mv "$CACHED.tmp" "$CACHED"
"$DEST" --version 2>&1 | head -2

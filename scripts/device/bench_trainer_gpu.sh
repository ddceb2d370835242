#!/usr/bin/env bash
# GRPO update throughput on a lent GPU machine (issue 27: ours vs plain PyTorch AdamW vs TRL's
# GRPOTrainer on the same batch), with bench/bench_trainer.py on randomly initialised weights of
# the real architectures (the weights do not travel; the cost of an update does not depend on them).
#
# The machine has torch (CUDA), transformers, accelerate, numpy, pandas, pyarrow... but not trl,
# datasets, deepspeed, pydantic and a few more: those come as wheels in .whl/ (ignored; built by
# scripts/device/build_wheels.sh and carried with the run), installed with --no-deps into /tmp/site.
#
#   run(command="bash scripts/device/bench_trainer_gpu.sh", carry=[".whl"], timeout_s=600)
#
# Three runs, each under its own timeout (150 + 200 + 200 s at most; ~4 minutes in all on an H200):
#   a) the SmolLM2-135M architecture, fp32, the bench's default batch (8 sequences x (64 + 32)
#      tokens): the shape of the CPU numbers in bench/RESULTS-trainer.md;
#   b) the Qwen2.5-0.5B architecture, bf16, 32 sequences x (512 + 256) tokens, micro-batches of 8;
#   c) as b) with every row keeping fp32 master weights (--dtype bf16-amp).
# Results (markdown table + JSON line) and logs are written to $OUT (or ./out-bench-trainer).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out-bench-trainer}
mkdir -p "$OUT"
T_A=${T_A:-150}
T_B=${T_B:-200}
# SMOKE=1: the same two runs cut to one layer, a few tokens and fp32 (a check of this script on a CPU,
# where bf16 matrix products are slow)
SMOKE_ARGS=()
[ "${SMOKE:-0}" = 1 ] && SMOKE_ARGS=(--layers 1 --sequences 4 --prompt 8 --completion 4 --micro-batch 2 --repeats 1
                                     --dtype fp32)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export TRL_EXPERIMENTAL_SILENCE=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

{
  echo "== $(date -u +%FT%TZ) setup"
  nvidia-smi -L || echo "nvidia-smi failed"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  ls -la .whl/ 2>&1 | head -40
  if ls .whl/*.whl >/dev/null 2>&1; then
    if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl; then
      echo "wheels installed into /tmp/site"
    else  # a wheel is a zip of its files: unpacked as they are, they import the same
      echo "pip install failed: unpacking the wheels into /tmp/site instead"
      for w in .whl/*.whl; do python3 -m zipfile -e "$w" /tmp/site || echo "could not unpack $w"; done
    fi
  else
    echo "no .whl/ folder: carry [\".whl\"] with the run (scripts/device/build_wheels.sh builds it)"
  fi
  export PYTHONPATH=/tmp/site:$PWD
  # datasets 5.2.0 wants huggingface-hub >= 1.31: if the image's is older and datasets does not import,
  # the hub wheel in .whl/fallback/ goes in too (transformers 5.17 runs with it)
  if ! python3 -c "import datasets" 2>/dev/null && ls .whl/fallback/*.whl >/dev/null 2>&1; then
    python3 -c "import datasets" 2>&1 | tail -1
    echo "datasets does not import: installing .whl/fallback/ (huggingface_hub) into /tmp/site"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whl/fallback/*.whl || for w in .whl/fallback/*.whl; do python3 -m zipfile -e "$w" /tmp/site; done
  fi
  python3 - <<'PY'
import importlib, importlib.metadata, platform
print("python", platform.python_version())
for name in ("torch", "transformers", "accelerate", "tokenizers", "deepspeed", "trl", "datasets", "pydantic",
             "pydantic_core", "peft", "huggingface_hub", "httpx", "pyarrow", "pandas", "fsspec", "typing_extensions",
             "structlog", "multiprocess", "dill"):
    try:
        m = importlib.import_module(name)
        try:
            v = importlib.metadata.version(name.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            v = getattr(m, "__version__", "?")
        print(f"{name:17} {v:22} {m.__file__}")
    except Exception as e:  # noqa: BLE001
        print(f"{name:17} IMPORT FAILED: {type(e).__name__}: {e}")
import torch
print("cuda available:", torch.cuda.is_available(), torch.version.cuda,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
import shutil
print("nvcc:", shutil.which("nvcc"), "CUDA_HOME:", __import__("os").environ.get("CUDA_HOME"))
PY
} 2>&1 | tee "$OUT/setup.log"
export PYTHONPATH=/tmp/site:$PWD

run() {  # NAME TIMEOUT ARGS...
  local name=$1 limit=$2; shift 2
  echo "== $(date -u +%FT%TZ) $name: python3 -m bench.bench_trainer $* (timeout ${limit}s)"
  timeout -k 10 "$limit" python3 -m bench.bench_trainer --out "$OUT/$name.md" "$@" ${SMOKE_ARGS[@]+"${SMOKE_ARGS[@]}"} 2>&1 \
    | tee "$OUT/$name.log"
  local rc=$?
  echo "== $(date -u +%FT%TZ) $name: exit $rc" | tee -a "$OUT/$name.log"
  return 0
}

# RUNS picks some of them (e.g. RUNS="b c"); all by default
wanted() { [[ " ${RUNS:-a b c} " == *" $1 "* ]]; }
wanted a && run a-smollm2-135m-fp32 "$T_A" --init random --arch smollm2-135m --dtype fp32 \
  --sequences 8 --prompt 64 --completion 32 --repeats 5 --warmup full
wanted b && run b-qwen2.5-0.5b-bf16 "$T_B" --init random --arch qwen2.5-0.5b --dtype bf16 \
  --sequences 32 --prompt 512 --completion 256 --micro-batch 8 --repeats 3 --warmup full
# c) the same batch with every row keeping fp32 master weights (plain and TRL under bf16 autocast)
wanted c && run c-qwen2.5-0.5b-bf16-amp "$T_B" --init random --arch qwen2.5-0.5b --dtype bf16-amp \
  --sequences 32 --prompt 512 --completion 256 --micro-batch 8 --repeats 3 --warmup full

echo "== results"
ls "$OUT"/*.md >/dev/null 2>&1 && sed '/^```json$/,/^```$/d' "$OUT"/*.md || echo "no results written"
ls -la "$OUT"

#!/usr/bin/env bash
# Build .whl/ (ignored by .gitignore): the wheels bench/bench_trainer.py needs on a lent
# GPU machine that its image lacks (CPython 3.12, manylinux x86_64; the image has torch, transformers,
# accelerate, numpy, pandas, pyarrow, peft, pyyaml, requests, tqdm, psutil, py-cpuinfo, msgpack, einops,
# nvidia-ml-py, ninja, xxhash, fsspec, huggingface-hub). scripts/device/bench_trainer_gpu.sh installs
# them with --no-deps. Versions: the venv's (deploy/requirements.lock) and the `bench` extra's.
# Why each: trl (the baseline row) needs datasets (+ dill, multiprocess); deepspeed needs hjson and pydantic
# (+ pydantic_core, annotated-types, typing-inspection, a typing_extensions new enough for pydantic_core);
# services.trainer.config imports skillos.methods, whose import chain reaches skillos.clients (httpx, +
# httpcore, h11, anyio, sniffio: huggingface-hub 2.x no longer brings httpx) and skillos.logging (structlog).
# deepspeed is an sdist on PyPI: its wheel is built here, pure Python (DS_BUILD_OPS=0: the CUDA ops stay
# JIT sources, and the bench does not use them).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
rm -rf .whl && mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \
  hjson==3.1.0 pydantic==2.14.3 pydantic_core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing_extensions==4.16.0 structlog==26.1.0 httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0 \
  sniffio==1.3.1
# only if datasets does not import on the image (its huggingface-hub older than datasets wants)
mkdir -p .whl/fallback
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl/fallback huggingface_hub==1.33.0
DS=$("$PY" -c "import importlib.metadata as m; print(m.version('deepspeed'))")
DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation --no-binary deepspeed -w .whl "deepspeed==$DS"
ls -la .whl .whl/fallback && du -sh .whl

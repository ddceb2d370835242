"""The policy sampled by llama-server with the trainer's current LoRA adapter (``sync.backend: llamacpp_lora``):
the CPU loop's generator, in place of `GenerationBatcher`'s in-process ``generate``.

llama-server batches the rollouts' requests across its slots and keeps each slot's prompt prefix, which torch
``generate`` does neither of; it loads adapters only at start (``--lora``; its ``/lora-adapters`` route sets the
scales of adapters already loaded), so a push writes the new adapter as GGUF (`lora_gguf`), stops the server
and starts it again on the new one. The base is the GGUF the trainer dequantised its own copy from, so
trainer and server hold the same base weights (llama.cpp multiplies them in their quantized form).

`ServedGenerator.generate` takes prompt token ids, as the in-process batcher does, and sends them as ids to
``/completion``, so the sample's prompt is exactly what the loss scores; the completion's ids come back with
``return_tokens`` (the end-of-generation token llama.cpp stopped on among them). Sampling is temperature then
top-p, the trainer's order (no other llama.cpp sampler in the chain). A JSON schema, when the caller asks for
one, is applied by llama-server's grammar; the loss then takes the model's unconstrained log-probs (as TRL does
with vLLM's guided decoding), since the trainer's own grammar could disagree with llama.cpp's about a token and
give it no probability at all. Unlike the trainer's grammar, llama.cpp's does not know the token budget: a
schema-bound completion can be cut at the limit, unparseable (counted in ``at_limit``; give the curator's
calls room with ``max_response_tokens``).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import httpx

from skillos.llm.llama_server import LlamaServer
from skillos.logging import get_logger

log = get_logger("trainer.served")


class ServedPolicy:
    """llama-server over ``base_gguf`` with the latest adapter; `restart` moves it to a new one."""

    def __init__(self, base_gguf: Path, *, alias: str, parallel: int, ctx_per_slot: int, log_dir: Path,
                 threads: int | None = None, seed: int = 0):
        self.base_gguf, self.alias, self.parallel, self.ctx_per_slot = base_gguf, alias, parallel, ctx_per_slot
        self.threads = threads or max(1, os.cpu_count() or 1)
        self.seed, self.log_dir = seed, log_dir
        self.server: LlamaServer | None = None
        self.adapter: Path | None = None

    @property
    def url(self) -> str:
        if self.server is None:
            raise RuntimeError("the served policy has not been started (no weights pushed yet)")
        return self.server.url

    def restart(self, adapter: Path | None, timeout_s: float = 300.0) -> None:
        """Serve ``adapter`` (None: the base alone). The old server stops first (two copies of the model on a
        small machine only slow each other); a new one that does not come up raises: no sampling from stale
        weights."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        new = LlamaServer(self.base_gguf, alias=self.alias, n_threads=self.threads, ctx_per_slot=self.ctx_per_slot,
                          parallel=self.parallel, seed=self.seed, log_path=self.log_dir / "served-policy.log",
                          extra=["--lora", str(adapter)] if adapter is not None else [])
        self.stop()
        new.start()
        try:
            new.wait_ready(timeout=timeout_s)
        except Exception:
            new.stop()
            raise
        self.server, self.adapter = new, adapter
        log.info("served_policy_restarted", url=new.url, adapter=str(adapter) if adapter else None)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


class ServedGenerator:
    """`GenerationBatcher`'s ``generate`` over llama-server: prompt ids in, completion ids out (EOS kept)."""

    applies_schema = True   # PolicyLLM hands it the schema itself; the sample carries no trainer-side constraint

    def __init__(self, policy: ServedPolicy, max_new_tokens: int, temperature: float, top_p: float = 1.0,
                 seed: int = 0, timeout_s: float = 3600.0):
        self.policy = policy
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self._rng = random.Random(seed)
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0))
        self.at_limit = 0       # completions cut at the token budget (under a schema: unparseable JSON)
        self.tokens_generated = 0
        self.seconds = 0.0      # as GenerationBatcher's: time with a generation under way (the step's generate_s)
        self._in_flight, self._busy_since = 0, 0.0

    async def generate(self, prompt_ids: list[int], schema: dict | None = None,
                       max_new_tokens: int | None = None) -> list[int]:
        # a schema's call gets the whole budget, as GenerationBatcher gives it (the caller's cap would cut the JSON)
        n = self.max_new_tokens if schema is not None or not max_new_tokens \
            else min(max_new_tokens, self.max_new_tokens)
        body = {"prompt": list(prompt_ids), "n_predict": n, "temperature": self.temperature, "top_p": self.top_p,
                # HF's order (temperature, then top-p), and nothing else in the chain
                "samplers": ["temperature", "top_p"], "top_k": 0, "min_p": 0.0, "typical_p": 1.0,
                "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0,
                "xtc_probability": 0.0, "mirostat": 0,
                "seed": self._rng.randrange(2**31), "cache_prompt": True, "return_tokens": True, "stream": False}
        if schema is not None:
            body["json_schema"] = schema
        if self._in_flight == 0:
            self._busy_since = time.perf_counter()
        self._in_flight += 1
        try:
            resp = await self._http.post(self.policy.url + "/completion", json=body)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.seconds += time.perf_counter() - self._busy_since
        if resp.status_code != 200:
            raise RuntimeError(f"llama-server /completion answered {resp.status_code}: {resp.text[:500]}")
        data = resp.json()
        if "tokens" not in data or (not data["tokens"] and data.get("content")):
            raise RuntimeError("llama-server answered /completion without the completion's token ids "
                               "(return_tokens): this llama-server cannot serve the training loop")
        ids = [int(t) for t in data["tokens"]]   # ends with the EOG token it stopped on, as the trainer's samples
        self.at_limit += data.get("stop_type") == "limit"
        self.tokens_generated += len(ids)
        return ids

    async def aclose(self) -> None:
        await self._http.aclose()


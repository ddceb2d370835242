"""The GRPO training loop (Algorithm 1 with N rollouts per group, §3.2.2).

step: sample groups → rollouts over HTTP (`rollouts/`: curator or agent) → rewards and group
advantages → recompute old log-probs → token-level clipped surrogate → one DeepSpeed optimizer
step (`grpo/update.py`) → push weights to the serving backend → metrics → checkpoint every k steps.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import random
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from services.trainer.config import TrainConfig
from services.trainer.data import GroupSampler
from services.trainer.decoding.constrained import GrammarCache
from services.trainer.grouping.agentic import group_by_type
from services.trainer.grouping.families import group_by_family
from services.trainer.grouping.io import read_groups
from services.trainer.grpo import checkpoint
from services.trainer.grpo.engine import build_engine, close_distributed, rank_world
from services.trainer.grpo.lora_gguf import float_base_gguf
from services.trainer.grpo.policy import GenerationBatcher, apply_lora, load_policy, resolve_model
from services.trainer.grpo.served import ServedGenerator, ServedPolicy
from services.trainer.grpo.sync import WeightSync, export_adapter
from services.trainer.grpo.update import update_policy
from services.trainer.metrics import MetricsWriter, write_report, write_rollouts
from services.trainer.rollouts.agent import (
    AgentContext,
    SkillRLBank,
    agent_signal,
    bank_name,
    run_agent_group,
)
from services.trainer.rollouts.agent_rewards import SegmentWeights
from services.trainer.rollouts.base import GroupResult
from services.trainer.rollouts.curator import RolloutContext, run_curator_group
from services.trainer.settings import TrainerSettings
from skillos.clients.curator import AsyncCuratorClient
from skillos.clients.envs import EnvClient
from skillos.clients.executor import AsyncExecutorClient
from skillos.clients.skillrepo import AsyncSkillRepoClient
from skillos.llm import LLMClient, LLMSettings
from skillos.logging import get_logger
from skillos.methods import method_class
from skillos.models.store import converted_dir
from skillos.protocol.runs import RunFolder, TrainSummary, to_dict
from skillos.settings import ActingSettings, CurationSettings

log = get_logger("trainer")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def _method_measures(method: str, rollouts) -> dict[str, float | None]:
    """The method's own numbers (`Method.measures`) over the step's rollouts, averaged."""
    per = [method_class(method).measures(r.records) for r in rollouts]
    keys = sorted({k for m in per for k in m})
    return {k: _mean(m[k] for m in per if m.get(k) is not None) for k in keys}


def signal_metrics(groups) -> dict[str, float]:
    """Is there anything to learn from? Groups whose rewards differ, |A|, and how many decisions
    wrote a readable call and how many calls the repo accepted."""
    rollouts = [r for g in groups for r in g.rollouts]
    traces = [t for r in rollouts for t in r.traces]
    calls = [c for t in traces for c in t["calls"]]
    n_groups, n_rollouts = max(1, len(groups)), max(1, len(rollouts))
    return {"groups_nonzero_std_frac": sum(float(np.std([r.reward.total for r in g.rollouts])) > 1e-9
                                           for g in groups) / n_groups,
            "adv_abs_mean": sum(abs(r.advantage) for r in rollouts) / n_rollouts,
            "parse_rate": sum(t["readable_calls"] > 0 for t in traces) / max(1, len(traces)),
            "call_valid_rate": sum(c["valid"] for c in calls) / max(1, len(calls))}


def _push_weights(sync, module, tokenizer, step: int) -> float:
    """Every rank enters the push: under ZeRO-3 they gather the weights together; rank 0 writes
    them and calls the server, and the others wait for its outcome (a failure raises on every
    rank), so no rank samples its next rollouts from the old weights. See grpo/sync.py."""
    return sync.push(module, tokenizer, step)


def load_groups(cfg: TrainConfig, settings) -> list:
    if cfg.data.groups_file is not None:
        return read_groups(cfg.data.groups_file)
    url = settings.env_url(cfg.data.env)
    with EnvClient(url, token=settings.api_token or None) as env:
        tasks = env.tasks(split=cfg.data.split)
    if cfg.data.env == "reasoning":   # Random(min, max) tasks of one family (reasoning-gym's, the type)
        low, high = cfg.data.reasoning_group_size
        return group_by_family(tasks, "reasoning", low, high, cfg.data.num_groups, seed=cfg.seed)[0]
    groups, _ = group_by_type(tasks, cfg.data.env, cfg.data.group_size, cfg.data.distribution,
                              cfg.data.num_groups, seed=cfg.seed)
    return groups


def converted_cache(cfg: TrainConfig) -> Path:
    """Where a GGUF policy's conversions are kept (the torch copy transformers dequantises, a float GGUF for the
    server): in the model cache (`SKILLOS_MODELS_DIR`), once per machine, not beside each run."""
    return converted_dir(*resolve_model(cfg.model.path, cfg.model.gguf_file))


def served_policy(cfg: TrainConfig, log_dir: Path) -> ServedPolicy:
    """llama-server over the GGUF the policy was dequantised from (sync.backend llamacpp_lora), not started."""
    src, gguf = resolve_model(cfg.model.path, cfg.model.gguf_file)
    if not gguf:
        raise ValueError(f"sync.backend=llamacpp_lora serves the policy's base GGUF: model.path {cfg.model.path!r} "
                         "is not a GGUF model (the packaged SmolLM2 or a name of `skillos models list`)")
    if rank_world()[1] > 1:   # one server, started by the rank that pushes: the others would have none
        raise ValueError("sync.backend=llamacpp_lora is the single-process CPU loop: run it with one rank "
                         "(vllm_lora serves several)")
    base = Path(src) / gguf
    if cfg.sync.served_base != "gguf":   # beside the trainer's own dequantised copy of it
        base = float_base_gguf(base, converted_cache(cfg) / f"base-{cfg.sync.served_base}.gguf", cfg.sync.served_base)
    return ServedPolicy(base, alias="policy", parallel=cfg.rollout.max_concurrency,
                        ctx_per_slot=cfg.max_prompt_tokens + cfg.max_response_tokens, log_dir=log_dir,
                        threads=cfg.sync.llama_threads, seed=cfg.seed)


def curator_context(cfg: TrainConfig, s: TrainerSettings, tokenizer, batcher, grammars, run_id: str
                    ) -> tuple[RolloutContext, list]:
    """The curator rollouts' context over the stack's services, and the clients to close after."""
    token = s.api_token or None
    repo_client = AsyncSkillRepoClient(s.skillrepo_url, token=token)
    curator_client = AsyncCuratorClient(s.curator_url, token=token, timeout=cfg.rollout.timeout_s)
    executor = AsyncExecutorClient(s.executor_url, token=token, timeout=cfg.rollout.timeout_s)
    ctx = RolloutContext(
        env=cfg.data.env, executor=executor, repo_client=repo_client, curator_client=curator_client,
        curation=CurationSettings(curator_output_mode=cfg.rollout.curator_output_mode).curation_options(),
        tokenizer=tokenizer, batcher=batcher, grammars=grammars,
        run_id=run_id, max_prompt_tokens=cfg.max_prompt_tokens, top_k=cfg.rollout.top_k_skills,
        max_turns=cfg.rollout.max_turns, content_judge=cfg.rollout.content_judge, self_judge=cfg.rollout.self_judge,
        seed_repo=cfg.rollout.seed_repo, lambdas=cfg.reward_weights(),
        concurrency=asyncio.Semaphore(cfg.rollout.max_concurrency), model_name=cfg.model.path)
    return ctx, [repo_client, curator_client, executor]


class Trainer:
    def __init__(self, cfg: TrainConfig, settings=None):
        self.cfg = cfg
        self.settings = settings or TrainerSettings()
        self.out = Path(cfg.output_dir)
        self.folder = RunFolder(self.out)      # the run folder's contract: `skillos.protocol.runs`
        self.ckpt_dir = self.folder.checkpoints_dir
        self.out.mkdir(parents=True, exist_ok=True)
        self.folder.train_config.write_text(cfg.model_dump_json(indent=2))

    # --- set-up ---------------------------------------------------------------------------
    def _build_model(self):
        m = self.cfg.model
        model, tokenizer = load_policy(m.path, m.gguf_file, m.dtype, cache_dir=converted_cache(self.cfg) / "torch")
        if m.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        ref = None
        if self.cfg.kl_coef > 0 and not m.lora:
            ref = copy.deepcopy(model).eval().requires_grad_(False)
        if m.lora:
            model = apply_lora(model, m.lora_r, m.lora_alpha, m.lora_dropout, m.lora_target_modules,
                               m.lora_layers)
        return model, tokenizer, ref

    def _base_gguf(self) -> Path | None:
        src, gguf = resolve_model(self.cfg.model.path, self.cfg.model.gguf_file)
        return Path(src) / gguf if gguf else None

    def run(self) -> dict[str, Any]:
        try:
            return asyncio.run(self._run())
        finally:
            close_distributed()

    async def _run(self) -> dict[str, Any]:
        cfg, s = self.cfg, self.settings
        seed_everything(cfg.seed)
        groups = load_groups(cfg, s)
        model, tokenizer, ref = self._build_model()
        engine = build_engine(model, cfg)
        sampler = GroupSampler(groups, cfg.seed)
        step = 0
        metrics = MetricsWriter(self.out)
        if cfg.resume:
            state = checkpoint.load(engine, self.ckpt_dir)
            if state is not None:
                step = state["step"]
                sampler.state = state["sampler"]
                metrics.truncate_after(step)
                log.info("resumed", step=step, sampler=str(sampler.state))
        served = served_policy(cfg, self.out) if cfg.sync.backend == "llamacpp_lora" else None
        vllm_key = LLMSettings.for_role("curator").api_key if cfg.sync.backend.startswith("vllm") else None
        sync = WeightSync(cfg.sync, self.out, served=served, api_key=vllm_key)
        inprocess = cfg.sync.backend == "inprocess"
        if not inprocess:
            # the server must serve this policy from the first rollout on: it may hold the initial
            # weights, or after a resume weights pushed after the checkpoint
            try:
                log.info("weights_pushed", step=step,
                         seconds=round(_push_weights(sync, engine.module, tokenizer, step), 2))
            except BaseException:
                if served is not None:
                    served.stop()
                raise
        if inprocess:
            batcher = GenerationBatcher(engine.module, tokenizer, cfg.max_response_tokens, cfg.temperature,
                                        cfg.top_p, max_batch=max(1, cfg.rollout.max_concurrency))
        elif served is not None:   # the same rollouts, sampled by llama-server with the pushed adapter
            batcher = ServedGenerator(served, cfg.max_response_tokens, cfg.temperature, cfg.top_p,
                                      seed=cfg.seed * 100_003 + step)
        else:
            batcher = None
        grammars = None
        wants_grammar = cfg.agent.action_format == "json" if cfg.policy == "agent" \
            else cfg.rollout.curator_output_mode == "json"
        if inprocess and wants_grammar:
            width = engine.module.get_output_embeddings().weight.shape[0]   # logits width
            grammars = GrammarCache(tokenizer, width, cfg.max_response_tokens)
        run_id = f"train-{uuid.uuid4().hex[:6]}"
        closing: list = [batcher] if served is not None else []
        bank = None
        if cfg.policy == "agent":
            repo_client = AsyncSkillRepoClient(s.skillrepo_url, token=s.api_token or None)
            closing.append(repo_client)
            ctx, bank = await self._agent_context(tokenizer, batcher, grammars, repo_client, run_id, closing, step)
        else:
            ctx, clients = curator_context(cfg, s, tokenizer, batcher, grammars, run_id)
            closing += clients
        summary: dict[str, Any] = {"start_step": step}
        try:
            while step < cfg.steps:
                step += 1
                row, kept = await self._step(step, engine, tokenizer, ref, sampler, ctx, sync)
                if bank is not None and rank_world()[0] == 0:   # one rank evolves the bank the others fork
                    try:
                        evolution = await bank.after_step(step, kept)
                    except Exception as e:  # noqa: BLE001 - the teacher or the repo failed: the bank stays as it was
                        evolution = {"error": f"{type(e).__name__}: {e}"[:500]}
                        log.warning("skillrl_bank_not_evolved", step=step, error=evolution["error"])
                    if evolution is not None:
                        row["evolution"] = evolution
                if rank_world()[0] == 0:
                    metrics.write(step, row)
                    write_rollouts(self.out, step, kept)
                reward = row["reward"].get("total", row["reward"].get("outcome"))   # curator: Eq. 1; agent: outcome
                log.info("step", step=step, reward=reward,
                         groups_with_signal=row["signal"].get("groups_nonzero_std_frac"),
                         dropped=row["groups"]["dropped"], rollout_s=row["time"]["rollout_s"],
                         update_s=row["time"]["update_s"])
                # the adapter before the checkpoint: a run killed between the two plays the step again and
                # writes it then, where the other order would resume past a step whose adapter was never kept
                if cfg.model.lora and (step % cfg.adapter_every == 0 or step == cfg.steps):
                    export_adapter(engine.module, self.folder.adapter_dir(step), self._base_gguf())
                if step % cfg.save_every == 0 or step == cfg.steps:
                    t0 = time.perf_counter()
                    checkpoint.save(engine, self.ckpt_dir, step, sampler.state, cfg.keep_checkpoints)
                    log.info("checkpoint", step=step, seconds=round(time.perf_counter() - t0, 2))
        finally:
            if isinstance(batcher, GenerationBatcher):
                batcher.close()
            if served is not None:
                served.stop()
            metrics.close()
            for client in closing:
                await client.aclose()
        if metrics.path.exists():
            summary["report"], summary["report_md"] = (str(p) for p in write_report(self.out))
        summary["end_step"] = step
        self.folder.summary.write_text(json.dumps(to_dict(TrainSummary.model_validate(summary)), indent=2))
        return summary

    async def _step(self, step, engine, tokenizer, ref, sampler, ctx,
                    sync) -> tuple[dict[str, Any], list[GroupResult]]:
        """One GRPO step: the metrics row of the step and the groups kept (not dropped)."""
        cfg = self.cfg
        play = run_agent_group if cfg.policy == "agent" else run_curator_group
        batch = sampler.next_batch(cfg.groups_per_step)
        # data parallel: every rank draws the same batch (same seed and position) and plays its
        # own share of the groups; DeepSpeed averages the ranks' gradients
        rank, world = rank_world()
        batch = batch[rank::world]
        t0 = time.perf_counter()
        gen_before = ctx.batcher.seconds if ctx.batcher else 0.0
        at_limit_before = getattr(ctx.batcher, "at_limit", 0)
        engine.module.eval()
        results = await asyncio.gather(*(play(ctx, g, cfg.rollouts_per_group, step, cfg.rollout.retries,
                                              seed=cfg.seed * 100_003 + step) for g in batch))
        rollout_s = time.perf_counter() - t0
        kept = [r for r in results if not r.dropped]
        samples = [smp for g in kept for r in g.rollouts for smp in r.samples]
        t1 = time.perf_counter()
        upd = update_policy(engine, samples, cfg, tokenizer.pad_token_id, ref) if samples else {"skipped": 1.0}
        update_s = time.perf_counter() - t1
        sync_s = _push_weights(sync, engine.module, tokenizer, step)
        rollouts = [r for g in kept for r in g.rollouts]
        common = {
            "groups": {"sampled": len(batch), "dropped": len(results) - len(kept),
                       "dropped_reasons": [f"{r.group_id}: {r.reason}" for r in results if r.dropped]},
            "lengths": {"prompt_mean": _mean(len(x.prompt_ids) for x in samples),
                        "completion_mean": _mean(len(x.completion_ids) for x in samples)},
            "update": upd,
            "time": {"rollout_s": rollout_s, "update_s": update_s, "sync_s": sync_s,
                     "generate_s": (ctx.batcher.seconds - gen_before) if ctx.batcher else 0.0},
        }
        if hasattr(ctx.batcher, "at_limit"):   # llama-server's samples cut at the token budget (grpo/served.py)
            common["served"] = {"at_limit": ctx.batcher.at_limit - at_limit_before}
        if cfg.policy == "agent":
            return {**common,
                    "reward": {"outcome": _mean(r.outcome for r in rollouts)},
                    "signal": agent_signal(kept),
                    "success_rate": _mean(x for r in rollouts for x in r.successes),
                    "method": _method_measures(cfg.agent.method, rollouts),
                    "repo": {"skills_mean": _mean((r.records[-1].repo_size or 0) for r in rollouts
                                                  if r.records and r.records[-1].repo_size is not None)}}, kept
        ops = Counter()
        for r in rollouts:
            for d in r.decisions:
                ops.update(d.op_counts)
        n_dec = max(1, sum(len(r.decisions) for r in rollouts))
        return {
            **common,
            "reward": {k: _mean(getattr(r.reward, k) for r in rollouts) for k in ("total", "task", "fc", "cnt", "comp")},
            "reward_std_within_group": _mean(float(np.std([r.reward.total for r in g.rollouts])) for g in kept),
            "signal": signal_metrics(kept),
            "success_rate": _mean(x for r in rollouts for x in r.successes),
            "ops": {k: v / n_dec for k, v in sorted(ops.items())},
            "repo": {"skills_mean": _mean((r.records[-1].repo_size or 0) for r in rollouts if r.records)},
        }, kept

    async def _agent_context(self, tokenizer, batcher, grammars, repo_client, run_id, closing, step: int):
        """The agent mode's rollout context, and SkillRL's run-long bank (None for the other methods)."""
        cfg, a = self.cfg, self.cfg.agent
        teacher = None
        if a.method == "skillrl":
            teacher = LLMClient(LLMSettings.for_role("curator"))
            closing.append(teacher)
        ctx = AgentContext(
            env=cfg.data.env, method=a.method, params=dict(a.params),
            # the episodes reach the env servers and the skill repo this trainer was pointed at
            # (SKILLOS_EXECUTOR_* say how the agent decides, as for the executor service; the format is this run's)
            player=dataclasses.replace(ActingSettings(**{k: getattr(self.settings, k) for k in ActingSettings.model_fields
                                                         if hasattr(self.settings, k)}).player_options(),
                                       action_format=a.action_format),
            act_max_tokens=a.act_max_tokens, repo_client=repo_client,
            tokenizer=tokenizer, batcher=batcher, grammars=grammars, teacher=teacher, run_id=run_id,
            max_prompt_tokens=cfg.max_prompt_tokens,
            weights=SegmentWeights(a.rerank_weight, a.distill_weight, a.generator_positive_weight),
            top_k=cfg.rollout.top_k_skills, max_turns=cfg.rollout.max_turns, seed_repo=cfg.rollout.seed_repo,
            concurrency=asyncio.Semaphore(cfg.rollout.max_concurrency), model_name=cfg.model.path)
        bank = None
        if a.method == "skillrl":
            if rank_world()[1] > 1:
                raise ValueError("agent.method=skillrl keeps one bank that evolves between steps: run it as one "
                                 "process (several ranks would each evolve it)")
            bank = SkillRLBank(ctx, bank_name(self.out), a.evolve_every)
            log.info("skillrl_bank", repo=await bank.open(step))
        return ctx, bank

"""Rollouts: one pass of the curator policy over a whole task group, on its own fresh repo.

The stream itself is `skillos.stream.run_stream` with the SkillOS method (`skillos.methods`) (executor episode over HTTP → self-judge
→ curate → ops applied by the skill repo), so training sees exactly the production loop. Each
curation decision is `skillos.curation.curate` (prompt, parsing, validation, non-atomic apply with
per-op verdicts: the code the curator service runs), with either

- `PolicyLLM`: the trainer's own model, sampled in-process (CPU path, `sync.backend: inprocess`),
  as its `ChatLLM`, and the trainer's skill repo client;
- the curator service over HTTP backed by vLLM (`vllm_*` backends), token ids taken from its
  answer (`curator_ask_token_ids`); the trainer recomputes every log-prob either way.

Each decision is scored for the reward: verdicts (r_fc), the content judge of the curator service
(POST /v1/judge/content, r_cnt) and repo/context token lengths (r_comp).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from services.trainer.grpo.policy import GenerationBatcher
from services.trainer.grpo.sample import PolicySample
from services.trainer.rollouts.base import GroupResult, PolicyLLM, RolloutFailed, run_group
from services.trainer.rollouts.curator_rewards import (
    Decision,
    RewardParts,
    composite_reward,
    group_advantages,
)
from skillos.curation import OP_NAMES, ChatLLM, CurationOptions, curate, parse_curator_output
from skillos.logging import get_logger
from skillos.methods import StreamContext, build_method
from skillos.protocol.curator import ContentJudgeRequest, ContentOp, CurateRequest, CurateResponse
from skillos.stream import StreamConfig, TaskSpec, run_stream

log = get_logger("trainer.rollout")


@dataclass
class RolloutResult:
    rollout: int
    repo: str
    successes: list[bool]
    decisions: list[Decision]
    samples: list[PolicySample]
    reward: RewardParts
    records: list[Any]
    seconds: float
    attempts: int = 1
    advantage: float = 0.0
    traces: list[dict] = field(default_factory=list)   # per decision: completion, calls, verdicts

    def log_row(self) -> dict[str, Any]:
        return {"rollout": self.rollout, "reward": self.reward.as_dict(), "advantage": self.advantage,
                "successes": self.successes, "decisions": self.traces}


class ScoringCurator:
    """Wraps a curator (`InProcessCurator` or the service) for one rollout and scores each decision."""

    def __init__(self, inner, ctx: RolloutContext, repo: str, llm: PolicyLLM | None):
        self.inner, self.ctx, self.repo, self.llm = inner, ctx, repo, llm
        self.decisions: list[Decision] = []
        self.samples: list[PolicySample] = []
        self.traces: list[dict] = []

    async def curate(self, request):
        response = await self.inner.curate(request)
        if response.error:   # backend failure: the rollout is retried, not scored
            raise RolloutFailed(f"curator LLM failed: {response.error}")
        if self.llm is not None:
            sample = self.llm.samples[-1]
        else:
            t = response.tokens
            if not t.prompt_token_ids or t.completion_token_ids is None:
                raise RolloutFailed("remote curator returned no token ids (set SKILLOS_CURATOR_ASK_TOKEN_IDS)")
            sample = PolicySample(list(t.prompt_token_ids), list(t.completion_token_ids))
        self.samples.append(sample)
        ops: dict[str, int] = {}
        for call in response.calls:
            key = call.name if call.valid and call.name else "invalid"
            ops[key] = ops.get(key, 0) + 1
        unreadable = any(c.name is None for c in response.calls)
        decision = Decision(num_calls=len(response.calls), num_valid=sum(c.valid for c in response.calls),
                            parse_ok=not (unreadable and len(response.calls) == 1),
                            context_tokens=max(1, len(sample.prompt_ids)), op_counts=ops)
        decision.judge_score = await self._judge(response, request.trajectory.task)
        decision.repo_tokens = await self._repo_tokens()
        self.decisions.append(decision)
        self.traces.append(_trace(response, decision))
        return response

    async def _judge(self, response, task: str) -> float:
        ops = []
        for c in response.calls:
            if not c.applied or c.name not in ("new_skill_insert", "skill_update"):
                continue
            content = c.arguments.get("content") or c.arguments.get("new_content") or ""
            if content:
                ops.append(ContentOp(name=c.name, skill_name=str(c.arguments.get("skill_name", ""))[:200],
                                     content=content[:100_000]))
        if not ops or not self.ctx.content_judge:
            return 0.0       # nothing written: no content credit (see docs/training.md)
        result = await self.ctx.curator_client.judge_content(ContentJudgeRequest(ops=ops, task=task[:20_000]))
        return result.score

    async def _repo_tokens(self) -> int:
        skills = await self.ctx.repo_client.list_skills(self.repo)
        text = "\n".join(getattr(s, "content", "") or _skill_text(s) for s in skills)
        return len(self.ctx.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0


def _trace(response, decision: Decision) -> dict:
    """What one decision did, for the step's rollout log (why rewards tie or differ)."""
    readable = sum(1 for c in parse_curator_output(response.raw_completion, response.raw_tool_calls)
                   if c.error is None and c.name in OP_NAMES)
    return {"completion": (response.raw_completion or "")[:4000], "readable_calls": readable,
            "calls": [{"name": c.name, "valid": c.valid, "applied": c.applied, "reason": c.reason,
                       "arguments": {k: str(v)[:300] for k, v in (c.arguments or {}).items()}}
                      for c in response.calls],
            "parse_ok": decision.parse_ok, "judge": decision.judge_score,
            "repo_tokens": decision.repo_tokens, "context_tokens": decision.context_tokens}


def _skill_text(skill: Any) -> str:
    return "\n".join(str(getattr(skill, k, "") or "") for k in ("name", "description", "body"))


@dataclass
class RolloutContext:
    """Clients and knobs shared by every rollout of a run."""

    env: str
    executor: Any            # ExecutorLike (skillos.clients.executor.AsyncExecutorClient)
    repo_client: Any         # AsyncSkillRepoClient
    curator_client: Any      # AsyncCuratorClient (content judge; remote curate on GPU backends)
    curation: CurationOptions  # how the in-process decision asks the policy (`skillos.settings.CurationSettings`)
    tokenizer: Any
    batcher: GenerationBatcher | None
    run_id: str
    max_prompt_tokens: int
    lambdas: tuple[float, float, float]   # (λ_fc, λ_cnt, λ_comp): `TrainConfig.reward_weights()`
    top_k: int = 5
    max_turns: int = 30
    content_judge: bool = True
    self_judge: bool = True  # False: the curator reads the env's verdict (rollout.self_judge)
    seed_repo: str | None = None
    concurrency: asyncio.Semaphore | None = None
    model_name: str = "policy"
    grammars: Any = None     # GrammarCache for in-process constrained decoding (None: free text)


async def run_rollout(ctx: RolloutContext, group, n: int, step: int, attempt: int, seed: int) -> RolloutResult:
    repo = f"{ctx.run_id}-s{step}-{group.id}-r{n}-a{attempt}"[-128:].lstrip("-")
    start = time.perf_counter()
    if ctx.seed_repo:
        await ctx.repo_client.fork_repo(ctx.seed_repo, repo)
    else:
        await ctx.repo_client.create_repo(repo)
    try:
        llm = None
        if ctx.batcher is not None:
            llm = PolicyLLM(ctx.batcher, ctx.tokenizer, ctx.max_prompt_tokens, ctx.model_name, ctx.grammars)
            inner = InProcessCurator(llm, ctx.repo_client, ctx.curation)
        else:
            inner = _RemoteCurator(ctx.curator_client)
        curator = ScoringCurator(inner, ctx, repo, llm)
        tasks = [TaskSpec(id=t.id, type=t.type, instruction=t.instruction) for t in group.tasks]
        config = StreamConfig(env=ctx.env, method="skillos", repo=repo, k=ctx.top_k, max_turns=ctx.max_turns,
                              seed=seed, self_judge=ctx.self_judge)
        records = await run_stream(tasks, build_method(config.method), StreamContext(
            config, ctx.executor, curator=curator, repo=ctx.repo_client))
        for r in records:
            if r.error:
                raise RolloutFailed(f"task {r.position} ({r.task_id}): {r.error}")
            if r.curator_error:
                raise RolloutFailed(f"task {r.position} ({r.task_id}) curator: {r.curator_error}")
        if len(curator.decisions) != len(records):
            raise RolloutFailed(f"{len(curator.decisions)} curation decisions for {len(records)} tasks")
        successes = [bool(r.success) for r in records]
        reward = composite_reward(successes, curator.decisions, *ctx.lambdas)
        for s in curator.samples:
            s.group_id, s.rollout = group.id, n
        return RolloutResult(n, repo, successes, curator.decisions, curator.samples, reward, records,
                             time.perf_counter() - start, attempt + 1, traces=curator.traces)
    finally:
        try:
            await ctx.repo_client.delete_repo(repo)
        except Exception as e:  # noqa: BLE001 - a leftover repo is harmless; say so and go on
            log.warning("rollout_repo_not_deleted", repo=repo, error=str(e))


class InProcessCurator:
    """A curator whose decisions are sampled from the policy: `skillos.curation.curate` over `PolicyLLM`.
    (r_cnt still comes from the curator service's content judge, `ScoringCurator._judge`.)

    It speaks the curator service's wire (`CurateRequest` in, `CurateResponse` out) like the remote
    curator, so the stream and `ScoringCurator` read both alike; a request the core refuses
    (`skillos.curation.CurationRequestError`) fails the rollout."""

    def __init__(self, llm: ChatLLM, repo, options: CurationOptions):
        self.llm, self.repo, self.options = llm, repo, options

    async def curate(self, request: CurateRequest) -> CurateResponse:
        decision = await curate(request.to_decision_request(), llm=self.llm, repo=self.repo, options=self.options)
        return CurateResponse.from_decision(decision)


class _RemoteCurator:
    def __init__(self, client):
        self.client = client

    async def curate(self, request):
        request = request.model_copy(update={"logprobs": False})
        return await self.client.curate(request)


def _curator_credit(result: GroupResult) -> None:
    advantages = group_advantages([r.reward.total for r in result.rollouts])
    for r, a in zip(result.rollouts, advantages):
        r.advantage = a
        for s in r.samples:
            s.advantage = a


async def run_curator_group(ctx: RolloutContext, group, n_rollouts: int, step: int, retries: int,
                            seed: int) -> GroupResult:
    """`base.run_group` with curator rollouts and Eq. 1's reward, group-centred."""
    return await run_group(ctx, group, n_rollouts, step, retries, seed, rollout=run_rollout,
                           credit=_curator_credit)

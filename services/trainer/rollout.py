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
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from services.trainer.policy import GenerationBatcher, encode_prompt
from services.trainer.rewards import Decision, RewardParts, composite_reward, group_advantages
from skillos.curation import OP_NAMES, ChatLLM, CurationOptions, curate, parse_curator_output
from skillos.llm.client import ChatResult, Usage
from skillos.logging import get_logger
from skillos.methods import StreamContext, build_method
from skillos.methods.writer import PURPOSE
from skillos.protocol.curator import ContentJudgeRequest, ContentOp, CurateRequest, CurateResponse
from skillos.stream import TASK_POSITION, StreamConfig, TaskSpec, run_stream

log = get_logger("trainer.rollout")


@dataclass
class PolicySample:
    """One completion of the policy, the unit the loss is computed over: a curation decision, or in the
    agent mode one agent decision or one of a method's own calls (`segment`)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float = 0.0
    group_id: str = ""
    rollout: int = 0
    constraint: Any = None       # the SchemaConstraint it was sampled under (the loss replays it)
    segment: str = "curate"      # agent mode: act, query, rerank, distill, induce (`skillos.methods.writer.PURPOSE`)
    position: int = -1           # agent mode: the task of the group it belongs to
    episode: str | None = None   # agent mode, act: the episode it is a decision of


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


@dataclass
class GroupResult:
    group_id: str
    rollouts: list[RolloutResult] = field(default_factory=list)
    dropped: bool = False
    reason: str = ""


class RolloutFailed(Exception):
    pass


# The episode an agent decision belongs to (set by the agent mode's in-process executor, `agent.PolicyExecutor`).
EPISODE: ContextVar[str | None] = ContextVar("skillos_policy_episode", default=None)


class PolicyLLM:
    """The trainer's policy as a `skillos.curation.ChatLLM` (what the HTTP `LLMClient` is to the service)."""

    def __init__(self, batcher: GenerationBatcher, tokenizer, max_prompt_tokens: int, model_name: str,
                 grammars=None):
        self.batcher = batcher
        self.tokenizer = tokenizer
        self.grammars = grammars     # GrammarCache: honour response_format as llama.cpp does
        self.max_prompt_tokens = max_prompt_tokens
        self.model = model_name
        self.samples: list[PolicySample] = []
        self.truncated_prompts = 0

    async def chat(self, messages: list[dict], response_format: dict | None = None, max_tokens: int | None = None,
                   stop: list[str] | None = None, **_ignored: Any):
        # the temperature is the trainer's (the log-probs of the loss are taken at it), not the caller's;
        # max_tokens is honoured below the trainer's max_response_tokens
        prompt_ids, truncated = encode_prompt(self.tokenizer, messages, self.max_prompt_tokens)
        self.truncated_prompts += truncated
        constraint = self.grammars.for_response_format(response_format) if self.grammars else None
        start = time.perf_counter()
        ids = await self.batcher.generate(prompt_ids, constraint, max_tokens)
        stopped = False
        if stop and constraint is None:
            ids, stopped = cut_at_stop(self.tokenizer, ids, stop)
        self.samples.append(PolicySample(prompt_ids=prompt_ids, completion_ids=ids, constraint=constraint,
                                         segment=PURPOSE.get(), position=TASK_POSITION.get(),
                                         episode=EPISODE.get()))
        finished = stopped or (bool(ids) and ids[-1] == self.tokenizer.eos_token_id)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if stopped:      # as an OpenAI server answers: the stop sequence itself is not in the content
            text = text[:min(i for i in (text.find(s) for s in stop) if i >= 0)]
        return ChatResult(content=text, finish_reason="stop" if finished else "length",
                          usage=Usage(len(prompt_ids), len(ids)), latency_s=time.perf_counter() - start,
                          raw={"model": self.model})

    async def aclose(self) -> None:
        pass


def cut_at_stop(tokenizer, ids: list[int], stop: list[str]) -> tuple[list[int], bool]:
    """The shortest prefix of ``ids`` whose text contains a stop sequence (and whether there was one).
    Cutting after sampling is exact: the tokens kept were drawn from the same distributions as if the
    generation had stopped there, so their log-probs in the loss are the sampling ones."""
    stop = [s for s in stop if s]
    if not stop or not any(s in tokenizer.decode(ids, skip_special_tokens=True) for s in stop):
        return ids, False
    lo, hi = 1, len(ids)            # the text of a prefix only grows: binary search the first hit
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in tokenizer.decode(ids[:mid], skip_special_tokens=True) for s in stop):
            hi = mid
        else:
            lo = mid + 1
    return ids[:lo], True


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
                              seed=seed)
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


async def run_group(ctx, group, n_rollouts: int, step: int, retries: int, seed: int,
                    rollout=None, credit=None) -> GroupResult:
    """N rollouts of one group in parallel (bounded by ctx.concurrency); each retried on failure.
    A rollout that still fails drops the whole group: a group with a missing member would give
    the others a wrong baseline. ``rollout`` plays one (default: a curator rollout, `run_rollout`);
    ``credit`` sets the advantages of a complete group (default: Eq. 1's reward, group-centred)."""
    rollout = rollout or run_rollout
    result = GroupResult(group.id)

    async def one(n: int):
        last = ""
        for attempt in range(retries + 1):
            try:
                if ctx.concurrency is not None:
                    async with ctx.concurrency:
                        return await rollout(ctx, group, n, step, attempt, seed)
                return await rollout(ctx, group, n, step, attempt, seed)
            except RolloutFailed as e:
                last = str(e)
            except Exception as e:  # noqa: BLE001 - service errors (HTTP, repo) are rollout failures
                last = f"{type(e).__name__}: {e}"
            log.warning("rollout_failed", group=group.id, rollout=n, attempt=attempt, reason=last[:500])
        return last

    outcomes = await asyncio.gather(*(one(n) for n in range(n_rollouts)))
    failed = [(n, o) for n, o in enumerate(outcomes) if isinstance(o, str)]
    if failed:
        result.dropped = True
        result.reason = f"rollout {failed[0][0]} failed after {retries + 1} attempt(s): {failed[0][1][:300]}"
        log.warning("group_dropped", group=group.id, reason=result.reason)
        return result
    result.rollouts = [o for o in outcomes if not isinstance(o, str)]
    (credit or _curator_credit)(result)
    return result


def _curator_credit(result: GroupResult) -> None:
    advantages = group_advantages([r.reward.total for r in result.rollouts])
    for r, a in zip(result.rollouts, advantages):
        r.advantage = a
        for s in r.samples:
            s.advantage = a

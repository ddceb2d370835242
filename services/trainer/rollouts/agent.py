"""The agent-policy mode (`policy: agent`): GRPO of the agent that acts with skills in context, as
SkillRL, SAPO and Skill1 train it, over the same task groups, services and loss as the curator mode.

A rollout plays one task group with a method of `skillos run` (`skillos.methods`): the episodes run
through the executor's own logic (`skillos.acting.player.EpisodePlayer`, what the executor service
serves: prompts, parsing, env calls) in this process, with the policy as its LLM (`PolicyLLM`); the
methods that train their skill work with the same policy (Skill1's query, rerank and distillation,
SAPO's skill induction) call it too. Every completion is kept with its segment, task and episode, and `agent_rewards` gives it its
advantage. The method learns from the environment's verdict (training tasks have one).

Where the methods' libraries live:
- Skill1 and SAPO: along each rollout's task group (the group is the stream, as for SkillOS's curator),
  from `rollout.seed_repo` or empty;
- SkillRL: one bank for the whole run (`bank_name`) that every rollout forks and reads; after
  every `agent.evolve_every` steps it evolves from the trajectories the steps played, written by the
  teacher (the curator role's LLM; SkillRL's is a frontier model), as its Alg. 1 does between
  validation passes.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.trainer.grpo.sample import PolicySample
from services.trainer.rollouts.agent_rewards import SegmentWeights, TaskPlay, segment_advantages
from services.trainer.rollouts.base import EPISODE, GroupResult, PolicyLLM, RolloutFailed, run_group
from skillos.acting.options import PlayerOptions
from skillos.acting.player import EpisodePlayer
from skillos.clients.skillrepo import SkillRepoError
from skillos.logging import get_logger
from skillos.methods import StreamContext, build_method, method_class
from skillos.methods.bank import Bank
from skillos.stream import StreamConfig, TaskSpec, run_stream

log = get_logger("trainer.agent")

# methods whose own LLM calls are the policy's (the others' writer is the teacher)
POLICY_WRITES = {"sapo", "skill1"}
# what each method must do differently while it is trained (the rest of its parameters are the user's)
TRAINING_PARAMS: dict[str, dict[str, Any]] = {
    "skill1": {"distill": "always"},           # every rollout distils: a negative variation is credit too
    "skillrl": {"distill": False, "evolve_every": 10_000},   # the bank changes between steps only
}


def outcome(episode) -> float:
    """r of an episode: the environment's reward in [0, 1] (a win is 1)."""
    if episode.error:
        return 0.0
    return 1.0 if episode.success else max(0.0, min(1.0, float(episode.reward)))


class PolicyExecutor:
    """`ExecutorLike` in process: the executor's episodes (`EpisodePlayer`), driven by the policy. Each
    decision the policy samples is tagged with its episode (`EPISODE`) and each episode's outcome kept."""

    def __init__(self, player: EpisodePlayer, llm: PolicyLLM):
        self.player, self.llm = player, llm
        self.outcomes: dict[str, float] = {}      # episode key -> r, in play order

    async def episode(self, request):
        key = uuid.uuid4().hex[:12]
        token = EPISODE.set(key)
        try:
            response = await self.player.play(request)
        finally:
            EPISODE.reset(token)
        if response.error:       # the policy or an env failed: the rollout is retried, not scored
            raise RolloutFailed(f"episode {request.task_id}: {response.stop_reason}: {response.error}")
        self.outcomes[key] = outcome(response)
        return response

    async def judge(self, request):
        raise RolloutFailed("agent training learns from the environment's verdict: the stream runs with self_judge off")

    async def aclose(self) -> None:
        await self.player.aclose()


@dataclass
class AgentRolloutResult:
    rollout: int
    repo: str | None
    plays: list[TaskPlay]
    samples: list[PolicySample]
    records: list[Any]
    seconds: float
    attempts: int = 1
    trajectories: list[Any] = field(default_factory=list)   # SkillRL: the trajectory documents it recorded

    @property
    def successes(self) -> list[bool]:
        return [bool(r.success) for r in self.records]

    @property
    def outcome(self) -> float:
        """Mean r of the scored episodes (what the stream's report counts)."""
        scored = [p.episodes[p.scored] for p in self.plays if p.scored is not None]
        return sum(scored) / len(scored) if scored else 0.0

    def log_row(self) -> dict[str, Any]:
        return {"rollout": self.rollout, "outcome": self.outcome, "successes": self.successes,
                "tasks": [{"position": p.position, "episodes": list(p.episodes.values()),
                           "episode_keys": list(p.episodes),
                           "info": {k: v for k, v in p.info.items() if k != "writer_tokens"}} for p in self.plays],
                "samples": [{"segment": s.segment, "position": s.position, "episode": s.episode,
                             "advantage": s.advantage,
                             "completion_tokens": len(s.completion_ids)} for s in self.samples]}


@dataclass
class AgentContext:
    """What every agent rollout of a run shares."""
    env: str
    method: str
    params: dict[str, Any]
    player: PlayerOptions         # env servers and skill repo the episodes use, how the agent decides
    act_max_tokens: int
    repo_client: Any
    tokenizer: Any
    batcher: Any
    grammars: Any
    teacher: Any                  # the writer of the methods whose writing is not trained (SkillRL)
    run_id: str
    max_prompt_tokens: int
    weights: SegmentWeights
    top_k: int = 5
    max_turns: int = 30
    seed_repo: str | None = None  # each rollout's library starts as a fork of it
    concurrency: Any = None
    model_name: str = "policy"


class _ActLLM:
    """The policy as the executor's LLM: a decision is at most `act_max_tokens` long."""

    def __init__(self, llm: PolicyLLM, max_tokens: int):
        self.llm, self.max_tokens = llm, max_tokens

    async def chat(self, messages, max_tokens: int | None = None, **kw):
        return await self.llm.chat(messages, max_tokens=min(max_tokens or self.max_tokens, self.max_tokens), **kw)

    async def aclose(self) -> None:
        pass


async def run_agent_rollout(ctx: AgentContext, group, n: int, step: int, attempt: int, seed: int) -> AgentRolloutResult:
    cls = method_class(ctx.method)
    # 100: room for the companions' suffixes (`-trajectories`) under the repo name limit of 128
    repo = f"{ctx.run_id}-s{step}-{group.id}-r{n}-a{attempt}"[-100:].lstrip("-") if cls.uses_repo else None
    start = time.perf_counter()
    if repo is not None:
        if ctx.seed_repo:
            await ctx.repo_client.fork_repo(ctx.seed_repo, repo)
        else:
            await ctx.repo_client.create_repo(repo)
    llm = PolicyLLM(ctx.batcher, ctx.tokenizer, ctx.max_prompt_tokens, ctx.model_name, ctx.grammars)
    player = PolicyExecutor(EpisodePlayer(_ActLLM(llm, ctx.act_max_tokens), ctx.player), llm)
    try:
        tasks = [TaskSpec(id=t.id, type=t.type, instruction=t.instruction) for t in group.tasks]
        config = StreamConfig(env=ctx.env, method=ctx.method, repo=repo, k=ctx.top_k, max_turns=ctx.max_turns,
                              seed=seed, self_judge=False, run_id=ctx.run_id,
                              params={**ctx.params, **TRAINING_PARAMS.get(ctx.method, {})})
        writer = llm if ctx.method in POLICY_WRITES else ctx.teacher
        records = await run_stream(tasks, build_method(config.method, config.params),
                                   StreamContext(config, player, repo=ctx.repo_client, llm=writer))
        for r in records:
            if r.error:
                raise RolloutFailed(f"task {r.position} ({r.task_id}): {r.error}")
            if r.curator_error or r.method_info.get("round_error"):
                raise RolloutFailed(f"task {r.position} ({r.task_id}) {ctx.method}: "
                                    f"{r.curator_error or r.method_info['round_error']}")
        plays = _plays(records, llm.samples, player.outcomes)
        trajectories = []
        if ctx.method == "skillrl":
            trajectories = list((await Bank(ctx.repo_client, repo, ctx.method).companion("trajectories").skills()).values())
        for s in llm.samples:
            s.group_id, s.rollout = group.id, n
        return AgentRolloutResult(n, repo, plays, llm.samples, records, time.perf_counter() - start, attempt + 1,
                                  trajectories)
    finally:
        await player.aclose()
        if repo is not None:
            bank = Bank(ctx.repo_client, repo, ctx.method)
            for name in (repo, *(bank.companion(c).name for c in cls.companions)):
                try:
                    await ctx.repo_client.delete_repo(name)
                except Exception as e:  # noqa: BLE001 - a leftover repo is harmless; say so and go on
                    log.warning("rollout_repo_not_deleted", repo=name, error=str(e))


def _plays(records, samples: list[PolicySample], outcomes: dict[str, float]) -> list[TaskPlay]:
    plays = {r.position: TaskPlay(r.position, info=dict(r.method_info)) for r in records}
    for s in samples:     # episodes in the order their decisions were sampled, i.e. play order
        if s.episode is not None and s.episode in outcomes and s.position in plays:
            plays[s.position].episodes.setdefault(s.episode, outcomes[s.episode])
    return [plays[p] for p in sorted(plays)]


async def run_agent_group(ctx: AgentContext, group, n_rollouts: int, step: int, retries: int,
                          seed: int) -> GroupResult:
    """`base.run_group` with agent rollouts and per-segment credit."""
    return await run_group(ctx, group, n_rollouts, step, retries, seed, rollout=run_agent_rollout,
                           credit=lambda g: credit(g, ctx.weights))


def credit(group: GroupResult, weights: SegmentWeights) -> None:
    """Set every sample's advantage from its segment (`agent_rewards.segment_advantages`)."""
    adv = segment_advantages([r.plays for r in group.rollouts], weights)
    for r in group.rollouts:
        for s in r.samples:
            what = s.episode if s.segment == "act" else s.segment
            s.advantage = adv.get((r.rollout, s.position, what), 0.0)


def agent_signal(groups: list[GroupResult]) -> dict[str, Any]:
    """Is there anything to learn from? Per segment: samples and mean |A|; act groups whose outcomes differ."""
    count, magnitude = defaultdict(int), defaultdict(float)
    for g in groups:
        for r in g.rollouts:
            for s in r.samples:
                count[s.segment] += 1
                magnitude[s.segment] += abs(s.advantage)
    spread = []
    for g in groups:
        by_position = defaultdict(list)
        for r in g.rollouts:
            for p in r.plays:
                by_position[p.position].extend(p.episodes.values())
        spread += [max(v) > min(v) for v in by_position.values() if v]
    return {"segments": dict(sorted(count.items())),
            "adv_abs_mean": {k: magnitude[k] / count[k] for k in sorted(count)},
            "task_groups_with_signal_frac": sum(spread) / len(spread) if spread else 0.0}


def bank_name(output_dir) -> str:
    """SkillRL's bank of the run in ``output_dir``: its folder name, made a valid repo name, and a hash of
    the whole path (two runs in folders of the same name never share a bank)."""
    path = Path(output_dir).resolve()
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", path.name).strip("-._")[:60] or "run"
    return f"{stem}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}-skillrl-bank"


class SkillRLBank:
    """SkillRL's one bank of a training run (`<output dir>-skillrl-bank`, kept after the run: it is what
    training built, next to the checkpoint): every rollout forks it; it evolves between steps from the
    trajectories the rollouts recorded, by the method's own evolution round (`SkillRL.evolve`). A resumed
    run finds it and goes on with it."""

    def __init__(self, ctx: AgentContext, name: str, every: int):
        self.ctx, self.name, self.every = ctx, name, every
        # one round per call of `evolve`: the bank's rounds are counted in steps, not tasks
        self.method = build_method("skillrl", {**ctx.params, "evolve_every": 1})
        self.repos = [self.name, self.method.companion(self._stream(), "trajectories").name]

    def _stream(self):
        config = StreamConfig(env=self.ctx.env, method="skillrl", repo=self.name, run_id=self.ctx.run_id)
        return StreamContext(config, executor=None, repo=self.ctx.repo_client, llm=self.ctx.teacher)

    async def open(self, step: int) -> str:
        """The bank the rollouts fork from now on. A run that starts (``step`` 0) makes it afresh (a
        fork of `rollout.seed_repo` when given), replacing what an earlier run in the same output
        directory left; a resumed run goes on with it, its trajectories of steps after the checkpoint
        (to be played again) dropped."""
        exists = True
        try:
            await self.ctx.repo_client.get_repo(self.name)
        except SkillRepoError as e:
            if e.status != 404:
                raise
            exists = False
        if exists and step == 0:
            for name in self.repos:
                try:
                    await self.ctx.repo_client.delete_repo(name)
                except SkillRepoError as e:
                    if e.status != 404:
                        raise
            exists = False
        if not exists:
            if self.ctx.seed_repo:
                await self.ctx.repo_client.fork_repo(self.ctx.seed_repo, self.name)
            else:
                await self.ctx.repo_client.create_repo(self.name)
        stream = self._stream()
        await self.method.setup(stream)
        store = self.method.companion(stream, "trajectories")
        for t in (await store.skills()).values():
            if int(t.metadata.get("step", 0)) > step:
                await store.delete(t.name)
        self.ctx.seed_repo = self.name
        return self.name

    async def after_step(self, step: int, groups: list[GroupResult]) -> dict[str, Any] | None:
        """Record the step's trajectories in the bank's own record; every `every` steps, one round."""
        stream = self._stream()
        store = self.method.companion(stream, "trajectories")
        recorded = {int(t.metadata.get("position", -1)) for t in (await store.skills()).values()}
        position = max(recorded, default=-1) + 1
        for g in groups:
            for r in g.rollouts:
                for t in r.trajectories:
                    await store.write(f"t{position:06d}", t.description, t.body,
                                      {**t.metadata, "position": position, "step": step})
                    position += 1
        if step % self.every:
            return None
        bank = stream.bank("skillrl")
        report = await self.method.evolve(step // self.every - 1, stream, await bank.skills())
        report["bank"], report["bank_skills"] = self.name, len(await bank.skills())
        log.info("skillrl_bank_evolved", step=step, added=len(report["added"]), evolved=report["evolved"])
        return report

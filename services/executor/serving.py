"""The executor's logic: ReAct episodes over an env server, single decisions, self-judging.

Routes (api_router.py) only translate HTTP to these methods. What fails where:
- bad task / unknown repo (the env or skill repo answers 4xx) -> that 4xx to the caller;
- env server or skill repo unreachable before the episode starts -> 502;
- the LLM fails (down, 5xx, timeout, after the client's retries) during an episode -> the episode
  ends with ``success=false, stop_reason="llm_error"`` and the reason (200: the trajectory so far is
  data the caller wants); in /v1/act and /v1/judge -> 502 ``llm_unavailable``;
- the env fails mid-episode -> ``stop_reason="env_error"``, ``success=false``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Sequence

from prometheus_client import Counter, Histogram

from services.executor.settings import ExecutorSettings
from skillos.acting import episode as acting
from skillos.acting.options import ActingOptions
from skillos.acting.parse import parse_action
from skillos.acting.prompt import JUDGE_SCHEMA, agent_messages, avoided, judge_messages
from skillos.clients.envs import AsyncEnvClient, EnvError
from skillos.errors import APIError
from skillos.llm import ChatResult, LLMClient, LLMError, LLMSettings
from skillos.logging import get_logger
from skillos.protocol.executor import (
    ActRequest,
    ActResponse,
    EpisodeRequest,
    EpisodeResponse,
    JudgeRequest,
    JudgeResponse,
    RetrievedSkill,
    SkillText,
    Timing,
    TokenCount,
)
from skillos.protocol.skillrepo import SearchMode

log = get_logger("executor")

EPISODES = Counter("skillos_executor_episodes_total", "Episodes run", ["env", "stop_reason"])
TURNS = Counter("skillos_executor_turns_total", "Episode turns", ["env", "parse"])
EPISODE_SECONDS = Histogram("skillos_executor_episode_seconds", "Episode wall time", ["env"],
                            buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1200))
OVERHEAD_SECONDS = Histogram("skillos_executor_turn_overhead_seconds",
                             "Per-turn time not spent in the LLM or the env",
                             buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5))

_VERDICT = re.compile(r"verdict\s*[:：]?\s*\**\s*(success|failure|yes|no|true|false|correct|incorrect)", re.IGNORECASE)


def _tokens(results: Sequence[ChatResult]) -> TokenCount:
    p = sum(r.usage.prompt_tokens for r in results)
    c = sum(r.usage.completion_tokens for r in results)
    return TokenCount(prompt=p, completion=c, total=p + c)


_close_tags = acting.close_tags  # the tests' name for it


class _Session:
    """An open env session as `skillos.acting.episode.EnvSession`."""

    def __init__(self, client: AsyncEnvClient, session_id: str):
        self.client, self.session_id = client, session_id

    async def step(self, action: str):
        try:
            return await self.client.step(self.session_id, action)
        except EnvError as e:
            raise acting.EnvFailed(e.message) from e


def _env_error_to_api(e: EnvError, what: str) -> APIError:
    if e.status == 0 or e.status >= 500 or e.status == 421:  # 421: env replicas misconfigured, not the caller
        return APIError(502, "upstream_unavailable", f"{what}: {e.message}")
    if e.status == 429:
        return APIError(429, "too_many_requests", f"{what}: {e.message}",
                        headers={"Retry-After": str(int(e.retry_after or 1))})
    status = e.status if e.status in (400, 404, 409, 422) else 400
    return APIError(status, e.code, f"{what}: {e.message}", e.details)


def read_judgement(text: str) -> tuple[bool, bool, str]:
    """(success, parsed, reason) from a judge completion: the JSON verdict, else the text rule."""
    try:
        data = json.loads(text or "")
    except ValueError:
        data = None
    if isinstance(data, dict) and str(data.get("verdict", "")).upper() in ("SUCCESS", "FAILURE"):
        return data["verdict"].upper() == "SUCCESS", True, str(data.get("reason", ""))[:1000]
    success, parsed = parse_verdict(text)
    reason = _VERDICT.split(text)[0].strip()[:1000] if parsed else (text or "").strip()[:1000]
    return success, parsed, reason


def parse_verdict(text: str) -> tuple[bool, bool]:
    """(success, parsed) from a judge completion; an unreadable verdict counts as failure."""
    found = _VERDICT.findall(text or "")
    if found:
        return found[-1].lower() in ("success", "yes", "true", "correct"), True
    low = (text or "").lower()
    pos = bool(re.search(r"\b(succeeded|successful|success|accomplished)\b", low))
    neg = bool(re.search(r"\b(fail|failed|failure|not accomplished|unsuccessful)\b", low))
    if pos != neg:
        return pos, True
    return False, False


class SkillSource:
    """Top-k skills from the skill repo service."""

    def __init__(self, base_url: str, token: str | None, timeout: float):
        from skillos.clients.skillrepo import AsyncSkillRepoClient

        self._client = AsyncSkillRepoClient(base_url, token=token or None, timeout=timeout)

    async def search(self, repo: str, query: str, k: int, mode: SearchMode = "bm25") -> list[RetrievedSkill]:
        hits = await self._client.search(repo, query, k, mode)
        return [RetrievedSkill(name=h.name, description=h.description, version=h.version, score=h.score,
                               body=h.body) for h in hits]

    async def aclose(self) -> None:
        await self._client.aclose()


class Executor:
    """``llm``: any `ChatLLM`-like backend in place of the HTTP client of the executor role (the trainer's
    agent-policy mode drives these episodes with the policy it trains)."""

    def __init__(self, settings: ExecutorSettings, llm_settings: LLMSettings | None = None, llm=None):
        self.settings = settings
        self.llm = llm if llm is not None else LLMClient(llm_settings or LLMSettings.for_role("executor"))
        self._envs: dict[str, AsyncEnvClient] = {}
        self._skills: SkillSource | None = None
        self._slots = asyncio.Semaphore(settings.executor_max_concurrent_episodes)
        self.action_format = settings.executor_action_format

    def _decision_format(self, admissible: list[str] | None, avoid: list[str] = ()) -> dict:
        return acting.decision_format(self.action_format, admissible, avoid)

    def acting_options(self, requested: ActingOptions | None) -> ActingOptions:
        if requested is not None:
            return requested
        s = self.settings
        return ActingOptions(state_line=s.executor_state_line, hold_back=s.executor_hold_back,
                             demos=s.executor_demos, demos_per_type=s.executor_demos_per_type)

    async def aclose(self) -> None:
        await self.llm.aclose()
        for c in self._envs.values():
            await c.aclose()
        if self._skills is not None:
            await self._skills.aclose()

    def env(self, name: str) -> AsyncEnvClient:
        if name not in self._envs:
            self._envs[name] = AsyncEnvClient(self.settings.env_url(name), token=self.settings.api_token or None,
                                              timeout=self.settings.executor_upstream_timeout_s)
        return self._envs[name]

    async def skills_for(self, query: str, repo: str | None, inline: list[SkillText] | None,
                         k: int, mode: SearchMode = "bm25") -> list[RetrievedSkill]:
        if inline is not None:
            return [RetrievedSkill(name=s.name, description=s.description, version=s.version, body=s.body)
                    for s in inline[:k]]
        if repo is None or k == 0:
            return []
        if self._skills is None:
            self._skills = SkillSource(self.settings.skillrepo_url, self.settings.api_token,
                                       self.settings.executor_upstream_timeout_s)
        from skillos.clients.skillrepo import SkillRepoError

        try:
            return await self._skills.search(repo, query, k, mode)
        except SkillRepoError as e:
            if 400 <= e.status < 500:
                raise APIError(e.status if e.status in (404, 422) else 400, e.code,
                               f"skill repo: {e.message}") from e
            raise APIError(502, "upstream_unavailable", f"skill repo: {e.message}") from e

    # ---------------------------------------------------------------- episodes
    async def run_episode(self, req: EpisodeRequest) -> EpisodeResponse:
        async with self._slots:
            return await self._episode(req)

    async def _episode(self, req: EpisodeRequest) -> EpisodeResponse:
        start = time.perf_counter()
        env = self.env(req.env)
        env_s = 0.0
        try:
            t = time.perf_counter()
            created = await env.create_session(task_id=req.task_id, split=req.split, index=req.index,
                                               seed=req.seed)
            env_s += time.perf_counter() - t
        except EnvError as e:
            raise _env_error_to_api(e, f"{req.env} env at {env.base_url}") from e
        try:
            t = time.perf_counter()
            skills = await self.skills_for(created.task.instruction, req.repo, req.skills, req.k, req.retrieval)
            retrieval_s = time.perf_counter() - t
            if req.env == "reasoning":
                resp = await self._reasoning(req, created, skills)
            else:
                resp = await self._react(req, created, skills)
        finally:
            t = time.perf_counter()
            try:
                await env.close_session(created.session_id)
            except EnvError:
                pass  # a finished session may already be gone; the env reaps idle ones anyway
            env_s += time.perf_counter() - t
        timing = resp.timing
        timing.env_s += env_s
        timing.retrieval_s = retrieval_s
        timing.total_s = time.perf_counter() - start
        timing.overhead_s = max(0.0, timing.total_s - timing.llm_s - timing.env_s - timing.retrieval_s)
        if resp.steps:
            OVERHEAD_SECONDS.observe(timing.overhead_s / resp.steps)
        EPISODES.labels(req.env, resp.stop_reason).inc()
        EPISODE_SECONDS.labels(req.env).observe(timing.total_s)
        log.info("episode", env=req.env, task_id=resp.task_id, success=resp.success, steps=resp.steps,
                 stop_reason=resp.stop_reason, seconds=round(timing.total_s, 2))
        return resp

    def _response(self, req, created, skills, turns, results, *, success, reward, stop_reason, error,
                  llm_s, env_s, final_answer="") -> EpisodeResponse:
        return EpisodeResponse(
            episode_id=uuid.uuid4().hex, env=req.env, task_id=created.task.id, task_type=created.task.type,
            instruction=created.task.instruction, repo=req.repo, success=success and stop_reason == "won",
            reward=reward, steps=len(turns), stop_reason=stop_reason, error=error, final_answer=final_answer,
            turns=turns, skills=skills, tokens=_tokens(results), timing=Timing(llm_s=llm_s, env_s=env_s),
            invalid_actions=sum(1 for t in turns if not t.valid))

    async def _react(self, req: EpisodeRequest, created, skills: list[RetrievedSkill]) -> EpisodeResponse:
        out = await acting.react(
            self.llm, _Session(self.env(req.env), created.session_id), env_name=req.env,
            task=created.task.instruction, task_type=created.task.type, task_id=created.task.id,
            observation=created.observation,
            admissible=created.admissible_actions, skills=skills, max_turns=req.max_turns,
            history_len=req.history_len, sampling=req.sampling, seed=req.seed, action_format=self.action_format,
            options=self.acting_options(req.acting),
            on_turn=lambda turn: TURNS.labels(req.env, turn.parse).inc())
        return self._response(req, created, skills, out.turns, out.results, success=out.won, reward=out.reward,
                              stop_reason=out.stop_reason, error=out.error, llm_s=out.llm_s, env_s=out.env_s)

    async def _reasoning(self, req: EpisodeRequest, created, skills: list[RetrievedSkill]) -> EpisodeResponse:
        out = await acting.reason(self.llm, _Session(self.env(req.env), created.session_id),
                                  problem=created.observation, skills=skills, sampling=req.sampling,
                                  max_tokens=req.sampling.max_tokens or self.settings.executor_reasoning_max_tokens,
                                  seed=req.seed)
        return self._response(req, created, skills, out.turns, out.results, success=out.won, reward=out.reward,
                              stop_reason=out.stop_reason, error=out.error, llm_s=out.llm_s, env_s=out.env_s,
                              final_answer=out.final_answer)

    # ---------------------------------------------------------------- single decisions
    async def act(self, req: ActRequest) -> ActResponse:
        skills = await self.skills_for(req.task, req.repo, req.skills, req.k, req.retrieval)
        history = [(h.observation, h.action, h.thought) for h in req.history]
        opts = self.acting_options(req.acting)
        avoid = avoided(req.env, req.task, history, req.observation, req.admissible_actions,
                        req.first_observation, req.first_admissible_actions, opts)
        messages = agent_messages(req.env, req.task, req.observation, skills=skills, history=history,
                                  history_len=req.history_len, admissible=req.admissible_actions, avoid=avoid,
                                  first_observation=req.first_observation,
                                  first_admissible=req.first_admissible_actions,
                                  action_format=self.action_format, options=opts, task_type=req.task_type,
                                  task_id=req.task_id)
        res = await self._chat_or_502(messages, req.sampling, req.seed,
                                      **self._decision_format(req.admissible_actions, avoid))
        parsed = parse_action(_close_tags(res.content), req.admissible_actions)
        return ActResponse(action=parsed.action, thought=parsed.thought, raw_action=parsed.raw_action,
                           valid=parsed.valid, parse=parsed.parse, skills=skills, tokens=_tokens([res]),
                           latency_s=res.latency_s, completion=res.content)

    async def judge(self, req: JudgeRequest) -> JudgeResponse:
        turns = [(t.observation, t.action) for t in req.turns]
        json_mode = self.action_format == "json"
        messages = judge_messages(req.env, req.task, turns, req.final_answer, ended_by_env=req.ended_by_env,
                                  max_turns=req.max_turns, output_format="json" if json_mode else "text")
        sampling = req.sampling
        temperature = 0.0 if sampling.temperature is None else sampling.temperature
        fmt = {"response_format": {"type": "json_schema", "json_schema": {"name": "verdict", "schema": JUDGE_SCHEMA}}
               } if json_mode else {}
        res = await self._chat_or_502(messages, sampling.model_copy(update={"temperature": temperature}), req.seed,
                                      **fmt)
        success, parsed, reason = read_judgement(res.content)
        return JudgeResponse(success=success, parsed=parsed, reason=reason, completion=res.content,
                             tokens=_tokens([res]), latency_s=res.latency_s)

    async def _chat_or_502(self, messages, sampling, seed, stop=None, response_format=None) -> ChatResult:
        try:
            return await self.llm.chat(messages, temperature=sampling.temperature, top_p=sampling.top_p,
                                       max_tokens=sampling.max_tokens, seed=seed, stop=stop,
                                       response_format=response_format)
        except LLMError as e:
            raise APIError(502, "llm_unavailable", e.describe(), {"kind": e.kind, "status": e.status}) from e

"""Episodes played in process: an `EpisodeRequest` in, an `EpisodeResponse` out, over any `ChatLLM`.

The player opens the env session, retrieves the skills (top k from the skill repo, or those given
inline), plays `episode.react` (ALFWorld, WebShop) or `episode.reason` (single-turn reasoning) and
closes the session. The executor service serves it over HTTP (with its metrics, concurrency limit and
HTTP errors around it); the trainer's agent-policy mode plays it with the policy it trains. One
implementation of an episode for both.

What fails where: an env session that cannot be opened raises `EnvError`, a skill repo that refuses
or cannot be reached raises `SkillRepoError` (the caller maps them: the executor service to 4xx/502);
once the episode runs, the LLM's and the env's failures end it (``llm_error``, ``env_error``) and the
trajectory so far comes back.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence

from skillos.acting import episode as acting
from skillos.acting.options import ActingOptions, PlayerOptions
from skillos.clients.envs import AsyncEnvClient, EnvError
from skillos.clients.skillrepo import AsyncSkillRepoClient
from skillos.llm import ChatResult
from skillos.protocol.executor import (
    EpisodeRequest,
    EpisodeResponse,
    RetrievedSkill,
    SkillText,
    Timing,
    TokenCount,
    Turn,
)
from skillos.protocol.skillrepo import SearchMode


def token_count(results: Sequence[ChatResult]) -> TokenCount:
    p = sum(r.usage.prompt_tokens for r in results)
    c = sum(r.usage.completion_tokens for r in results)
    return TokenCount(prompt=p, completion=c, total=p + c)


LOST_SESSION = (0, 404, 410, 421)


class EnvSessionOverHTTP:
    """An open session of an env server as `skillos.acting.episode.EnvSession`."""

    def __init__(self, client: AsyncEnvClient, session_id: str):
        self.client, self.session_id = client, session_id

    async def step(self, action: str):
        try:
            return await self.client.step(self.session_id, action)
        except EnvError as e:
            # unreachable (0), unknown (404), crashed and closed (410) or held by a replica that is gone (421):
            # the session cannot go on anywhere
            raise acting.EnvFailed(e.message, lost=e.status in LOST_SESSION) from e


class SkillSource:
    """Top-k skills from the skill repo service."""

    def __init__(self, base_url: str, token: str | None, timeout: float):
        self._client = AsyncSkillRepoClient(base_url, token=token or None, timeout=timeout)

    async def search(self, repo: str, query: str, k: int, mode: SearchMode = "bm25") -> list[RetrievedSkill]:
        hits = await self._client.search(repo, query, k, mode)
        return [RetrievedSkill(name=h.name, description=h.description, version=h.version, score=h.score,
                               body=h.body, examples=getattr(h, "examples", None) or []) for h in hits]

    async def aclose(self) -> None:
        await self._client.aclose()


class EpisodePlayer:
    """Plays episodes with ``llm`` (any `ChatLLM`: the HTTP client of the executor role, the trainer's
    policy) against the env servers and the skill repo of ``options``."""

    def __init__(self, llm, options: PlayerOptions):
        self.llm, self.options = llm, options
        self.action_format = options.action_format
        self._envs: dict[str, AsyncEnvClient] = {}
        self._skills: SkillSource | None = None

    def acting_options(self, requested: ActingOptions | None) -> ActingOptions:
        """How to decide: the request's options, else the player's defaults."""
        return requested if requested is not None else self.options.acting

    def env(self, name: str) -> AsyncEnvClient:
        if name not in self._envs:
            self._envs[name] = AsyncEnvClient(self.options.env_urls[name], token=self.options.api_token or None,
                                              timeout=self.options.timeout_s)
        return self._envs[name]

    async def retrieve(self, query: str, repo: str | None, inline: list[SkillText] | None,
                       k: int, mode: SearchMode = "bm25") -> list[RetrievedSkill]:
        """The first ``k`` of the skills given inline, else the top ``k`` of ``repo`` for ``query``
        (raises `SkillRepoError`)."""
        if inline is not None:
            return [RetrievedSkill(name=s.name, description=s.description, version=s.version, body=s.body,
                                   examples=s.examples) for s in inline[:k]]
        if repo is None or k == 0:
            return []
        if self._skills is None:
            self._skills = SkillSource(self.options.skillrepo_url, self.options.api_token, self.options.timeout_s)
        return await self._skills.search(repo, query, k, mode)

    async def aclose(self) -> None:
        await self.llm.aclose()
        for c in self._envs.values():
            await c.aclose()
        if self._skills is not None:
            await self._skills.aclose()

    async def play(self, req: EpisodeRequest, on_turn: Callable[[Turn], None] | None = None) -> EpisodeResponse:
        """One episode; ``on_turn(turn)`` is called after each ReAct turn."""
        start = time.perf_counter()
        env = self.env(req.env)
        env_s = 0.0
        t = time.perf_counter()
        created = await env.create_session(task_id=req.task_id, split=req.split, index=req.index, seed=req.seed)
        env_s += time.perf_counter() - t
        try:
            t = time.perf_counter()
            skills = await self.retrieve(created.task.instruction, req.repo, req.skills, req.k, req.retrieval)
            retrieval_s = time.perf_counter() - t
            session = EnvSessionOverHTTP(env, created.session_id)
            if req.env == "reasoning":
                out = await acting.reason(
                    self.llm, session, problem=created.observation, skills=skills, sampling=req.sampling,
                    max_tokens=req.sampling.max_tokens or self.options.reasoning_max_tokens, seed=req.seed,
                    options=self.acting_options(req.acting))
            else:
                out = await acting.react(
                    self.llm, session, env_name=req.env, task=created.task.instruction,
                    task_type=created.task.type, task_id=created.task.id, observation=created.observation,
                    admissible=created.admissible_actions, skills=skills, max_turns=req.max_turns,
                    history_len=req.history_len, sampling=req.sampling, seed=req.seed,
                    action_format=self.action_format, options=self.acting_options(req.acting), on_turn=on_turn)
        finally:
            t = time.perf_counter()
            try:
                await env.close_session(created.session_id)
            except EnvError:
                pass  # a finished session may already be gone; the env reaps idle ones anyway
            env_s += time.perf_counter() - t
        resp = EpisodeResponse(
            episode_id=uuid.uuid4().hex, env=req.env, task_id=created.task.id, task_type=created.task.type,
            instruction=created.task.instruction, repo=req.repo, success=out.won and out.stop_reason == "won",
            reward=out.reward, steps=len(out.turns), stop_reason=out.stop_reason, error=out.error,
            final_answer=out.final_answer, turns=out.turns, skills=skills, examples_shown=out.examples,
            tokens=token_count(out.results),
            timing=Timing(llm_s=out.llm_s, env_s=out.env_s), invalid_actions=sum(1 for t in out.turns if not t.valid))
        timing = resp.timing
        timing.env_s += env_s
        timing.retrieval_s = retrieval_s
        timing.total_s = time.perf_counter() - start
        timing.overhead_s = max(0.0, timing.total_s - timing.llm_s - timing.env_s - timing.retrieval_s)
        return resp

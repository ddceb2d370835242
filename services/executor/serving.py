"""The executor service's logic: episodes (`skillos.acting.player`), single decisions, self-judging.

Routes (api_router.py) only translate HTTP to these methods. What fails where:
- bad task / unknown repo (the env or skill repo answers 4xx) -> that 4xx to the caller;
- env server or skill repo unreachable before the episode starts -> 502;
- the LLM fails (down, 5xx, timeout, after the client's retries) during an episode -> the episode
  ends with ``success=false, stop_reason="llm_error"`` and the reason (200: the trajectory so far is
  data the caller wants); in /v1/act and /v1/judge -> 502 ``llm_unavailable``; a prompt longer than the LLM's
  context is shortened from its oldest past steps (`skillos.acting.episode.ask_fitting`: episodes and /v1/act),
  and when it cannot be (or in /v1/judge, which shows the whole trajectory) -> 400 ``context_exceeded``;
  more single calls (/v1/act, /v1/judge, the gateway) than the backend should hold at once wait their turn,
  then -> 429 ``overloaded`` with Retry-After (`services.executor.admission`);
- a token that already holds its share of those calls (SKILLOS_EXECUTOR_MAX_CALLS_PER_CALLER, counted with its
  gateway calls) or of the episode slots (SKILLOS_EXECUTOR_MAX_EPISODES_PER_CALLER) -> 429 ``too_many_requests``
  with Retry-After at once (`caller_of`: an operator's token, the services' own, has no share);
- the env fails mid-episode -> ``stop_reason="env_error"``, ``success=false``.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from contextlib import asynccontextmanager
from functools import partial

from prometheus_client import Counter, Histogram

from services.executor.admission import Admission, CallerBusy, Overloaded, Shares
from services.executor.settings import ExecutorSettings
from skillos.acting import episode as acting
from skillos.acting.options import ActingOptions
from skillos.acting.parse import parse_action
from skillos.acting.player import EpisodePlayer, token_count
from skillos.acting.prompt import JUDGE_SCHEMA, agent_messages, avoided, judge_messages
from skillos.auth import Grant
from skillos.clients.envs import AsyncEnvClient, EnvError
from skillos.clients.skillrepo import SkillRepoError
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
)
from skillos.protocol.skillrepo import SearchMode

log = get_logger("executor")

EPISODES = Counter("skillos_executor_episodes_total", "Episodes run", ["env", "stop_reason"])
TURNS = Counter("skillos_executor_turns_total", "Episode turns", ["env", "parse"])
EPISODE_SECONDS = Histogram("skillos_executor_episode_seconds", "Episode wall time", ["env"],
                            buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1200))
REFUSED = Counter("skillos_executor_episodes_refused_total",
                  "episodes answered 429: the caller's token held its share of the slots")
OVERHEAD_SECONDS = Histogram("skillos_executor_turn_overhead_seconds",
                             "Per-turn time not spent in the LLM or the env",
                             buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5))

_VERDICT = re.compile(r"verdict\s*[:：]?\s*\**\s*(success|failure|yes|no|true|false|correct|incorrect)", re.IGNORECASE)


_close_tags = acting.close_tags  # the tests' name for it


def _env_error_to_api(e: EnvError, what: str) -> APIError:
    if e.status == 0 or e.status >= 500 or e.status == 421:  # 421: env replicas misconfigured, not the caller
        return APIError(502, "upstream_unavailable", f"{what}: {e.message}")
    if e.status == 429:
        return APIError(429, "too_many_requests", f"{what}: {e.message}",
                        headers={"Retry-After": str(int(e.retry_after or 1))})
    status = e.status if e.status in (400, 404, 409, 422) else 400
    return APIError(status, e.code, f"{what}: {e.message}", e.details)


CONTEXT_ADVICE = {
    "act": "even with only the last past step shown; shorten the observation, the task or the skills (or fewer: "
           "k), or ask for fewer sampling.max_tokens",
    "judge": "; send fewer or shorter turns, a shorter final answer, or fewer sampling.max_tokens",
}


def _llm_error_to_api(e: LLMError, what: str = "act") -> APIError:
    if e.context_exceeded:   # the request's own text is too long: retrying cannot help, the caller can
        return APIError(400, "context_exceeded", f"the prompt is longer than the LLM's context {CONTEXT_ADVICE[what]}. "
                        + e.describe(), {"kind": e.kind, "status": e.status})
    return APIError(502, "llm_unavailable", e.describe(), {"kind": e.kind, "status": e.status})


def _repo_error_to_api(e: SkillRepoError) -> APIError:
    if 400 <= e.status < 500:
        return APIError(e.status if e.status in (404, 422) else 400, e.code, f"skill repo: {e.message}")
    return APIError(502, "upstream_unavailable", f"skill repo: {e.message}")


def caller_of(grant: Grant | None) -> str | None:
    """Whom a call counts against (`services.executor.admission.Shares`): the token's digest (`Grant.caller_id`;
    labels may repeat across replicas' configs, digests do not); None, not counted, for an operator's token (rw
    without a prefix: the services' own, which `skillos run`, the trainer and the curator send, and open mode's
    one caller) and for the executor's own work (the gateway's self-judge at expiry). Why operators have no
    share: their runs' concurrency is their own setting (`skillos run`'s 4 episodes at once, the trainer's
    rollouts), a share would slow the paper's runs for nothing, and such a token reaches every repo and
    trajectory already, so holding every turn gives it nothing it lacks; the global bounds still hold it."""
    if grant is None or grant.operator:
        return None
    return grant.caller_id


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


class Executor:
    """The episodes are `skillos.acting.player.EpisodePlayer`'s (the trainer's agent-policy mode plays the
    same with its policy); the service adds the concurrency limit, the metrics and the HTTP errors.
    ``llm``: any `ChatLLM`-like backend in place of the HTTP client of the executor role."""

    def __init__(self, settings: ExecutorSettings, llm_settings: LLMSettings | None = None, llm=None):
        self.settings = settings
        llm_settings = llm_settings or LLMSettings.for_role("executor")
        llm = llm if llm is not None else LLMClient(llm_settings)
        self.player = EpisodePlayer(llm, settings.player_options())
        self._slots = asyncio.Semaphore(settings.executor_max_concurrent_episodes)
        # /v1/act, /v1/judge and the gateway's calls share one bound on what is at the backend; it shrinks while
        # calls take more than half the LLM timeout (a call that would time out is a 502)
        self.admission = Admission(settings.executor_max_llm_calls, settings.executor_llm_queue_s,
                                   target_s=settings.executor_llm_target_s or llm_settings.timeout_s / 2)
        # what each token holds of the episode slots (running or waiting for one); its calls' share is admission's
        self._episode_shares = Shares("episodes running or waiting for a slot")
        self._episode_s = 30.0   # a moving average of an episode's wall time: a full share's Retry-After

    @property
    def llm(self):
        return self.player.llm

    @property
    def action_format(self) -> str:
        return self.player.action_format

    def _decision_format(self, admissible: list[str] | None, avoid: list[str] = ()) -> dict:
        return acting.decision_format(self.action_format, admissible, avoid)

    def acting_options(self, requested: ActingOptions | None) -> ActingOptions:
        return self.player.acting_options(requested)

    async def aclose(self) -> None:
        await self.player.aclose()

    def env(self, name: str) -> AsyncEnvClient:
        return self.player.env(name)

    async def skills_for(self, query: str, repo: str | None, inline: list[SkillText] | None,
                         k: int, mode: SearchMode = "bm25") -> list[RetrievedSkill]:
        try:
            return await self.player.retrieve(query, repo, inline, k, mode)
        except SkillRepoError as e:
            raise _repo_error_to_api(e) from e

    # ---------------------------------------------------------------- episodes
    @asynccontextmanager
    async def _episode_share(self, grant: Grant | None):
        """The caller's share of the episode slots for the block (429 at once when it holds its share)."""
        try:
            caller = self._episode_shares.take(caller_of(grant), self.settings.executor_max_episodes_per_caller,
                                               max(1, min(60, math.ceil(self._episode_s))))
        except CallerBusy as e:
            REFUSED.inc()
            raise e.api_error("SKILLOS_EXECUTOR_MAX_EPISODES_PER_CALLER") from None
        try:
            yield
        finally:
            self._episode_shares.give_back(caller)

    async def run_episode(self, req: EpisodeRequest, grant: Grant | None = None) -> EpisodeResponse:
        """``grant``: the caller's, whose share of the episode slots this one takes (`caller_of`)."""
        async with self._episode_share(grant), self._slots:
            started = time.perf_counter()
            try:
                resp = await self.player.play(req, on_turn=lambda turn: TURNS.labels(req.env, turn.parse).inc())
            except EnvError as e:  # the session could not be opened
                raise _env_error_to_api(e, f"{req.env} env at {self.env(req.env).base_url}") from e
            except SkillRepoError as e:
                raise _repo_error_to_api(e) from e
            self._episode_s = 0.9 * self._episode_s + 0.1 * (time.perf_counter() - started)
        timing = resp.timing
        if resp.steps:
            OVERHEAD_SECONDS.observe(timing.overhead_s / resp.steps)
        EPISODES.labels(req.env, resp.stop_reason).inc()
        EPISODE_SECONDS.labels(req.env).observe(timing.total_s)
        log.info("episode", env=req.env, task_id=resp.task_id, success=resp.success, steps=resp.steps,
                 stop_reason=resp.stop_reason, seconds=round(timing.total_s, 2))
        return resp

    # ---------------------------------------------------------------- single decisions
    async def act(self, req: ActRequest, grant: Grant | None = None) -> ActResponse:
        """``grant``: the caller's, whose share of the LLM turns this call takes (`caller_of`)."""
        skills = await self.skills_for(req.task, req.repo, req.skills, req.k, req.retrieval)
        history = [(h.observation, h.action, h.thought) for h in req.history]
        opts = self.acting_options(req.acting)
        avoid = avoided(req.env, req.task, history, req.observation, req.admissible_actions,
                        req.first_observation, req.first_admissible_actions, opts)
        messages_for = partial(agent_messages, req.env, req.task, req.observation, skills=skills, history=history,
                               history_len=req.history_len, admissible=req.admissible_actions, avoid=avoid,
                               first_observation=req.first_observation,
                               first_admissible=req.first_admissible_actions,
                               action_format=self.action_format, options=opts, task_type=req.task_type,
                               task_id=req.task_id)
        try:   # a history longer than the context is shortened from its oldest steps, as in an episode
            async with self.admission.turn("act", caller_of(grant), self.settings.executor_max_calls_per_caller):
                res, _ = await acting.ask_fitting(
                    self.llm, messages_for, past=len(history), history_len=req.history_len,
                    temperature=req.sampling.temperature, top_p=req.sampling.top_p,
                    max_tokens=req.sampling.max_tokens, seed=req.seed,
                    **self._decision_format(req.admissible_actions, avoid))
        except LLMError as e:
            raise _llm_error_to_api(e) from e
        except Overloaded as e:
            raise e.api_error() from None
        except CallerBusy as e:
            raise e.api_error("SKILLOS_EXECUTOR_MAX_CALLS_PER_CALLER") from None
        parsed = parse_action(_close_tags(res.content), req.admissible_actions)
        return ActResponse(action=parsed.action, thought=parsed.thought, raw_action=parsed.raw_action,
                           valid=parsed.valid, parse=parsed.parse, skills=skills, tokens=token_count([res]),
                           latency_s=res.latency_s, completion=res.content)

    async def judge(self, req: JudgeRequest, grant: Grant | None = None) -> JudgeResponse:
        """``grant``: the caller's (`caller_of`); None for the executor's own work (the gateway's self-judge)."""
        turns = [(t.observation, t.action) for t in req.turns]
        json_mode = self.action_format == "json"
        messages = judge_messages(req.env, req.task, turns, req.final_answer, ended_by_env=req.ended_by_env,
                                  max_turns=req.max_turns, output_format="json" if json_mode else "text")
        sampling = req.sampling
        temperature = 0.0 if sampling.temperature is None else sampling.temperature
        fmt = {"response_format": {"type": "json_schema", "json_schema": {"name": "verdict", "schema": JUDGE_SCHEMA}}
               } if json_mode else {}
        res = await self._chat_or_502(messages, sampling.model_copy(update={"temperature": temperature}), req.seed,
                                      caller=caller_of(grant), **fmt)
        success, parsed, reason = read_judgement(res.content)
        return JudgeResponse(success=success, parsed=parsed, reason=reason, completion=res.content,
                             tokens=token_count([res]), latency_s=res.latency_s)

    async def _chat_or_502(self, messages, sampling, seed, stop=None, response_format=None,
                           caller: str | None = None) -> ChatResult:
        try:
            async with self.admission.turn("judge", caller, self.settings.executor_max_calls_per_caller):
                return await self.llm.chat(messages, temperature=sampling.temperature, top_p=sampling.top_p,
                                           max_tokens=sampling.max_tokens, seed=seed, stop=stop,
                                           response_format=response_format)
        except LLMError as e:
            raise _llm_error_to_api(e, "judge") from e
        except Overloaded as e:
            raise e.api_error() from None
        except CallerBusy as e:
            raise e.api_error("SKILLOS_EXECUTOR_MAX_CALLS_PER_CALLER") from None

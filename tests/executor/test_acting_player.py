"""The in-process episode player (`skillos.acting.player`), the one implementation of an episode that the
executor service serves and the trainer's agent mode plays with its policy: against a real reasoning env
server (no LLM: a scripted `ChatLLM` answers)."""

from __future__ import annotations

import asyncio

import pytest

from services.executor.serving import Executor
from services.executor.settings import ExecutorSettings
from services.trainer.rollouts.agent import PolicyExecutor
from services.trainer.rollouts.base import RolloutFailed
from skillos.acting.options import PlayerOptions
from skillos.acting.player import EpisodePlayer
from skillos.clients.envs import EnvError
from skillos.errors import APIError
from skillos.llm.client import ChatResult, LLMError, Usage
from skillos.protocol.executor import EpisodeRequest, SkillText
from skillos.settings import ActingSettings
from tests.conftest import free_port, run_service


@pytest.fixture(scope="module")
def reasoning(tmp_path_factory):
    with run_service(["reasoning"], tmp_path=tmp_path_factory.mktemp("reasoning")) as svc:
        yield svc.url


class Scripted:
    """A `ChatLLM` that answers in order and keeps what it was asked."""

    def __init__(self, *answers: str):
        self.answers, self.calls, self.closed = list(answers), [], False

    async def chat(self, messages, **kw):
        self.calls.append((messages, kw))
        return ChatResult(content=self.answers.pop(0), usage=Usage(7, 3), latency_s=0.01)

    async def aclose(self) -> None:
        self.closed = True


class Down(Scripted):
    async def chat(self, messages, **kw):
        raise LLMError("connection", "connection refused")


def _options(url: str, **kw) -> PlayerOptions:
    return PlayerOptions(env_urls={"alfworld": url, "webshop": url, "reasoning": url},
                         skillrepo_url="http://127.0.0.1:9", **kw)


def _request(**kw) -> EpisodeRequest:
    return EpisodeRequest(**{"env": "reasoning", "task_id": "demo-math-005", **kw})


def test_a_reasoning_episode_is_played_and_scored(reasoning):
    async def go():
        llm = Scripted("<think>5/4</think><answer>\\frac{5}{4}</answer>")
        player = EpisodePlayer(llm, _options(reasoning, reasoning_max_tokens=99))
        skills = [SkillText(name=f"s{i}", description="d", body="b") for i in range(3)]
        resp = await player.play(_request(skills=skills, k=2))
        await player.aclose()
        return llm, resp

    llm, resp = asyncio.run(go())
    assert resp.success and resp.stop_reason == "won" and resp.reward == 1.0 and resp.steps == 1
    assert resp.final_answer == "\\frac{5}{4}" and resp.task_id == "demo-math-005" and resp.error is None
    assert [s.name for s in resp.skills] == ["s0", "s1"]          # inline skills: the first k
    assert resp.tokens.total == 10 and resp.timing.total_s >= resp.timing.llm_s
    assert llm.calls[0][1]["max_tokens"] == 99 and llm.closed


def test_a_wrong_answer_is_done_not_won(reasoning):
    resp = asyncio.run(EpisodePlayer(Scripted("<answer>4/5</answer>"), _options(reasoning)).play(_request()))
    assert not resp.success and resp.stop_reason == "done" and resp.reward == 0.0


def test_an_env_that_cannot_open_a_session_raises_and_the_service_answers_502():
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EnvError):
        asyncio.run(EpisodePlayer(Scripted(), _options(dead, timeout_s=2)).play(_request()))
    settings = ExecutorSettings(_env_file=None, reasoning_url=dead, executor_upstream_timeout_s=2)
    with pytest.raises(APIError) as e:
        asyncio.run(Executor(settings, llm=Scripted()).run_episode(_request()))
    assert e.value.status == 502 and dead in str(e.value.message)


def test_the_service_and_the_trainer_play_through_the_same_player(reasoning):
    settings = ExecutorSettings(_env_file=None, reasoning_url=reasoning)
    executor = Executor(settings, llm=Scripted("<answer>5/4</answer>"))
    assert isinstance(executor.player, EpisodePlayer)
    assert executor.player.options == ActingSettings(_env_file=None, reasoning_url=reasoning).player_options()
    served = asyncio.run(executor.run_episode(_request()))

    policy = PolicyExecutor(EpisodePlayer(Scripted("<answer>5/4</answer>"), settings.player_options()), llm=None)
    played = asyncio.run(policy.episode(_request()))
    assert (served.success, served.reward, served.final_answer) == (played.success, played.reward, played.final_answer)
    assert list(policy.outcomes.values()) == [1.0]
    with pytest.raises(RolloutFailed, match="llm_error"):   # a broken episode is retried, never scored
        asyncio.run(PolicyExecutor(EpisodePlayer(Down(), settings.player_options()), llm=None).episode(_request()))


class KillsTheEnv(Scripted):
    """Answers after killing the env server (SIGKILL) between the session's start and its step, as a replica
    lost mid-episode; with ``restart``, a new server comes up on the same port first (a restarted pod)."""

    def __init__(self, svc, stack, restart: bool, *answers: str):
        super().__init__(*answers)
        self.svc, self.stack, self.restart = svc, stack, restart

    async def chat(self, messages, **kw):
        self.svc.proc.kill()
        self.svc.proc.wait()
        if self.restart:
            port = int(self.svc.url.rsplit(":", 1)[1])
            self.stack.enter_context(run_service(["reasoning"], port=port))
        return await super().chat(messages, **kw)


@pytest.mark.parametrize("restart", [False, True], ids=["killed", "killed-and-restarted"])
def test_an_env_server_lost_mid_episode_ends_it_with_env_lost(restart, tmp_path):
    """The session is gone (its server unreachable, or a new one that never held it): the episode ends with
    ``env_lost`` and says why, as a 200 episode, so a stream counts it apart and goes on."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        svc = stack.enter_context(run_service(["reasoning"], tmp_path=tmp_path))
        llm = KillsTheEnv(svc, stack, restart, "<answer>5/4</answer>")
        resp = asyncio.run(EpisodePlayer(llm, _options(svc.url, timeout_s=5)).play(_request()))
    assert resp.stop_reason == "env_lost" and not resp.success and resp.error, resp
    assert "reasoning env" in resp.error

"""One episode of the executor over a `ChatLLM` and an env session: the decision loop, no HTTP.

The executor service (`services.executor.serving`) opens the env session and retrieves the skills,
then hands both to `react` (ALFWorld, WebShop) or `reason` (single-turn reasoning); the trainer's
agent-policy mode and the benchmarks call the same functions with their own LLM. What ends an
episode: the env says done (``won`` / ``done``), the turns run out (``max_turns``), the LLM gives no
answer (``llm_error``: the trajectory so far is kept) or the env fails (``env_error``). A prompt longer than
the LLM's context is not an end: the oldest steps shown are hidden until it fits (`ask_fitting`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from skillos.acting.options import ActingOptions
from skillos.acting.parse import parse_action
from skillos.acting.prompt import (
    action_schema,
    agent_messages,
    avoided,
    hide_more,
    reasoning_messages,
    shown_examples,
    turn_tail,
)
from skillos.llm import ChatResult, LLMError
from skillos.logging import get_logger
from skillos.protocol.executor import RetrievedSkill, Sampling, Turn

ACTION_STOP = ["</action>"]
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>(.*?)(?:</think>|<answer>|$)", re.DOTALL | re.IGNORECASE)
log = get_logger("skillos.acting")


class StepLike(Protocol):
    observation: str
    reward: float
    done: bool
    won: bool
    admissible_actions: list[str]
    info: dict


class EnvSession(Protocol):
    """One open env session: the episode only steps it (opening and closing are the caller's)."""

    async def step(self, action: str) -> StepLike: ...


class EnvFailed(Exception):
    """Raised by an `EnvSession` whose env cannot go on; the episode ends with ``env_lost`` when the session
    itself is gone (its env server unreachable, killed or restarted: nothing to retry, the game is lost), else
    with ``env_error``."""

    def __init__(self, message: str, *, lost: bool = False):
        super().__init__(message)
        self.lost = lost

    @property
    def stop_reason(self) -> str:
        return "env_lost" if self.lost else "env_error"


@dataclass
class Outcome:
    turns: list[Turn] = field(default_factory=list)
    results: list[ChatResult] = field(default_factory=list)
    won: bool = False
    reward: float = 0.0
    stop_reason: str = "max_turns"
    error: str | None = None
    llm_s: float = 0.0
    env_s: float = 0.0
    final_answer: str = ""
    examples: list[str] = field(default_factory=list)  # ids of the worked examples shown


def close_tags(text: str) -> str:
    """The stop sequence ``</action>`` is cut from the completion; put it back for the parser."""
    low = text.lower()
    if low.rfind("<action>") > low.rfind("</action>"):
        return text + "</action>"
    return text


def decision_format(action_format: str, admissible: Sequence[str] | None, avoid: Sequence[str] = ()) -> dict:
    """How one decision is asked for: a JSON schema (a thought, an admissible action) when the backend
    can constrain to one, else the tags with ``</action>`` as the stop sequence."""
    if action_format == "json":
        schema = action_schema(admissible, avoid)
        if schema is not None:
            return {"response_format": {"type": "json_schema", "json_schema": {"name": "decision", "schema": schema}}}
        return {}
    return {"stop": ACTION_STOP}


async def ask_fitting(llm, messages_for: Callable[..., list[dict]], *, past: int, history_len: int,
                      hidden: int = 0, **chat) -> tuple[ChatResult, int]:
    """One decision asked with ``messages_for(hidden=...)``; while the backend says the prompt is longer than its
    context, the oldest steps shown are hidden a chunk at a time (`prompt.hide_more`) and it is asked again.
    Returns the answer (its ``latency_s`` counts the refused attempts too) and the ``hidden`` it was asked
    with, which the episode keeps: its next prompts then grow from there and stay cached. Raises the
    `LLMError` when nothing is left to hide or the backend failed otherwise."""
    spent = 0.0
    while True:
        try:
            res = await llm.chat(messages_for(hidden=hidden), **chat)
        except LLMError as e:
            spent += getattr(e, "latency_s", 0.0)
            more = hide_more(past, history_len, hidden) if e.context_exceeded else None
            if more is None:
                e.latency_s = spent
                raise
            log.info("prompt_over_context", past_steps=past, hidden=more, error=e.message[:200])
            hidden = more
            continue
        res.latency_s += spent
        return res, hidden


async def react(llm, env: EnvSession, *, env_name: str, task: str, task_type: str | None, task_id: str | None,
                observation: str,
                admissible: Sequence[str], skills: Sequence[RetrievedSkill], max_turns: int, history_len: int,
                sampling: Sampling, seed: int | None, action_format: str = "json",
                options: ActingOptions | None = None, on_turn=None) -> Outcome:
    """A ReAct episode from the env's first observation. ``on_turn(turn)`` is called after each turn."""
    opts = options or ActingOptions()
    first_obs, first_adm = observation, list(admissible)
    admissible = list(admissible)
    examples = shown_examples(env_name, task, skills, opts, task_type, task_id)   # once: the opening never changes
    out = Outcome(examples=[e.id for e in examples])
    # (observation, action, thought, what closed the turn's message, the model's own answer when kept): every
    # later prompt repeats a turn word for word (`prompt.agent_messages`), so the server's prompt cache holds it
    history: list[tuple[str, str, str, str, str]] = []
    hidden = 0   # the first steps hidden because the prompt outgrew the context (ask_fitting)
    for i in range(max_turns):
        avoid = avoided(env_name, task, history, observation, admissible, first_obs, first_adm, opts)
        asked = turn_tail(history, observation, env_name, admissible, avoid)
        messages_for = partial(agent_messages, env_name, task, observation, skills=skills, history=history,
                               history_len=history_len, admissible=admissible, first_observation=first_obs,
                               first_admissible=first_adm, avoid=avoid, action_format=action_format,
                               options=opts, task_type=task_type, task_id=task_id, examples=examples)
        try:
            res, hidden = await ask_fitting(
                llm, messages_for, past=len(history), history_len=history_len, hidden=hidden,
                temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens,
                seed=None if seed is None else seed + i, **decision_format(action_format, admissible, avoid))
        except LLMError as e:
            out.llm_s += getattr(e, "latency_s", 0.0)
            out.stop_reason, out.error = "llm_error", e.describe()
            break
        out.llm_s += res.latency_s
        out.results.append(res)
        parsed = parse_action(close_tags(res.content), admissible or None)
        t = time.perf_counter()
        try:
            step = await env.step(parsed.action)
        except EnvFailed as e:
            out.env_s += time.perf_counter() - t
            out.stop_reason, out.error = e.stop_reason, f"{env_name} env: {e}"
            break
        dt = time.perf_counter() - t
        out.env_s += dt
        # the env has the last word when it says; without an admissible list, any non-empty action is valid
        if "invalid" in step.info:
            valid = not step.info["invalid"] and parsed.parse != "empty"
        else:
            valid = parsed.valid if parsed.valid is not None else True
        turn = Turn(index=i, observation=observation, thought=parsed.thought, action=parsed.action,
                    raw_action=parsed.raw_action, valid=valid, parse=parsed.parse, reward=step.reward,
                    done=step.done, llm_s=res.latency_s, env_s=dt, completion=res.content)
        out.turns.append(turn)
        if on_turn is not None:
            on_turn(turn)
        out.reward += step.reward
        # the answer as generated, when it was an admissible action word for word (a repaired one is written again)
        said = res.content.strip() if action_format == "json" and parsed.raw_action == parsed.action else ""
        history.append((observation, parsed.action, parsed.thought, asked, said))
        if step.done:
            out.won = step.won
            out.stop_reason = "won" if step.won else "done"
            break
        observation, admissible = step.observation, list(step.admissible_actions)
    return out


def read_answer(completion: str) -> tuple[str, str]:
    """(thought, answer) of a reasoning completion: the last ``<answer>``, else the last line."""
    m = _ANSWER.findall(completion)
    lines = [ln for ln in completion.splitlines() if ln.strip()]
    answer = (m[-1] if m else (lines[-1] if lines else "")).strip()[:4000]
    think = _THINK.search(completion)
    return (think.group(1).strip() if think else ""), answer


async def reason(llm, env: EnvSession, *, problem: str, skills: Sequence[RetrievedSkill], sampling: Sampling,
                 max_tokens: int, seed: int | None, options: ActingOptions | None = None) -> Outcome:
    """A single-turn reasoning episode: one chain of thought, the answer in ``<answer>``."""
    examples = shown_examples("reasoning", problem, skills, options)
    out = Outcome(stop_reason="done", examples=[e.id for e in examples])
    try:
        res = await llm.chat(reasoning_messages(problem, skills, examples), temperature=sampling.temperature,
                             top_p=sampling.top_p, max_tokens=max_tokens, seed=seed)
    except LLMError as e:
        out.stop_reason, out.error = "llm_error", e.describe()
        return out
    out.results.append(res)
    out.llm_s = res.latency_s
    thought, answer = read_answer(res.content)
    out.final_answer = answer
    t = time.perf_counter()
    try:
        step = await env.step(answer or "(no answer)")
    except EnvFailed as e:
        out.env_s = time.perf_counter() - t
        out.stop_reason, out.error = e.stop_reason, f"reasoning env: {e}"
        return out
    out.env_s = time.perf_counter() - t
    out.turns.append(Turn(index=0, observation=problem, thought=thought, action=answer or "(no answer)",
                          raw_action=answer, valid=bool(answer), parse="free" if answer else "empty",
                          reward=step.reward, done=True, llm_s=res.latency_s, env_s=out.env_s,
                          completion=res.content))
    out.won, out.reward = step.won, step.reward
    out.stop_reason = "won" if step.won else "done"
    return out

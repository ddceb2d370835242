"""One streaming step, in the pieces a method strings together (`skillos.methods.base.Method.play`):

    executor episode (top-k skills retrieved from the repo, query = the instruction)
    → the executor judges its own success → the curator edits the repo.

`play_episode` runs the episode and fills the task record, `verdict` is what a method learns from (the
self-judge, or the env's verdict), `curate` / `curate_trajectory` are SkillOS's learning step.
"""

from __future__ import annotations

import re
import time
from typing import Any

from skillos.protocol.curator import (
    CurateRequest,
    CurateResponse,
    Outcome,
    RetrievedSkill,
    Trajectory,
    TrajectoryTurn,
)
from skillos.protocol.executor import EpisodeRequest, EpisodeResponse, HistoryStep, JudgeRequest, SkillText
from skillos.protocol.skillrepo import OpOrigin
from skillos.stream.types import CuratorLike, ExecutorLike, OpRecord, StreamConfig, TaskRecord, TaskSpec


def _mentions(text: str, skill_name: str) -> bool:
    spaced = skill_name.replace("-", " ")
    return bool(re.search(rf"\b({re.escape(skill_name)}|{re.escape(spaced)})\b", text, re.IGNORECASE))


def _plain_action(action: str) -> str:
    """'clean apple 1 with sinkbasin 1' -> 'clean apple with sinkbasin' (object ids differ per game)."""
    return re.sub(r"\s+\d+\b", "", action.strip().lower())


_WORD = re.compile(r"[a-z0-9]+")
_FRONTMATTER = re.compile(r"\A---\n.*?\n---\n?", re.DOTALL)
_UNIT = re.compile(r"(?:^\s*(?:\d+[.)]|[-*•])\s+)|(?<=[.!?:;])\s+", re.MULTILINE)
ECHO_GRAM = 4     # words in a row that count as a skill's wording, not chance
ECHO_MIN = 2      # a skill's steps (sentences) a completion must echo to count as followed


def _grams(text: str) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return {tuple(words[i:i + ECHO_GRAM]) for i in range(len(words) - ECHO_GRAM + 1)}


def echoed_steps(completion: str, skill_body: str, instruction: str = "") -> int:
    """How many of a skill's steps (its sentences and numbered lines) the completion repeats ECHO_GRAM words of.

    The single-turn usage measure: a reasoning answer takes no action a skill could spell out, but a 1.5B that
    follows a procedure writes its steps' words ("identify all occurrences of the letter"). Word runs the
    instruction itself holds are not counted: restating the problem follows no skill."""
    seen = _grams(completion) - _grams(instruction)
    echoed = 0
    for unit in _UNIT.split(_FRONTMATTER.sub("", skill_body or "")):
        hits = _grams(unit or "") & seen
        if hits:   # a word run counts for one step only: two steps sharing a phrase are not both repeated by it
            echoed += 1
            seen -= hits
    return echoed


def skills_used(episode: EpisodeResponse) -> list[str]:
    """Retrieved skills the agent actually followed (the paper's Fig. 6 "usage" metrics).

    A skill counts as used when the agent names it in a thought, or when an action the agent took
    (of three words or more, object ids removed) is written in the skill's body, or, for a reasoning
    problem (one answer: no actions to compare), when the answer repeats ECHO_MIN of the skill's steps
    (`echoed_steps`: recitation, the way this 1.5B follows a procedure). A skill that was retrieved but
    neither cited nor followed counts as retrieved only. ALFWorld and WebShop episodes keep the first two
    rules alone, so their rates stay comparable with the runs recorded before the third.
    """
    thoughts = "\n".join(f"{t.thought}\n{t.completion}" for t in episode.turns)
    actions = {_plain_action(t.action) for t in episode.turns if t.valid}
    actions = {a for a in actions if len(a.split()) >= 3}
    single = episode.env == "reasoning" and len(episode.turns) == 1   # the env whose episode is one answer
    answer = f"{thoughts}\n{episode.turns[0].action}" if single else ""
    used = []
    for skill in episode.skills:
        body = re.sub(r"\s+\d+\b", "", (skill.body or "").lower())
        if (_mentions(thoughts, skill.name) or any(a in body for a in actions)
                or (single and echoed_steps(answer, skill.body, episode.instruction) >= ECHO_MIN)):
            used.append(skill.name)
    return used


def shown_examples(episode: EpisodeResponse) -> list[dict[str, Any]]:
    """The worked examples the executor was shown, as the task record keeps them (the skill that held each; the
    expert's demonstrations have none)."""
    shown = set(episode.examples_shown)
    out: list[dict[str, Any]] = []
    for skill in episode.skills:
        for e in skill.examples:
            if e.id in shown and all(o["id"] != e.id for o in out):
                out.append({"id": e.id, "skill": skill.name, "kind": e.kind, "source": e.source,
                            "actions": e.actions()})
    out += [{"id": i, "skill": None} for i in episode.examples_shown if all(o["id"] != i for o in out)]
    return out


def trajectory_of(episode: EpisodeResponse, spec: TaskSpec) -> Trajectory:
    return Trajectory(task=episode.instruction or spec.instruction or spec.id, task_id=episode.task_id,
                      task_type=episode.task_type or spec.type, env=episode.env,
                      final_answer=episode.final_answer,
                      turns=[TrajectoryTurn(observation=t.observation, thought=t.thought, action=t.action,
                                            valid=t.valid) for t in episode.turns],
                      env_success=episode.success)


async def _self_judge(executor: ExecutorLike, episode: EpisodeResponse, spec: TaskSpec, seed: int | None,
                      record: TaskRecord, max_turns: int | None = None) -> bool:
    """The executor's own verdict. A failed judge is reported and treated as 'not successful'."""
    if episode.error:
        record.self_judged_success = False
        return False
    req = JudgeRequest(env=episode.env, task=episode.instruction or spec.instruction or spec.id,
                       turns=[HistoryStep(observation=t.observation[:20_000], action=t.action[:4096])
                              for t in episode.turns],
                       final_answer=episode.final_answer, seed=seed,
                       ended_by_env=episode.stop_reason in ("won", "done"),
                       max_turns=max_turns)
    if not req.turns and not req.final_answer:
        record.self_judged_success = False
        return False
    try:
        verdict = await executor.judge(req)
    except Exception as e:  # noqa: BLE001 - any failure of the judge is recorded, the stream goes on
        record.judge_error = f"{type(e).__name__}: {e}"
        record.self_judged_success = False
        return False
    record.self_judged_success = verdict.success
    return verdict.success


def new_record(position: int, spec: TaskSpec, config: StreamConfig) -> TaskRecord:
    return TaskRecord(position=position, task_id=spec.id, task_type=spec.type, instruction=spec.instruction,
                      method=config.method, seed=config.seed, repo=config.repo)


async def play_episode(executor: ExecutorLike, spec: TaskSpec, config: StreamConfig, record: TaskRecord | None, *,
                       repo: str | None = None, skills: list[SkillText] | None = None,
                       k: int | None = None, seed: int | None = None) -> EpisodeResponse | None:
    """One executor episode, with skills retrieved from ``repo`` (top ``k``) or given inline (``skills``).

    With a ``record`` the outcome is written into it (an episode that could not run is a failed task
    with its reason, and None comes back); without one (a method's extra rollouts) errors propagate.
    """
    # the executor keeps the first k of inline skills: all of them here (the method chose them), up to
    # the 50 a request may carry
    skills = skills[:50] if skills else skills
    top = len(skills) if skills else (config.k if k is None else k) if repo else 0
    request = EpisodeRequest(env=config.env, task_id=spec.id, repo=repo, skills=skills, k=top, retrieval=config.retrieval,
                             max_turns=config.max_turns, history_len=config.history_len,
                             seed=config.seed if seed is None else seed, acting=config.acting)
    if record is None:
        return await executor.episode(request)
    start = time.perf_counter()
    try:
        episode = await executor.episode(request)
    except Exception as e:  # noqa: BLE001 - an episode that could not run is a failed task with its reason
        record.error = f"episode failed: {type(e).__name__}: {e}"
        record.stop_reason = "error"
        record.episode_s = time.perf_counter() - start
        return None
    record.episode_s = time.perf_counter() - start
    record.success = bool(episode.success) and not episode.error
    record.reward, record.steps, record.stop_reason = episode.reward, episode.steps, episode.stop_reason
    record.error = episode.error
    record.task_type = episode.task_type or spec.type
    record.instruction = episode.instruction or spec.instruction
    record.tokens = episode.tokens.total
    record.retrieved = [{"name": s.name, "version": s.version, "score": s.score,
                         **({"examples": len(s.examples)} if s.examples else {})} for s in episode.skills]
    record.examples = shown_examples(episode)
    record.used = skills_used(episode)
    record.turns = [{"observation": t.observation, "thought": t.thought, "action": t.action, "valid": t.valid}
                    for t in episode.turns]
    return episode


async def verdict(executor: ExecutorLike, episode: EpisodeResponse, spec: TaskSpec, config: StreamConfig,
                  record: TaskRecord) -> bool:
    """What a method learns from: the executor's own judgement, or the env's with ``--oracle-judge``."""
    if not config.self_judge:
        return bool(episode.success) and not episode.error
    return await _self_judge(executor, episode, spec, config.seed, record, config.max_turns)


async def curate(position: int, spec: TaskSpec, episode: EpisodeResponse, judged: bool, config: StreamConfig,
                 curator: CuratorLike, record: TaskRecord) -> None:
    """SkillOS's learning step: the curator reads the trajectory and edits the repo (ops applied there). A won
    episode (the environment's verdict, whatever the self-judge said) is kept as a worked example of the skills
    the curator's ops write."""
    await curate_trajectory(position, spec, trajectory_of(episode, spec), judged, episode.skills, config, curator,
                            record, outcome=Outcome(success=bool(episode.success) and not episode.error, source="env"))


async def curate_trajectory(position: int, spec: TaskSpec, trajectory: Trajectory, judged: bool,
                            skills: list[Any], config: StreamConfig, curator: CuratorLike,
                            record: TaskRecord, outcome: Outcome | None = None) -> CurateResponse | None:
    """`curate` for any trajectory (an expert's too); ``skills``: those the agent was given, each with
    ``name``, ``description``, ``body`` and ``version`` (the executor's `RetrievedSkill`, a repo `Skill`), and
    ``examples`` when they have some. ``outcome``: the verified outcome (a success leaves a worked example).
    Returns the curator's answer (None when the call failed: the record says why)."""
    start = time.perf_counter()
    response = None
    try:
        response = await curator.curate(CurateRequest(
            trajectory=trajectory, self_judged_success=judged,
            # the curator's `content` is the executor's `body`: the SKILL.md body, no frontmatter
            retrieved_skills=[RetrievedSkill(name=s.name, description=s.description, content=s.body,
                                             version=s.version, examples=list(getattr(s, "examples", None) or []))
                              for s in skills],
            repo=config.repo, apply=True, temperature=config.curator_temperature, seed=config.seed,
            # the same key for the HTTP retries of one call; a resumed run plays a task again under a new one
            # (the repo remembers keys: the replay of a task curated before the stop would be "replayed")
            idempotency_key=f"{config.repo}:{position}:{spec.id}" + (f":r{config.attempt}" if config.attempt else ""),
            origin=OpOrigin(source="run", run=config.run_id, seed=config.seed, position=position,
                            task_id=spec.id[:500]), outcome=outcome))
    except Exception as e:  # noqa: BLE001 - the stream goes on with the repo unchanged
        record.curator_error = f"{type(e).__name__}: {e}"
    else:
        record.curator_error = response.error
        record.curator_completion = response.raw_completion
        record.curator_call_id = getattr(response, "call_id", "") or ""
        record.validity_rate = response.validity_rate if response.calls or not response.error else 0.0
        record.method_info["writer_tokens"] = response.usage.prompt_tokens + response.usage.completion_tokens
        record.ops = [OpRecord(name=c.name, skill_name=c.skill_name or (c.arguments or {}).get("skill_name"),
                               valid=c.valid,
                               applied=c.applied, reason=c.reason, version=c.skill_version) for c in response.calls]
        if response.example is not None:
            record.example = {"id": response.example.id, "steps": len(response.example.steps),
                              "taken": response.example.taken, "source": response.example.source,
                              "kept": {c.skill_name: c.example for c in response.calls if c.example}}
    record.curate_s = time.perf_counter() - start
    return response

"""The methods' learning steps against the real skill repo (started on loopback, SQLite, with its MiniLM
encoder), on hand-built episodes: the success paths that a 135M executor never reaches in the stream
tests (MemP building and replacing a procedure, Skill1 admitting and retiring, SAPO promoting with
dedup and pruning, SkillRL evolving). The LLM is not ours: where a method calls its writer, a scripted
stand-in answers (`ScriptedWriter`), and the test names say so."""

from __future__ import annotations

import asyncio
import math
import uuid

import pytest

from harness.runner import REPO_TIMEOUT_S
from skillos.clients.skillrepo import AsyncSkillRepoClient
from skillos.llm.client import ChatResult, Usage
from skillos.methods import build_method
from skillos.methods.bank import ensure_stream_repo
from skillos.methods.base import StreamContext
from skillos.protocol.executor import EpisodeResponse, RetrievedSkill, Timing, TokenCount, Turn
from skillos.stream import StreamConfig, TaskRecord, TaskSpec
from tests.conftest import run_service

INSTRUCTION = "put a clean apple in fridge"


@pytest.fixture(scope="module")
def repo_url(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("banks")
    with run_service(["skillrepo"], env={"SKILLOS_DATABASE_URL": f"sqlite:///{tmp}/repo.db"}, tmp_path=tmp,
                     ready_timeout=300) as svc:
        yield svc.url


class ScriptedWriter:
    """Stands in for the writer LLM: answers in order, keeps the prompts."""

    def __init__(self, *answers: str):
        self.answers = list(answers)
        self.prompts: list[str] = []

    async def chat(self, messages, **_):
        self.prompts.append(messages[-1]["content"])
        return ChatResult(content=self.answers.pop(0), usage=Usage(10, 5))


def _episode(won: bool, actions: list[str], skills: list[str] = (), instruction: str = INSTRUCTION):
    return EpisodeResponse(
        episode_id="e", env="alfworld", task_id="t", task_type="clean", instruction=instruction, success=won,
        reward=float(won), steps=len(actions), stop_reason="won" if won else "max_turns",
        turns=[Turn(index=i, observation="obs", action=a, valid=True, parse="exact") for i, a in enumerate(actions)],
        skills=[RetrievedSkill(name=n) for n in skills], tokens=TokenCount(), timing=Timing())


def _play(url: str, method: str, params: dict, body, writer=None):
    """Run ``body(method, ctx, repo_client, record)`` on a fresh repo, learning from the env's verdict."""
    async def go():
        async with AsyncSkillRepoClient(url, timeout=REPO_TIMEOUT_S) as repo:
            name = f"r-{uuid.uuid4().hex[:10]}"
            await repo.create_repo(name)
            config = StreamConfig(env="alfworld", method=method, repo=name, self_judge=False, seed=0)
            ctx = StreamContext(config, executor=None, repo=repo, llm=writer)
            m = build_method(method, params)
            await m.setup(ctx)
            record = TaskRecord(position=0, task_id="t", task_type="clean", instruction=INSTRUCTION, method=method,
                                seed=0)
            return await body(m, ctx, repo, record)
    return asyncio.run(go())


SPEC = TaskSpec("t", "clean", INSTRUCTION)


def test_memp_builds_a_procedure_and_keeps_the_shortest(repo_url):
    async def body(m, ctx, repo, record):
        long = ["go to countertop 1", "take apple 1 from countertop 1", "go to sinkbasin 1",
                "clean apple 1 with sinkbasin 1", "go to fridge 1", "put apple 1 in/on fridge 1"]
        await m.learn(0, SPEC, _episode(True, long), ctx, record)
        first = (await repo.list_skills(ctx.config.repo))[0]
        await m.learn(1, SPEC, _episode(True, long[2:], instruction="put a clean apple 2 in fridge 1"), ctx, record)
        shorter = await repo.get_skill(ctx.config.repo, first.name)
        await m.learn(2, SPEC, _episode(True, long + ["look"]), ctx, record)
        kept = await repo.get_skill(ctx.config.repo, first.name)
        await m.learn(3, SPEC, _episode(False, long), ctx, record)  # a failure builds nothing
        return first, shorter, kept, await repo.list_skills(ctx.config.repo)

    first, shorter, kept, final = _play(repo_url, "memp", {}, body)
    assert first.metadata["steps"] == 6 and "4. clean apple 1 with sinkbasin 1" in first.body
    assert shorter.name == first.name and shorter.metadata["steps"] == 4 and shorter.version == 2  # replaced
    assert kept.version == 2 and kept.metadata["steps"] == 4  # the longer script did not replace it
    assert [s.name for s in final] == [first.name]


def test_skill1_admits_a_lesson_that_beats_the_trend_and_retires_the_weakest_with_a_scripted_writer(repo_url):
    writer = ScriptedWriter('{"action_lesson": "Clean at the sinkbasin before placing.", '
                            '"navigation_lesson": "Go straight to the sink.", "description_head": "Cleaning tasks"}')

    async def body(m, ctx, repo, record):
        await repo.put_skill(ctx.config.repo, {"name": "old", "description": "an old lesson", "body": "x",
                                               "metadata": {"utility": 0.1, "selected": 0}})
        record.method_info.update(candidates=["old"], candidate_utilities=[0.1], ranked=["old"])
        await m.learn(0, SPEC, _episode(True, ["go to sinkbasin 1"], skills=["old"]), ctx, record)
        failed = TaskRecord(position=1, task_id="t", task_type="clean", instruction=INSTRUCTION, method="skill1", seed=0)
        failed.method_info.update(candidates=["cleaning-tasks"], candidate_utilities=[0.5])
        await m.learn(1, SPEC, _episode(False, ["look"], skills=["cleaning-tasks"]), ctx, failed)
        return record, failed, {s.name: s for s in await repo.list_skills(ctx.config.repo)}

    record, failed, skills = _play(repo_url, "skill1", {"capacity": 1}, body, writer)
    info = record.method_info
    assert info["variation"] == pytest.approx(0.9)        # r − u* = 1 − 0.1
    assert info["admitted"] == "cleaning-tasks"
    # "old": u = 0.95·0.1 + 0.05 = 0.145, n = 1 → 0.145·ln 3 = 0.159 < the new one's 0.5·ln 2 = 0.347: retired
    assert info["retired"] == ["old"] and 0.145 * math.log(3) < 0.5 * math.log(2)
    assert failed.method_info["variation"] == pytest.approx(-0.5) and failed.method_info["admitted"] is None
    assert len(writer.prompts) == 1                       # nothing was distilled for the failure
    lesson = skills["cleaning-tasks"]
    assert list(skills) == ["cleaning-tasks"] and "- Clean at the sinkbasin before placing." in lesson.body
    assert lesson.metadata["utility"] == pytest.approx(0.95 * 0.5) and lesson.metadata["selected"] == 1


def test_sapo_promotes_validated_novel_candidates_and_prunes_to_capacity(repo_url):
    async def body(m, ctx, repo, record):
        main, tmp = ctx.config.repo, ctx.config.repo + "-candidates"
        heat = {"description": "Heat food in the microwave", "body": "Go to the microwave, open it, heat the food."}
        # a real name: the index embeds "<name words>: <description> <body>", and a bare "x" moved the
        # int8 encoder's cosine of the duplicate below the 0.8 threshold (0.79; "heat food" gives 0.95)
        await repo.put_skill(main, {"name": "heat-food", **heat, "metadata": {"utility": 0.05}})
        await repo.put_skill(main, {"name": "y", "description": "Look under a lamp", "body": "Use the desklamp.",
                                    "metadata": {"utility": 0.01}})
        cands = {"a": (0.5, "Clean objects at the sink", "Rinse the object at the sinkbasin before placing it."),
                 "b": (0.2, "Count two objects", "Keep a tally when a task asks for two things."),
                 "c": (-0.1, "Wander", "Walk around."),
                 "d": (0.4, heat["description"], heat["body"]),   # the same skill as "heat-food": a duplicate
                 "e": (0.3, "Cool things in the fridge", "Open the fridge and cool the object inside.")}
        for name, (u, desc, text) in cands.items():
            await repo.put_skill(tmp, {"name": name, "description": desc, "body": text,
                                       "metadata": {"status": "pending", "utility": u}})
        await m.boundary(2, ctx, record)
        return (record.method_info["promotion"], {s.name: s.metadata for s in await repo.list_skills(main)},
                {s.name: s.metadata["status"] for s in await repo.list_skills(tmp)})

    promotion, longterm, status = _play(repo_url, "sapo", {"promote_every": 3, "top_fraction": 0.6, "capacity": 3},
                                        body)
    # top ⌈0.6·5⌉ = 3 by U: a, d, e; d duplicates heat-food; y has the lowest U of four: pruned
    assert promotion == {"pending": 5, "promoted": ["a", "e"], "duplicates": ["d"], "pruned": ["y"]}
    assert sorted(longterm) == ["a", "e", "heat-food"] and longterm["a"]["utility"] == 0.5
    assert status == {"a": "promoted", "b": "discarded", "c": "discarded", "d": "discarded", "e": "promoted"}


def test_skillrl_evolves_the_weak_category_from_its_failures_with_a_scripted_writer(repo_url):
    writer = ScriptedWriter(
        '[{"title": "Check preconditions", "principle": "Verify an action is possible before taking it.", '
        '"when_to_apply": "always"}]',
        'Here: [{"title": "Sink first", "principle": "Clean at the sinkbasin.", "when_to_apply": "clean tasks", '
        '"category": "clean"}, {"title": "Hold one thing", "principle": "Put down what you carry first.", '
        '"when_to_apply": "before taking", "category": "clean"}]')

    async def body(m, ctx, repo, record):
        traj = ctx.config.repo + "-trajectories"
        for i, (cat, won, invalid) in enumerate([("clean", False, 1), ("heat", True, 0), ("clean", False, 5)]):
            await repo.put_skill(traj, {"name": f"t{i:05d}", "description": f"task {i}", "body": f"steps of {i}",
                                        "metadata": {"category": cat, "success": won, "position": i,
                                                     "invalid": invalid, "steps": 10}})
        await m.boundary(2, ctx, record)
        return record.method_info, {s.name: s.metadata for s in await repo.list_skills(ctx.config.repo)}

    info, skills = _play(repo_url, "skillrl", {"evolve_every": 3, "general_skills": 1}, body, writer)
    evolution = info["evolution"]
    assert evolution["evolved"] == ["clean"] and evolution["success"] == {"clean": 0.0, "heat": 1.0}
    assert evolution["failures_read"] == ["t00002", "t00000"]  # worst (most invalid actions) first
    assert "task 1" not in writer.prompts[1]                    # the heat success is not a failure to learn from
    assert info["writer_tokens"] == 30
    tiers = sorted((m["tier"], m.get("category")) for m in skills.values())
    assert tiers == [("general", None), ("specific", "clean"), ("specific", "clean")]


def test_a_stream_counts_the_environments_outcome_for_each_skill_it_was_shown(repo_url):
    """Measured utility from `skillos run`: each task's outcome counted once per skill shown (source
    environment, the served arm only: a stream withholds nothing); a stream refuses a repo whose policy keeps
    what it learns as candidates (its method serves what it learns to the next task)."""
    async def body(m, ctx, repo, record):
        record.retrieved = [{"name": "clean-apple", "version": 1}, {"name": "cool-apple", "version": 2}]
        record.success = True
        await m.count_outcome(0, ctx, record)
        await m.count_outcome(0, ctx, record)      # a resumed stream's retry counts nothing
        record2 = TaskRecord(position=1, task_id="t2", task_type="clean", instruction=INSTRUCTION, method="skillos",
                             seed=0, retrieved=[{"name": "clean-apple", "version": 1}])
        await m.count_outcome(1, ctx, record2)      # a failure
        report = await repo.utility(ctx.config.repo)
        other = f"c-{uuid.uuid4().hex[:8]}"
        await repo.create_repo(other, {"candidates": True})
        refused = None
        try:
            await ctx.bank("skillos").companion("x").ensure()   # a fresh one is made with the stream policy
            await ensure_stream_repo(repo, other)
        except Exception as e:  # noqa: BLE001 - the refusal is what is checked
            refused = e
        return report, record.method_info, refused

    report, info, refused = _play(repo_url, "skillos", {}, body)
    got = {u.name: (u.served, u.served_success, u.withheld) for u in report.skills}
    assert got == {"clean-apple": (2, 1, 0), "cool-apple": (1, 1, 0)} and "utility_error" not in info
    assert report.skills[0].interval is None     # no withheld arm in a stream: no interval
    assert refused is not None and getattr(refused, "code", "") == "repo_candidates", refused

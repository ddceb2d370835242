"""The reasoning server over HTTP (JSONL files, the demo set, reasoning-gym's families), and the generic
session server (TTL, limits, metrics) on it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import httpx
import pytest
from conftest import ROOT, run_service

from services.envs.reasoning.gym import (
    CHUNK,
    DEFAULT_FAMILIES,
    MAX_INDEX,
    SPLITS,
    GymGame,
    ReasoningGym,
    task_seed,
)
from skillos.clients.envs import AsyncEnvClient, EnvClient, EnvError


@pytest.fixture(scope="module")
def reasoning(tmp_path_factory):
    with run_service(["reasoning"], tmp_path=tmp_path_factory.mktemp("reasoning")) as svc:
        yield svc


@pytest.fixture
def client(reasoning):
    with EnvClient(reasoning.url) as c:
        yield c


def answer(client: EnvClient, task_id: str, text: str):
    s = client.create_session(task_id=task_id)
    try:
        return client.step(s.session_id, text)
    finally:
        client.close_session(s.session_id)


def test_demonstration_set_is_served(client):
    # the default source: reasoning-gym's families, and the demo set beside them
    assert client.splits() == ["train", "valid", "test", "demo_choice", "demo_math"]
    math = client.tasks("demo_math")
    assert len(math) == 12 and math[0].id == "demo-math-001" and math[0].split == "demo_math"
    s = client.create_session(split="demo_choice", index=1)
    assert s.task.id == "demo-choice-002" and s.observation == s.task.instruction
    assert "(C) 19.6 m" in s.observation and s.admissible_actions == []
    client.close_session(s.session_id)


@pytest.mark.parametrize(("task_id", "text", "reward"), [
    ("demo-math-005", "Adding them up, the answer is \\boxed{\\frac{5}{4}}", 1.0),
    ("demo-math-005", "5/4", 1.0),
    ("demo-math-005", "1.25", 1.0),
    ("demo-math-005", "\\boxed{4/5}", 0.0),
    ("demo-math-008", "\\sqrt{2}", 1.0),
    ("demo-math-008", "x = 2", 0.0),
    ("demo-math-012", "$25\\pi$", 1.0),
    ("demo-math-001", "205 minutes", 1.0),
    ("demo-math-001", "I do not know", 0.0),
    ("demo-choice-002", "The answer is (C)", 1.0),
    ("demo-choice-002", "C", 1.0),
    ("demo-choice-002", "\\boxed{B}", 0.0),
    ("demo-choice-002", "19.6 m", 0.0),  # the option letter is what counts
])
def test_rewards(client, task_id, text, reward):
    r = answer(client, task_id, text)
    assert r.done and r.reward == reward and r.won == (reward == 1.0), r.info
    assert r.info["correct"] == (reward == 1.0)


def test_one_step_only_then_409(client):
    s = client.create_session(task_id="demo-math-002")
    assert client.step(s.session_id, "12").won
    with pytest.raises(EnvError) as e:
        client.step(s.session_id, "12")
    assert e.value.status == 409
    client.close_session(s.session_id)


def test_user_jsonl_files(tmp_path):
    (tmp_path / "aime_mini.jsonl").write_text(
        json.dumps({"id": "aime-1", "problem": "What is 7 * 8?", "answer": "56", "source": "aime"}) + "\n")
    (tmp_path / "gpqa_mini.jsonl").write_text(
        json.dumps({"question": "Which is a noble gas?", "choices": ["Neon", "Sodium", "Iron"],
                    "answer": "Neon"}) + "\n")
    with run_service(["reasoning", "--data-dir", str(tmp_path)], tmp_path=tmp_path) as svc, \
            EnvClient(svc.url) as c:
        assert c.splits() == ["aime_mini", "gpqa_mini"]
        assert c.tasks("aime_mini")[0].type == "aime"
        g = c.tasks("gpqa_mini")[0]
        assert g.id == "gpqa_mini/1" and "(A) Neon" in g.instruction
        assert answer(c, "aime-1", "\\boxed{56}").reward == 1.0
        assert answer(c, g.id, "Answer: A").reward == 1.0
        assert answer(c, g.id, "Answer: B").reward == 0.0


def test_with_tokens_a_session_is_its_openers(tmp_path):
    """Issue 51: with SKILLOS_AUTH_MODE=tokens an env server needs a token on every route but the probes, and
    a session (its steps are an episode's rewards) is stepped, read and closed by its opener alone; an
    operator's token (rw, no prefix) sees, reads and may close any, and steps none."""
    env = {"SKILLOS_AUTH_MODE": "tokens", "SKILLOS_AUTH_TOKENS": "ops:rw,alice:read:team-,bob:rw:team-"}
    with run_service(["reasoning"], env=env, tmp_path=tmp_path) as svc, \
            EnvClient(svc.url, token="alice") as alice, EnvClient(svc.url, token="bob") as bob, \
            EnvClient(svc.url, token="ops") as ops:
        assert httpx.get(f"{svc.url}/v1/tasks").status_code == 401
        assert httpx.get(f"{svc.url}/v1/sessions", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert httpx.get(f"{svc.url}/readyz").status_code == 200
        mine = alice.create_session(split="demo_math", index=0).session_id
        theirs = bob.create_session(split="demo_math", index=1).session_id
        for call in (lambda: bob.step(mine, "205"), lambda: bob.session(mine), lambda: bob.close_session(mine)):
            with pytest.raises(EnvError) as e:
                call()
            assert e.value.status == 403 and "another token" in e.value.message
        listed = httpx.get(f"{svc.url}/v1/sessions", headers={"Authorization": "Bearer bob"}).json()
        assert listed["session_ids"] == [theirs] and listed["count"] == 1
        everything = httpx.get(f"{svc.url}/v1/sessions", headers={"Authorization": "Bearer ops"}).json()
        assert sorted(everything["session_ids"]) == sorted([mine, theirs])
        with pytest.raises(EnvError) as e:
            ops.step(mine, "205")                    # an operator reads and closes; the episode is not its own
        assert e.value.status == 403
        assert alice.step(mine, "205").done          # the opener plays on, with a read token
        assert ops.session(theirs).steps == 0
        ops.close_session(theirs)


def test_bad_data_dir_is_refused_with_a_message(tmp_path):
    (tmp_path / "broken.jsonl").write_text(json.dumps({"problem": "no answer here"}) + "\n")
    out = subprocess.run([sys.executable, "-m", "skillos.cli", "serve", "reasoning", "--data-dir", str(tmp_path)],
                         check=False, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "broken.jsonl:1" in out.stderr and "'answer'" in out.stderr


def test_ttl_limit_and_metrics(tmp_path):
    env = {"SKILLOS_ENV_SESSION_TTL_S": "1", "SKILLOS_ENV_MAX_SESSIONS": "3"}
    with run_service(["reasoning"], env=env, tmp_path=tmp_path) as svc, EnvClient(svc.url) as c:
        ids = [c.create_session(split="demo_math", index=i).session_id for i in range(3)]
        r = httpx.post(f"{svc.url}/v1/sessions", json={"split": "demo_math", "index": 3})
        assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_sessions"
        assert 1 <= int(r.headers["Retry-After"]) <= 10
        c.step(ids[0], "205")
        time.sleep(2.5)  # idle past the TTL; the sweeper runs every TTL/4
        assert httpx.get(f"{svc.url}/v1/sessions").json()["count"] == 0
        with pytest.raises(EnvError) as e:
            c.session(ids[1])
        assert e.value.status == 404 and "expired" in e.value.message
        c.create_session(split="demo_math", index=3)  # room again
        m = httpx.get(f"{svc.url}/metrics").text
        assert 'skillos_env_sessions_total{env="reasoning",event="expired"} 3.0' in m
        assert 'skillos_env_sessions_total{env="reasoning",event="rejected"} 1.0' in m
        assert 'skillos_env_sessions_open{env="reasoning"} 1.0' in m
        assert 'skillos_env_steps_total{env="reasoning",result="ok"} 1.0' in m
        assert 'skillos_env_step_seconds_count{env="reasoning"} 1.0' in m
        assert httpx.get(f"{svc.url}/readyz").json()["status"] == "ready"


def test_async_client_many_sessions_at_once(reasoning):
    async def run():
        async with AsyncEnvClient(reasoning.url) as c:
            tasks = await c.tasks("demo_choice")

            async def one(t):
                s = await c.create_session(task_id=t.id)
                r = await c.step(s.session_id, "A")
                await c.close_session(s.session_id)
                return r.reward

            return tasks, await asyncio.gather(*(one(t) for t in tasks))

    tasks, rewards = asyncio.run(run())
    answers = [json.loads(line)["answer"] for line in
               (ROOT / "services/envs/reasoning/data/demo_choice.jsonl").read_text().splitlines()]
    assert rewards == [1.0 if a == "A" else 0.0 for a in answers] and len(tasks) == 8


def test_client_reports_unreachable_server():
    with EnvClient("http://127.0.0.1:9", timeout=2) as c, pytest.raises(EnvError) as e:
        c.splits()
    assert e.value.status == 0 and e.value.code == "unreachable"


# ---- reasoning-gym: generated families, scored by their own scorers ----------------------------------

@pytest.fixture(scope="module")
def gym():
    return ReasoningGym(DEFAULT_FAMILIES, tasks_per_split=50)


def test_gym_splits_are_disjoint_seed_ranges(gym):
    ids = {s: {t.id for t in gym.tasks(s)} for s in SPLITS}
    assert all(len(v) == 50 * len(DEFAULT_FAMILIES) for v in ids.values())
    assert not (ids["train"] & ids["valid"] or ids["train"] & ids["test"] or ids["valid"] & ids["test"])
    for family in DEFAULT_FAMILIES:
        # every seed a split can ever use (any index, and the chunk datasets' seeds) lies in its own range
        lows = {s: task_seed(family, s, 0) for s in SPLITS}
        highs = {s: task_seed(family, s, MAX_INDEX - 1) for s in SPLITS}
        assert highs["train"] < lows["valid"] and highs["valid"] < lows["test"] and highs["test"] < 2**32
        listed = {s: {gym.problem(t.id).seed for t in gym.tasks(s) if t.type == family} for s in SPLITS}
        assert not (listed["train"] & listed["valid"] or listed["train"] & listed["test"]
                    or listed["valid"] & listed["test"])
    assert [t.type for t in gym.tasks("valid")][::50] == list(DEFAULT_FAMILIES)
    t = gym.tasks("valid")[17]
    assert (t.id, t.type, t.split) == ("rg/gsm_symbolic/valid/17", "gsm_symbolic", "valid")


def test_gym_tasks_are_deterministic_for_any_index(gym):
    other = ReasoningGym(["chain_sum", "base_conversion"], tasks_per_split=3)   # another process, fewer listed
    for tid in ("rg/chain_sum/test/2", "rg/base_conversion/train/40", f"rg/chain_sum/valid/{CHUNK + 7}",
                f"rg/base_conversion/test/{MAX_INDEX - 1}"):
        a, b = gym.problem(tid), other.problem(tid)
        assert a.task == b.task and a.entry["answer"] == b.entry["answer"] and a.seed == b.seed
    assert gym.problem("rg/chain_sum/train/5").task.instruction != gym.problem("rg/chain_sum/test/5").task.instruction
    for bad in ("rg/chain_sum/train/-1", "rg/chain_sum/train/007", f"rg/chain_sum/train/{MAX_INDEX}",
                "rg/chain_sum/dev/1", "rg/nope/train/1", "rg/gcd/train/1",   # gcd exists, but is not served
                "chain_sum/train/1", "rg/chain_sum/train/1/"):
        with pytest.raises(KeyError):
            gym.problem(bad)


def test_gym_scores_with_the_family_scorer(gym):
    def play(tid: str, action: str):
        game = GymGame(gym.problem(tid))
        assert game.start().observation == game.task.instruction
        return game.step(action)

    for family in DEFAULT_FAMILIES:
        p = gym.problem(f"rg/{family}/test/3")
        right = play(p.task.id, f"<think>easy</think><answer>{p.entry['answer']}</answer>")
        assert (right.reward, right.won, right.done, right.observation) == (1.0, True, True, "Correct.")
        assert right.info["graded_by"] == f"reasoning_gym:{family}" and right.info["correct"] is True
        wrong = play(p.task.id, "no idea")
        assert wrong.reward < 1.0 and not wrong.won and wrong.info["correct"] is False
    # partial credit where the family has it: chain_sum keeps a share for the right number inside words,
    # gsm_symbolic gives 0.01 for a number that is wrong
    p = gym.problem("rg/chain_sum/test/3")
    partial = play(p.task.id, f"it is {p.entry['answer']}")
    assert 0.0 < partial.reward < 1.0 and not partial.won and partial.observation.startswith("Partly correct")
    p = gym.problem("rg/gsm_symbolic/test/3")
    assert play(p.task.id, str(int(float(p.entry["answer"])) + 1)).reward == 0.01
    # a boxed answer is unwrapped (the scorers compare the bare answer); only a box around all of it
    p = gym.problem("rg/letter_counting/test/3")
    assert play(p.task.id, f"<answer>$\\boxed{{{p.entry['answer']}}}$</answer>").won
    assert not play(p.task.id, f"\\boxed{{{p.entry['answer']}}} or \\boxed{{99}}").won
    # base_conversion's answer format is said in the task
    assert "no prefix such as 0x" in gym.problem("rg/base_conversion/test/3").task.instruction


def test_unknown_family_is_refused_with_the_known_ones():
    with pytest.raises(ValueError) as e:
        ReasoningGym(["chain_sum", "no_such_family"])
    assert "'no_such_family'" in str(e.value) and "gsm_symbolic" in str(e.value) and "letter_counting" in str(e.value)
    out = subprocess.run([sys.executable, "-m", "skillos.cli", "serve", "reasoning", "--source", "reasoning-gym",
                          "--families", "chain_sum,no_such_family"],
                         check=False, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "no_such_family" in out.stderr and "base_conversion" in out.stderr
    out = subprocess.run([sys.executable, "-m", "skillos.cli", "serve", "reasoning"], check=False, cwd=ROOT,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "SKILLOS_REASONING_SOURCE": "gym"})
    assert out.returncode != 0 and "reasoning-gym" in out.stderr and "jsonl" in out.stderr


@pytest.fixture(scope="module")
def rg_server(tmp_path_factory):
    args = ["reasoning", "--source", "reasoning-gym", "--families", "chain_sum,letter_counting,gsm_symbolic",
            "--tasks-per-split", "6"]
    with run_service(args, tmp_path=tmp_path_factory.mktemp("rg")) as svc:
        yield svc


def test_gym_over_http(rg_server):
    with EnvClient(rg_server.url) as c:
        assert c.splits() == ["train", "valid", "test"]
        test = c.tasks("test")
        assert len(test) == 18 and {t.type for t in test} == {"chain_sum", "letter_counting", "gsm_symbolic"}
        assert [t.id for t in c.tasks("test", type="chain_sum")] == [f"rg/chain_sum/test/{i}" for i in range(6)]
        both = c.tasks("test", type="chain_sum,gsm_symbolic")
        assert len(both) == 12 and {t.type for t in both} == {"chain_sum", "gsm_symbolic"}
        # a session: the executor submits what it put inside <answer></answer>
        gym = ReasoningGym(["chain_sum"], tasks_per_split=1)
        gold = gym.problem("rg/chain_sum/test/4").entry["answer"]
        s = c.create_session(task_id="rg/chain_sum/test/4")
        assert s.task.type == "chain_sum" and s.observation == s.task.instruction
        r = c.step(s.session_id, gold)
        assert r.done and r.won and r.reward == 1.0
        c.close_session(s.session_id)
        r = answer(c, "rg/chain_sum/test/4", str(int(gold) + 1))
        assert r.done and not r.won and r.reward == 0.0
        s = c.create_session(split="valid", index=6)   # the 7th listed task: letter_counting's first
        assert s.task.id == "rg/letter_counting/valid/0"
        c.close_session(s.session_id)
        assert answer(c, "rg/chain_sum/train/123456", "0").done   # past the listed ones: still a task
        served = "family 'gcd' is not served here; the families are: chain_sum, letter_counting, gsm_symbolic"
        for bad, why in (("rg/gcd/test/1", served), ("rg/chain_sum/test/x", "not a reasoning-gym task id"),
                         ("demo-math-001", "")):
            with pytest.raises(EnvError) as e:
                c.create_session(task_id=bad)
            assert e.value.status == 404 and e.value.code == "unknown_task" and why in e.value.message
    r = httpx.get(f"{rg_server.url}/v1/tasks", params={"split": "test", "type": "chain_sum,no_such_family"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_type"
    msg = r.json()["error"]["message"]
    assert "'no_such_family'" in msg and "chain_sum, gsm_symbolic, letter_counting" in msg
    assert r.json()["error"]["details"]["types"] == ["chain_sum", "gsm_symbolic", "letter_counting"]


def test_task_type_takes_a_comma_separated_list(rg_server):
    from harness.runner import select_tasks

    async def pick(task_type, split="test"):
        async with AsyncEnvClient(rg_server.url) as c:
            return await select_tasks(c, split, None, task_type)

    assert {t.type for t in asyncio.run(pick("gsm_symbolic,chain_sum"))} == {"gsm_symbolic", "chain_sum"}
    assert len(asyncio.run(pick(" chain_sum , gsm_symbolic ,"))) == 12
    assert {t.type for t in asyncio.run(pick("letter_counting"))} == {"letter_counting"}   # one, as before
    with pytest.raises(ValueError) as e:
        asyncio.run(pick("chain_sum,base_conversion"))
    assert "'base_conversion'" in str(e.value) and "chain_sum, gsm_symbolic, letter_counting" in str(e.value)

"""The ALFWorld server over HTTP: real games in worker processes, the handcoded expert, isolation."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil
import pytest
from conftest import SHARED_DATA, run_service

from skillos.clients.envs import EnvClient, EnvError

pytestmark = pytest.mark.slow
DATA = SHARED_DATA / "alfworld"
SPARES = 2


@pytest.fixture(scope="module")
def alfworld(tmp_path_factory):
    if not (DATA / "json_2.1.1").is_dir():
        pytest.fail(f"ALFWorld data missing at {DATA}")
    env = {"SKILLOS_ALFWORLD_DATA": str(DATA), "SKILLOS_ENV_STEP_TIMEOUT_S": "8",
           "SKILLOS_ALFWORLD_SPARE_WORKERS": str(SPARES)}
    with run_service(["alfworld"], env=env, tmp_path=tmp_path_factory.mktemp("alfworld")) as svc:
        yield svc


@pytest.fixture
def client(alfworld):
    with EnvClient(alfworld.url) as c:
        yield c


def play_expert(client: EnvClient, task_id: str, max_steps: int = 60) -> tuple[bool, float, int, str]:
    """Follow info.expert_action until the episode ends; the session stays open."""
    s = client.create_session(task_id=task_id, expert=True, seed=0)
    action = s.info["expert_action"]
    for n in range(1, max_steps + 1):
        r = client.step(s.session_id, action)
        assert not r.info.get("invalid"), f"the expert chose an inadmissible action {action!r}"
        if r.done:
            return r.won, r.reward, n, s.session_id
        action = r.info["expert_action"]
    return False, 0.0, max_steps, s.session_id


def test_splits_and_tasks_come_from_the_data_dir(client):
    assert client.splits() == ["valid_seen", "valid_train"]
    seen = client.tasks("valid_seen")
    assert len(seen) == 140 and len(client.tasks("valid_train")) == 200
    assert {t.type for t in seen} == {"pick", "look", "clean", "heat", "cool", "pick2"}
    t = seen[0]
    assert t.id.startswith("valid_seen/look_at_obj_in_light-") and t.type == "look" and t.split == "valid_seen"
    assert t.instruction == "look at alarmclock under the desklamp."
    assert [x.id for x in client.tasks("valid_seen", type="heat")] == [x.id for x in seen if x.type == "heat"]
    assert {x.type for x in client.tasks("valid_seen", type="pick,clean")} == {"pick", "clean"}
    with pytest.raises(EnvError) as e:
        client.tasks("valid_seen", type="pick,boil")
    assert e.value.status == 404 and e.value.code == "unknown_type" and "'boil'" in e.value.message
    with pytest.raises(EnvError) as e:
        client.tasks("train")
    assert e.value.status == 404 and "valid_seen" in e.value.message


# Games of four task families on which ALFWorld's handcoded expert wins in few steps (5-16; found
# by running the expert over valid_seen), so that the test stays short on 2 cores.
EXPERT_GAMES = {
    "look": "valid_seen/look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790",
    "pick": "valid_seen/pick_and_place_simple-Candle-None-Cart-401/trial_T20190909_081908_677973",
    "cool": "valid_seen/pick_cool_then_place_in_recep-Apple-None-CounterTop-14/trial_T20190909_044933_815840",
    "heat": "valid_seen/pick_heat_then_place_in_recep-Apple-None-DiningTable-26/trial_T20190907_060234_011675",
}


def test_expert_wins_games_of_several_types(client):
    known = {t.id: t.type for t in client.tasks("valid_seen")}
    assert all(known[tid] == kind for kind, tid in EXPERT_GAMES.items())
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(EXPERT_GAMES, pool.map(lambda tid: play_expert(client, tid), EXPERT_GAMES.values())))
    for kind, (won, reward, steps, sid) in results.items():
        assert won and reward == 1.0, f"the expert did not win the {kind} game in {steps} steps"
        with pytest.raises(EnvError) as e:  # the episode is over
            client.step(sid, "look")
        assert e.value.status == 409 and e.value.code == "episode_done"
        client.close_session(sid)


def test_first_observation_and_invalid_actions_are_alfworld_text(client):
    s = client.create_session(split="valid_seen", index=0)
    try:
        assert s.observation.startswith("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.")
        assert s.observation.endswith("Your task is to: look at alarmclock under the desklamp.")
        assert s.task.type == "look" and "go to desk 1" in s.admissible_actions and "look" in s.admissible_actions
        assert "expert_action" not in s.info
        r = client.step(s.session_id, "fly to the moon")
        assert r.observation == "Nothing happens." and r.info["invalid"] is True and not r.done
        r = client.step(s.session_id, "  go to   desk 1 ")  # spacing is normalized like a typed command
        assert r.observation.startswith("You arrive at desk 1.") and not r.info.get("invalid")
        state = client.session(s.session_id)
        assert state.steps == 2 and not state.done
    finally:
        client.close_session(s.session_id)


def test_bad_input_gets_4xx(client, alfworld):
    cases = [
        (lambda: client.create_session(task_id="valid_seen/no-such-game/trial_0"), 404, "unknown_task"),
        (lambda: client.create_session(split="valid_seen", index=140), 404, "unknown_task"),
        (lambda: client.create_session(split="nope", index=0), 404, "unknown_split"),
        (lambda: client.step("0" * 32, "look"), 404, "unknown_session"),
        (lambda: client.close_session("0" * 32), 404, "unknown_session"),
    ]
    for call, status, code in cases:
        with pytest.raises(EnvError) as e:
            call()
        assert (e.value.status, e.value.code) == (status, code), e.value
    for body in ({}, {"task_id": "x", "split": "valid_seen", "index": 0}, {"split": "valid_seen", "index": -1},
                 {"task_id": "x", "colour": "red"}):
        r = httpx.post(f"{alfworld.url}/v1/sessions", json=body)
        assert r.status_code == 422 and r.json()["error"]["message"], body
    s = client.create_session(split="valid_seen", index=1)
    try:
        r = httpx.post(f"{alfworld.url}/v1/sessions/{s.session_id}/step", json={"action": "x" * 1_000_000})
        assert r.status_code == 422 and "action" in r.json()["error"]["message"]
        r = httpx.post(f"{alfworld.url}/v1/sessions/{s.session_id}/step", content=b"{not json",
                       headers={"content-type": "application/json"})
        assert r.status_code == 422
        assert client.step(s.session_id, "look").observation  # the session still works
    finally:
        client.close_session(s.session_id)


def test_eight_parallel_sessions_on_one_server(client, alfworld):
    tasks = client.tasks("valid_train")[:8]

    def episode(task):
        s = client.create_session(task_id=task.id)
        obs = [s.observation]
        for _ in range(2):
            action = next(a for a in s.admissible_actions if a.startswith("go to"))
            r = client.step(s.session_id, action)
            assert r.observation.startswith("You arrive at") and not r.info.get("invalid")
            obs.append(r.observation)
            s.admissible_actions = r.admissible_actions
        return s.session_id, s.task.id, obs

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(episode, tasks))
    assert len({sid for sid, _, _ in results}) == 8
    assert [tid for _, tid, _ in results] == [t.id for t in tasks]
    for (sid, _, obs), task in zip(results, tasks):
        assert obs[0].endswith(f"Your task is to: {task.instruction}")  # each session kept its own game
        client.close_session(sid)
    assert httpx.get(f"{alfworld.url}/v1/sessions").json()["count"] == 0
    # the 8 workers are stopped or kept as the configured spares: no leaked processes
    deadline = time.monotonic() + 20
    while len(_workers(alfworld)) > SPARES and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(_workers(alfworld)) <= SPARES
    metrics = httpx.get(f"{alfworld.url}/metrics").text
    assert 'skillos_env_sessions_open{env="alfworld"} 0.0' in metrics
    assert 'skillos_env_step_seconds_count{env="alfworld"}' in metrics


def _workers(svc) -> list[psutil.Process]:
    """The game workers: children of the server's forkserver process."""
    server = psutil.Process(svc.proc.pid)
    return [w for p in server.children() if "forkserver" in " ".join(p.cmdline()) for w in p.children()]


def test_killed_worker_fails_only_its_session(client, alfworld):
    a = client.create_session(split="valid_seen", index=10)
    b = client.create_session(split="valid_seen", index=11)
    assert a.info["worker_pid"] != b.info["worker_pid"]
    client.step(a.session_id, "look")
    os.kill(a.info["worker_pid"], signal.SIGKILL)
    with pytest.raises(EnvError) as e:
        client.step(a.session_id, "look")
    assert e.value.status == 502 and e.value.code == "game_failed" and "died" in e.value.message
    with pytest.raises(EnvError) as e:
        client.step(a.session_id, "look")
    assert e.value.status == 410 and e.value.code == "session_failed"
    assert client.step(b.session_id, "look").observation  # the other game goes on
    c = client.create_session(split="valid_seen", index=10)  # and the server still starts games
    assert c.observation.startswith("-= Welcome to TextWorld")
    for s in (b, c):
        client.close_session(s.session_id)
    assert httpx.get(f"{alfworld.url}/readyz").status_code == 200


def test_hung_worker_is_killed_after_the_step_timeout(client, alfworld):
    s = client.create_session(split="valid_seen", index=12)
    pid = s.info["worker_pid"]
    os.kill(pid, signal.SIGSTOP)  # the game stops answering
    started = time.monotonic()
    with pytest.raises(EnvError) as e:
        client.step(s.session_id, "look")
    assert e.value.status == 502 and "did not answer" in e.value.message
    assert 7 <= time.monotonic() - started < 30
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_ttl_eviction_and_session_limit(tmp_path):
    env = {"SKILLOS_ALFWORLD_DATA": str(DATA), "SKILLOS_ENV_SESSION_TTL_S": "3",
           "SKILLOS_ENV_MAX_SESSIONS": "1", "SKILLOS_ALFWORLD_SPARE_WORKERS": "0"}
    with run_service(["alfworld"], env=env, tmp_path=tmp_path) as svc, EnvClient(svc.url) as c:
        a = c.create_session(split="valid_seen", index=0)
        r = httpx.post(f"{svc.url}/v1/sessions", json={"split": "valid_seen", "index": 2})
        assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 3
        assert "limit of 1" in r.json()["error"]["message"]
        time.sleep(6)  # idle past the TTL: the session expires and its worker is stopped
        with pytest.raises(EnvError) as e:
            c.step(a.session_id, "look")
        assert e.value.status == 404
        pid = a.info["worker_pid"]
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        metrics = httpx.get(f"{svc.url}/metrics").text
        assert 'skillos_env_sessions_total{env="alfworld",event="expired"} 1.0' in metrics
        c.close_session(c.create_session(split="valid_seen", index=2).session_id)  # room again

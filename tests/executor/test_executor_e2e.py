"""The executor service end to end over HTTP: real embedded LLM, real ALFWorld and reasoning env
servers, real skill repo; and LLM backends that are down, answer 500 or hang (stand-ins, by name).
"""

from __future__ import annotations

import importlib.util
import json
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from conftest import SHARED_DATA, free_port, run_service

from skillos.clients.executor import ExecutorClient, ExecutorError
from skillos.clients.skillrepo import SkillRepoClient

pytestmark = [pytest.mark.slow, pytest.mark.llm]

_spec = importlib.util.spec_from_file_location(
    "broken_llm_backend", Path(__file__).resolve().parents[1] / "llm" / "broken_llm_backend.py")
_broken = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_broken)
broken_backend = _broken.broken_backend

ALFWORLD_DATA = SHARED_DATA / "alfworld"
# keep turns short: the embedded model is slow on a shared 2-core machine
SMALL = {"max_tokens": 48, "temperature": 0.3}


@pytest.fixture(scope="module")
def alfworld(tmp_path_factory):
    if not (ALFWORLD_DATA / "json_2.1.1").is_dir():
        pytest.fail(f"ALFWorld data missing at {ALFWORLD_DATA}")
    env = {"SKILLOS_ALFWORLD_DATA": str(ALFWORLD_DATA), "SKILLOS_ALFWORLD_SPARE_WORKERS": "1"}
    with run_service(["alfworld"], env=env, tmp_path=tmp_path_factory.mktemp("alfworld")) as svc:
        yield svc


@pytest.fixture(scope="module")
def reasoning(tmp_path_factory):
    with run_service(["reasoning"], tmp_path=tmp_path_factory.mktemp("reasoning")) as svc:
        yield svc


@pytest.fixture(scope="module")
def skillrepo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("skillrepo")
    with run_service(["skillrepo"], env={"SKILLOS_DATABASE_URL": f"sqlite:///{tmp}/repo.db"}, tmp_path=tmp) as svc:
        yield svc


@contextmanager
def executor_on(llm_url: str, tmp_path: Path, alfworld=None, skillrepo=None, reasoning=None, **llm_env):
    env = {"SKILLOS_EXECUTOR_LLM_BASE_URL": llm_url, "SKILLOS_EXECUTOR_LLM_TIMEOUT_S": "600",
           "SKILLOS_EXECUTOR_LLM_MAX_RETRIES": "1", "SKILLOS_EXECUTOR_LLM_BACKOFF_S": "0.05"}
    env.update({f"SKILLOS_EXECUTOR_LLM_{k.upper()}": str(v) for k, v in llm_env.items()})
    if alfworld:
        env["SKILLOS_ALFWORLD_URL"] = alfworld.url
    if skillrepo:
        env["SKILLOS_SKILLREPO_URL"] = skillrepo.url
    if reasoning:
        env["SKILLOS_REASONING_URL"] = reasoning.url
    with run_service(["executor"], env=env, tmp_path=tmp_path) as svc:
        yield svc


@pytest.fixture(scope="module")
def executor(embedded_llm, alfworld, skillrepo, reasoning, tmp_path_factory):
    with executor_on(embedded_llm, tmp_path_factory.mktemp("executor"), alfworld, skillrepo, reasoning) as svc:
        yield svc


def post(svc, path, body, timeout=900.0) -> httpx.Response:
    return httpx.post(f"{svc.url}{path}", json=body, timeout=timeout)


def first_task(alfworld) -> dict:
    return httpx.get(f"{alfworld.url}/v1/tasks", params={"split": "valid_seen"}, timeout=30).json()["tasks"][0]


def test_alfworld_episode_with_retrieved_skills(executor, alfworld, skillrepo):
    task = first_task(alfworld)
    with SkillRepoClient(skillrepo.url) as repo:
        repo.create_repo("exec-e2e")
        repo.put_skill("exec-e2e", {"name": "examine-under-lamp", "description": f"how to {task['instruction']}",
                                    "body": "Find the object, take it, go to the desklamp and use it."})
    r = post(executor, "/v1/episodes", {"env": "alfworld", "task_id": task["id"], "repo": "exec-e2e",
                                        "max_turns": 2, "sampling": SMALL, "seed": 7})
    assert r.status_code == 200, r.text
    ep = r.json()
    assert ep["task_id"] == task["id"] and ep["instruction"] == task["instruction"]
    assert ep["stop_reason"] in ("won", "done", "max_turns"), ep["error"]
    assert ep["success"] == (ep["stop_reason"] == "won")
    assert [(s["name"], s["version"]) for s in ep["skills"]] == [("examine-under-lamp", 1)]
    assert 1 <= ep["steps"] == len(ep["turns"]) <= 2
    first = ep["turns"][0]
    assert "You are in the middle of a room" in first["observation"]
    for t in ep["turns"]:
        assert t["action"] and t["completion"] and isinstance(t["valid"], bool)
        assert t["parse"] in ("exact", "fuzzy", "free", "unmatched", "empty")
        assert t["valid"] == (t["parse"] in ("exact", "fuzzy")) or t["parse"] == "free"
    assert ep["tokens"]["prompt"] > 100 and ep["tokens"]["completion"] > 0
    tm = ep["timing"]
    assert tm["llm_s"] > 0 and tm["env_s"] > 0 and 0 <= tm["overhead_s"] < tm["total_s"]
    assert ep["invalid_actions"] == sum(not t["valid"] for t in ep["turns"])
    metrics = httpx.get(f"{executor.url}/metrics", timeout=10).text
    reason = ep["stop_reason"]
    assert f'skillos_executor_episodes_total{{env="alfworld",stop_reason="{reason}"}}' in metrics
    assert 'skillos_llm_tokens_total{kind="completion",model="smollm2-135m-instruct",role="executor"}' in metrics


def test_act_retrieves_by_meaning_with_dense_search(executor, skillrepo):
    """retrieval=dense reaches the skill repo's encoder: a task that shares no word with the skill finds it."""
    with SkillRepoClient(skillrepo.url) as repo:
        repo.create_repo("exec-dense")
        repo.put_skill("exec-dense", {"name": "cool-object", "description": "Use when a task asks to cool or chill "
                                      "an object.", "body": "Take the object, go to fridge 1, cool it with the fridge."})
        repo.put_skill("exec-dense", {"name": "clean-object", "description": "Use when a task asks to clean or wash "
                                      "an object.", "body": "Take the object, go to sinkbasin 1, clean it."})
    base = {"task": "freeze a lettuce", "env": "alfworld", "observation": "You are in the kitchen.",
            "admissible_actions": ["look", "go to fridge 1"], "sampling": SMALL, "repo": "exec-dense", "k": 1}
    found = {}
    for mode in ("bm25", "dense", "hybrid"):
        r = post(executor, "/v1/act", {**base, "retrieval": mode})
        assert r.status_code == 200, r.text
        found[mode] = [s["name"] for s in r.json()["skills"]]
    assert found == {"bm25": [], "dense": ["cool-object"], "hybrid": ["cool-object"]}
    r = post(executor, "/v1/act", {**base, "retrieval": "semantic"})
    assert r.status_code == 422 and "retrieval" in r.text


def test_reasoning_episode_is_one_turn_with_a_final_answer(executor):
    r = post(executor, "/v1/episodes", {"env": "reasoning", "split": "demo_math", "index": 1,
                                        "sampling": {"max_tokens": 64}})
    assert r.status_code == 200, r.text
    ep = r.json()
    assert ep["steps"] == 1 and ep["stop_reason"] in ("won", "done") and ep["skills"] == []
    assert ep["turns"][0]["action"] == (ep["final_answer"] or "(no answer)")
    assert ep["success"] == (ep["stop_reason"] == "won")


def test_act_and_judge(executor):
    adm = ["go to fridge 1", "go to countertop 1", "look"]
    r = post(executor, "/v1/act", {"task": "put a cold apple on the countertop", "env": "alfworld",
                                   "observation": "You are in the kitchen. You see a fridge 1 and a countertop 1.",
                                   "admissible_actions": adm, "sampling": SMALL,
                                   "skills": [{"name": "cool-things", "description": "cool an object",
                                               "body": "Go to the fridge and cool the object in it."}]})
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["skills"][0]["name"] == "cool-things" and a["tokens"]["completion"] > 0
    assert (a["action"] in adm) == bool(a["valid"])
    j = post(executor, "/v1/judge", {"env": "alfworld", "task": "put a cold apple on the countertop",
                                     "turns": [{"observation": "You are in the kitchen.", "action": "look"}],
                                     "sampling": {"max_tokens": 64}})
    assert j.status_code == 200, j.text
    v = j.json()
    assert isinstance(v["success"], bool) and v["completion"]
    assert v["parsed"] or v["success"] is False  # an unreadable verdict is never a success


def test_acting_options_per_request_shape_the_episode(executor, alfworld):
    """All acting options on (state line, held-back actions, expert demonstrations) against the real
    ALFWorld server: no look-around action is ever played; with them off, the old prompt is used (the
    same request with `acting` off is still a normal episode); a bad option is a 422 that names it."""
    task = first_task(alfworld)
    on = {"state_line": True, "hold_back": True, "demos": "expert", "demos_per_type": 1}
    r = post(executor, "/v1/episodes", {"env": "alfworld", "task_id": task["id"], "max_turns": 3, "sampling": SMALL,
                                        "seed": 11, "acting": on})
    assert r.status_code == 200, r.text
    ep = r.json()
    assert ep["stop_reason"] in ("won", "done", "max_turns"), ep["error"]
    for t in ep["turns"]:
        assert not t["action"].startswith(("look", "inventory", "examine ", "close ")), t["action"]
    off = {"state_line": False, "hold_back": False, "demos": "generic"}
    r = post(executor, "/v1/episodes", {"env": "alfworld", "task_id": task["id"], "max_turns": 1, "sampling": SMALL,
                                        "seed": 11, "acting": off})
    assert r.status_code == 200 and r.json()["steps"] == 1, r.text
    r = post(executor, "/v1/episodes", {"env": "alfworld", "task_id": task["id"], "acting": {"demos": "oracle"}})
    assert r.status_code == 422 and "demos" in r.json()["error"]["message"]
    r = post(executor, "/v1/act", {"task": "t", "observation": "o", "acting": {"state_lines": True}})
    assert r.status_code == 422 and "state_lines" in r.json()["error"]["message"]


def test_an_episode_shows_the_worked_example_of_its_kind(executor, alfworld):
    """Inline skills carrying worked examples: the episode shows the one of its task's kind and says so
    (`examples_shown`); with `examples=0` it shows none."""
    task = first_task(alfworld)
    won = [{"observation": "You are in the middle of a room.", "action": "go to desk 1"},
           {"observation": "You arrive at desk 1. On the desk 1, you see a mug 1, a desklamp 1.",
            "action": "take mug 1 from desk 1"},
           {"observation": "You pick up the mug 1 from the desk 1.", "action": "use desklamp 1"}]
    from skillos.worked_examples import compress

    mine = compress("alfworld", "look at mug under the desklamp.", won)
    other = compress("alfworld", "put a clean mug in shelf.", won)
    skill = {"name": "look-under-lamp", "description": "Look at an object under a lamp.", "body": "1. take it",
             "examples": [other.model_dump(mode="json"), mine.model_dump(mode="json")]}
    body = {"env": "alfworld", "task_id": task["id"], "max_turns": 1, "sampling": SMALL, "seed": 5,
            "skills": [skill]}
    r = post(executor, "/v1/episodes", body)
    assert r.status_code == 200, r.text
    assert task["type"] == "look" and r.json()["examples_shown"] == [mine.id]
    r = post(executor, "/v1/episodes", {**body, "acting": {"examples": 0}})
    assert r.status_code == 200 and r.json()["examples_shown"] == [], r.text


def test_bad_requests_get_clear_4xx(executor, alfworld):
    r = post(executor, "/v1/episodes", {"env": "alfworld"})
    assert r.status_code == 422 and "task_id" in r.json()["error"]["message"]
    r = post(executor, "/v1/episodes", {"env": "minecraft", "task_id": "x"})
    assert r.status_code == 422 and "env" in r.json()["error"]["message"]
    r = post(executor, "/v1/episodes", {"env": "alfworld", "task_id": "valid_seen/no-such-task/trial_0"})
    assert r.status_code == 404, r.text
    r = post(executor, "/v1/episodes", {"env": "alfworld", "task_id": first_task(alfworld)["id"],
                                        "repo": "no-such-repo"})
    assert r.status_code == 404 and "skill repo" in r.json()["error"]["message"]
    r = post(executor, "/v1/episodes", {"env": "alfworld", "split": "valid_seen", "index": 0, "max_turns": 0})
    assert r.status_code == 422 and "max_turns" in r.json()["error"]["message"]
    for seed in (-1, 2**63):   # past int64 vLLM refuses the seed: a 422 here, not a 502 from the backend
        r = post(executor, "/v1/episodes", {"env": "alfworld", "split": "valid_seen", "index": 0, "seed": seed})
        assert r.status_code == 422 and "seed" in r.json()["error"]["message"], seed
    r = post(executor, "/v1/judge", {"task": "t"})
    assert r.status_code == 422 and "turns" in r.json()["error"]["message"]
    with ExecutorClient(executor.url) as client, pytest.raises(ExecutorError) as e:
        client.episode(env="alfworld", task_id="valid_seen/no-such-task/trial_0")
    assert e.value.status == 404


# ---------------------------------------------------------------- broken LLM backends
def _failed_episode(svc, alfworld) -> dict:
    r = post(svc, "/v1/episodes", {"env": "alfworld", "task_id": first_task(alfworld)["id"], "max_turns": 3})
    assert r.status_code == 200, r.text
    ep = r.json()
    assert ep["success"] is False and ep["stop_reason"] == "llm_error" and ep["steps"] == 0
    return ep


def test_llm_down_fails_the_episode_with_the_reason(alfworld, tmp_path):
    with executor_on(f"http://127.0.0.1:{free_port()}/v1", tmp_path, alfworld) as svc:
        ep = _failed_episode(svc, alfworld)
        assert "connection" in ep["error"] and "after 2 attempts" in ep["error"]
        with ExecutorClient(svc.url) as client:  # the typed client reads the same failed episode
            typed = client.episode(env="alfworld", task_id=first_task(alfworld)["id"], max_turns=1)
        assert typed.success is False and typed.stop_reason == "llm_error" and typed.turns == []
        r = post(svc, "/v1/act", {"task": "t", "observation": "o"})
        assert r.status_code == 502 and r.json()["error"]["code"] == "llm_unavailable"
        assert httpx.get(f"{svc.url}/readyz", timeout=10).status_code == 503


def test_llm_answering_500_fails_the_episode(alfworld, tmp_path):
    with broken_backend("500", free_port()) as llm, executor_on(llm, tmp_path, alfworld) as svc:
        ep = _failed_episode(svc, alfworld)
        assert "HTTP 500" in ep["error"] and "simulated internal error" in ep["error"]


def test_llm_timing_out_fails_the_episode(alfworld, tmp_path):
    with broken_backend("hang", free_port()) as llm, \
            executor_on(llm, tmp_path, alfworld, timeout_s=1, max_retries=0) as svc:
        ep = _failed_episode(svc, alfworld)
        assert "timeout" in ep["error"] and ep["timing"]["llm_s"] >= 1.0


def test_a_client_that_disconnects_cancels_its_episode_llm_stand_in(reasoning, tmp_path):
    """With one episode slot and an LLM that never answers (stand-in: broken_backend "hang"), a client
    that gives up must free the slot: the next episode reaches the LLM at once instead of queueing
    behind an episode nobody waits for."""
    env = {"SKILLOS_EXECUTOR_MAX_CONCURRENT_EPISODES": "1"}
    with broken_backend("hang", free_port()) as llm, \
            run_service(["executor"], env={**env, "SKILLOS_EXECUTOR_LLM_BASE_URL": llm,
                                           "SKILLOS_EXECUTOR_LLM_TIMEOUT_S": "600",
                                           "SKILLOS_EXECUTOR_LLM_MAX_RETRIES": "0",
                                           "SKILLOS_REASONING_URL": reasoning.url}, tmp_path=tmp_path) as svc:
        body = {"env": "reasoning", "split": "demo_math", "index": 0}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{svc.url}/v1/episodes", json=body, timeout=3)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{svc.url}/v1/episodes", json=body, timeout=5)
        assert _broken.chat_requests_seen(llm) == 2  # without the cancel: 1, the 2nd episode waits


@pytest.fixture(scope="module")
def qwen_05b(tmp_path_factory):
    """The smallest capable model (Qwen2.5-Coder-0.5B-Instruct, Q4_K_M, fetched and verified by the set-up)."""
    from skillos.models.store import ModelError, resolve

    try:
        resolve("qwen2.5-coder-0.5b-instruct")
    except ModelError as e:
        pytest.fail(f"{e} (scripts/setup.sh fetches it)")
    with run_service(["llm", "--model", "qwen2.5-coder-0.5b-instruct", "--parallel", "1"],
                     tmp_path=tmp_path_factory.mktemp("qwen"), ready_timeout=300) as svc:
        yield f"{svc.url}/v1"


def test_alfworld_episode_on_qwen_0_5b_plays_only_admissible_actions(qwen_05b, alfworld, tmp_path):
    """A capable model through the real services: every turn a thought and an action the game accepts
    (the JSON decision schema), the task's own words in the first thought's reach, nothing invalid."""
    task = first_task(alfworld)
    with executor_on(qwen_05b, tmp_path, alfworld, model="qwen2.5-coder-0.5b-instruct") as ex:
        r = post(ex, "/v1/episodes", {"env": "alfworld", "task_id": task["id"], "max_turns": 3, "seed": 3})
        metrics = httpx.get(f"{ex.url}/metrics", timeout=10).text
    assert r.status_code == 200, r.text
    ep = r.json()
    assert ep["stop_reason"] in ("won", "max_turns"), ep["error"]
    assert 1 <= ep["steps"] == len(ep["turns"]) <= 3
    for t in ep["turns"]:
        assert t["parse"] == "exact" and t["valid"], t          # the schema's enum: an admissible action
        assert t["thought"].strip(), t                          # and it reasoned first
    assert ep["invalid_actions"] == 0
    assert 'model="qwen2.5-coder-0.5b-instruct",role="executor"' in metrics


SMALL_CTX = 2048   # tokens per slot: the opening prompt of an ALFWorld episode fits, a dozen full turns do not


@pytest.fixture(scope="module")
def small_context_llm(tmp_path_factory):
    """The embedded SmolLM2 on llama-server with a context of SMALL_CTX tokens."""
    with run_service(["llm", "--model", "smollm2-135m-instruct", "--parallel", "1", "--ctx", str(SMALL_CTX)],
                     tmp_path=tmp_path_factory.mktemp("small-ctx"), ready_timeout=180) as svc:
        yield f"{svc.url}/v1"


def test_a_prompt_longer_than_the_context_hides_the_oldest_steps(small_context_llm, alfworld, tmp_path):
    """A long episode with its full history outgrows a real llama-server's context: the executor hides its oldest
    steps a chunk at a time and plays on (it ended on the backend's HTTP 400 before); /v1/act does the same for
    a long history, and a request whose own text cannot fit gets a 400 that says what to shorten."""
    task = first_task(alfworld)
    history = [{"observation": f"You arrive at cabinet {i}. The cabinet {i} is open. In it, you see a "
                               f"cloth {i}, a soapbar {i} and a candle {i}.", "action": f"go to cabinet {i + 1}",
                "thought": "Nothing the task needs here; I go on to the next cabinet."} for i in range(1, 41)]
    with executor_on(small_context_llm, tmp_path, alfworld) as ex:
        r = post(ex, "/v1/episodes", {"env": "alfworld", "task_id": task["id"], "max_turns": 14, "history_len": 30,
                                      "sampling": SMALL, "seed": 5})
        episode_logs = ex.logs()   # before /v1/act, whose long history overflows too
        act = post(ex, "/v1/act", {"env": "alfworld", "task": task["instruction"], "observation": "You arrive at "
                                   "cabinet 41. The cabinet 41 is closed.", "history": history, "history_len": 30,
                                   "sampling": SMALL})
        too_long = post(ex, "/v1/act", {"env": "alfworld", "task": "put a mug in shelf. " * 900,
                                        "observation": "You are in the middle of a room.", "sampling": SMALL})
        act_logs = ex.logs()[len(episode_logs):]
    assert r.status_code == 200, r.text
    ep = r.json()
    assert ep["stop_reason"] in ("won", "done", "max_turns"), ep["error"]
    assert ep["stop_reason"] != "max_turns" or ep["steps"] == 14
    fitted = [json.loads(line) for line in episode_logs.splitlines() if '"prompt_over_context"' in line]
    assert fitted, "no turn of the episode outgrew the context: raise max_turns or lower SMALL_CTX"
    assert all(0 < f["hidden"] < f["past_steps"] for f in fitted)
    assert act.status_code == 200, act.text
    assert act.json()["action"] and '"prompt_over_context"' in act_logs
    assert too_long.status_code == 400, too_long.text
    err = too_long.json()["error"]
    assert err["code"] == "context_exceeded" and "shorten" in err["message"]

"""The curator service's wire around the core's decision, in-process (fake LLM, fake skill repo; no network):
the core's `Decision` and `CurationRequestError` come out of `POST /v1/curate` as the same JSON and the
same 422 as before the core had types of its own (tests/curator/test_curator_api.py does it for real)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import ClassVar

import httpx
import pytest

from services.curator.app import build_app
from services.curator.serving import Curator
from services.curator.settings import CuratorSettings
from skillos.clients.skillrepo import SkillRepoError
from skillos.llm import ChatResult, LLMError
from skillos.llm.client import Usage
from skillos.protocol.skillrepo import OpOutcome, OpsResult

COMPLETION = json.dumps({"calls": [
    {"name": "new_skill_insert", "arguments": {"skill_name": "clean-then-place", "content": "1. clean it"}},
    {"name": "skill_delete", "arguments": {"skill_name": "no-such-skill"}},
    {"name": "skill_update", "arguments": {"skill_name": "find-object"}}]})
TRAJ = {"task": "put a clean apple in fridge", "turns": [{"observation": "o", "action": "go to x"}]}
FIELDS = ["calls", "validity_rate", "applied", "raw_completion", "raw_tool_calls", "messages", "tokens", "usage",
          "model", "error", "call_id", "example"]


class FakeLLM:
    model = "fake-model"

    def __init__(self, fail: bool = False):
        self.fail = fail

    async def chat(self, messages, **kw):
        if self.fail:
            raise LLMError("connection", "backend down")
        return ChatResult(content=COMPLETION, finish_reason="stop", usage=Usage(prompt_tokens=11, completion_tokens=7),
                          raw={"model": "served", "prompt_token_ids": [1, 2], "choices": [{"token_ids": [3]}]},
                          logprobs=[{"token": "a", "logprob": -0.5}], latency_s=0.25)

    async def aclose(self):
        pass


class FakeRepo:
    """The skill repo client: repo "missing" is not there; every delete is refused."""

    async def get_repo(self, name):
        if name == "missing":
            raise SkillRepoError(404, "not_found", "no")
        return SimpleNamespace(name=name)

    sent: ClassVar[list] = []   # the examples sent with the batches
    vouched: ClassVar[list] = []   # the provenance sent with them

    async def apply_ops(self, repo, ops, idempotency_key=None, atomic=True, origin=None, example=None,
                        provenance=None):
        FakeRepo.sent.append(example)
        FakeRepo.vouched.append(provenance)
        out = [OpOutcome(index=i, name=op["name"], status="refused", code="skill_not_found", message="nope")
               if op["name"] == "skill_delete" else
               OpOutcome(index=i, name=op["name"], status="applied", skill_name=op["arguments"]["skill_name"],
                         version=1, example="added" if example else None) for i, op in enumerate(ops)]
        return OpsResult(applied=False, verdicts=out)

    async def aclose(self):
        pass


def _post(body: dict, *, fail: bool = False, with_repo: bool = True) -> httpx.Response:
    app = build_app(CuratorSettings())
    curator = Curator(CuratorSettings(), llm=FakeLLM(fail), judge_llm=FakeLLM(), repo=FakeRepo())
    if not with_repo:
        curator._ops = None
    app.state.curator = curator

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://curator") as c:
            return await c.post("/v1/curate", json=body)
    return asyncio.run(go())


def test_a_decision_is_answered_with_every_field_in_order():
    r = _post({"trajectory": TRAJ, "self_judged_success": False,
               "retrieved_skills": [{"name": "find-object"}, {"name": "no-such-skill"}],
               "repo": "r", "seed": 3, "logprobs": True})
    assert r.status_code == 200, r.text
    out = r.json()
    assert list(out) == FIELDS
    assert [list(c) for c in out["calls"]] == [["index", "name", "arguments", "valid", "applied", "reason",
                                                "skill_name", "skill_version", "normalized", "example"]] * 3
    assert [(c["valid"], c["applied"]) for c in out["calls"]] == [(True, True), (False, False), (False, False)]
    assert out["calls"][1]["reason"] == "skill_not_found: nope"
    assert out["validity_rate"] == pytest.approx(1 / 3) and out["applied"] is True
    assert out["tokens"] == {"prompt_token_ids": [1, 2], "completion_token_ids": [3], "completion_tokens": ["a"],
                             "completion_logprobs": [-0.5]}
    assert list(out["usage"]) == ["prompt_tokens", "completion_tokens", "llm_seconds", "total_seconds"]
    assert out["usage"]["prompt_tokens"] == 11 and out["usage"]["llm_seconds"] == 0.25
    assert out["model"] == "served" and out["error"] is None and len(out["call_id"]) == 16


def test_a_reported_success_leaves_a_worked_example_with_the_ops():
    """The outcome (not the self-judge the curator is told) decides: a success sends the system's compression of
    the trajectory with the batch, and each applied call says what became of it; a failure sends none."""
    FakeRepo.sent.clear()
    body = {"trajectory": TRAJ, "self_judged_success": False, "repo": "r"}
    out = _post({**body, "outcome": {"success": True, "source": "env"}}).json()
    example = FakeRepo.sent[-1]
    assert example["source"] == "env" and example["steps"] and example["task"] == TRAJ["task"]
    assert out["example"]["id"] == example["id"]
    assert [c["example"] for c in out["calls"]] == ["added", None, None]
    # what the curator vouches for, from its side: its model and the outcome's source (in the repo's words)
    assert FakeRepo.vouched[-1] == {"curator_model": "fake-model", "requested_by": "open", "trajectory": None,
                                    "outcome_source": "environment"}, FakeRepo.vouched[-1]
    out = _post({**body, "outcome": {"success": False, "source": "caller"}}).json()
    assert FakeRepo.sent[-1] is None and out["example"] is None
    r = _post({**body, "outcome": {"success": True, "source": "oracle"}})
    assert r.status_code == 422 and "source" in r.text


def test_a_skill_repo_older_than_worked_examples_still_gets_the_ops():
    """Its OpsRequest refuses the unknown field with a 422: the curator sends the batch again without it."""
    from services.curator.serving import RepoForCuration

    class OldClient:
        sent: ClassVar[list] = []

        async def apply_ops(self, repo, ops, idempotency_key=None, atomic=True, origin=None, example=None,
                            provenance=None):
            OldClient.sent.append(example)
            if example is not None:
                raise SkillRepoError(422, "invalid_request", "example: Extra inputs are not permitted")
            return OpsResult(applied=True, verdicts=[])

    result = asyncio.run(RepoForCuration(OldClient()).apply_ops("r", [{"name": "skill_delete"}], example={"id": "x"}))
    assert result.applied and OldClient.sent == [{"id": "x"}, None]


def test_a_failed_llm_is_a_200_with_the_error():
    out = _post({"trajectory": TRAJ, "self_judged_success": True, "repo": "r"}, fail=True).json()
    assert list(out) == FIELDS
    assert out["calls"] == [] and out["validity_rate"] == 0.0 and out["applied"] is False
    assert out["tokens"] == {"prompt_token_ids": None, "completion_token_ids": None, "completion_tokens": None,
                             "completion_logprobs": None}
    assert out["error"] and "backend down" in out["error"] and out["model"] == "fake-model"


@pytest.mark.parametrize("body,with_repo,message", [
    ({"apply": True}, True, "apply is true but no repo was given: set repo, or apply=false"),
    ({"repo": "r"}, False, "apply is true but this curator has no skill repo"),
])
def test_the_cores_refusal_is_the_same_422(body, with_repo, message):
    r = _post({"trajectory": TRAJ, "self_judged_success": True, **body}, with_repo=with_repo)
    assert r.status_code == 422
    assert r.content == json.dumps({"error": {"code": "invalid_request", "message": message, "details": None}},
                                   separators=(",", ":")).encode()


def test_an_unknown_repo_is_404():
    r = _post({"trajectory": TRAJ, "self_judged_success": True, "repo": "missing"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "repo_not_found"

"""skillos.curation on its own: the op union, the schemas generated from it (pinned byte for byte), the
verdicts, and one whole decision through a fake ChatLLM and a fake repo (no service, no network)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from skillos.curation import (
    ATOMIC,
    CURATOR_OP,
    CURATOR_TOOLS,
    OP_NAMES,
    ChatLLM,
    CurationOptions,
    CurationRequestError,
    Decision,
    DecisionRequest,
    NewSkillInsert,
    OpVerdict,
    SkillDelete,
    SkillUpdate,
    build_curator_messages,
    curate,
    curator_json_schema,
    settle,
    validity_rate,
)
from skillos.curation.ops import required, signature
from skillos.llm import ChatResult, LLMClient, LLMError, LLMSettings
from skillos.protocol.curator import CurateRequest, CurateResponse
from skillos.protocol.skillrepo import OpOutcome, OpsResult

DATA = Path(__file__).parent / "data"


# ---- the schemas the LLM sees: generated from the op classes, unchanged byte for byte ------------

def test_tools_definition_is_the_pinned_one():
    golden = json.loads((DATA / "golden_tools.json").read_text())
    assert json.dumps(CURATOR_TOOLS) == json.dumps(golden)


@pytest.mark.parametrize("case", sorted(json.loads((DATA / "golden_json_schemas.json").read_text())))
def test_json_mode_schema_is_the_pinned_one(case):
    golden = json.loads((DATA / "golden_json_schemas.json").read_text())[case]
    min_calls, max_calls, existing = golden["args"]
    assert json.dumps(curator_json_schema(min_calls, max_calls, existing=existing)) == json.dumps(golden["schema"])


@pytest.mark.parametrize("mode", ["tools", "json", "text"])
def test_prompt_is_the_pinned_one(mode):
    golden = json.loads((DATA / "golden_messages.json").read_text())[mode]
    traj = json.loads((DATA / "trajectory_clean_apple.json").read_text())
    skills = [{"name": "clean-then-place", "content": "---\nname: clean-then-place\n---\n1. find"}]
    assert build_curator_messages(traj, False, skills, output_format=mode) == golden


@pytest.mark.parametrize("env", ["webshop", "reasoning"])
def test_prompt_speaks_the_trajectorys_env(env):
    """The example skill is the env's own: an ALFWorld example made a small curator write ALFWorld steps
    for WebShop tasks. Each env's JSON example is a well-formed call of the same skill as its Markdown."""
    from jsonschema import validate

    from skillos.curation import parse_curator_output
    from skillos.curation.prompt import ENV_WORDING

    for mode in ("json", "tools", "text"):
        system = build_curator_messages({"task": "t", "env": env}, False, [], output_format=mode)[0]["content"]
        assert "OBJECT" not in system and "cabinet" not in system and "where to look first" not in system
    system_json = build_curator_messages({"task": "t", "env": env}, False, [],
                                                  output_format="json")[0]["content"]
    answer = system_json[system_json.rindex("\n") + 1:]
    validate(json.loads(answer), curator_json_schema(0, 2))
    [call] = parse_curator_output(answer, None)
    example = ENV_WORDING[env].example
    assert call.ok and call.name == "new_skill_insert"
    assert f"name: {call.arguments['skill_name']}\n" in example
    assert f"description: {json.loads(answer)['calls'][0]['arguments']['description']}\n" in example


def test_every_env_has_its_own_curator_wording_and_others_fall_back_to_alfworlds():
    from typing import get_args

    from skillos.curation.prompt import ENV_WORDING
    from skillos.protocol.executor import EnvName

    assert set(get_args(EnvName)) <= set(ENV_WORDING)
    alfworld = build_curator_messages({"task": "t", "env": "alfworld"}, False, [])[0]["content"]
    for env in ("", "generic"):
        assert build_curator_messages({"task": "t", "env": env}, False, [])[0]["content"] == alfworld


# ---- the op union --------------------------------------------------------------------------------

def test_ops_are_one_discriminated_union():
    assert OP_NAMES == ("new_skill_insert", "skill_update", "skill_delete")
    assert isinstance(CURATOR_OP.validate_python({"name": "skill_delete", "skill_name": "x"}), SkillDelete)
    op = CURATOR_OP.validate_python({"name": "skill_update", "skill_name": "x", "new_name": "y"})
    assert isinstance(op, SkillUpdate) and op.arguments() == {"skill_name": "x", "new_name": "y"}
    with pytest.raises(ValidationError):
        CURATOR_OP.validate_python({"name": "skill_rename", "skill_name": "x"})
    with pytest.raises(ValidationError):   # content is required
        CURATOR_OP.validate_python({"name": "new_skill_insert", "skill_name": "x"})
    assert NewSkillInsert(skill_name="a", content="b").name == "new_skill_insert"


def test_signatures_and_required_arguments_come_from_the_classes():
    assert [signature(n) for n in OP_NAMES] == ["new_skill_insert(skill_name, content)",
                                                "skill_update(skill_name, new_name?, new_content?)",
                                                "skill_delete(skill_name)"]
    for tool in CURATOR_TOOLS:
        assert tool["function"]["parameters"]["required"] == required(tool["function"]["name"])
    system = build_curator_messages({"task": "t"}, True, [])[0]["content"]
    assert all(f"- {signature(n)}:" in system for n in OP_NAMES)


# ---- verdicts ------------------------------------------------------------------------------------

def _outcome(index, status, **kw):
    return OpOutcome(index=index, name="x", status=status, **kw)


def test_settle_copies_the_repos_answer_and_a_state_refusal_makes_the_call_invalid():
    verdicts = [OpVerdict(index=0, name="new_skill_insert", valid=True),
                OpVerdict(index=1, name=None, valid=False, reason="call has no function name"),
                OpVerdict(index=2, name="skill_delete", valid=True)]
    applied = settle(verdicts, [0, 2], [_outcome(0, "applied", skill_name="a", version=1),
                                        _outcome(1, "refused", code="skill_not_found", message="no b")])
    assert applied is True
    assert (verdicts[0].applied, verdicts[0].skill_name, verdicts[0].skill_version) == (True, "a", 1)
    assert not verdicts[2].valid and verdicts[2].reason == "skill_not_found: no b" and not verdicts[2].applied
    assert validity_rate(verdicts) == pytest.approx(1 / 3)
    assert validity_rate([]) == 1.0   # abstaining is a valid decision


# ---- one whole decision --------------------------------------------------------------------------

class FakeLLM:
    """A ChatLLM that answers one fixed completion and records what it was asked."""

    model = "fake-model"

    def __init__(self, content: str = "", fail: bool = False):
        self.content, self.fail, self.asked = content, fail, []

    async def chat(self, messages, **kwargs):
        self.asked.append((messages, kwargs))
        if self.fail:
            raise LLMError("connection", "backend down")
        return ChatResult(content=self.content, finish_reason="stop")

    async def aclose(self):
        pass


class FakeRepo:
    """An OpsPort: the repo has skill "find-object" only; records the batches it got."""

    def __init__(self):
        self.batches = []

    async def get_repo(self, name):
        return SimpleNamespace(name=name)

    async def apply_ops(self, repo, ops, idempotency_key=None, atomic=True, origin=None):
        self.batches.append({"repo": repo, "ops": ops, "atomic": atomic, "origin": origin})
        out = []
        for i, op in enumerate(ops):
            name = op["arguments"]["skill_name"]
            if op["name"] == "skill_delete" and name != "find-object":
                out.append(_outcome(i, "refused", code="skill_not_found", message=f"no {name}"))
            else:
                out.append(_outcome(i, "applied", skill_name=name, version=1))
        return OpsResult(applied=all(o.status == "applied" for o in out), verdicts=out)


def _request(**kw):
    return DecisionRequest(**{"trajectory": {"task": "put a clean apple in fridge"}, "self_judged_success": False,
                              "retrieved_skills": [{"name": "find-object"}], "repo": "r", **kw})


def test_a_decision_applies_its_valid_calls_one_by_one_and_counts_r_fc_per_call():
    completion = json.dumps({"calls": [
        {"name": "new_skill_insert", "arguments": {"skill_name": "clean-then-place", "content": "1. clean it"}},
        {"name": "skill_delete", "arguments": {"skill_name": "stale-skill"}},   # shown, gone from the repo since
        {"name": "skill_update", "arguments": {"skill_name": "find-object"}},   # neither new_name nor new_content
        {"name": "skill_delete", "arguments": {"skill_name": "Someone Elses Skill"}},   # never shown
    ]})
    llm, repo = FakeLLM(completion), FakeRepo()
    shown = [{"name": "find-object"}, {"name": "stale-skill"}]
    response = asyncio.run(curate(_request(retrieved_skills=shown), llm=llm, repo=repo,
                                  options=CurationOptions(output_mode="json")))

    # the refused update never reached the repo; the other two went as one non-atomic batch
    assert ATOMIC is False
    assert [b["atomic"] for b in repo.batches] == [False]
    assert [op["name"] for op in repo.batches[0]["ops"]] == ["new_skill_insert", "skill_delete"]
    assert repo.batches[0]["origin"]["source"] == "curator"
    assert repo.batches[0]["origin"]["curator_call"] == response.call_id
    # the insert is applied although its sibling delete was refused by the repo
    insert, delete, update, foreign = response.calls
    assert insert.valid and insert.applied and insert.skill_version == 1
    assert not delete.valid and delete.reason.startswith("skill_not_found")
    assert not update.valid and "needs new_content, new_name or both" in update.reason
    # an edit of a skill the curator was not shown is refused before the repo, in every output mode
    assert not foreign.valid and foreign.reason.startswith("not_shown") and "Someone Elses" in foreign.reason
    assert response.applied and response.validity_rate == pytest.approx(1 / 4)
    # json mode: the schema offers edits of the shown skills only
    kwargs = llm.asked[0][1]
    schema = kwargs["response_format"]["schema"]
    assert schema == curator_json_schema(1, 2, existing=["find-object", "stale-skill"])
    assert response.model == "fake-model"


def test_tools_mode_edits_only_the_skills_it_was_shown():
    """Issue 51: tools mode has no schema to hold the curator to the retrieved skills; validate does."""
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
             for i, (name, args) in enumerate([("skill_delete", {"skill_name": "find-object"}),
                                               ("skill_delete", {"skill_name": "deploy-everything"})])]

    class ToolsLLM(FakeLLM):
        async def chat(self, messages, **kwargs):
            self.asked.append((messages, kwargs))
            return ChatResult(content="", finish_reason="tool_calls", tool_calls=calls)

    repo = FakeRepo()
    response = asyncio.run(curate(_request(), llm=ToolsLLM(), repo=repo, options=CurationOptions(output_mode="tools")))
    assert [op["arguments"]["skill_name"] for op in repo.batches[0]["ops"]] == ["find-object"]
    assert response.calls[1].reason.startswith("not_shown")


def test_a_failed_llm_is_an_answer_with_no_calls_not_an_exception():
    repo = FakeRepo()
    response = asyncio.run(curate(_request(), llm=FakeLLM(fail=True), repo=repo, options=CurationOptions()))
    assert response.error and response.calls == [] and response.validity_rate == 0.0
    assert repo.batches == []


def test_without_apply_nothing_is_sent():
    repo = FakeRepo()
    completion = '{"calls": [{"name": "skill_delete", "arguments": {"skill_name": "find-object"}}]}'
    response = asyncio.run(curate(_request(apply=False), llm=FakeLLM(completion), repo=repo,
                                  options=CurationOptions()))
    assert repo.batches == [] and response.calls[0].valid and not response.calls[0].applied


@pytest.mark.parametrize("kw,repo,message", [
    ({"repo": None}, FakeRepo(), "apply is true but no repo was given: set repo, or apply=false"),
    ({}, None, "apply is true but this curator has no skill repo"),
])
def test_the_callers_mistakes_are_the_cores_own_error_not_an_http_one(kw, repo, message):
    llm = FakeLLM("{}")
    with pytest.raises(CurationRequestError) as err:
        asyncio.run(curate(_request(**kw), llm=llm, repo=repo, options=CurationOptions()))
    assert str(err.value) == message and llm.asked == []
    assert not hasattr(err.value, "status")


def test_a_decision_is_the_cores_type_and_the_wire_maps_it_field_for_field():
    completion = '{"calls": [{"name": "skill_delete", "arguments": {"skill_name": "find-object"}}]}'
    wire = CurateRequest(trajectory={"task": "put a clean apple in fridge"}, self_judged_success=False,
                         retrieved_skills=[{"name": "find-object"}], repo="r", seed=4,
                         origin={"source": "run", "run": "x", "position": 2})
    repo = FakeRepo()
    decision = asyncio.run(curate(wire.to_decision_request(), llm=FakeLLM(completion), repo=repo,
                                  options=CurationOptions()))
    assert type(decision) is Decision
    assert repo.batches[0]["origin"] == {"source": "run", "run": "x", "position": 2,
                                         "curator_call": decision.call_id}
    response = CurateResponse.from_decision(decision)
    assert [f.name for f in fields(Decision)] == list(CurateResponse.model_fields)
    assert response.calls[0] is decision.calls[0] and response.call_id == decision.call_id
    assert response.usage.total_seconds == decision.usage.total_seconds


def test_the_http_llm_client_is_a_chat_llm():
    client = LLMClient(LLMSettings.for_role("curator"))
    try:
        assert isinstance(client, ChatLLM) and client.model == client.settings.model
    finally:
        asyncio.run(client.aclose())
    assert isinstance(FakeLLM(), ChatLLM)

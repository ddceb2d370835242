"""The trainer's curation is `skillos.curation`, driven by its policy: no curator service internals."""

from __future__ import annotations

import ast
from pathlib import Path

from services.trainer.rollouts.base import PolicyLLM
from services.trainer.rollouts.curator import InProcessCurator
from skillos.curation import ChatLLM, CurationOptions

TRAINER = Path(__file__).resolve().parents[2] / "services" / "trainer"


def test_the_policy_is_a_chat_llm():
    llm = PolicyLLM(batcher=None, tokenizer=None, max_prompt_tokens=16, model_name="policy")
    assert isinstance(llm, ChatLLM) and llm.model == "policy"
    assert InProcessCurator(llm, repo=None, options=CurationOptions()).llm is llm


def test_the_trainer_does_not_import_the_curator_service():
    offenders = []
    for path in sorted(TRAINER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}:{node.lineno} {n}" for n in names if n.startswith("services.curator")]
    assert offenders == []


def test_the_in_process_curator_answers_the_curator_services_wire():
    """The core returns its own `Decision`; the trainer maps it to the `CurateResponse` the stream and the
    scoring read, as the curator service does."""
    import asyncio
    from types import SimpleNamespace

    from skillos.llm import ChatResult
    from skillos.protocol.curator import CurateRequest, CurateResponse

    class Policy:
        model = "policy"

        async def chat(self, messages, **kwargs):
            return ChatResult(content='{"calls": []}', finish_reason="stop")

        async def aclose(self):
            pass

    class Repo:
        async def get_repo(self, name):
            return SimpleNamespace(name=name)

        async def apply_ops(self, *a, **kw):
            raise AssertionError("no call, nothing to apply")

    request = CurateRequest(trajectory={"task": "put a clean apple in fridge"}, self_judged_success=True, repo="r")
    response = asyncio.run(InProcessCurator(Policy(), Repo(), CurationOptions()).curate(request))
    assert type(response) is CurateResponse
    assert response.calls == [] and response.validity_rate == 1.0 and response.model == "policy"

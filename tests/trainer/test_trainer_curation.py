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

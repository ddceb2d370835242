"""Stage 1 (App. B.2.1) for real: `skillos group annotate` against the embedded llama.cpp server
(SmolLM2-135M, schema-constrained JSON), then stage 2 (`skillos group reasoning`) on the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jsonschema
import pytest
from conftest import ROOT

from services.envs.reasoning.environment import DEMO_DATA
from services.trainer.grouping.annotate import FIELDS, response_format

pytestmark = [pytest.mark.slow, pytest.mark.llm, pytest.mark.timeout(900)]

N_TASKS = 6


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skillos.cli", "group", *args], cwd=ROOT, capture_output=True,
                          check=False, text=True, env={**os.environ, **env}, timeout=800)


def _cli(args: list[str], env: dict[str, str]) -> dict:
    proc = _run(args, env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def test_annotate_demo_tasks_with_the_embedded_llm_then_group(embedded_llm, tmp_path):
    rows = [json.loads(line) for f in sorted(DEMO_DATA.glob("*.jsonl")) for line in f.read_text().splitlines()
            if line.strip()]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cache = tmp_path / "ann.jsonl"
    args = ["annotate", "--tasks-file", str(tasks), "--cache", str(cache), "--json-style", "llama_cpp",
            "--limit", str(N_TASKS), "--concurrency", "2"]
    first = _cli(args, {"SKILLOS_JUDGE_LLM_BASE_URL": embedded_llm, "SKILLOS_JUDGE_LLM_TIMEOUT_S": "300"})
    assert first["annotated"] == first["llm_annotated"] == N_TASKS, first
    lines = [json.loads(line) for line in cache.read_text().splitlines()]
    assert len(lines) == N_TASKS
    schema = response_format("llama_cpp")["schema"]
    for line in lines:
        assert line["ok"], line                                   # the grammar gives valid JSON
        jsonschema.validate(line["annotation"], schema)
        assert any(line["annotation"][f] for f in FIELDS), line   # not an empty annotation
    assert first["valid"] == N_TASKS and first["valid_first_try"] >= 1

    # rerun: every answer comes from the cache; an unreachable LLM proves none was asked
    again = _cli(args, {"SKILLOS_JUDGE_LLM_BASE_URL": "http://127.0.0.1:9/v1", "SKILLOS_JUDGE_LLM_MAX_RETRIES": "0"})
    assert again["from_cache"] == N_TASKS and again["llm_annotated"] == 0, again
    assert len(cache.read_text().splitlines()) == N_TASKS

    # stage 2 reads the same cache (same model name); whether 135M annotations pass the dependency
    # gate is the model's business, but the pairs must have been scored with them
    out = tmp_path / "groups.jsonl"
    proc = _run(["reasoning", "--tasks-file", str(tasks), "--annotations", str(cache), "--num-groups", "3",
                 "--size-min", "2", "--size-max", "3", "--out", str(out)], {})
    report = json.loads((tmp_path / "groups.report.json").read_text())
    assert report["tasks_without_annotation"] == len(rows) - N_TASKS
    assert report["groups"] > 0 or sum(report["gate_failures"].values()) > 0, report
    if proc.returncode == 0:
        annotated = {line["task_id"] for line in lines}
        for line in out.read_text().splitlines():
            assert {t["id"] for t in json.loads(line)["tasks"]} <= annotated
    else:
        assert "passed the dependency gate" in proc.stderr and not out.exists(), proc.stderr[-2000:]

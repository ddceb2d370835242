"""Fixtures of the console tests: a real skill repo with tokens, data made through its API and by the
real report code, and a real console (`skillos serve console`) on loopback."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from conftest import run_service
from console_data import (
    HOSTILE_BODY,
    HOSTILE_NAME,
    StreamPlan,
    apply_run_ops,
    skill_md,
    write_stream_run,
    write_train_run,
)

from skillos.clients.skillrepo import SkillRepoClient

TOKENS = {"admin": "admin-token-7f3a", "viewer": "viewer-token-51c0", "team": "team-token-9e2d",
          # review (test_console_review.py): rw tokens of the `rev` repos, by label; none is an operator
          "writer": "writer-token-3b1e", "lead": "lead-token-c7a4", "other": "other-token-90d2"}
AUTH_TOKENS = (f"{TOKENS['admin']}:rw,{TOKENS['viewer']}:read,{TOKENS['team']}:read:team-,"
               f"{TOKENS['writer']}:rw:rev:rev-writer,{TOKENS['lead']}:rw:rev:rev-lead,"
               f"{TOKENS['other']}:rw:rev:rev-other")
RUN = "20260101-120000"                  # a finished `skillos run` folder
RUN_ID = "run-20260101-120000-a1b2c3"    # its config.run_id; its skillos repo is RUN_ID-s0
REPO = f"{RUN_ID}-s0"
DEMO = "demo"                            # versions, diffs, restores and the hostile skill
TEAM = "team-alpha"


@dataclass
class ConsoleStack:
    repo_url: str
    url: str
    runs: Path
    admin: SkillRepoClient
    plan: StreamPlan


def build_data(admin: SkillRepoClient, runs: Path) -> StreamPlan:
    plan = StreamPlan(run_id=RUN_ID, tasks=12, seeds=1)
    write_stream_run(runs / RUN, plan)
    apply_run_ops(admin, plan, 0)
    # an older report: summary.json and tasks/*.json only (no run.json, no tasks.jsonl)
    old = StreamPlan(run_id="run-20251231-090000-0ld0ld", tasks=4, seeds=1, methods=("none",))
    write_stream_run(runs / "20251231-090000", old, plots=False)
    (runs / "20251231-090000" / "run.json").unlink()
    (runs / "20251231-090000" / "tasks.jsonl").unlink()
    write_train_run(runs / "cpu-tiny", 6)
    (runs / "not-a-run").mkdir()
    admin.create_repo(DEMO)
    heat_v3 = ("Use it when the task says *heat* something.\n\n1. open the microwave\n2. heat the mug\n"
               "3. take it out\n\n```\nheat mug 1 with microwave 1\n```")
    for i, body in enumerate(["1. take the mug\n2. heat it", "1. take the mug\n2. put it in the microwave\n3. heat it",
                              heat_v3]):
        admin.put_skill(DEMO, skill_md("heat-mug", f"Heat a mug (revision {i + 1})", body))
    admin.put_skill(DEMO, skill_md("clean-plate", "Clean a plate in the sinkbasin", "1. go to the sinkbasin\n2. clean"))
    admin.put_skill(DEMO, skill_md("clean-plate", "Clean a plate in the sinkbasin", "1. rinse\n2. dry"))
    admin.put_skill(DEMO, skill_md(HOSTILE_NAME, 'Probe <img src=x onerror="window.__xss=\'desc\'"> of escaping',
                                   HOSTILE_BODY, note='<script>window.__xss="meta"</script>'))
    admin.create_repo(TEAM)
    admin.put_skill(TEAM, skill_md("team-skill", "A skill of the team", "1. do it"))
    return plan


def start_stack(tmp: Path, *, auth: bool = True) -> Iterator[ConsoleStack]:
    runs = tmp / "runs"
    if runs.exists():
        shutil.rmtree(runs)
    runs.mkdir(parents=True)
    env = {"SKILLOS_DATABASE_URL": f"sqlite:///{tmp}/skillrepo.db"}
    if auth:
        env.update(SKILLOS_AUTH_MODE="tokens", SKILLOS_AUTH_TOKENS=AUTH_TOKENS)
    with run_service(["skillrepo"], env=env, tmp_path=tmp, ready_timeout=300) as repo, \
            SkillRepoClient(repo.url, token=TOKENS["admin"] if auth else None) as admin:
        plan = build_data(admin, runs)
        with run_service(["console"], env={"SKILLOS_SKILLREPO_URL": repo.url, "SKILLOS_CONSOLE_RUNS_DIR": str(runs),
                                           "SKILLOS_API_TOKEN": TOKENS["admin"]}, tmp_path=tmp,
                         ready_timeout=300) as con:
            yield ConsoleStack(repo.url, con.url, runs, admin, plan)


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[ConsoleStack]:
    """Skill repo with tokens (admin rw, viewer read, team read on team-*), its data and the console.

    The console is given SKILLOS_API_TOKEN=<admin>: it must not use it for users (a read token must
    stay read-only)."""
    yield from start_stack(tmp_path_factory.mktemp("console"))


def login(url: str, token: str) -> httpx.Client:
    """An HTTP client logged in through the console's form, as a browser does."""
    c = httpx.Client(base_url=url, timeout=60)
    form = c.get("/login")
    assert form.status_code == 200, form.text[:500]
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text).group(1)
    r = c.post("/login", data={"token": token, "nonce": nonce, "next": "/"})
    assert r.status_code == 303, r.text[:500]
    return c


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)

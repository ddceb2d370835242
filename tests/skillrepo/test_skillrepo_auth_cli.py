"""Bearer tokens (scopes, repo prefixes, open mode) and the `skillos repo` commands against a real service."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import ROOT, run_service

from skillos.auth import Authenticator, prefix_reaches
from skillos.clients.skillrepo import SkillRepoClient, SkillRepoError

pytestmark = pytest.mark.slow


def test_token_parsing_refuses_bad_entries():
    with pytest.raises(ValueError):
        Authenticator("tokens", "")
    with pytest.raises(ValueError):
        Authenticator("tokens", "abc:admin")
    with pytest.raises(ValueError):
        Authenticator("sometimes", "")
    with pytest.raises(ValueError, match="label"):
        Authenticator("tokens", "abc:rw:team-:not a label")
    for spec in ("a:rw::ci,b:read::ci", "a:rw::open", "a:rw,b:read::token#1"):   # one label, one token
        with pytest.raises(ValueError, match="is taken"):
            Authenticator("tokens", spec)


def test_the_templates_placeholder_credentials_are_refused():
    """Issue 51: k8s/base ships CHANGE-ME for the token list, the API token and the database password;
    a process given one stops with a message naming the setting instead of serving with it."""
    from pydantic import ValidationError

    from skillos.db import make_engine
    from skillos.settings import ApiTokenSettings

    with pytest.raises(ValueError, match="SKILLOS_AUTH_TOKENS entry 2 is still the placeholder"):
        Authenticator("tokens", "real-secret:rw,CHANGE-ME:rw")
    with pytest.raises(ValidationError, match="SKILLOS_API_TOKEN is still the placeholder"):
        ApiTokenSettings(_env_file=None, api_token="change-me")
    with pytest.raises(ValueError, match="password is still the placeholder"):
        make_engine("postgresql+psycopg://skillos:CHANGE-ME@skillos-postgresql:5432/skillos")
    assert Authenticator("tokens", "change-me-not:rw").mode == "tokens"   # only the placeholder itself


def test_tokens_scopes_and_prefixes(tmp_path):
    env = {"SKILLOS_DATABASE_URL": f"sqlite:///{tmp_path}/auth.db", "SKILLOS_AUTH_MODE": "tokens",
           "SKILLOS_AUTH_TOKENS": "admin-t:rw,reader-t:read,train-t:rw:train-,acme-t:rw:acme"}
    with run_service(["skillrepo"], env=env, tmp_path=tmp_path) as svc:
        u = f"{svc.url}/v1/repos"
        assert httpx.get(u).status_code == 401
        assert httpx.get(u, headers={"Authorization": "Bearer nope"}).status_code == 401
        assert httpx.get(u, headers={"Authorization": "Basic abc"}).status_code == 401
        assert httpx.get(f"{svc.url}/healthz").status_code == 200  # probes need no token
        admin, reader, trainer = (SkillRepoClient(svc.url, token=t) for t in ("admin-t", "reader-t", "train-t"))
        admin.create_repo("prod")
        admin.put_skill("prod", {"name": "a-skill", "description": "d"})
        assert reader.get_skill("prod", "a-skill").version == 1
        assert reader.search("prod", "skill")[0].name == "a-skill"
        with pytest.raises(SkillRepoError) as e:
            reader.put_skill("prod", {"name": "b-skill", "description": "d"})
        assert e.value.status == 403 and "read-only" in e.value.message
        with pytest.raises(SkillRepoError) as e:
            trainer.get_skill("prod", "a-skill")
        assert e.value.status == 403 and "train-" in e.value.message
        with pytest.raises(SkillRepoError) as e:
            trainer.fork_repo("prod", "train-1")  # reading the source is beyond its prefix
        assert e.value.status == 403
        trainer.create_repo("train-1")
        trainer.put_skill("train-1", {"name": "t", "description": "d"})
        assert [r.name for r in trainer.list_repos()] == ["train-1"]
        assert sorted(r.name for r in admin.list_repos()) == ["prod", "train-1"]
        # a prefix without a separator at its end reaches its own words only: not another tenant's "acmecorp"
        acme = SkillRepoClient(svc.url, token="acme-t")
        admin.create_repo("acmecorp")
        for name in ("acme", "acme-dev", "acme.eu"):
            acme.create_repo(name)
        with pytest.raises(SkillRepoError) as e:
            acme.get_repo("acmecorp")
        assert e.value.status == 403 and "'acme-'" in e.value.message
        with pytest.raises(SkillRepoError) as e:
            acme.create_repo("acmeX")
        assert e.value.status == 403
        assert [r.name for r in acme.list_repos()] == ["acme", "acme-dev", "acme.eu"]


def test_a_prefix_reaches_whole_words_of_a_name():
    assert prefix_reaches(None, "anything")
    assert prefix_reaches("acme", "acme") and prefix_reaches("acme", "acme_x") and prefix_reaches("acme", "acme.x")
    assert not prefix_reaches("acme", "acmecorp") and not prefix_reaches("acme", "acm")
    assert prefix_reaches("team-", "team-a") and not prefix_reaches("team-", "team")


def test_oversized_request_refused_before_reading(tmp_path):
    env = {"SKILLOS_DATABASE_URL": f"sqlite:///{tmp_path}/big.db", "SKILLOS_MAX_REQUEST_BYTES": "1000"}
    with run_service(["skillrepo"], env=env, tmp_path=tmp_path) as svc:
        SkillRepoClient(svc.url).create_repo("r")
        r = httpx.post(f"{svc.url}/v1/repos/r/ops", json={"ops": [{"name": "x", "arguments": "y" * 2000}]})
        assert r.status_code == 413 and "1000" in r.json()["error"]["message"]

        def chunks():  # no Content-Length: capped while reading
            for _ in range(10):
                yield b"x" * 500

        r = httpx.post(f"{svc.url}/v1/repos/r/import", content=chunks())
        assert r.status_code == 413


def _cli(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skillos.cli", "repo", *args, "--url", url], input=stdin, check=False,
                          capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_cli_commands(tmp_path):
    env = {"SKILLOS_DATABASE_URL": f"sqlite:///{tmp_path}/cli.db"}
    with run_service(["skillrepo", "--seed", "default"], env=env, tmp_path=tmp_path) as svc:
        url = svc.url
        out = _cli(url, "list")
        assert out.returncode == 0 and out.stdout.startswith("default\t5 skills"), out.stderr
        out = _cli(url, "search", "default", "heat a mug and put it in the cabinet")
        assert out.stdout.split("\n")[0].split()[1] == "heat-object"
        assert _cli(url, "import", "ex", str(ROOT / "examples" / "skills")).returncode == 0
        assert _cli(url, "get", "ex", "cool-object").stdout == \
            (ROOT / "examples/skills/cool-object/SKILL.md").read_text()
        doc = "---\nname: slice-object\ndescription: Slice food with a knife\n---\n\ntake knife, slice\n"
        out = _cli(url, "put", "ex", "-", stdin=doc)
        assert out.returncode == 0 and "slice-object version 1" in out.stdout
        ops = [{"name": "skill_update", "arguments": {"skill_name": "slice-object", "new_content": "use a knife"}}]
        out = _cli(url, "ops", "ex", "-", "--idempotency-key", "x1", stdin=json.dumps(ops))
        assert json.loads(out.stdout)["applied"] is True
        out = _cli(url, "history", "ex", "slice-object")
        assert out.stdout.startswith("v2\tpresent\tupdate")
        assert _cli(url, "fork", "ex", "ex2").returncode == 0
        assert _cli(url, "snapshot", "ex2", "s1").returncode == 0
        assert _cli(url, "rm", "ex2", "slice-object").returncode == 0
        assert _cli(url, "restore", "ex2", "s1").returncode == 0
        target = Path(tmp_path) / "ex2.tar.gz"
        assert _cli(url, "export", "ex2", "-o", str(target)).returncode == 0 and target.stat().st_size > 100
        out = _cli(url, "rm", "missing-repo")
        assert out.returncode == 1 and "404 repo_not_found" in out.stderr
        assert _cli(url, "rm", "ex2").returncode == 0

"""Measured utility per skill over HTTP, on SQLite and PostgreSQL, with tokens: outcomes recorded per skill
served or withheld (a trajectory counts once), the per-skill report with Newcombe's interval, the CLI's table,
and the rights (a read token reads the numbers, only rw moves them)."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from conftest import run_service
from skillrepo_fixtures import backend_url  # noqa: F401

from skillos.clients.skillrepo import SkillRepoClient, SkillRepoError
from skillos.utility import difference_interval, wilson

pytestmark = pytest.mark.slow

TOKENS = "admin-t:rw::admin,viewer-t:read::viewer,tenant-t:rw:ut:tenant"


def test_newcombes_interval_matches_his_published_examples():
    # Newcombe (1998), Statistics in Medicine 17:873-890, table II, method 10
    for (a, n, b, m), want in [((56, 70, 48, 80), (0.0524, 0.3339)), ((9, 10, 3, 10), (0.1705, 0.8090)),
                               ((6, 7, 2, 7), (0.0582, 0.8062)), ((5, 56, 0, 29), (-0.0381, 0.1926)),
                               ((0, 10, 0, 20), (-0.1611, 0.2775)), ((10, 10, 0, 20), (0.6791, 1.0))]:
        low, high = difference_interval(a, n, b, m)
        assert (round(low, 4), round(high, 4)) == want
    assert difference_interval(3, 5, 0, 0) is None and wilson(0, 0) == (0.0, 1.0)


@pytest.fixture(scope="module")
def svc(backend_url, tmp_path_factory):  # noqa: F811
    env = {"SKILLOS_DATABASE_URL": backend_url, "SKILLOS_AUTH_MODE": "tokens", "SKILLOS_AUTH_TOKENS": TOKENS}
    with run_service(["skillrepo"], env=env, tmp_path=tmp_path_factory.mktemp("svc"), ready_timeout=300) as s:
        yield s


def test_outcomes_count_once_per_trajectory_and_report_per_skill(svc):
    admin, viewer = SkillRepoClient(svc.url, token="admin-t"), SkillRepoClient(svc.url, token="viewer-t")
    repo = f"ut-{uuid.uuid4().hex[:8]}"
    admin.create_repo(repo)
    # clean-mug: served 4 (3 won), withheld 2 (0 won); heat-egg: served once, never withheld
    for i, (won, served, withheld) in enumerate([(True, ["clean-mug", "heat-egg"], []), (True, ["clean-mug"], []),
                                                 (True, ["clean-mug"], []), (False, ["clean-mug"], []),
                                                 (False, [], ["clean-mug"]), (False, [], ["clean-mug"])]):
        assert admin.record_outcome(repo, f"trj-{i}", won, "caller", served, withheld) == len(served + withheld)
    assert admin.record_outcome(repo, "trj-0", False, "caller", ["clean-mug"]) == 0   # a retry counts nothing
    admin.record_outcome(repo, "judged-1", True, "judge", [], ["clean-mug"])

    report = viewer.utility(repo, ["caller"])
    assert [u.name for u in report.skills] == ["clean-mug", "heat-egg"]
    mug, egg = report.skills
    assert (mug.served, mug.served_success, mug.withheld, mug.withheld_success) == (4, 3, 2, 0)
    assert mug.difference == pytest.approx(0.75) and mug.interval == pytest.approx(difference_interval(3, 4, 0, 2))
    assert (egg.served, egg.withheld, egg.difference, egg.interval) == (1, 0, None, None)
    assert viewer.utility(repo).skills[0].withheld == 3   # every source by default: the judged one too
    assert viewer.utility(repo, skill="heat-egg").skills[0].name == "heat-egg"

    with pytest.raises(SkillRepoError) as e:   # a read token reads the numbers; only rw moves them
        viewer.record_outcome(repo, "trj-9", True, "caller", ["clean-mug"])
    assert e.value.status == 403
    # nor a caller's own rw token: it could name any source and report a trajectory before the gateway does
    tenant = SkillRepoClient(svc.url, token="tenant-t")
    assert [u.name for u in tenant.utility(repo).skills] == ["clean-mug", "heat-egg"]
    with pytest.raises(SkillRepoError) as e:
        tenant.record_outcome(repo, "trj-9", True, "environment", ["clean-mug"])
    assert (e.value.status, e.value.code) == (403, "operator_only")
    with pytest.raises(SkillRepoError) as e:   # a name with no letter or digit is no skill's
        admin.record_outcome(repo, "trj-9", True, "caller", ["---"])
    assert (e.value.status, e.value.code) == (400, "invalid_report")
    with pytest.raises(SkillRepoError) as e:
        admin.record_outcome(repo, "trj-9", True, "caller", ["x" * 129])
    assert e.value.status == 422
    with pytest.raises(SkillRepoError) as e:
        admin.record_outcome(f"nope-{repo}", "trj-9", True, "caller", ["clean-mug"])
    assert (e.value.status, e.value.code) == (404, "repo_not_found")
    with pytest.raises(SkillRepoError) as e:
        admin.record_outcome(repo, "trj-9", True, "caller", ["clean-mug"], ["clean-mug"])
    assert (e.value.status, e.value.code) == (400, "invalid_report")
    with pytest.raises(SkillRepoError) as e:
        admin.record_outcome(repo, "trj-9", True, "someone", ["clean-mug"])
    assert e.value.status == 422
    with pytest.raises(SkillRepoError) as e:
        viewer.utility("no-such-repo-here")
    assert e.value.status == 404

    shown = subprocess.run([sys.executable, "-m", "skillos.cli", "repo", "stats", repo, "--source", "caller",
                            "--url", svc.url, "--token", "viewer-t"], capture_output=True, text=True, timeout=60,
                           check=False)
    assert shown.returncode == 0, shown.stderr
    mug_line = next(line for line in shown.stdout.splitlines() if line.startswith("clean-mug"))
    assert "3/4" in mug_line and "0/2" in mug_line and "+0.75" in mug_line
    assert "(no task in an arm yet)" in shown.stdout
    metrics = __import__("httpx").get(f"{svc.url}/metrics").text
    assert 'skillos_skillrepo_skill_outcomes_total{arm="withheld",source="caller",success="false"}' in metrics

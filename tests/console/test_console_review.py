"""The console's review, utility and states pages against a real skill repo with tokens: a curator op batch waits in
a repo with review on, a reviewer approves it through the console with their own token (the session's), the
writer's token, a read token, another rw token and no login are refused; the utility page shows the numbers
posted through POST /v1/repos/{repo}/outcomes, the skills whose interval lies below 0 first; in a repo with
candidates on, what an op batch writes shows as a candidate, a reviewer promotes, retires and restores it through
the console (the repo refuses everyone else), and the forms show only to tokens the repo would let decide."""
# ruff: noqa: F811 - pytest fixtures imported from console_fixtures are redefined as parameters

from __future__ import annotations

import re

import httpx
import pytest
from console_data import skill_md
from console_fixtures import RUN, RUN_ID, TOKENS, csrf_of, login, stack  # noqa: F401

from skillos.clients.skillrepo import SkillRepoClient

pytestmark = pytest.mark.slow
T = 60
KITCHEN = "rev-kitchen"
UTIL = "rev-utility"
STATES = "rev-states"


def _insert(name: str, body: str) -> dict:
    return {"name": "new_skill_insert", "arguments": {"skill_name": name, "content": skill_md(name, f"{name} d", body)}}


def _update(name: str, body: str) -> dict:
    return {"name": "skill_update", "arguments": {"skill_name": name, "new_content": skill_md(name, f"{name} d", body)}}


def _decide(c: httpx.Client, pid: int, decision: str, note: str = "", csrf: str | None = None, **kw) -> httpx.Response:
    form = c.get(f"/repos/{KITCHEN}/review/{pid}")
    token = csrf if csrf is not None else csrf_of(form.text)
    return c.post(f"/repos/{KITCHEN}/review/{pid}/decide", data={"decision": decision, "note": note, "csrf": token},
                  **kw)


@pytest.fixture(scope="module")
def proposals(stack):
    """A repo with review on (reviewers: rev-lead and rev-writer) and two batches the writer sent."""
    admin = stack.admin
    admin.create_repo(KITCHEN, policy={"review": True, "reviewers": ["rev-lead", "rev-writer"]})
    admin.put_skill(KITCHEN, skill_md("heat-cup", "heat-cup d", "1. microwave it"))
    with SkillRepoClient(stack.repo_url, token=TOKENS["writer"]) as writer:
        first = writer.apply_ops(KITCHEN, [_insert("clean-mug", "1. go to the sink\n2. clean it"),
                                           _update("heat-cup", "1. open the microwave\n2. heat it")],
                                 origin={"source": "gateway", "trajectory": "trj-9", "run": RUN_ID, "seed": 0,
                                         "position": 2})
        second = writer.apply_ops(KITCHEN, [_insert("leak-chat", "1. paste the conversation here")])
    assert not first.applied and first.proposal and second.proposal
    return first.proposal, second.proposal


def test_the_review_pages_show_what_waits_who_sent_it_and_the_diff(stack, proposals):
    pid, other = proposals
    c = login(stack.url, TOKENS["lead"])
    repo = c.get(f"/repos/{KITCHEN}")
    assert repo.status_code == 200
    assert f'href="/repos/{KITCHEN}/review"' in repo.text and "<b>2</b> pending" in repo.text
    assert f'href="/repos/{KITCHEN}/utility"' in repo.text

    listing = c.get(f"/repos/{KITCHEN}/review")
    assert listing.status_code == 200
    rows = re.findall(r'<tr data-proposal="(\d+)">(.*?)</tr>', listing.text, re.DOTALL)
    assert [int(i) for i, _ in rows] == [other, pid]          # newest first
    row = {int(i): r for i, r in rows}[pid]
    assert "rev-writer" in row and "review:" in row and "clean-mug" in row and "heat-cup" in row
    assert "new_skill_insert" in row and "skill_update" in row
    assert "rev-lead, rev-writer" in listing.text              # the policy's reviewers

    page = c.get(f"/repos/{KITCHEN}/review/{pid}")
    assert page.status_code == 200
    text = page.text
    assert "rev-writer" in text and "trj-9" in text and "as the writer claims" in text
    # the origin names a task of a run folder here: linked
    assert f'href="/runs/{RUN}/tasks/skillos/0/2"' in text
    changes = re.findall(r'<section class="change" data-change="(\d)">(.*?)</section>', text, re.DOTALL)
    assert [i for i, _ in changes] == ["0", "1"]
    insert, update = changes[0][1], changes[1][1]
    assert "a new skill" in insert and re.search(r'<tr class="insert">.*?2\. clean it', insert, re.DOTALL)
    assert re.search(r'<tr class="delete">.*?1\. microwave it', update, re.DOTALL)
    assert re.search(r'<tr class="insert">.*?2\. heat it', update, re.DOTALL)
    assert 'id="decide"' in text and 'data-decide="approve"' in text and 'data-decide="reject"' in text
    for body in (repo.text, listing.text, text):
        assert TOKENS["lead"] not in body

    assert c.get(f"/repos/{KITCHEN}/review/999999").status_code == 404
    assert c.get(f"/repos/{KITCHEN}/review/0").status_code == 400
    assert c.get(f"/repos/{KITCHEN}/review?status=nonsense").status_code == 400


def test_only_a_reviewers_own_token_decides(stack, proposals):
    pid, _ = proposals
    admin = stack.admin

    def pending() -> bool:
        return admin.proposal(KITCHEN, pid).status == "pending"

    # no login: the pages and the form send to the login page, nothing is decided
    anon = httpx.Client(base_url=stack.url, timeout=T)
    assert anon.get(f"/repos/{KITCHEN}/review").status_code == 303
    r = anon.post(f"/repos/{KITCHEN}/review/{pid}/decide", data={"decision": "approve", "csrf": "x"})
    assert r.status_code == 303 and r.headers["location"].startswith("/login")
    assert pending()

    # a read token: proposals are not for it, and a forged form is refused by the console
    viewer = login(stack.url, TOKENS["viewer"])
    r = viewer.get(f"/repos/{KITCHEN}/review")
    assert r.status_code == 403 and "scope rw" in r.text
    home = viewer.get("/")
    r = viewer.post(f"/repos/{KITCHEN}/review/{pid}/decide", data={"decision": "approve", "csrf": csrf_of(home.text)})
    assert r.status_code == 403 and "read" in r.text.lower()
    assert f'href="/repos/{KITCHEN}/review"' not in viewer.get(f"/repos/{KITCHEN}").text
    assert pending()

    # the writer's own token: a reviewer of the repo, but not of its own batch
    writer = login(stack.url, TOKENS["writer"])
    r = _decide(writer, pid, "approve")
    assert r.status_code == 403 and "written with this token" in r.text
    assert f'href="/repos/{KITCHEN}/review/{pid}"' in r.text      # back to the proposal
    assert 'id="decide"' not in writer.get(f"/repos/{KITCHEN}/review/{pid}").text   # the form is not offered
    # an rw token of the repo that the policy does not name
    other = login(stack.url, TOKENS["other"])
    page = other.get(f"/repos/{KITCHEN}/review/{pid}")
    assert page.status_code == 200                                          # reads it (rw) ...
    assert 'id="decide"' not in page.text and 'id="not-a-reviewer"' in page.text and "rev-other" in page.text
    r = _decide(other, pid, "approve")
    assert r.status_code == 403 and "may not decide" in r.text             # ... does not decide it
    assert pending()

    # the reviewer: not without the session's CSRF token, not from another site
    lead = login(stack.url, TOKENS["lead"])
    assert _decide(lead, pid, "approve", csrf="forged").status_code == 403
    assert _decide(lead, pid, "approve", headers={"Origin": "http://evil.test"}).status_code == 403
    assert lead.post(f"/repos/{KITCHEN}/review/{pid}/decide",
                     data={"decision": "merge", "csrf": "x"}).status_code == 400
    assert pending()

    r = _decide(lead, pid, "approve", note="reads right")
    assert r.status_code == 303 and r.headers["location"] == f"/repos/{KITCHEN}/review/{pid}?decided=approved"
    done = lead.get(r.headers["location"])
    assert done.status_code == 200 and 'id="decided"' in done.text and "Approved" in done.text
    assert "rev-lead" in done.text and "reads right" in done.text and 'id="decide"' not in done.text
    p = admin.proposal(KITCHEN, pid)
    assert (p.status, p.decided_by, p.note) == ("approved", "rev-lead", "reads right")
    assert "clean it" in admin.get_skill(KITCHEN, "clean-mug").body
    assert "heat it" in admin.get_skill(KITCHEN, "heat-cup").body
    entry = admin.op_log(KITCHEN).entries[0]
    assert (entry.kind, entry.writer, entry.origin.source) == ("ops", "rev-lead", f"proposal {pid}")

    # decided once: a second decision is refused, with the reason
    again = _decide(lead, pid, "reject")
    assert again.status_code == 409 and "approved" in again.text
    assert admin.proposal(KITCHEN, pid).status == "approved"
    approved = lead.get(f"/repos/{KITCHEN}/review?status=approved")
    assert f'data-proposal="{pid}"' in approved.text


def test_a_reviewer_rejects_with_a_note_and_nothing_is_written(stack, proposals):
    _, pid = proposals
    lead = login(stack.url, TOKENS["lead"])
    r = _decide(lead, pid, "reject", note="asks for the conversation")
    assert r.status_code == 303 and r.headers["location"].endswith(f"/review/{pid}?decided=rejected")
    page = lead.get(r.headers["location"])
    assert "Rejected" in page.text and "asks for the conversation" in page.text
    p = stack.admin.proposal(KITCHEN, pid)
    assert (p.status, p.decided_by) == ("rejected", "rev-lead")
    assert "leak-chat" not in [s.name for s in stack.admin.list_skills(KITCHEN)]
    assert 'id="no-proposals"' in lead.get(f"/repos/{KITCHEN}/review").text
    assert "nothing pending" in lead.get(f"/repos/{KITCHEN}").text


@pytest.fixture(scope="module")
def outcomes(stack):
    """Outcomes posted with the operator's token: `hurts` is worse when shown, `helps` better, `fresh` has no
    withheld task; `caller` outcomes only for `helps` (the other sources count it as unmeasured)."""
    admin = stack.admin
    admin.create_repo(UTIL)
    for name in ("hurts", "helps", "fresh"):
        admin.put_skill(UTIL, skill_md(name, f"{name} d", "1. do it"))
    plan = [("hurts", "served", 20, 2, "judge"), ("hurts", "withheld", 20, 18, "judge"),
            ("helps", "served", 20, 18, "environment"), ("helps", "withheld", 10, 1, "environment"),
            ("helps", "served", 3, 0, "caller"), ("helps", "withheld", 3, 3, "caller"),
            ("fresh", "served", 3, 3, "judge")]
    n = 0
    for name, arm, tasks, wins, source in plan:
        for i in range(tasks):
            n += 1
            arms = {"served": [name]} if arm == "served" else {"withheld": [name]}
            assert admin.record_outcome(UTIL, f"trj-{n}", i < wins, source, **arms) == 1
    return admin.utility(UTIL)


def _rows(html: str) -> list[tuple[str, str, str]]:
    return re.findall(r'<tr class="verdict-\w+" data-skill="([^"]+)" data-verdict="(\w+)">(.*?)</tr>', html, re.DOTALL)


def test_the_utility_page_shows_the_numbers_worse_skills_first(stack, outcomes):
    c = login(stack.url, TOKENS["viewer"])     # a read token reads the numbers
    repo = c.get(f"/repos/{UTIL}")
    assert f'href="/repos/{UTIL}/utility"' in repo.text
    page = c.get(f"/repos/{UTIL}/utility")
    assert page.status_code == 200
    rows = _rows(page.text)
    assert [(s, v) for s, v, _ in rows] == [("hurts", "worse"), ("helps", "better"), ("fresh", "unmeasured")]
    by = {u.name: u for u in outcomes.skills}
    hurts = rows[0][2]
    cells = [re.sub(r"<[^>]+>", "", x).strip() for x in re.findall(r'<td class="num">(.*?)</td>', hurts, re.DOTALL)]
    lo, hi = by["hurts"].interval
    assert hi < 0
    assert cells == ["20", "10.0 (2)", "20", "90.0 (18)", "-80.0", f"[{100 * lo:+.1f}, {100 * hi:+.1f}]"]
    assert '<svg class="ci"' in hurts
    assert "<b>1</b> worse when shown" in page.text and "<b>1</b> better when shown" in page.text
    helps = by["helps"]
    assert (helps.served, helps.served_success, helps.withheld, helps.withheld_success) == (23, 18, 13, 4)
    assert "<svg" not in rows[2][2]                        # no interval while an arm is empty

    # one source: only the caller's reports count
    only = c.get(f"/repos/{UTIL}/utility?source=caller")
    rows = _rows(only.text)
    assert [(s, v) for s, v, _ in rows] == [("helps", "worse")]
    assert 'value="caller" checked' in only.text and 'value="judge" checked' not in only.text
    assert c.get(f"/repos/{UTIL}/utility?source=nobody").status_code == 400

    # a token that does not reach the repo
    team = login(stack.url, TOKENS["team"])
    assert team.get(f"/repos/{UTIL}/utility").status_code in (403, 404)


def test_a_repo_without_outcomes_says_so(stack, outcomes):
    c = login(stack.url, TOKENS["admin"])
    page = c.get(f"/repos/{KITCHEN}/utility")
    assert page.status_code == 200 and 'id="no-outcomes"' in page.text


# --- a skill's life: candidates, retired skills ----------------------------------------------------

def _set_state(c: httpx.Client, name: str, state: str, note: str = "", back: str = "skill", csrf: str | None = None,
               **kw) -> httpx.Response:
    page = c.get(f"/repos/{STATES}/skills/{name}")
    token = csrf if csrf is not None else csrf_of(page.text)
    return c.post(f"/repos/{STATES}/skills/{name}/state",
                  data={"state": state, "note": note, "csrf": token, "back": back}, **kw)


def _state_rows(html: str, section: str) -> dict[str, str]:
    table = re.search(rf'<table class="grid states" id="states-{section}">(.*?)</table>', html, re.DOTALL)
    if table is None:
        return {}
    return dict(re.findall(r'<tr data-skill="([^"]+)" data-state="\w+"[^>]*>(.*?)</tr>', table.group(1), re.DOTALL))


@pytest.fixture(scope="module")
def candidates(stack):
    """A repo with candidates on (reviewers: rev-lead): a person's skill, and the writer's op batches: dry-cup stays
    a candidate (with outcomes), stack-plates is deleted by a later batch (retired)."""
    admin = stack.admin
    admin.create_repo(STATES, policy={"candidates": True, "reviewers": ["rev-lead"], "utility_sources": ["judge"]})
    admin.put_skill(STATES, skill_md("wipe-table", "wipe-table d", "1. take the cloth\n2. wipe the table"))
    with SkillRepoClient(stack.repo_url, token=TOKENS["writer"]) as writer:
        first = writer.apply_ops(STATES, [_insert("dry-cup", "1. take the cup\n2. dry it with the cloth"),
                                          _insert("stack-plates", "1. stack the plates")])
        second = writer.apply_ops(STATES, [{"name": "skill_delete", "arguments": {"skill_name": "stack-plates"}}])
    assert first.applied and second.applied
    for i in range(4):
        admin.record_outcome(STATES, f"trj-s{i}", i < 3, "judge", served=["dry-cup"])
    for i in range(4):
        admin.record_outcome(STATES, f"trj-w{i}", i < 1, "judge", withheld=["dry-cup"])
    assert admin.get_skill(STATES, "dry-cup").state == "candidate"
    assert admin.get_skill(STATES, "stack-plates").state == "retired"
    return admin


def test_candidates_and_retired_skills_show_with_who_when_and_why(stack, candidates):
    admin = candidates
    lead = login(stack.url, TOKENS["lead"])
    repo = lead.get(f"/repos/{STATES}")
    assert repo.status_code == 200
    rows = dict(re.findall(r'<tr data-skill="([^"]+)" data-state="(\w+)"', repo.text))
    assert rows == {"dry-cup": "candidate", "stack-plates": "retired", "wipe-table": "active"}
    cells = dict(re.findall(r'<tr data-skill="([^"]+)"[^>]*>\s*<td>(.*?)</td>', repo.text, re.DOTALL))
    assert 'class="life candidate"' in cells["dry-cup"] and "from traffic" in cells["dry-cup"]
    assert 'class="life retired"' in cells["stack-plates"]
    assert "life" not in cells["wipe-table"]                 # a person's active skill: no badge
    assert re.search(r'id="states-link"[^>]*>States: <b>1</b> candidate, <b>1</b> retired', repo.text)

    page = lead.get(f"/repos/{STATES}/states")
    assert page.status_code == 200
    cand, retired = _state_rows(page.text, "candidate"), _state_rows(page.text, "retired")
    assert list(cand) == ["dry-cup"] and list(retired) == ["stack-plates"]
    assert "rev-writer" in cand["dry-cup"] and "written by an op batch" in cand["dry-cup"]
    assert "4 / 4" in cand["dry-cup"]                                           # served / withheld (judge)
    assert "+50.0" in cand["dry-cup"]                                           # 75 % - 25 %
    assert "rev-writer" in retired["stack-plates"] and "skill_delete" in retired["stack-plates"]
    assert 'data-set-state="active"' in cand["dry-cup"] and 'data-set-state="retired"' in cand["dry-cup"]
    assert re.search(r'data-set-state="active"[^>]*>Restore', retired["stack-plates"])
    assert "wipe-table" not in page.text                      # a person's skill has no state of its own
    assert "rev-lead" in page.text and TOKENS["lead"] not in page.text

    skill = lead.get(f"/repos/{STATES}/skills/dry-cup")
    assert 'id="life" data-state="candidate"' in skill.text and "written from traffic" in skill.text
    assert 'data-life-form="dry-cup"' in skill.text and ">Promote<" in skill.text

    utility = lead.get(f"/repos/{STATES}/utility")
    assert re.search(r'data-skill="dry-cup"[^>]*>\s*<td>.*?</td>\s*<td class="state" data-state="candidate">',
                     utility.text, re.DOTALL)

    # a read token reads the states, without the forms
    viewer = login(stack.url, TOKENS["viewer"])
    for path in (f"/repos/{STATES}/states", f"/repos/{STATES}/skills/dry-cup"):
        r = viewer.get(path)
        assert r.status_code == 200 and "data-life-form" not in r.text and 'id="not-a-reviewer"' not in r.text
    # an rw token the policy does not name: no forms, and why
    writer = login(stack.url, TOKENS["writer"])
    for path in (f"/repos/{STATES}/states", f"/repos/{STATES}/skills/dry-cup"):
        r = writer.get(path)
        assert r.status_code == 200 and "data-life-form" not in r.text
        assert 'id="not-a-reviewer"' in r.text and "rev-writer" in r.text
    # an operator (rw, no prefix) is a reviewer of every repo
    op = login(stack.url, TOKENS["admin"])
    assert 'data-life-form="dry-cup"' in op.get(f"/repos/{STATES}/skills/dry-cup").text
    assert admin.get_skill(STATES, "dry-cup").state == "candidate"


def test_a_reviewer_promotes_retires_and_restores_with_their_own_token(stack, candidates):
    admin = candidates

    def state() -> str:
        return admin.get_skill(STATES, "dry-cup").state

    anon = httpx.Client(base_url=stack.url, timeout=T)
    r = anon.post(f"/repos/{STATES}/skills/dry-cup/state", data={"state": "active", "csrf": "x"})
    assert r.status_code == 303 and r.headers["location"].startswith("/login")
    viewer = login(stack.url, TOKENS["viewer"])
    r = _set_state(viewer, "dry-cup", "active")
    assert r.status_code == 403 and "read" in r.text.lower()
    # rw tokens of the repo the policy does not name: the repo refuses, the console shows why with a way back
    for who in ("writer", "other"):
        c = login(stack.url, TOKENS[who])
        r = _set_state(c, "dry-cup", "active", note="mine is fine")
        assert r.status_code == 403 and "may not change the states" in r.text, who
        assert f'href="/repos/{STATES}/skills/dry-cup" id="back"' in r.text
    assert state() == "candidate"

    lead = login(stack.url, TOKENS["lead"])
    assert _set_state(lead, "dry-cup", "active", csrf="forged").status_code == 403
    assert _set_state(lead, "dry-cup", "active", headers={"Origin": "http://evil.test"}).status_code == 403
    assert _set_state(lead, "dry-cup", "served").status_code == 400
    assert _set_state(lead, "dry-cup", "active", back="http://evil.test").status_code == 400
    assert state() == "candidate"
    assert "dry-cup" not in [h.name for h in admin.search(STATES, "dry the cup")]   # a candidate: not served

    # promote, with a note: served to every caller, logged as the reviewer's write
    r = _set_state(lead, "dry-cup", "active", note="helps in 3 of 4")
    assert r.status_code == 303 and r.headers["location"] == f"/repos/{STATES}/skills/dry-cup?state=active"
    page = lead.get(r.headers["location"])
    assert 'id="state-set"' in page.text and 'id="life" data-state="active"' in page.text
    assert "helps in 3 of 4" in page.text and "rev-lead" in page.text
    assert state() == "active"
    entry = next(e for e in admin.states(STATES) if e.name == "dry-cup")
    assert (entry.state, entry.updated_by, entry.reason, entry.traffic) == ("active", "rev-lead", "helps in 3 of 4",
                                                                            True)
    log = admin.op_log(STATES).entries[0]
    assert (log.kind, log.writer) == ("state", "rev-lead")
    assert "dry-cup" in [h.name for h in admin.search(STATES, "dry the cup")]

    # retire from the states page: back there, the skill under Retired
    r = _set_state(lead, "dry-cup", "retired", note="superseded", back="states")
    assert r.status_code == 303 and r.headers["location"] == f"/repos/{STATES}/states?changed=dry-cup&to=retired"
    page = lead.get(r.headers["location"])
    assert 'id="state-set"' in page.text and "superseded" in _state_rows(page.text, "retired")["dry-cup"]
    assert state() == "retired"
    assert "dry-cup" not in [h.name for h in admin.search(STATES, "dry the cup")]

    # restore: served again
    r = _set_state(lead, "dry-cup", "active", note="back")
    assert r.status_code == 303 and state() == "active"
    # and a person's skill: retired by a reviewer, restored to a plain person's skill
    assert _set_state(lead, "wipe-table", "retired").status_code == 303
    assert admin.get_skill(STATES, "wipe-table").state == "retired"
    assert _set_state(lead, "wipe-table", "active").status_code == 303
    assert admin.get_skill(STATES, "wipe-table").state == "active"

    # a skill the repo does not have: its 404, with the way back
    home = lead.get(f"/repos/{STATES}/states")
    r = lead.post(f"/repos/{STATES}/skills/no-such-skill/state",
                  data={"state": "retired", "csrf": csrf_of(home.text), "back": "states"})
    assert r.status_code == 404 and f'href="/repos/{STATES}/states" id="back"' in r.text

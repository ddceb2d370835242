"""The console over HTTP against a real skill repo with tokens: login and sessions, read-only tokens,
CSRF, hostile content, error pages, run folders (finished, older format, training, in progress)."""
# ruff: noqa: F811 - pytest fixtures imported from console_fixtures are redefined as parameters

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest
from console_data import HOSTILE_NAME, StreamPlan, skill_md, task_records, write_stream_run
from console_fixtures import DEMO, REPO, RUN, RUN_ID, TEAM, TOKENS, csrf_of, login, stack  # noqa: F401

pytestmark = pytest.mark.slow
T = 60   # seconds: a 2-core machine busy with LLM servers can take seconds per page


def test_pages_need_a_login_and_the_login_sets_a_safe_cookie(stack):
    r = httpx.get(f"{stack.url}/repos/{DEMO}?q=heat", timeout=T)
    assert r.status_code == 303 and r.headers["location"] == f"/login?next=%2Frepos%2F{DEMO}%3Fq%3Dheat"
    assert httpx.get(f"{stack.url}/api/runs/{RUN}/series", timeout=T).status_code == 401

    c = httpx.Client(base_url=stack.url, timeout=T)
    form = c.get("/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text).group(1)
    bad = c.post("/login", data={"token": "wrong", "nonce": nonce, "next": "/"})
    assert bad.status_code == 401 and "does not know this token" in bad.text
    assert c.post("/login", data={"token": TOKENS["admin"], "nonce": "forged"}).status_code == 403
    evil = c.post("/login", data={"token": TOKENS["admin"], "nonce": nonce}, headers={"Origin": "http://evil.test"})
    assert evil.status_code == 403
    ok = c.post("/login", data={"token": TOKENS["admin"], "nonce": nonce, "next": "//evil.test/x"})
    assert ok.status_code == 303 and ok.headers["location"] == "/"   # no open redirect
    cookie = next(v for k, v in ok.headers.multi_items() if k == "set-cookie" and v.startswith("skillos_console="))
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and TOKENS["admin"] not in cookie
    home = c.get("/")
    assert home.status_code == 200 and "read-write" in home.text
    for name in (DEMO, TEAM, REPO):
        assert f'href="/repos/{name}"' in home.text
    assert TOKENS["admin"] not in home.text


def test_security_headers(stack):
    r = httpx.get(f"{stack.url}/login", timeout=T)
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "object-src 'none'" in csp
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
    assert r.headers["server-timing"].startswith("app;dur=")


def test_read_token_sees_a_read_only_console(stack):
    c = login(stack.url, TOKENS["viewer"])
    page = c.get(f"/repos/{DEMO}/skills/heat-mug")
    assert page.status_code == 200 and "read-only" in page.text and "data-restore" not in page.text
    # even a forged form is refused by the console, and the repo would refuse it too
    r = c.post(f"/repos/{DEMO}/skills/heat-mug/restore", data={"version": 1, "csrf": csrf_of(page.text)})
    assert r.status_code == 403 and "read" in r.text.lower()
    assert stack.admin.get_skill(DEMO, "heat-mug").version == 3


def test_restore_needs_the_session_csrf_token_and_logs_its_origin(stack):
    c = login(stack.url, TOKENS["admin"])
    page = c.get(f"/repos/{DEMO}/skills/clean-plate")
    assert 'data-restore="1"' in page.text
    r = c.post(f"/repos/{DEMO}/skills/clean-plate/restore", data={"version": 1, "csrf": "forged"})
    assert r.status_code == 403
    r = c.post(f"/repos/{DEMO}/skills/clean-plate/restore", data={"version": 1, "csrf": csrf_of(page.text)},
               headers={"Origin": "http://evil.test"})
    assert r.status_code == 403
    assert stack.admin.get_skill(DEMO, "clean-plate").version == 2
    r = c.post(f"/repos/{DEMO}/skills/clean-plate/restore", data={"version": 1, "csrf": csrf_of(page.text)})
    assert r.status_code == 303 and r.headers["location"] == f"/repos/{DEMO}/skills/clean-plate?restored=3"
    skill = stack.admin.get_skill(DEMO, "clean-plate")
    assert skill.version == 3 and "go to the sinkbasin" in skill.body
    entry = stack.admin.op_log(DEMO).entries[0]
    assert entry.kind == "restore" and entry.origin.source == "console"
    assert "Restored" in c.get(r.headers["location"]).text
    bad = c.post(f"/repos/{DEMO}/skills/clean-plate/restore", data={"version": 99, "csrf": csrf_of(page.text)})
    assert bad.status_code == 404 and "text/html" in bad.headers["content-type"]


def test_prefix_token_sees_only_its_repos_and_runs(stack):
    c = login(stack.url, TOKENS["team"])
    home = c.get("/")
    assert f'href="/repos/{TEAM}"' in home.text and f'href="/repos/{DEMO}"' not in home.text
    assert f"/runs/{RUN}" not in home.text
    assert c.get(f"/repos/{DEMO}").status_code == 403
    assert c.get(f"/runs/{RUN}").status_code == 403
    assert c.get(f"/repos/{TEAM}").status_code == 200


def test_hostile_skill_content_is_escaped(stack):
    c = login(stack.url, TOKENS["admin"])
    page = c.get(f"/repos/{DEMO}/skills/{HOSTILE_NAME}").text
    assert "<script>window" not in page and "<img src=x" not in page and "<iframe" not in page
    assert 'href="javascript:' not in page
    assert "&lt;script&gt;window.__xss" in page and "onerror=&quot;window.__xss" in page
    assert page.count("<script") == 2   # the console's own two scripts
    hits = c.get(f"/repos/{DEMO}/search", params={"q": "probe escaping"}).text
    assert HOSTILE_NAME in hits and "<img src=x" not in hits and "&lt;img src=x" in hits
    repo_page = c.get(f"/repos/{DEMO}").text
    assert "<img src=x" not in repo_page


def test_skill_page_shows_worked_examples_escaped(stack):
    from skillos.worked_examples import ExampleStep, WorkedExample

    stack.admin.put_skill(DEMO, skill_md("example-probe", "A skill with worked examples", "1. do it"))
    plain = WorkedExample(task="put a clean plate in the cabinet", env="alfworld", kind="clean", taken=9,
                          steps=[ExampleStep(action="take plate 1 from countertop 1", observation="You pick it up.",
                                             note="searched first: drawer 1"),
                                 ExampleStep(action="clean plate 1 with sinkbasin 1", observation="(task done)")],
                          source="caller", trajectory="gw-traj-42").finish()
    hostile = WorkedExample(task='<script>window.__xss="task"</script>', env="gateway", source="judge",
                            steps=[ExampleStep(action='<img src=x onerror="window.__xss=1">')]).finish()
    for e in (plain, hostile):
        stack.admin.add_example(DEMO, "example-probe", e)
    c = login(stack.url, TOKENS["viewer"])
    page = c.get(f"/repos/{DEMO}/skills/example-probe").text
    assert 'id="examples"' in page and page.count('class="example"') == 2
    assert f'data-example="{plain.id}"' in page and "source <b>caller</b>" in page and "gw-traj-42" in page
    assert "&gt; take plate 1 from countertop 1\nYou pick it up." in page and "(searched first: drawer 1)" in page
    assert "<script>window" not in page and "<img src=x" not in page
    assert "&lt;script&gt;window.__xss" in page and "&lt;img src=x onerror=" in page
    old = c.get(f"/repos/{DEMO}/skills/example-probe", params={"version": 1}).text
    assert 'id="examples"' not in old     # the version before the examples shows none


def test_repo_page_search_timeline_and_usage(stack):
    c = login(stack.url, TOKENS["admin"])
    page = c.get(f"/repos/{REPO}").text
    first = stack.plan   # the run's op batches link back to the task whose curation wrote them
    assert f'href="/runs/{RUN}/tasks/skillos/0/11"' in page and first.run_id in page
    assert "refused: skill_not_found" in page
    # retrieved / used counts come from the run's task records
    rows = task_records(stack.plan, "skillos", 0)
    name = max({n for r in rows for n in (s["name"] for s in r.retrieved)},
               key=lambda n: sum(n in [s["name"] for s in r.retrieved] for r in rows))
    times = sum(name in [s["name"] for s in r.retrieved] for r in rows)
    assert re.search(rf'skills/{name}">{name}</a>.*?<td class="num">{times}</td>', page, re.DOTALL)
    found = c.get(f"/repos/{DEMO}", params={"q": "heat a mug microwave"}).text
    assert 'id="hits"' in found and "heat-mug" in found and re.search(r'class="num score">\d+\.\d{3}<', found)
    # by meaning: a query that shares no word with any skill finds nothing by BM25, skills by dense search
    assert "No skill matches" in c.get(f"/repos/{DEMO}/search", params={"q": "frosty chilly"}).text
    dense = c.get(f"/repos/{DEMO}", params={"q": "frosty chilly", "mode": "dense"}).text
    assert 'id="hits"' in dense and "(dense)" in dense and '<option value="dense" selected>' in dense
    bad = c.get(f"/repos/{DEMO}/search", params={"q": "x", "mode": "semantic"})
    assert bad.status_code == 400 and "mode" in bad.text
    ids = [e.id for e in stack.admin.op_log(REPO).entries]
    assert c.get(f"/repos/{REPO}/ops").text.count('class="op-entry') == len(ids) == 12
    older = c.get(f"/repos/{REPO}/ops", params={"before": ids[4]}).text
    assert older.count('class="op-entry') == 7 and f'/ops?before={ids[4]}' not in older


def test_skill_page_versions_and_diff(stack):
    c = login(stack.url, TOKENS["admin"])
    page = c.get(f"/repos/{DEMO}/skills/heat-mug").text
    assert "<li>open the microwave</li>" in page and "Heat a mug (revision 3)" in page
    old = c.get(f"/repos/{DEMO}/skills/heat-mug", params={"version": 1}).text
    assert "Heat a mug (revision 1)" in old and "(newest)" not in old
    diff = c.get(f"/repos/{DEMO}/skills/heat-mug/diff", params={"from": 1, "to": 3}).text
    assert 'class="delete"' in diff and 'class="insert"' in diff and "open the microwave" in diff
    default = c.get(f"/repos/{DEMO}/skills/heat-mug/diff").text   # newest against the one before
    assert "v2 (put) → v3 (put)" in default


@pytest.mark.parametrize("path,status", [
    (f"/repos/{DEMO}/skills/heat-mug/diff?from=abc", 400),
    (f"/repos/{DEMO}/skills/heat-mug/diff?from=1&to=42", 404),
    (f"/repos/{DEMO}/skills/heat-mug?version=0", 400),
    (f"/repos/{DEMO}/skills/heat-mug?version=9", 404),
    (f"/repos/{DEMO}/skills/no-such-skill", 404),
    ("/repos/no-such-repo", 404),
    ("/repos/bad%20name!", 404),
    (f"/repos/{DEMO}/ops?before=-1", 400),
    (f"/repos/{DEMO}?q=" + "x" * 600, 400),
    ("/runs/no-such-run", 404),
    ("/runs/not-a-run", 404),
    ("/runs/..%2F..%2Fetc", 404),
    (f"/runs/{RUN}?page=0", 400),
    (f"/runs/{RUN}?outcome=maybe", 400),
    (f"/runs/{RUN}/tasks/skillos/0/999", 404),
    (f"/runs/{RUN}/tasks/skillos/x/1", 404),
    (f"/runs/{RUN}/files/run.json", 404),
    (f"/runs/{RUN}/files/..%2Frun.json", 404),
    ("/runs/cpu-tiny/steps/99", 404),
    ("/runs/cpu-tiny/steps/" + "9" * 300, 400),   # a file name past the OS limit was a 500 (ENAMETOOLONG)
    ("/no/such/page", 404),
])
def test_bad_addresses_get_error_pages(stack, path, status):
    c = login(stack.url, TOKENS["admin"])
    r = c.get(path)
    assert r.status_code == status, r.text[:300]
    assert r.headers["content-type"].startswith("text/html") and "<h1>" in r.text


def test_api_errors_are_json(stack):
    c = login(stack.url, TOKENS["admin"])
    r = c.get("/api/runs/no-such-run/series")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = c.get(f"/api/runs/{RUN}/events", params={"after": -1})
    assert r.status_code == 422 and r.json()["error"]["code"]


def test_run_pages_finished_old_format_and_training(stack):
    c = login(stack.url, TOKENS["admin"])
    runs = c.get("/runs").text
    for run in (RUN, "20251231-090000", "cpu-tiny"):
        assert f'href="/runs/{run}"' in runs
    assert "not-a-run" not in runs
    page = c.get(f"/runs/{RUN}").text
    assert 'id="summary"' in page and "Mean ± std over seeds" in page and "24</b> / 24 tasks" in page
    assert len(re.findall(r"/runs/[^/]+/tasks/", page)) == 24
    assert "/files/success_over_stream.png" in page and "data-events-url" not in page   # finished: no live stream
    only = c.get(f"/runs/{RUN}", params={"method": "none", "outcome": "success"}).text
    assert "skillos · s0" not in only and "✗" not in only
    series = c.get(f"/api/runs/{RUN}/series").json()
    assert series["x"] == list(range(1, 13)) and set(series["success"]) == {"none", "skillos"}
    assert series["repo_size"]["seed 0"][-1] > 0 and series["op_mix"]["new_skill_insert applied"][-1] > 0
    png = c.get(f"/runs/{RUN}/files/success_over_stream.png")
    assert png.status_code == 200 and png.content[:4] == b"\x89PNG"
    task = c.get(f"/runs/{RUN}/tasks/skillos/0/4").text
    assert 'id="turns"' in task and 'id="retrieved"' in task and 'id="calls"' in task
    assert f'href="/repos/{REPO}/skills/' in task

    old = c.get("/runs/20251231-090000").text   # tasks/*.json only
    assert len(re.findall(r"/runs/[^/]+/tasks/", old)) == 4
    assert c.get("/runs/20251231-090000/tasks/none/0/2").status_code == 200

    train = c.get("/runs/cpu-tiny").text
    assert "training run" in train and len(re.findall(r"/runs/cpu-tiny/steps/\d+", train)) == 6
    tseries = c.get("/api/runs/cpu-tiny/series").json()
    assert tseries["x"] == [1, 2, 3, 4, 5, 6]
    reward = next(p for p in tseries["panels"] if p["title"].startswith("Reward"))
    assert set(reward["series"]) == {"total", "task", "fc", "cnt", "comp"}
    step = c.get("/runs/cpu-tiny/steps/3").text
    assert 'id="rollouts"' in step and "new_skill_insert" in step


def _events(client: httpx.Client, url: str, want: int, timeout: float = 30,
            headers: dict | None = None) -> list[tuple[str, dict]]:
    got: list[tuple[str, dict]] = []
    with client.stream("GET", url, timeout=timeout, headers=headers) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event:
                got.append((event, json.loads(line[6:])))
                if len(got) >= want or event == "status":
                    break
    return got


def test_a_run_in_progress_streams_its_tasks_as_they_end(stack):
    plan = StreamPlan(run_id="run-20260102-000000-1i1e00", tasks=5, seeds=1, methods=("skillos",))
    live = write_stream_run(stack.runs / "20260102-live", plan, finish=False)
    records = task_records(plan, "skillos", 0)
    live.task(records[0])
    c = login(stack.url, TOKENS["admin"])
    page = c.get("/runs/20260102-live").text
    assert "running" in page and 'data-events-url="/api/runs/20260102-live/events?after=1"' in page

    def write_rest():
        time.sleep(1.0)
        for rec in records[1:]:
            live.task(rec)
            time.sleep(0.3)
        live.finish()

    writer = threading.Thread(target=write_rest)
    writer.start()
    got = _events(c, "/api/runs/20260102-live/events?after=1", want=10)
    writer.join()
    tasks = [d for e, d in got if e == "task"]
    assert [d["n"] for d in tasks] == [2, 3, 4, 5] and tasks[-1]["total"] == 5
    assert "/runs/20260102-live/tasks/skillos/0/4" in tasks[-1]["html"]
    assert got[-1] == ("status", {"status": "done"})
    # a reconnecting browser resumes after the last event it saw (Last-Event-ID)
    resumed = _events(c, "/api/runs/20260102-live/events", want=5, headers={"Last-Event-ID": "4"})
    assert [(e, d.get("n")) for e, d in resumed if e != "summary"] == [("task", 5), ("status", None)]
    summary = next(d["html"] for e, d in resumed if e == "summary")
    assert '<td class="num">5</td>' in summary   # the live summary table counts every task so far
    # an id the page could not have sent is ignored (the stream starts at ?after), never a 500
    for bad in (b"\xb2", b"9" * 5000):
        replay = _events(c, "/api/runs/20260102-live/events?after=3", want=5, headers={"Last-Event-ID": bad})
        assert [(e, d.get("n")) for e, d in replay if e != "summary"] == [("task", 4), ("task", 5), ("status", None)]


def test_open_skill_repo_needs_no_login(tmp_path):
    from console_fixtures import start_stack

    gen = start_stack(tmp_path, auth=False)
    s = next(gen)
    try:
        c = httpx.Client(base_url=s.url, timeout=T)
        r = c.get("/")
        assert r.status_code == 200 and "open" in r.text and "read-write" in r.text
        assert "HttpOnly" in r.headers["set-cookie"]
        assert c.get("/login", follow_redirects=False).status_code == 303
        page = c.get(f"/repos/{DEMO}/skills/heat-mug")
        r = c.post(f"/repos/{DEMO}/skills/heat-mug/restore", data={"version": 2, "csrf": csrf_of(page.text)})
        assert r.status_code == 303 and s.admin.get_skill(DEMO, "heat-mug").version == 4
        # a cross-site form without the session's token is refused
        r = httpx.post(f"{s.url}/repos/{DEMO}/skills/heat-mug/restore", data={"version": 1, "csrf": "x"},
                       cookies=c.cookies, timeout=T)
        assert r.status_code == 403
    finally:
        gen.close()

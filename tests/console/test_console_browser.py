"""The console in a real browser: Debian's headless Chromium driven by Playwright (no browser download).

Log in, list repos, search as you type, open a skill, a diff, restore a version, open a run and a task,
watch a run in progress advance, a skill whose body holds script that must not run, a reviewer approving a
proposal (its diff holding script) and reading the repo's measured utility, and a reviewer promoting a candidate
from the repo's states page. With
SKILLOS_CONSOLE_SCREENSHOTS=<dir> the main pages are saved there (docs/img holds the README's).
In CI (CI=true) a missing chromium or playwright fails these tests; elsewhere they are skipped.
"""
# ruff: noqa: F811 - pytest fixtures imported from console_fixtures are redefined as parameters

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from conftest import _unavailable
from console_data import HOSTILE_NAME, StreamPlan, skill_md, task_records, write_stream_run
from console_fixtures import DEMO, REPO, RUN, TOKENS, stack  # noqa: F401

from skillos.clients.skillrepo import SkillRepoClient

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = os.environ.get("SKILLOS_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1360, "height": 860}


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        _unavailable("playwright (pip install -e '.[dev]')", e)
    if not Path(CHROMIUM).exists():
        _unavailable("chromium (apt-get install chromium; scripts/setup.sh does it)", FileNotFoundError(CHROMIUM))
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Tab:
    """One browser context (its own cookies) and page, recording dialogs and script errors."""

    def __init__(self, browser, base: str, shots: Path):
        self.ctx = browser.new_context(viewport=VIEWPORT)
        self.page = self.ctx.new_page()
        self.page.set_default_timeout(60_000)   # a loaded 2-core CI machine is slow
        self.base, self.shots = base, shots
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def go(self, path: str):
        return self.page.goto(self.base + path)

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"console-{name}.png"), full_page=False)

    def login(self, token: str) -> None:
        self.go("/")
        assert "/login" in self.page.url
        self.page.fill("#token", token)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(self.base + "/")

    def close(self) -> None:
        self.ctx.close()
        assert not self.errors, self.errors


@pytest.fixture
def tab(browser, stack, tmp_path):
    shots = Path(os.environ.get("SKILLOS_CONSOLE_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    t = Tab(browser, stack.url, shots)
    yield t
    t.close()


def test_login_search_skill_diff_restore(tab, stack):
    page = tab.page
    tab.login(TOKENS["admin"])
    assert page.locator("#repos").get_by_role("link", name=DEMO, exact=True).is_visible()
    assert page.locator(".badge.rw").is_visible()
    tab.shot("home")

    page.locator("#repos").get_by_role("link", name=DEMO, exact=True).click()
    page.wait_for_url(f"{stack.url}/repos/{DEMO}")
    assert page.locator("#skill-table tbody tr").count() == 3
    page.locator("#q").press_sequentially("microwave mug", delay=40)
    page.wait_for_selector("#hits a:text('heat-mug')")
    assert "q=microwave+mug" in page.url          # the search can be shared
    assert page.locator("#skills").is_hidden()
    assert float(page.locator("#hits .score").first.inner_text()) > 0
    tab.shot("search")
    page.locator("#mode").select_option("dense")  # the same query, by meaning
    # the repo's first dense search loads its sentence encoder: seconds idle, over a minute once on a loaded
    # machine (seen beside an evaluation), so the wait is longer than Playwright's default
    page.wait_for_selector("#search-results h2:has-text('(dense)')", timeout=180_000)
    assert "mode=dense" in page.url and page.locator("#hits a:text('heat-mug')").count() == 1
    page.locator("#mode").select_option("bm25")
    page.wait_for_selector("#search-results h2:not(:has-text('(dense)'))")
    page.wait_for_url(lambda url: "mode=" not in url)

    page.locator("#hits").get_by_role("link", name="heat-mug").click()
    page.wait_for_url(f"{stack.url}/repos/{DEMO}/skills/heat-mug")
    assert page.locator("#skill-body li").first.inner_text() == "open the microwave"
    assert page.locator("#versions tbody tr").count() == 3
    tab.shot("skill")

    page.get_by_role("link", name="diff with v2").click()
    page.wait_for_url(f"{stack.url}/repos/{DEMO}/skills/heat-mug/diff?from=2&to=3")
    assert page.locator("#diff tr.insert").count() > 0 and page.locator("#diff tr.delete").count() > 0
    tab.shot("diff")

    page.go_back()
    page.click('button[data-restore="1"]')
    page.wait_for_selector("#restored")
    assert "version 4" in page.locator("#restored").inner_text()
    assert page.locator("#versions tbody tr").count() == 4
    assert page.locator("#skill-body li").last.inner_text() == "heat it"   # version 1's body again
    assert stack.admin.get_skill(DEMO, "heat-mug").version == 4


def test_read_token_gets_a_read_only_console(tab):
    tab.login(TOKENS["viewer"])
    tab.go(f"/repos/{DEMO}/skills/heat-mug")
    assert tab.page.locator(".badge.ro").is_visible()
    assert tab.page.locator("button[data-restore]").count() == 0


def test_run_and_task_pages(tab, stack):
    page = tab.page
    tab.login(TOKENS["admin"])
    page.get_by_role("link", name="Runs").click()
    page.get_by_role("link", name=RUN, exact=True).click()
    page.wait_for_url(f"{stack.url}/runs/{RUN}")
    page.wait_for_selector("figure[data-chart=success] canvas")       # uPlot drew the charts
    for chart in ("success", "repo_size", "op_mix"):
        assert page.locator(f"figure[data-chart={chart}] .u-legend").count() == 1
    assert page.locator("#tasks tbody tr").count() == 24
    tab.shot("run")
    page.locator("#tasks tbody tr", has_text="skillos · s0").first.get_by_role("link").click()
    page.wait_for_selector("#turns li")
    assert page.locator("#retrieved, #calls").count() >= 1
    tab.shot("task")
    # the repo page's timeline links to the task that wrote an op
    tab.go(f"/repos/{REPO}")
    page.locator(".timeline .origin a").first.click()
    page.wait_for_selector("#turns")
    assert "/tasks/skillos/0/" in page.url


def test_a_live_run_advances_without_reload(tab, stack):
    # locator assertions poll without eval (the console's CSP refuses wait_for_function's eval)
    from playwright.sync_api import expect

    plan = StreamPlan(run_id="run-20260103-000000-b0b0b0", tasks=6, seeds=1, methods=("skillos",))
    live = write_stream_run(stack.runs / "20260103-live", plan, finish=False)
    records = task_records(plan, "skillos", 0)
    live.task(records[0])
    page = tab.page
    tab.login(TOKENS["admin"])
    tab.go("/runs/20260103-live")
    page.evaluate("window.__same_page = true")     # gone if the page reloads
    assert page.locator("#task-rows tr").count() == 1

    def write_more():
        for rec in records[1:4]:
            time.sleep(0.6)
            live.task(rec)

    writer = threading.Thread(target=write_more)
    writer.start()
    expect(page.locator("#task-rows tr")).to_have_count(4, timeout=30_000)
    writer.join()
    assert page.evaluate("window.__same_page") is True
    assert page.locator("[data-done]").inner_text() == "4"
    expect(page.locator("#summary tbody td").nth(1)).to_have_text("4")     # the live summary table
    page.wait_for_selector("figure[data-chart=success] canvas")
    page.wait_for_timeout(2000)                                            # the charts' refresh
    tab.shot("run-live")
    for rec in records[4:]:
        live.task(rec)
    live.finish()
    page.wait_for_selector(".status.done", timeout=30_000)            # the page reloads when the run ends
    assert page.locator("#tasks tbody tr").count() == 6


def test_hostile_skill_cannot_run_script(tab, stack):
    page = tab.page
    tab.login(TOKENS["admin"])
    for path in (f"/repos/{DEMO}/skills/{HOSTILE_NAME}", f"/repos/{DEMO}", f"/repos/{DEMO}/ops",
                 f"/repos/{DEMO}?q=probe+escaping"):
        tab.go(path)
        page.wait_for_load_state("load")
        page.wait_for_timeout(300)
        assert page.evaluate("window.__xss") is None, path
        assert page.evaluate("document.querySelectorAll('script').length") == 2, path   # the console's own
        assert page.evaluate("document.querySelectorAll('img[onerror], iframe, a[href^=\"javascript:\"]').length") == 0
    tab.go(f"/repos/{DEMO}/skills/{HOSTILE_NAME}")
    body = page.locator("#skill-body").inner_text()
    assert '<script>window.__xss = "script"</script>' in body and "onerror=" in body   # shown as text
    assert "<img src=x onerror=" in page.locator("#frontmatter").inner_text()
    tab.go(f"/repos/{DEMO}")
    page.locator("#q").press_sequentially("probe", delay=30)
    page.wait_for_selector(f"#hits a:text('{HOSTILE_NAME}')")
    assert page.evaluate("window.__xss") is None
    assert not tab.dialogs


def test_a_reviewer_approves_in_the_browser_and_reads_the_utility(tab, stack):
    """A batch whose text holds script waits in a repo with review on; the reviewer reads its diff (the script as
    text) and approves it with a note; the utility page shows the worse skill first."""
    repo = "rev-browser"
    admin = stack.admin
    admin.create_repo(repo, policy={"review": True, "reviewers": ["rev-lead"]})
    heat = "1. take the mug\n2. put it in the microwave\n3. heat it"
    admin.put_skill(repo, skill_md("heat-mug", "Heat a mug in the microwave", heat))
    admin.put_skill(repo, skill_md("cool-apple", "Cool an apple in the fridge", "1. open the fridge\n2. cool it"))
    with SkillRepoClient(stack.repo_url, token=TOKENS["writer"]) as writer:
        sent = writer.apply_ops(repo, [
            {"name": "skill_update", "arguments": {"skill_name": "heat-mug", "new_content": skill_md(
                "heat-mug", "Heat a mug in the microwave",
                "1. take the mug\n2. open the microwave first\n3. heat the mug with the microwave\n4. take it out")}},
            {"name": "new_skill_insert", "arguments": {"skill_name": "clean-knife", "content": skill_md(
                "clean-knife", "Clean a knife in the sinkbasin",
                '1. go to the sinkbasin\n2. clean the knife <script>window.__xss="proposal"</script>')}}],
            origin={"source": "gateway", "trajectory": "trj-4f1c0a", "task_id": "clean some knife and put it in drawer"})
    n = 0
    for name, served, won, withheld, withheld_won in (("heat-mug", 30, 26, 12, 5), ("cool-apple", 24, 6, 20, 17),
                                                       ("clean-knife", 4, 3, 0, 0)):
        for arm, tasks, wins in (("served", served, won), ("withheld", withheld, withheld_won)):
            for i in range(tasks):
                n += 1
                admin.record_outcome(repo, f"trj-b{n}", i < wins, "judge", **{arm: [name]})

    page = tab.page
    tab.login(TOKENS["lead"])
    tab.go(f"/repos/{repo}")
    page.locator("#review-link").click()
    page.wait_for_selector("#proposals")
    page.locator(f'#proposals tr[data-proposal="{sent.proposal}"] a').first.click()
    page.wait_for_selector("#decide")
    assert page.evaluate("window.__xss") is None
    assert '<script>window.__xss="proposal"</script>' in page.locator('section.change[data-change="1"]').inner_text()
    assert page.locator('section.change[data-change="0"] tr.insert').count() == 3
    page.fill("#note", "the microwave must be opened first")
    tab.shot("review")
    page.click('button[data-decide="approve"]')
    page.wait_for_selector("#decided")
    assert page.locator("#proposal-status").inner_text() == "approved"
    assert admin.proposal(repo, sent.proposal).decided_by == "rev-lead"

    tab.go(f"/repos/{repo}")
    page.locator("#utility-link").click()
    page.wait_for_selector("#utility")
    assert page.locator("#utility tbody tr").first.get_attribute("data-skill") == "cool-apple"
    assert page.locator("#utility tbody tr").first.get_attribute("data-verdict") == "worse"
    tab.shot("utility")


def test_a_reviewer_promotes_a_candidate_from_the_states_page(tab, stack):
    """In a repo with candidates on, what the writer's op batches wrote shows as candidates (one deleted: retired,
    with a note holding markup); the reviewer reads the states beside the measured utility and promotes one."""
    repo = "rev-life"
    admin = stack.admin
    admin.create_repo(repo, policy={"candidates": True, "reviewers": ["rev-lead"]})
    admin.put_skill(repo, skill_md("heat-mug", "Heat a mug in the microwave", "1. take the mug\n2. heat it"))
    with SkillRepoClient(stack.repo_url, token=TOKENS["writer"]) as writer:
        for name, desc, body in (("rinse-glass", "Rinse a glass in the sinkbasin", "1. go to the sinkbasin\n2. rinse"),
                                 ("slice-bread", "Slice bread with a knife", "1. take the knife\n2. slice the bread"),
                                 ("toast-bread", "Toast bread in the toaster", "1. put the bread in the toaster")):
            writer.apply_ops(repo, [{"name": "new_skill_insert",
                                     "arguments": {"skill_name": name, "content": skill_md(name, desc, body)}}])
        writer.apply_ops(repo, [{"name": "skill_delete", "arguments": {"skill_name": "toast-bread"}}])
    admin.set_state(repo, "toast-bread", "retired", note='burns it <img src=x onerror="window.__xss=\'note\'">')
    n = 0
    for name, served, won, withheld, withheld_won in (("rinse-glass", 14, 12, 6, 2), ("slice-bread", 5, 2, 3, 2)):
        for arm, tasks, wins in (("served", served, won), ("withheld", withheld, withheld_won)):
            for i in range(tasks):
                n += 1
                admin.record_outcome(repo, f"trj-l{n}", i < wins, "judge", **{arm: [name]})

    page = tab.page
    tab.login(TOKENS["lead"])
    tab.go(f"/repos/{repo}")
    assert page.locator('#skill-table tr[data-skill="rinse-glass"] .life.candidate').is_visible()
    page.locator("#states-link").click()
    page.wait_for_selector("#states-candidate")
    assert page.locator("#states-candidate tbody tr").count() == 2
    assert "burns it <img" in page.locator('#states-retired tr[data-skill="toast-bread"]').inner_text()
    assert page.evaluate("window.__xss") is None
    row = page.locator('#states-candidate tr[data-skill="rinse-glass"]')
    row.locator('input[name="note"]').fill("helps: +33 points")
    tab.shot("states")
    row.locator('button[data-set-state="active"]').click()
    page.wait_for_selector("#state-set")
    assert page.locator('#states-active tr[data-skill="rinse-glass"]').is_visible()
    assert admin.get_skill(repo, "rinse-glass").state == "active"
    assert next(e for e in admin.states(repo) if e.name == "rinse-glass").reason == "helps: +33 points"

"""Console benchmark: server time of its pages on a 10k-skill repo and a 1k-task run. One command, one table.

    .venv/bin/python -m bench.bench_console                 # 10,000 skills, 1,000 tasks (about 2 minutes)
    .venv/bin/python -m bench.bench_console --skills 2000 --tasks 200 --n 10    # quick

Real services on loopback: a skill repo (SQLite) filled through its API (an import of 10k SKILL.md
folders, then one curator op batch per task with its origin, so the op log has 1k+ entries), a run
folder written by the real report code of `skillos run` (1k task records with trajectories, summary,
plots), and `skillos serve console`. Each page is fetched `--n` times after a warm-up; "server" is the
console's own time (its Server-Timing header: from the request's arrival to the answer's first byte,
including its calls to the skill repo), "wall" what the client saw. Target: server p50 <= 300 ms.

Baselines, measured in the same run on the same data: what a console without paging or indexes would
do per page view: fetch the whole repo from the skill repo (`GET /v1/repos/<repo>/skills`, every skill
with its document) and read the whole run (json.loads of every line of tasks.jsonl).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "console")]

TARGET_MS = 300.0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


def server_ms(resp: httpx.Response) -> float:
    return float(resp.headers["server-timing"].split("dur=")[1])


def measure(client: httpx.Client, path: str, n: int, warm: int = 2) -> dict:
    for _ in range(warm):
        r = client.get(path)
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
    server, wall, size = [], [], 0
    for _ in range(n):
        t = time.perf_counter()
        r = client.get(path)
        wall.append((time.perf_counter() - t) * 1000)
        assert r.status_code == 200, (path, r.status_code)
        server.append(server_ms(r))
        size = len(r.content)
    return {"server_p50": pct(server, 50), "server_p95": pct(server, 95), "wall_p50": pct(wall, 50), "bytes": size}


def timed(fn, n: int) -> dict:
    fn()
    wall = []
    for _ in range(n):
        t = time.perf_counter()
        size = fn()
        wall.append((time.perf_counter() - t) * 1000)
    return {"server_p50": pct(wall, 50), "server_p95": pct(wall, 95), "wall_p50": pct(wall, 50), "bytes": size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skills", type=int, default=10_000)
    ap.add_argument("--tasks", type=int, default=1_000)
    ap.add_argument("--n", type=int, default=20, help="requests per page")
    args = ap.parse_args()

    from conftest import run_service
    from console_data import StreamPlan, apply_run_ops, big_archive, skill_name, write_stream_run

    from skillos.clients.skillrepo import SkillRepoClient
    from skillos.protocol.runs import RunFolder

    rows: list[tuple[str, str, dict]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        runs = tmp / "runs"
        runs.mkdir()
        t0 = time.perf_counter()
        with run_service(["skillrepo"], env={"SKILLOS_DATABASE_URL": f"sqlite:///{tmp}/repo.db",
                                             "SKILLOS_MAX_REQUEST_BYTES": str(64 * 1024 * 1024)},
                         tmp_path=tmp) as repo, SkillRepoClient(repo.url, timeout=300) as c:
            plan = StreamPlan(run_id="run-bench-000000-c0ffee", tasks=args.tasks, seeds=1, methods=("skillos",),
                              turns=8, repo_skills=[skill_name(i) for i in range(0, args.skills, 7)][:300])
            big = f"{plan.run_id}-s0"    # the run's repo: the console counts its skills' use in the run
            t = time.perf_counter()
            c.create_repo(big)
            c.import_(big, big_archive(args.skills))
            import_s = time.perf_counter() - t
            # the run's curator batches, each with its origin (the op log's timeline)
            apply_run_ops(c, plan, 0, create=False)
            write_stream_run(runs / "bench-run", plan)
            info = c.get_repo(big)
            print(f"data: {info.skill_count} skills (import of {args.skills}: {import_s:.1f} s), {args.tasks} tasks "
                  f"and as many op batches, set-up {time.perf_counter() - t0:.0f} s", flush=True)
            names = [s.name for s in c.list_skills_page(big, limit=1000).skills]
            updated = next(n for n in plan.repo_skills if c.get_skill(big, n).version > 1)
            mid = names[len(names) // 2]
            before = c.op_log(big, limit=100).next_before
            with run_service(["console"], env={"SKILLOS_SKILLREPO_URL": repo.url,
                                               "SKILLOS_CONSOLE_RUNS_DIR": str(runs)}, tmp_path=tmp) as con, \
                    httpx.Client(base_url=con.url, timeout=120) as h:
                pages = [
                    ("home: repos and runs", "/"),
                    (f"repo, {args.skills // 1000}k skills: first page + timeline + usage", f"/repos/{big}"),
                    ("repo: a middle page of skills", f"/repos/{big}?after={mid}"),
                    ("repo: BM25 search, 20 hits", f"/repos/{big}?q=heat+the+mug+in+the+microwave"),
                    ("search as you type (fragment)", f"/repos/{big}/search?q=clean+apple+sinkbasin"),
                    ("skill page (versions, tasks that used it)", f"/repos/{big}/skills/{updated}"),
                    ("diff of two versions", f"/repos/{big}/skills/{updated}/diff"),
                    ("op timeline, an older page", f"/repos/{big}/ops?before={before}"),
                    ("runs list", "/runs"),
                    (f"run, {args.tasks} tasks: summary + newest tasks", "/runs/bench-run"),
                    ("run: a later page of tasks", "/runs/bench-run?page=10"),
                    ("run: filtered (failures of seed 0)", "/runs/bench-run?seed=0&outcome=failure"),
                    ("task page (trajectory, skills, calls)", f"/runs/bench-run/tasks/skillos/0/{args.tasks // 2}"),
                    ("run charts data (JSON)", "/api/runs/bench-run/series"),
                ]
                # first view of the run: the console indexes tasks.jsonl once (then reads only new lines)
                t = time.perf_counter()
                h.get("/runs/bench-run")
                first = (time.perf_counter() - t) * 1000
                for what, path in pages:
                    rows.append((what, "console", measure(h, path, args.n)))
                    print(f"  {what:<58} {rows[-1][2]['server_p50']:8.1f} ms", flush=True)

                def whole_repo() -> int:
                    return len(httpx.get(f"{repo.url}/v1/repos/{big}/skills", timeout=300).content)

                def whole_run() -> int:
                    text = RunFolder(runs / "bench-run").tasks_log.read_text()
                    assert len([json.loads(line) for line in text.splitlines() if line]) == args.tasks
                    return len(text)

                rows.append((f"whole repo as JSON ({info.skill_count} skills)", "baseline: skill repo GET /skills",
                             timed(whole_repo, max(3, args.n // 4))))
                rows.append((f"whole run read ({args.tasks} task records)", "baseline: json.loads every task",
                             timed(whole_run, max(3, args.n // 4))))
    print()
    print(f"first view of the {args.tasks}-task run (index built): {first:.0f} ms wall")
    print()
    head = f"| {'page':<58} | {'system':<32} | server p50 | server p95 | wall p50 | KB    | <= {TARGET_MS:.0f} ms |"
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    for what, system, m in rows:
        ok = "yes" if m["server_p50"] <= TARGET_MS else "NO"
        kb = m["bytes"] / 1024
        print(f"| {what:<58} | {system:<32} | {m['server_p50']:7.1f} ms | {m['server_p95']:7.1f} ms | "
              f"{m['wall_p50']:6.1f} ms | {kb:5.0f} | {ok if system == 'console' else '':<9} |")
    worst = max(m["server_p50"] for _, s, m in rows if s == "console")
    print(f"\nslowest console page: server p50 {worst:.1f} ms (target {TARGET_MS:.0f} ms): "
          f"{'met' if worst <= TARGET_MS else 'NOT met'}; median over pages "
          f"{statistics.median(m['server_p50'] for _, s, m in rows if s == 'console'):.1f} ms")


if __name__ == "__main__":
    main()

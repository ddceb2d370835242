"""Worked examples on the production path: an openai-SDK agent plays ALFWorld games one after another
through the skill gateway and reports each outcome; the gateway's curation keeps the successes as worked
examples (source ``caller``) and serves them to the later games.

    skillos up -d                 # skill repo, ALFWorld, executor with its gateway, curator, the LLM
    .venv/bin/python -m bench.bench_gateway_examples --task-type look,pick --per-type 6 --turns 15 \\
        --out bench/evidence/gateway-examples

The agent is `examples/openai_agent.py` as a user runs it (the openai SDK, the gateway's base URL, the
outcome reported at the end), learning into a repo of its own (``SKILLOS_REPO``). Between two games the
bench waits until the gateway has curated the last one, so each game sees what the earlier ones left.
It writes ``games.jsonl`` (per game: won, calls, the skills and worked examples served, what the curation
did with the example) and ``stream.md`` with the stream's table; a second start plays on from the games
already in ``games.jsonl``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def agent_module():
    spec = importlib.util.spec_from_file_location("openai_agent", ROOT / "examples" / "openai_agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)   # it reads its settings (SKILLOS_*) when loaded
    return module


def wait_curated(gateway: str, tid: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        t = httpx.get(f"{gateway}/trajectories/{tid}", timeout=30).json()
        if t["status"] in ("curated", "failed", "expired") or time.monotonic() > deadline:
            return t
        time.sleep(2)


def games(env_url: str, split: str, types: list[str], per_type: int) -> list[tuple[int, dict]]:
    tasks = httpx.get(f"{env_url}/v1/tasks", params={"split": split}, timeout=60).json()["tasks"]
    out = []
    for kind in types:
        out += [(i, t) for i, t in enumerate(tasks) if t["type"] == kind][:per_type]
    return out


def summary(rows: list[dict], repo: str) -> str:
    lines = [f"# Worked examples through the gateway: {len(rows)} games, repo `{repo}`", "",
             "| # | task | won | calls | skills served | worked example served | curation | example kept |",
             "|---|---|---|---|---|---|---|---|"]
    for n, r in enumerate(rows, 1):
        kept = "; ".join(f"{k}: {v}" for k, v in (r["example_kept"] or {}).items()) or "–"
        lines.append(f"| {n} | {r['task']} | {'yes' if r['won'] else 'no'} | {r['calls']} | {', '.join(r['skills']) or '–'} "
                     f"| {', '.join(r['examples']) or '–'} | {r['curation_status']} | {kept} |")
    served = [r for r in rows if r["examples"]]
    won_served = sum(r["won"] for r in served)
    left = sum(1 for r in rows if any(str(v).startswith(("added", "replaced")) for v in (r["example_kept"] or {}).values()))
    lines += ["", (f"Won {sum(r['won'] for r in rows)} of {len(rows)}; {len(served)} games were served a worked example "
                  f"(won {won_served}); {left} successes left an example on a skill (source `caller`)."), ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task-type", default="look,pick")
    ap.add_argument("--per-type", type=int, default=6)
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--turns", type=int, default=15)
    ap.add_argument("--repo", default=None, help="the repo the agent learns into (default: a new one)")
    ap.add_argument("--gateway", default="http://127.0.0.1:8002/v1")
    ap.add_argument("--env-url", default="http://127.0.0.1:8010")
    ap.add_argument("--skillrepo", default="http://127.0.0.1:8001")
    ap.add_argument("--curation-timeout", type=float, default=900)
    ap.add_argument("--out", type=Path, default=Path("runs/gateway-examples"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "games.jsonl"
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    repo = args.repo or (done[0]["repo"] if done else f"gateway-examples-{time.strftime('%Y%m%d-%H%M%S')}")
    os.environ.update({"SKILLOS_GATEWAY_URL": args.gateway, "SKILLOS_ALFWORLD_URL": args.env_url, "SKILLOS_REPO": repo})
    agent = agent_module()
    plan = games(args.env_url, args.split, [t.strip() for t in args.task_type.split(",") if t.strip()], args.per_type)
    for index, task in plan[len(done):]:
        start = time.perf_counter()
        result = agent.play(index=index, turns=args.turns)
        t = wait_curated(args.gateway, result["trajectory"], args.curation_timeout)
        calls = (t.get("curation") or {}).get("calls") or []
        row = {"repo": repo, "index": index, "task_id": task["id"], "type": task["type"], "task": result["task"],
               "won": result["won"], "trajectory": result["trajectory"], "calls": t["calls"], "skills": t["skills"],
               "examples": t.get("examples", []), "curation_status": t["status"],
               "ops": [(c.get("name"), c.get("skill_name"), c.get("applied")) for c in calls],
               "example_kept": {c["skill_name"]: c["example"] for c in calls if c.get("example")},
               "seconds": round(time.perf_counter() - start, 1)}
        done.append(row)
        with log.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps({k: row[k] for k in ("index", "type", "won", "calls", "examples", "example_kept")}), flush=True)
    skills = httpx.get(f"{args.skillrepo}/v1/repos/{repo}/skills", timeout=60).json()["skills"]
    text = summary(done, repo) + "\nThe repo at the end: " + "; ".join(
        f"`{s['name']}` ({len(s.get('examples') or [])} examples: "
        + ", ".join(f"{e['kind'] or e['env']} from {e['source']}" for e in s.get("examples") or []) + ")"
        for s in skills) + "\n"
    (args.out / "stream.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

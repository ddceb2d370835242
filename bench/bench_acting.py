"""The executor that explores: what each acting option adds to No Memory (issue 23, item 1).

    # every variant of ALFWorld valid_seen, No Memory, the paper's 30 turns, 2 tasks of each type, 1 seed
    .venv/bin/python -m bench.bench_acting ablation --per-type 2 --seeds 1 --max-turns 30 --concurrency 4
    # the table again from the run folders (after an interruption: run the same command, it resumes)
    .venv/bin/python -m bench.bench_acting table runs/acting

Each variant is one `skillos run --method none --acting ...` into ``<out>/<variant>/``. The variants
switch the options of `skillos.acting.options.ActingOptions` one at a time, from the executor as it
was (``before``: no state line, nothing held back, one made-up demonstration) to all on (``all``).
With ``SKILLOS_LLM_CACHE`` set every completion is kept, so a variant started again replays its finished
episodes and goes on. The completions are made by the executor service: the variable must be set where
the stack starts (``SKILLOS_LLM_CACHE=... skillos up -d``); this command sets it for the stack that
`skillos run` starts itself when none is running (``<out>/llm-cache.sqlite`` unless it is set).

The table: success rate with a paired bootstrap interval and McNemar against ``before`` (b/c: pairs the
variant won and ``before`` lost / the reverse), over the tasks both played without an error (an error,
e.g. a timeout on a loaded machine, is counted apart, neither success nor failure); steps; what
the record showed was wrong (look-around share, repeated actions, places visited, the task's object
taken); seconds per turn (the prompt cache's health).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from bench.bench_learning import alfworld_steps
from harness.stats import paired
from skillos.protocol.runs import read_tasks, to_dict

ROOT = Path(__file__).resolve().parent.parent

VARIANTS: dict[str, list[str]] = {
    "before": ["state_line=false", "hold_back=false", "demos=generic"],
    "state_line": ["state_line=true", "hold_back=false", "demos=generic"],
    "hold_back": ["state_line=false", "hold_back=true", "demos=generic"],
    "expert_demos": ["state_line=false", "hold_back=false", "demos=expert"],
    "all": ["state_line=true", "hold_back=true", "demos=expert"],
}
LOOK = re.compile(r"^(look|inventory|examine )")


def load(run_dir: Path) -> dict[tuple[int, str], dict]:
    """(seed, task_id) -> the No Memory record of one variant's run folder (finished or live)."""
    rows = [to_dict(t) for t in read_tasks(run_dir)]   # the run folder's contract: `skillos.protocol.runs`
    return {(int(r.get("seed") or 0), r["task_id"]): r for r in rows if r.get("method") == "none"}


def scored(records: dict) -> dict:
    """The records of episodes that ran (an error is neither a success nor a failure of the executor)."""
    return {k: r for k, r in records.items() if not r.get("error")}


def behaviour(records: list[dict]) -> dict[str, float]:
    """What the trajectories show, over all turns of these episodes."""
    turns = looks = repeats = 0
    places, took_target = [], []
    for r in records:
        seen: set[str] = set()
        visited: set[str] = set()
        for t in r.get("turns") or []:
            a = (t.get("action") or "").strip().lower()
            turns += 1
            looks += bool(LOOK.match(a))
            repeats += a in seen
            seen.add(a)
            if a.startswith("go to "):
                visited.add(a[6:])
        places.append(len(visited))
        took_target.append(alfworld_steps(r)[0])
    n = max(1, len(records))
    return {"look_pct": 100 * looks / max(1, turns), "repeat_pct": 100 * repeats / max(1, turns),
            "places": sum(places) / n, "took_pct": 100 * sum(took_target) / n}


def table(out: Path, variants: list[str]) -> str:
    loaded = {v: load(out / v) for v in variants if (out / v).exists()}
    runs = {v: scored(recs) for v, recs in loaded.items()}
    errors = {v: len(recs) - len(runs[v]) for v, recs in loaded.items()}
    if "before" not in runs:
        raise SystemExit(f"no {out}/before run: the table compares every variant with it")
    base = runs["before"]
    lines = [("| variant (`--acting`) | n (errors left out) | SR % | Δ SR vs before [95 % CI] | McNemar p (b/c) | steps | "
              "look/examine/inventory % | repeated actions % | places visited | task's object taken % | s/turn |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for v, recs in runs.items():
        common = sorted(set(recs) & set(base))
        if not common:
            continue
        res = paired([float(bool(recs[k]["success"])) for k in common],
                     [float(bool(base[k]["success"])) for k in common])
        rows = [recs[k] for k in common]
        b = behaviour(rows)
        steps = sum(r["steps"] for r in rows) / len(rows)
        s_turn = sum(r.get("episode_s") or 0 for r in rows) / max(1, sum(r["steps"] for r in rows))
        p = "–" if v == "before" or res.p_value is None else f"{res.p_value:.3g} ({res.b}/{res.c})"
        delta = "–" if v == "before" else f"{100 * res.diff:+.1f} [{100 * res.ci_low:+.1f}, {100 * res.ci_high:+.1f}]"
        lines.append(f"| {v} ({', '.join(VARIANTS.get(v, []))}) | {res.n} ({errors[v]}) | {100 * res.mean_a:.1f} | "
                     f"{delta} | {p} | "
                     f"{steps:.1f} | {b['look_pct']:.0f} | {b['repeat_pct']:.0f} | {b['places']:.1f} | "
                     f"{b['took_pct']:.0f} | {s_turn:.1f} |")
    per_type = defaultdict(dict)
    for v, recs in runs.items():
        by = defaultdict(list)
        for key in sorted(set(recs) & set(base)):   # the same pairs as the table
            r = recs[key]
            by[r.get("task_type") or "?"].append(float(bool(r["success"])))
        for t, xs in by.items():
            per_type[t][v] = f"{100 * sum(xs) / len(xs):.0f} ({len(xs)})"
    lines += ["", "SR % per task type (n): " + "; ".join(
        f"{t}: " + ", ".join(f"{v} {x}" for v, x in cells.items()) for t, cells in sorted(per_type.items()))]
    text = "\n".join(lines) + "\n"
    (out / "ablation.md").write_text(text)
    return text


def ablation(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ}
    env.setdefault("SKILLOS_LLM_CACHE", str((out / "llm-cache.sqlite").resolve()))
    variants = args.variants.split(",") if args.variants else list(VARIANTS)
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"unknown variant {v!r}: use {', '.join(VARIANTS)}")
        cmd = [sys.executable, "-m", "skillos.cli", "run", "--env", "alfworld", "--split", args.split,
               "--method", "none", "--seeds", str(args.seeds), "--max-turns", str(args.max_turns),
               "--history-len", str(args.history_len), "--concurrency", str(args.concurrency),
               "--out", str(out / v)]
        if args.per_type:
            cmd += ["--per-type", str(args.per_type)]
        if args.limit:
            cmd += ["--limit", str(args.limit)]
        for pair in VARIANTS[v]:
            cmd += ["--acting", pair]
        for attempt in range(1 + args.retries):
            print("$ " + " ".join(cmd[2:]), flush=True)
            subprocess.run(cmd, check=True, cwd=ROOT, env=env)
            failed = [r for r in load(out / v).values() if r.get("error")]
            if not failed:
                break
            # an episode cut by an error (a timeout on a loaded machine) is not a failure of the executor:
            # play the variant again; the completion cache replays what was done, so only the rest costs
            if attempt < args.retries:
                print(f"{v}: {len(failed)} episode(s) ended with an error; again ({attempt + 1}/{args.retries})",
                      flush=True)
    print(table(out, variants))


def prefix(out: Path, variants: list[str]) -> str:
    """How much of each turn's prompt a server's prefix cache can reuse: every recorded turn's messages rebuilt
    (`skillos.acting.prompt.agent_messages`, without the admissible list the records do not keep), flattened,
    and held against the turn before's: the characters of the turn before's prompt that are not a prefix of this
    one (0: append-only), and the characters this turn adds after the shared prefix."""
    from skillos.acting.options import from_pairs
    from skillos.acting.prompt import agent_messages

    def flat(ms: list[dict]) -> str:
        return "".join(f"<{m['role']}>{m['content']}" for m in ms)

    rows = [("| variant | turns | first prompt (chars) | previous prompt not reused (chars per turn) | "
            "new after the shared prefix (chars per turn) |"), "|---|---|---|---|---|"]
    for v in variants:
        opts = from_pairs(VARIANTS[v])
        first, lost, added = [], [], []
        for r in read_tasks(out / v):
            history, prev, turns = [], None, r.turns
            for t in turns:
                text = flat(agent_messages("alfworld", r.instruction, t["observation"], skills=[], history=history,
                                           admissible=None, first_observation=turns[0]["observation"], options=opts,
                                           task_type=r.task_type, task_id=r.task_id))
                if prev is None:
                    first.append(len(text))
                else:
                    shared = len(os.path.commonprefix([prev, text]))
                    lost.append(len(prev) - shared)
                    added.append(len(text) - shared)
                prev = text
                history.append((t["observation"], t["action"], t["thought"]))
        mean = lambda xs: sum(xs) / max(1, len(xs))
        rows.append(f"| {v} | {len(added)} | {mean(first):.0f} | {mean(lost):.0f} | {mean(added):.0f} |")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("ablation", help="No Memory with each acting variant on the same tasks")
    a.add_argument("--split", default="valid_seen")
    a.add_argument("--per-type", type=int, default=2)
    a.add_argument("--limit", type=int)
    a.add_argument("--seeds", type=int, default=1)
    a.add_argument("--max-turns", type=int, default=30)
    a.add_argument("--history-len", type=int, default=30)
    a.add_argument("--concurrency", type=int, default=4)
    a.add_argument("--variants", help=f"comma-separated, of {', '.join(VARIANTS)} (default: all)")
    a.add_argument("--out", default="runs/acting")
    a.add_argument("--retries", type=int, default=2, help="plays of a variant again while episodes end with an error")
    t = sub.add_parser("table", help="the table from the run folders")
    t.add_argument("out", type=Path)
    t.add_argument("--variants", help="comma-separated (default: all)")
    f = sub.add_parser("prefix", help="append-only check and what a turn adds, from the run folders")
    f.add_argument("out", type=Path)
    f.add_argument("--variants", help="comma-separated (default: all)")
    args = p.parse_args()
    if args.cmd == "ablation":
        ablation(args)
    elif args.cmd == "prefix":
        print(prefix(args.out, args.variants.split(",") if args.variants else list(VARIANTS)))
    else:
        print(table(args.out, args.variants.split(",") if args.variants else list(VARIANTS)))


if __name__ == "__main__":
    main()

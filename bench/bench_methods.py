"""Every method of `skillos run` on the same stream, one table with paired statistics.

    # play them (the stack of `skillos run`, or the one already up) and print the table
    .venv/bin/python -m bench.bench_methods run --env alfworld --per-type 2 --seeds 3 --max-turns 20
    .venv/bin/python -m bench.bench_methods run --env webshop --limit 12 --seeds 3 --max-turns 15
    # the table of any finished run folder with several methods
    .venv/bin/python -m bench.bench_methods table runs/methods/alfworld
    # SkillOS's curation of a finished run's trajectories again, with today's prompt (nothing applied)
    .venv/bin/python -m bench.bench_methods recurate runs/methods/webshop --llm-url http://127.0.0.1:8080/v1

One row per method: success rate (WebShop: also the score), steps, tokens and rollouts per task, final
repo size, and the paired difference against No Memory and against SkillOS-base on the same
(seed, task) pairs: Δ with a paired bootstrap 95 % interval and McNemar's exact p on success (WebShop:
also the score's Δ with its interval). Writes ``methods.md`` into the run folder.
On a GPU cluster the same command scales by pointing the roles at vLLM (`SKILLOS_LLM_BASE_URL`, README)
and raising ``--concurrency``, ``--per-type``/``--limit`` and ``--max-turns 30``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from bench.bench_learning import load_records, run_header
from harness.stats import paired
from skillos.methods import METHODS
from skillos.protocol.runs import RUN_STATE, RunFolder, RunState, RunSummary, read_json
from skillos.skills import parse

ROOT = Path(__file__).resolve().parent.parent


def _keyed(recs: dict[int, dict[str, dict]], key) -> dict[tuple[int, str], float]:
    return {(seed, task): key(r) for seed, tasks in recs.items() for task, r in tasks.items()}


def _versus(a: dict, b: dict, mcnemar: bool = True) -> str:
    """Δ [95 % CI] of a paired bootstrap; McNemar's p only for success (``paired`` gives it to any 0/1
    outcome, which a score column can be by chance)."""
    common = sorted(set(a) & set(b))
    if not common:
        return "–"
    res = paired([a[k] for k in common], [b[k] for k in common])
    p = f", p = {res.p_value:.2g}" if mcnemar and res.p_value is not None else ""
    return f"{100 * res.diff:+.1f} [{100 * res.ci_low:+.1f}, {100 * res.ci_high:+.1f}]{p}"


def table(run_dir: Path) -> str:
    recs = load_records(run_dir)
    summary = read_json(RunFolder(run_dir).summary, RunSummary)
    cfg = summary.config if summary is not None else {}
    env = cfg.get("env", "?")
    order = [m for m in METHODS if m in recs] + sorted(m for m in recs if m not in METHODS)
    success = {m: _keyed(recs[m], lambda r: float(bool(r["success"]))) for m in order}
    score = {m: _keyed(recs[m], lambda r: float(r.get("reward") or 0.0)) for m in order}
    lines = run_header(f"{env} / {cfg.get('split', '?')}: {len(order)} methods on the same stream", cfg, run_dir)
    graded = env == "webshop"
    head = "| method | n | SR % |" + (" score |" if graded else "") + \
        " steps | LLM tokens/task (executor + method) | rollouts/task | repo size | SR Δ vs none [95% CI] | SR Δ vs skillos [95% CI] |" + \
        (" score Δ vs none [95% CI] | score Δ vs skillos [95% CI] |" if graded else "")
    lines += [head, "|---" * (head.count("|") - 1) + "|"]
    methods = summary.methods if summary is not None else {}
    agg_of = {m: (methods.get(m) or {}).get("aggregate") or {} for m in order}
    for m in order:
        rows = [r for tasks in recs[m].values() for r in tasks.values()]
        n = len(rows)
        sr = 100 * sum(success[m].values()) / max(1, n)
        size = (agg_of[m].get("final_repo_size") or {}).get("mean")
        cells = [m, str(n), f"{sr:.1f}"]
        if graded:
            cells.append(f"{100 * sum(score[m].values()) / max(1, n):.1f}")
        cells += [f"{sum(r['steps'] for r in rows) / max(1, n):.1f}",
                  (f"{sum(r.get('tokens') or 0 for r in rows) / max(1, n):,.0f} + "
                   f"{sum((r.get('method_info') or {}).get('writer_tokens', 0) for r in rows) / max(1, n):,.0f}"),
                  f"{sum(r.get('rollouts') or 1 for r in rows) / max(1, n):.1f}",
                  "–" if size is None else f"{size:.1f}",
                  "–" if m == "none" or "none" not in success else _versus(success[m], success["none"]),
                  "–" if m == "skillos" or "skillos" not in success else _versus(success[m], success["skillos"])]
        if graded:
            cells += ["–" if m == "none" or "none" not in score else _versus(score[m], score["none"], mcnemar=False),
                      "–" if m == "skillos" or "skillos" not in score else _versus(score[m], score["skillos"], mcnemar=False)]
        lines.append("| " + " | ".join(cells) + " |")
    own = [(m, agg_of[m].get("method_measures") or {}) for m in order]
    own = [(m, ms) for m, ms in own if ms]
    if own:
        lines += ["", "Each method's own measures (mean over seeds): " + "; ".join(
            f"**{m}** " + ", ".join(f"{k.replace('_', ' ')} {v['mean']:.2f}" for k, v in ms.items()
                                    if v.get("mean") is not None) for m, ms in own) + "."]
    text = "\n".join(lines) + "\n"
    (run_dir / "methods.md").write_text(text)
    return text


def _exported(run_dir: Path, seed: int, name: str) -> dict:
    """A retrieved skill as the run's exported repo holds it (records keep only names): its final
    version, which may be later than the one the curator was shown then."""
    path = RunFolder(run_dir).repo_dir(f"seed{seed}") / name / "SKILL.md"
    if not path.exists():
        return {"name": name}
    doc = parse(path.read_text())
    return {"name": name, "description": doc.description, "content": doc.body}


def recurate(run_dir: Path, llm_url: str, model: str) -> str:
    """Ask the curator again, with the current prompt and the same seeds, for every SkillOS task of a run
    (apply=false): what a prompt change does to the skills, on the very trajectories the run recorded."""
    import asyncio

    from skillos.curation import CurationOptions, curate
    from skillos.llm import LLMClient, LLMSettings
    from skillos.protocol.curator import CurateRequest

    records = sorted((r for tasks in load_records(run_dir).get("skillos", {}).values() for r in tasks.values()),
                     key=lambda r: (r["seed"], r["position"]))
    if not records:
        raise SystemExit(f"{run_dir}: no SkillOS task records")
    state = read_json(RunFolder(run_dir).run_state, RunState)
    if state is None:
        raise SystemExit(f"{run_dir}: no {RUN_STATE}")
    cfg = state.config
    env = cfg["env"]

    async def go() -> list[str]:
        llm = LLMClient(LLMSettings(base_url=llm_url, model=model, timeout_s=1800, max_retries=0))
        out = []
        for r in records:
            trajectory = {"task": r["instruction"], "task_id": r["task_id"], "env": env,
                          "turns": [{k: t.get(k) for k in ("observation", "thought", "action", "valid")}
                                    for t in r["turns"]]}
            retrieved = [_exported(run_dir, r["seed"], s.get("name", "")) for s in r.get("retrieved") or []]
            judged = r["success"] if r.get("self_judged_success") is None else r["self_judged_success"]
            req = CurateRequest(trajectory=trajectory, self_judged_success=bool(judged), retrieved_skills=retrieved,
                                apply=False, seed=r["seed"], temperature=cfg.get("curator_temperature"))
            resp = await curate(req.to_decision_request(), llm=llm, repo=None, options=CurationOptions())
            for call in resp.calls:
                body = call.arguments.get("content") or call.arguments.get("new_content") or ""
                out.append(f"#### seed {r['seed']}, task {r['position']}: {call.name} "
                           f"`{call.arguments.get('skill_name')}`\n\n```\n{body.strip()}\n```\n")
            if resp.error:
                out.append(f"#### seed {r['seed']}, task {r['position']}: no decision ({resp.error})\n")
        return out

    return "\n".join(asyncio.run(go()))


def run(args) -> None:
    out = Path(args.out or f"runs/methods/{args.env}")
    cmd = [sys.executable, "-m", "skillos.cli", "run", "--env", args.env, "--method", args.methods,
           "--seeds", str(args.seeds), "--max-turns", str(args.max_turns), "--concurrency", str(args.concurrency),
           "--order", "grouped", "--out", str(out)]
    for flag in ("split", "per_type", "task_type", "limit", "retrieval"):
        if getattr(args, flag):
            cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if args.oracle_judge:
        cmd.append("--oracle-judge")
    for p in args.param:
        cmd += ["--param", p]
    print("$ " + " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    print(table(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="play the methods on one stream, then print the table")
    r.add_argument("--env", default="alfworld", choices=["alfworld", "webshop", "reasoning"])
    # the paper's methods; gold and skillos-expert (ALFWorld only) are asked for by name
    r.add_argument("--methods", default=",".join(m for m in METHODS if m not in ("gold", "skillos-expert")))
    r.add_argument("--split")
    r.add_argument("--per-type", type=int)
    r.add_argument("--task-type")
    r.add_argument("--limit", type=int)
    r.add_argument("--retrieval")
    r.add_argument("--seeds", type=int, default=3)
    r.add_argument("--max-turns", type=int, default=20)
    r.add_argument("--concurrency", type=int, default=2)
    r.add_argument("--oracle-judge", action="store_true")
    r.add_argument("--param", action="append", default=[])
    r.add_argument("--out")
    t = sub.add_parser("table", help="the table of a finished run folder")
    t.add_argument("run_dir", type=Path)
    c = sub.add_parser("recurate", help="SkillOS's curation of a finished run again, with today's prompt")
    c.add_argument("run_dir", type=Path)
    c.add_argument("--llm-url", required=True, help="an OpenAI-compatible /v1 base URL (the curator role's)")
    c.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    args = p.parse_args()
    if args.cmd == "run":
        run(args)
    elif args.cmd == "recurate":
        print(recurate(args.run_dir, args.llm_url, args.model))
    else:
        print(table(args.run_dir))


if __name__ == "__main__":
    main()

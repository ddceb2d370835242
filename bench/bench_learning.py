"""Evidence that curation and training help: paired comparisons of two methods on the same tasks.

    # curation lifts a frozen executor (paper Table 1 protocol, scaled): SkillOS-base vs No Memory
    .venv/bin/python -m bench.bench_learning curation --env alfworld --per-type 3 --seeds 3 --max-turns 20
    .venv/bin/python -m bench.bench_learning curation --env webshop --limit 18 --seeds 3 --max-turns 15
    # the gold ceiling and the expert cold start beside SkillOS-base, No Memory shared (issue 23)
    .venv/bin/python -m bench.bench_learning curation --env alfworld --per-type 5 --seeds 1 --max-turns 30 \
        --method gold,skillos,skillos-expert --param gold.k=1
    # the statistics of any finished `skillos run` folder (methods A and B on the same tasks and seeds)
    .venv/bin/python -m bench.bench_learning analyze runs/learning/curation-alfworld --a skillos --b none

`curation` runs `skillos run` (its stack, or the one already up) with both methods and then `analyze`.
`analyze` pairs the per-task records by (seed, task) and reports, per seed and pooled: success rate
(WebShop also its score) with a paired bootstrap 95 % interval and McNemar's exact test, steps, and the
usage / curation / judge numbers of the run's summary. It prints Markdown and writes ``learning.md``
into the run folder; bench/RESULTS-learning.md quotes these files.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from harness.stats import paired

ROOT = Path(__file__).resolve().parent.parent


def load_records(run_dir: Path) -> dict[str, dict[int, dict[str, dict]]]:
    """method -> seed -> task_id -> record, from ``tasks/*.json`` (or ``tasks.jsonl`` of a live run)."""
    out: dict[str, dict[int, dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))
    files = sorted((run_dir / "tasks").glob("*.json"))
    records = [json.loads(p.read_text()) for p in files]
    if not records and (run_dir / "tasks.jsonl").exists():
        records = [json.loads(line) for line in (run_dir / "tasks.jsonl").read_text().splitlines() if line.strip()]
    for r in records:
        out[r["method"]][int(r.get("seed") or 0)][r["task_id"]] = r
    return out


def run_header(title: str, cfg: dict, run_dir: Path) -> list[str]:
    """The heading of a run's table: the models of each role and how the stream was played."""
    lines = [f"### {title}", ""]
    models = cfg.get("models") or {}
    if models:
        lines.append("Models: " + "; ".join(f"{role} `{m.get('served_as') or m.get('model')}`"
                                            for role, m in models.items()) + ".")
    lines += [(f"{cfg.get('tasks', '?')} tasks × {cfg.get('seeds', '?')} seeds, max turns {cfg.get('max_turns', '?')}, "
              f"k = {cfg.get('k', '?')}, order {cfg.get('order', '?')}, self-judge "
              f"{'on' if cfg.get('self_judge', True) else 'off (oracle)'}; run folder `{run_dir}`."), ""]
    return lines


def _pairs(a: dict[str, dict], b: dict[str, dict], key) -> tuple[list[float], list[float]]:
    common = sorted(set(a) & set(b))
    return [key(a[t]) for t in common], [key(b[t]) for t in common]


def analyze(run_dir: Path, method_a: str = "skillos", method_b: str = "none") -> str:
    recs = load_records(run_dir)
    if method_a not in recs or method_b not in recs:
        raise SystemExit(f"{run_dir} has methods {sorted(recs)}; need {method_a} and {method_b}")
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    cfg = summary.get("config", {})
    env = cfg.get("env", "?")
    measures = [("SR (%)", lambda r: float(bool(r["success"])), True)]
    if env == "webshop":
        measures.append(("score (×100)", lambda r: float(r.get("reward") or 0.0), True))
    lines = run_header(f"{env} / {cfg.get('split', '?')}: {method_a} vs {method_b}", cfg, run_dir)
    seeds = sorted(set(recs[method_a]) & set(recs[method_b]))
    header = "| seed | n | " + " | ".join(f"{name}: {method_a} vs {method_b}, Δ [95% CI]" for name, _, _ in measures)
    lines += [header + " | McNemar p (SR) | steps " + f"{method_a} / {method_b} |",
              "|---" * (len(measures) + 4) + "|"]
    pooled_a: dict[str, list[float]] = defaultdict(list)
    pooled_b: dict[str, list[float]] = defaultdict(list)
    steps_a, steps_b = [], []
    for seed in [*seeds, "pooled"]:
        cells, p_sr, n = [], None, 0
        for name, key, pct in measures:
            if seed == "pooled":
                xs, ys = pooled_a[name], pooled_b[name]
            else:
                xs, ys = _pairs(recs[method_a][seed], recs[method_b][seed], key)
                pooled_a[name] += xs
                pooled_b[name] += ys
            res = paired(xs, ys)
            n = res.n
            k = 100 if pct else 1
            cells.append(f"{res.mean_a * k:.1f} vs {res.mean_b * k:.1f}, {res.diff * k:+.1f} "
                         f"[{res.ci_low * k:+.1f}, {res.ci_high * k:+.1f}]")
            if name.startswith("SR"):
                p_sr = res
        if seed == "pooled":
            sa, sb = steps_a, steps_b
        else:
            sa, sb = _pairs(recs[method_a][seed], recs[method_b][seed], lambda r: float(r["steps"]))
            steps_a += sa
            steps_b += sb
        mcn = f"{p_sr.p_value:.3g} ({p_sr.b}/{p_sr.c})" if p_sr and p_sr.p_value is not None else "–"
        lines.append(f"| {seed} | {n} | " + " | ".join(cells) + f" | {mcn} | "
                     f"{sum(sa) / max(1, len(sa)):.1f} / {sum(sb) / max(1, len(sb)):.1f} |")
    agg = (summary.get("methods", {}).get(method_a) or {}).get("aggregate") or {}
    if agg:
        def f(key, pct=True):
            v = agg.get(key) or {}
            return "–" if v.get("mean") is None else f"{v['mean'] * (100 if pct else 1):.1f}"
        lines += ["", (f"{method_a}: usage rate {f('usage_rate')} %, success when used {f('success_when_used')} %, "
                      f"coverage {f('coverage')} %, skills used per task {f('skills_per_example', False)}, "
                      f"curator call validity r_fc {f('validity_rate')} %, self-judge agrees with the env "
                      f"{f('self_judge_agreement')} %, final repo size {f('final_repo_size', False)} skills; "
                      f"op mix {agg.get('op_mix')}.")]
    per_type = defaultdict(lambda: [[], []])
    for i, m in enumerate((method_a, method_b)):
        for seed in seeds:
            for r in recs[m][seed].values():
                per_type[r.get("task_type") or "?"][i].append(float(bool(r["success"])))
    if len(per_type) > 1:
        lines += ["", "SR per task type (all seeds): " + ", ".join(
            f"{t} {100 * sum(a) / max(1, len(a)):.0f} vs {100 * sum(b) / max(1, len(b)):.0f}"
            for t, (a, b) in sorted(per_type.items())) + "."]
    text = "\n".join(lines) + "\n"
    (run_dir / "learning.md").write_text(text)
    return text


def curation(args) -> None:
    out = Path(args.out or f"runs/learning/curation-{args.env}")
    cmd = [sys.executable, "-m", "skillos.cli", "run", "--env", args.env, "--method", args.method, "--baseline",
           "--seeds", str(args.seeds), "--max-turns", str(args.max_turns), "--concurrency", str(args.concurrency),
           "--order", "grouped", "--out", str(out)]
    if args.split:
        cmd += ["--split", args.split]
    if args.per_type:
        cmd += ["--per-type", str(args.per_type)]
    if args.task_type:
        cmd += ["--task-type", args.task_type]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    if args.oracle_judge:
        cmd.append("--oracle-judge")
    for pair in args.param or []:
        cmd += ["--param", pair]
    for pair in args.acting or []:
        cmd += ["--acting", pair]
    env = dict(os.environ)
    # every completion kept: the same command started again resumes, and No Memory's episodes are shared
    # with any other comparison that asks for them (skillos.llm.cache)
    env.setdefault("SKILLOS_LLM_CACHE", str(Path("~/.cache/skillos/llm-cache.sqlite").expanduser()))
    print("$ " + " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, env=env)
    for method in args.method.split(","):
        print(analyze(out, method.strip(), "none"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("curation", help="SkillOS-base vs No Memory on the same stream")
    c.add_argument("--env", default="alfworld", choices=["alfworld", "webshop", "reasoning"])
    c.add_argument("--split")
    c.add_argument("--per-type", type=int)
    c.add_argument("--task-type", help="only tasks of this type (ALFWorld: pick, clean, heat, cool, look, pick_two)")
    c.add_argument("--limit", type=int)
    c.add_argument("--seeds", type=int, default=3)
    c.add_argument("--max-turns", type=int, default=20)
    c.add_argument("--concurrency", type=int, default=4)
    c.add_argument("--oracle-judge", action="store_true")
    c.add_argument("--method", default="skillos", help="methods compared with No Memory, comma-separated "
                   "(e.g. gold,skillos,skillos-expert)")
    c.add_argument("--param", action="append", help="a method's parameter, as `skillos run --param`")
    c.add_argument("--acting", action="append", help="an executor option, as `skillos run --acting`")
    c.add_argument("--out")
    a = sub.add_parser("analyze", help="paired statistics of a finished run folder")
    a.add_argument("run_dir", type=Path)
    a.add_argument("--a", default="skillos")
    a.add_argument("--b", default="none")
    args = p.parse_args()
    if args.cmd == "curation":
        curation(args)
    else:
        print(analyze(args.run_dir, args.a, args.b))


if __name__ == "__main__":
    main()

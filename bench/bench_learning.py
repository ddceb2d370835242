"""Evidence that curation and training help: paired comparisons of two methods on the same tasks.

    # curation lifts a frozen executor (paper Table 1 protocol, scaled): SkillOS-base vs No Memory
    .venv/bin/python -m bench.bench_learning curation --env alfworld --per-type 3 --seeds 3 --max-turns 20
    .venv/bin/python -m bench.bench_learning curation --env webshop --limit 18 --seeds 3 --max-turns 15
    # the gold ceiling and the expert cold start beside SkillOS-base, No Memory shared (issue 23)
    .venv/bin/python -m bench.bench_learning curation --env alfworld --per-type 5 --seeds 1 --max-turns 30 \
        --method gold,skillos,skillos-expert --param gold.k=1
    # the statistics of any finished `skillos run` folder (methods A and B on the same tasks and seeds)
    .venv/bin/python -m bench.bench_learning analyze runs/learning/curation-alfworld --a skillos --b none
    # reasoning-gym valid: one stream per family side by side (each family's own repo), pooled; the
    # families served by the env (SKILLOS_REASONING_FAMILIES) and the run of bench/RESULTS-learning.md 0b
    .venv/bin/python -m bench.bench_learning curation --env reasoning --split valid --per-type 25 --seeds 1 \
        --task-type letter_counting,spell_backward,number_sorting,gsm_symbolic --stream-per-type \
        --concurrency 1 --oracle-judge
    # the same at 75 problems per family (300 per arm), gold beside SkillOS-base in each family's process;
    # started again, it carries each family's folder on from where it stopped (`skillos run --resume`)
    .venv/bin/python -m bench.bench_learning curation --env reasoning --split valid --per-type 75 --seeds 1 \
        --task-type letter_counting,spell_backward,number_sorting,gsm_symbolic --stream-per-type \
        --method skillos,gold --param gold.k=1 --concurrency 1 --oracle-judge --out bench/evidence/reasoning-valid-300

`curation` runs `skillos run` (its stack, or the one already up) with both methods and then `analyze`.
`analyze` pairs the per-task records by (seed, task) and reports, per seed and pooled: success rate
(WebShop also its score) with a paired bootstrap 95 % interval and McNemar's exact test, steps, and the
usage / curation / judge numbers counted from the records. It prints Markdown and writes
``learning-<a>-vs-<b>.md`` into the run folder (the parent folder of pooled ones); bench/RESULTS-learning.md quotes these files.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

from bench.skill_echo import echo_line, pct
from harness.report import left_example
from harness.resume import ResumeError, load_state
from harness.reuse import executor_code, played_with
from harness.stats import paired
from skillos.acting.state import needed_change, object_class, task_words
from skillos.protocol.runs import RunFolder, RunState, RunSummary, read_json, read_tasks, to_dict
from skillos.worked_examples.follow import follow_share

ROOT = Path(__file__).resolve().parent.parent


def _run_records(run_dir: Path) -> list[dict]:
    """The task records of a run folder, read through the run folder's contract (`skillos.protocol.runs`)."""
    return [to_dict(t) for t in read_tasks(run_dir)]


def load_records(*run_dirs: Path) -> dict[str, dict[int, dict[str, dict]]]:
    """method -> seed -> task_id -> record, from ``tasks/*.json`` (or ``tasks.jsonl`` of a live run) of
    each folder; the folders of one comparison played apart (one stream per task type) pool into one."""
    out: dict[str, dict[int, dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))
    source: dict[tuple[str, int, str], Path] = {}
    for run_dir in run_dirs:
        for r in _run_records(run_dir):
            key = (r["method"], int(r.get("seed") or 0), r["task_id"])
            if source.setdefault(key, run_dir) != run_dir:  # two plays of one task: which to pair is unclear
                raise SystemExit(f"{key[0]} played {key[2]} (seed {key[1]}) in both {source[key]} and {run_dir}: "
                                 "pool folders that played disjoint tasks, or pass the folders to compare")
            out[key[0]][key[1]][key[2]] = r
    return out


def type_streams(run_dir: Path) -> list[Path]:
    """The folders of a ``--stream-per-type`` comparison (one per type, under ``run_dir``), else [run_dir]."""
    subs = sorted(d for d in run_dir.iterdir() if d.is_dir() and RunFolder(d).run_state.exists()) \
        if run_dir.is_dir() else []
    return subs if subs and not RunFolder(run_dir).run_state.exists() else [run_dir]


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


def _config(run_dir: Path) -> dict:
    """The run's config: its summary's (a finished run), else its run.json's (a live one)."""
    folder = RunFolder(run_dir)
    for path, model in ((folder.summary, RunSummary), (folder.run_state, RunState)):
        read = read_json(path, model) if path.exists() else None
        if read is not None:
            return read.config or {}
    return {}


def _usage_line(method: str, records: list[dict]) -> str:
    """Usage and curation measures from the records themselves (a live or pooled run has no one summary)."""
    if not records:
        return ""
    used = [r for r in records if r.get("used")]
    retrieved = [r for r in records if r.get("retrieved")]
    ops = [op for r in records for op in r.get("ops") or []]
    valid = [r["validity_rate"] for r in records if r.get("validity_rate") is not None]
    judged = [r for r in records if r.get("self_judged_success") is not None]
    mix: dict[str, int] = defaultdict(int)
    for op in ops:
        mix[f"{op.get('name')}{'' if op.get('applied') else ' (rejected)'}"] += 1
    sizes = [r["repo_size"] for r in records if r.get("repo_size") is not None]
    return (f"{method} over {len(records)} tasks: skills retrieved for {pct(len(retrieved), len(records))} %, "
            f"used (followed) in {pct(len(used), len(records))} %, success when used "
            f"{pct(sum(bool(r['success']) for r in used), len(used))} % vs "
            f"{pct(sum(bool(r['success']) for r in records if not r.get('used')), len(records) - len(used))} % "
            f"when not; curator call validity r_fc {pct(sum(valid), len(valid))} %; self-judge agrees with the env "
            f"{pct(sum(bool(r['self_judged_success']) == bool(r['success']) for r in judged), len(judged))} %; "
            f"repo size at the end {'+'.join(str(x) for x in _last_sizes(records)) or '–'} skills"
            f" (max {max(sizes) if sizes else '–'}); op mix {dict(sorted(mix.items()))}.")


# what the env answers when a change is made ("You cool the apple 1 using the fridge 1."), and the action itself
_CHANGED = re.compile(r"^you (heat|cool|clean) the (.+?) using the ", re.IGNORECASE)
_CHANGE_ACTION = re.compile(r"^(heat|cool|clean) (.+?) with ")


def alfworld_steps(record: dict) -> tuple[bool, bool | None]:
    """(the task's object taken, the change the task asks for made to it: None for a task that asks
    none), read off the episode's actions and observations: whether the executor carried out the steps
    a procedure for its task type would give it, skill or no skill (the "used" measure only sees a
    skill's name in the completion).

    A turn's observation is what the agent saw before its action, so the last action's result is never
    recorded: a change made on the last turn is read from the action itself when it was a valid one, and
    "taken" counts a take of the task's object as written (every take whose result is recorded succeeded)."""
    words = task_words(record.get("instruction") or "")
    change = needed_change(record.get("instruction") or "")
    turns = record.get("turns") or []
    took, changed = False, False
    for i, t in enumerate(turns):
        a = (t.get("action") or "").strip().lower()
        if a.startswith("take ") and object_class(a.split(" from ")[0][5:]) in words:
            took = True
        m = _CHANGED.match((t.get("observation") or "").strip())
        if i == len(turns) - 1 and t.get("valid"):
            m = m or _CHANGE_ACTION.match(a)
        if change and m and f"{m.group(1).lower()}ed" == change and object_class(m.group(2).lower()) in words:
            changed = True
    return took, (changed if change else None)


def _steps_line(method: str, records: list[dict]) -> str:
    """ALFWorld: how often an arm's episodes took the task's object and made the change it asks for."""
    steps = [(r, *alfworld_steps(r)) for r in records]
    took = sum(t for _, t, _ in steps)
    asks = [(r, c) for r, _, c in steps if c is not None]
    made = [r for r, c in asks if c]
    return (f"{method}: the task's object taken in {took} of {len(records)} episodes "
            f"({pct(took, len(records))} %); the change its task asks for (clean / heat / cool) made in "
            f"{len(made)} of {len(asks)} ({pct(len(made), len(asks))} %), success when made "
            f"{pct(sum(bool(r['success']) for r in made), len(made))} %.")


def examples_line(method_a: str, method_b: str, pairs: list[tuple[dict, dict]]) -> str:
    """Worked examples over the pairs: how often A was shown one, won when shown one, and how far its episodes
    took the example's key steps in order (`skillos.worked_examples.follow`), beside the same measure of B's
    paired episode against the same example (B was not shown it: what any episode of the task matches)."""
    shown = [(a, b) for a, b in pairs if a.get("examples")]
    if not shown:
        return ""

    def follow(record: dict, example: dict, level: str) -> float | None:
        acts = [t.get("action", "") for t in record.get("turns") or [] if t.get("valid", True)]
        return follow_share(acts, example.get("actions") or [], level)

    def mean_follow(side: int, level: str) -> str:
        vals = [f for pair in shown for e in pair[0]["examples"][:1] if (f := follow(pair[side], e, level)) is not None]
        return f"{100 * sum(vals) / len(vals):.0f} %" if vals else "–"

    left = sum(1 for a, _ in pairs if left_example(a))
    won_a = sum(bool(a["success"]) for a, _ in shown)
    won_b = sum(bool(b["success"]) for _, b in shown)
    return (f"Worked examples: {method_a} was shown one in {len(shown)} of {len(pairs)} paired tasks "
            f"({pct(len(shown), len(pairs))} %) and won {won_a} of them ({method_b} won {won_b} of the same); "
            f"{left} of its successes left an example on a skill. The example's key steps (take, put, change, use) "
            f"taken in order: {mean_follow(0, 'pattern')} by {method_a} vs {mean_follow(1, 'pattern')} by "
            f"{method_b}'s paired episode against the same example (the verbs and appliances); "
            f"{mean_follow(0, 'exact')} vs {mean_follow(1, 'exact')} step for step (objects and places, numbers "
            "left out).")


def _last_sizes(records: list[dict]) -> list[int]:
    """The repo size after the last task of each stream (one repo per (seed, stream))."""
    last: dict[str, tuple[int, int]] = {}
    for r in records:
        if r.get("repo_size") is not None:
            key = str(r.get("repo") or r.get("seed"))
            if key not in last or r["position"] >= last[key][0]:
                last[key] = (r["position"], r["repo_size"])
    return [size for _, size in last.values()]


def analyze(run_dir: Path | list[Path], method_a: str = "skillos", method_b: str = "none") -> str:
    """The paired statistics of one run folder, or of several pooled (a ``--stream-per-type`` comparison:
    pass its parent folder or the list); writes ``learning-<a>-vs-<b>.md`` into the folder (the parent
    folder of the first of a list)."""
    dirs = type_streams(run_dir) if isinstance(run_dir, Path) else list(run_dir)
    # only the folders that played A or B (a parent folder may hold other methods' runs too)
    dirs = [d for d in dirs if {method_a, method_b} & set(load_records(d))] or dirs
    recs = load_records(*dirs)
    if method_a not in recs or method_b not in recs:
        raise SystemExit(f"{', '.join(map(str, dirs))} has methods {sorted(recs)}; need {method_a} and {method_b}")
    # the header's settings from a folder that played method_a (a pooled comparison's folders may differ)
    cfg = next((c for c in map(_config, dirs) if method_a in (c.get("methods") or [])), None) or _config(dirs[0])
    env = cfg.get("env", "?")
    measures = [("SR (%)", lambda r: float(bool(r["success"])), True)]
    if env in ("webshop", "reasoning"):  # partial credit: WebShop's reward, a reasoning-gym family's score
        measures.append(("score (×100)", lambda r: float(r.get("reward") or 0.0), True))
    where = run_dir if isinstance(run_dir, Path) else dirs[0].parent
    title = f"{env} / {cfg.get('split', '?')}: {method_a} vs {method_b}"
    if len(dirs) > 1:
        title += f" (pooled over {len(dirs)} run folders: {', '.join(d.name for d in dirs)})"
        cfg = {**cfg, "tasks": len({t for s in recs[method_a].values() for t in s})}
    lines = run_header(title, cfg, where)
    cfg_b = next((c for c in map(_config, dirs) if method_b in (c.get("methods") or [])), None) or {}
    differ = [f"{key} {cfg_b.get(key)!r}" for key in ("max_turns", "k", "self_judge", "acting")
              if cfg_b and cfg_b.get(key) != cfg.get(key)]
    params = (cfg.get("params") or {}).get(method_a)
    if params:
        lines.insert(-1, f"{method_a}'s parameters: {params}.")
    if differ:  # settings of the B folders that the A folders' header does not show
        lines.insert(-1, f"{method_b}'s folders differ: {', '.join(differ)} (an unused setting of a method "
                         "that plays no curator or fewer turns changes nothing).")
    seeds = sorted(set(recs[method_a]) & set(recs[method_b]))
    header = "| seed | n | " + " | ".join(f"{name}: {method_a} vs {method_b}, Δ [95% CI]" for name, _, _ in measures)
    lines += [header + " | McNemar p (SR) | steps " + f"{method_a} / {method_b} |",
              "|---" * (len(measures) + 4) + "|"]
    pooled_a: dict[str, list[float]] = defaultdict(list)
    pooled_b: dict[str, list[float]] = defaultdict(list)
    steps_a, steps_b = [], []
    for seed in [*seeds, "pooled"]:
        cells, p_sr, n = [], None, 0
        for name, key, percent in measures:
            if seed == "pooled":
                xs, ys = pooled_a[name], pooled_b[name]
            else:
                xs, ys = _pairs(recs[method_a][seed], recs[method_b][seed], key)
                pooled_a[name] += xs
                pooled_b[name] += ys
            if not xs:
                cells.append("no pairs yet")
                continue
            res = paired(xs, ys)
            n = res.n
            k = 100 if percent else 1
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
    records_a = [r for seed in seeds for r in recs[method_a][seed].values()]
    usage = _usage_line(method_a, records_a)
    if usage:
        lines += ["", usage]
    records_b = [r for seed in seeds for r in recs[method_b][seed].values()]
    pairs = [(recs[method_a][seed][tid], recs[method_b][seed][tid]) for seed in seeds
             for tid in sorted(set(recs[method_a][seed]) & set(recs[method_b][seed]))]
    shown = examples_line(method_a, method_b, pairs)
    if shown:
        lines += ["", shown]
    tokens = [(a.get("tokens") or 0, b.get("tokens") or 0) for a, b in pairs]
    if tokens and any(t for pair in tokens for t in pair):
        lines += ["", (f"Executor tokens per task (prompt + completion, as asked; the server's cache is not "
                      f"subtracted): {method_a} {sum(a for a, _ in tokens) / len(tokens):,.0f}, "
                      f"{method_b} {sum(b for _, b in tokens) / len(tokens):,.0f}.")]
    if env == "alfworld":   # over the pairs only, both arms alike
        paired_ids = {seed: set(recs[method_a][seed]) & set(recs[method_b][seed]) for seed in seeds}
        lines += [""] + [_steps_line(m, [r for seed in seeds for tid, r in recs[m][seed].items()
                                          if tid in paired_ids[seed]]) for m in (method_a, method_b)]
    if env == "reasoning":  # single-turn answers: usage read from the skills' wording (bench/skill_echo.py)
        if not any(r.get("used") for r in records_a):
            lines += ["", (f"({method_a}'s live \"used\" is empty on every problem; records played before the "
                           "single-turn rule of `skills_used` carry none: the line below reads it off the records.)")]
        # replayed from every record of A's streams (a skill written on an unpaired task is shown on later ones)
        lines += ["", echo_line(method_a, method_b, [(recs[method_a][seed][tid], recs[method_b][seed][tid])
                                                     for seed in seeds
                                                     for tid in sorted(set(recs[method_a][seed]) & set(recs[method_b][seed]))],
                                all_a=[r for s in recs[method_a].values() for r in s.values()])]
    origins = Counter((r.get("method_info") or {}).get("reused_from") for r in records_b)
    origins.pop(None, None)
    if origins:   # `skillos run --baseline-from`: episodes of an earlier run with the same executor settings
        lines += ["", f"{method_b}: " + "; ".join(f"{n} of {len(records_b)} episodes taken from `{folder}`"
                                                   for folder, n in origins.items()) + " (--baseline-from)."]
    # per type over the pairs only (a stream still running has played fewer tasks of method_a)
    per_type: dict[str, list[list[float]]] = defaultdict(lambda: [[], []])
    for seed in seeds:
        for tid in sorted(set(recs[method_a][seed]) & set(recs[method_b][seed])):  # sorted: the bootstrap resamples by position
            a, b = recs[method_a][seed][tid], recs[method_b][seed][tid]
            per_type[a.get("task_type") or "?"][0].append(float(bool(a["success"])))
            per_type[a.get("task_type") or "?"][1].append(float(bool(b["success"])))
    if len(per_type) > 1:
        cells = []
        for t, (a, b) in sorted(per_type.items()):
            res = paired(a, b)
            cells.append(f"| {t} | {res.n} | {100 * res.mean_a:.1f} | {100 * res.mean_b:.1f} | "
                         f"{100 * res.diff:+.1f} [{100 * res.ci_low:+.1f}, {100 * res.ci_high:+.1f}] | "
                         f"{'–' if res.p_value is None else f'{res.p_value:.3g} ({res.b}/{res.c})'} |")
        lines += ["", f"| task type | pairs | SR {method_a} % | SR {method_b} % | Δ [95% CI] | McNemar p (b/c) |",
                  "|---|---|---|---|---|---|", *cells]
    text = "\n".join(lines) + "\n"
    (where / f"learning-{method_a}-vs-{method_b}.md").write_text(text)
    return text


def _flag(run: list[str], name: str) -> str | None:
    return run[run.index(name) + 1] if name in run else None


def resumed(run: list[str]) -> list[str] | None:
    """The command that carries ``run`` (a `skillos run ... --out FOLDER`) on from where its folder stands: itself
    where the folder holds no run yet, ``skillos run --resume FOLDER`` where a run there stopped (a machine without
    the completion cache that once replayed it), None where the run there has finished. A folder whose run was
    asked for other tasks or arms (env, split, types, tasks per type, methods, turns, judge) is refused: carrying
    it on, or skipping it as finished, would report that run as this one."""
    folder = Path(_flag(run, "--out"))
    if not folder.is_absolute():   # the commands run in ROOT (`curation`)
        folder = ROOT / folder
    if not RunFolder(folder).run_state.exists():
        return run
    try:
        state = load_state(folder)   # the check `skillos run --resume` makes of the folder
    except ResumeError as e:
        raise SystemExit(f"{e}; move the folder aside or pass another --out") from None
    c = state.config
    methods = [m for m in _flag(run, "--method").split(",") if m] + (["none"] if "--baseline" in run else [])
    per_type = _flag(run, "--per-type")
    asked = {"env": _flag(run, "--env"), "split": _flag(run, "--split") or c.get("split"),
             "task_type": _flag(run, "--task-type"), "per_type": int(per_type) if per_type else None,
             "methods": sorted(set(methods)), "max_turns": int(_flag(run, "--max-turns")),
             "self_judge": "--oracle-judge" not in run}
    held = {**{k: c.get(k) for k in asked}, "methods": sorted(set(c.get("methods") or []))}
    differ = [f"{k} {held[k]!r} there, {v!r} asked" for k, v in asked.items() if held[k] != v]
    if differ:
        raise SystemExit(f"{folder} holds a run of other options ({'; '.join(differ)}): pass another --out "
                         "(a larger --per-type is a new run)")
    if state.status == "done":
        print(f"# {folder}: finished earlier, not played again", flush=True)
        return None
    # `skillos run --resume` refuses other executor code too, but only once its process runs: said here, it
    # stops the whole start with one message instead of one failure per folder
    played = played_with(folder)
    if played and executor_code() not in played:
        raise SystemExit(f"{folder}: its episodes were played by executor code {', '.join(sorted(played))}, this "
                         f"checkout's is {executor_code()}: carry it on from a checkout of the commit it was "
                         "started at (`skillos run --resume` says how)")
    return run[:run.index("run") + 1] + ["--resume", str(folder), "--concurrency", _flag(run, "--concurrency")]


def curation_runs(args, out: Path) -> list[list[str]]:
    """The `skillos run` commands `curation` starts: one with the methods and No Memory, or with
    ``--stream-per-type`` one per task type for the methods and one per type for No Memory."""
    cmd = [sys.executable, "-m", "skillos.cli", "run", "--env", args.env, "--method", args.method, "--baseline",
           "--seeds", str(args.seeds), "--max-turns", str(args.max_turns), "--concurrency", str(args.concurrency),
           "--order", "grouped"]
    if args.split:
        cmd += ["--split", args.split]
    if args.per_type:
        cmd += ["--per-type", str(args.per_type)]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    if args.oracle_judge:
        cmd.append("--oracle-judge")
    for pair in args.param or []:
        cmd += ["--param", pair]
    for pair in args.acting or []:
        cmd += ["--acting", pair]
    if not args.stream_per_type:
        return [cmd + (["--task-type", args.task_type] if args.task_type else []) + ["--out", str(out)]]
    # one stream (and one repo) per task type, played side by side: a memory method plays its stream
    # one task after another, so one stream keeps one of the server's slots busy; the types' streams
    # fill the others. Each type's repo sees only its own type's experience.
    types = [t.strip() for t in (args.task_type or "").split(",") if t.strip()]
    if not types:
        raise SystemExit("--stream-per-type needs --task-type with the types, comma-separated")
    # the baseline in a process of its own per type, so that pairs grow as both play (a run ended
    # early still pairs every task its slower memory stream reached)
    alone = [a if a != "--baseline" else "--no-baseline" for a in cmd]
    base = [a for i, a in enumerate(alone)   # No Memory has no parameters: the methods' are not its
            if a != "--param" and (i == 0 or alone[i - 1] != "--param")]
    base[base.index("--method") + 1] = "none"
    return ([alone + ["--task-type", t, "--out", str(out / t)] for t in types]
            + [base + ["--task-type", t, "--out", str(out / f"none-{t}")] for t in types])


def curation(args) -> None:
    out = Path(args.out or f"runs/learning/curation-{args.env}")
    env = dict(os.environ)
    # every completion kept, so No Memory's episodes are shared with any other comparison that asks for them
    # (skillos.llm.cache); the same command started again carries each folder's run on (`resumed`)
    env.setdefault("SKILLOS_LLM_CACHE", str(Path("~/.cache/skillos/llm-cache.sqlite").expanduser()))
    procs = []
    for run in curation_runs(args, out):
        run = resumed(run)
        if run is None:
            continue
        print("$ " + " ".join(run[2:]), flush=True)
        procs.append(subprocess.Popen(run, cwd=ROOT, env=env))
    failed = [" ".join(proc.args[2:]) for proc in procs if proc.wait() != 0]
    if failed:
        raise SystemExit("failed: " + "; ".join(failed))
    for method in args.method.split(","):
        print(analyze(out, method.strip(), "none"))


def parser() -> argparse.ArgumentParser:
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
    c.add_argument("--stream-per-type", action="store_true",
                   help="one stream (and repo) per --task-type type, played side by side, pooled in the analysis")
    c.add_argument("--out")
    a = sub.add_parser("analyze", help="paired statistics of a finished run folder")
    a.add_argument("run_dir", type=Path, nargs="+", help="a run folder, or several (or the parent folder of "
                   "a --stream-per-type comparison) pooled into one comparison")
    a.add_argument("--a", default="skillos")
    a.add_argument("--b", default="none")
    return p


def main() -> None:
    args = parser().parse_args()
    if args.cmd == "curation":
        curation(args)
    else:
        print(analyze(args.run_dir[0] if len(args.run_dir) == 1 else args.run_dir, args.a, args.b))


if __name__ == "__main__":
    main()

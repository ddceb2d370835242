"""The report of a `skillos run`: summary numbers, summary.md, plots and per-task JSON.

Metrics (per method, mean ± std over seeds):
  * SR per task type and their macro average; overall SR; steps per task.
  * Fig. 6 usage metrics of the paper: usage rate (tasks where ≥1 skill was used), success when
    used (SR among those), coverage (distinct skills used / distinct skills the repo held during
    the stream), skills used per task.
  * Curator: op mix (calls by name and verdict), mean validity rate (r_fc), curator errors.
  * Worked examples: tasks shown one, successes that left one on a skill, how far the episodes shown one
    followed its key actions (`skillos.worked_examples.follow`).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillos.methods import METHODS
from skillos.methods.base import mean as _mean
from skillos.protocol.runs import (
    OP_MIX_PLOT,
    REPO_SIZE_PLOT,
    SUCCESS_PLOT,
    RunFolder,
    RunState,
    RunSummary,
    TaskEntry,
    to_dict,
)
from skillos.stream import TaskRecord
from skillos.textguard import without_lone_surrogates
from skillos.worked_examples.files import file_name, to_file
from skillos.worked_examples.follow import follow_share


@dataclass
class StreamRun:
    method: str
    seed: int
    repo: str | None
    records: list[TaskRecord]


def _mean_std(xs: list[float]) -> dict[str, float | None]:
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"mean": None, "std": None}
    return {"mean": round(sum(xs) / len(xs), 4), "std": round(statistics.pstdev(xs), 4) if len(xs) > 1 else 0.0}


def example_follow(record: TaskRecord, level: str = "pattern") -> float | None:
    """How far the task's episode followed the worked examples it was shown (the best of them), or None."""
    actions = [t.get("action", "") for t in record.turns if t.get("valid", True)]
    shares = [f for e in record.examples if e.get("actions") and (f := follow_share(actions, e["actions"], level))
              is not None]
    return max(shares) if shares else None


def left_example(record: TaskRecord | dict) -> bool:
    """The task's success left a worked example on a skill (added, or replacing a longer one)."""
    example = record.get("example") if isinstance(record, dict) else record.example
    kept = (example or {}).get("kept") or {}
    return any(str(v).startswith(("added", "replaced")) for v in kept.values())


def run_metrics(run: StreamRun) -> dict[str, Any]:
    """Metrics of one stream (one method, one seed)."""
    recs = run.records
    by_type: dict[str, list[bool]] = defaultdict(list)
    for r in recs:
        by_type[r.task_type or "unknown"].append(r.success)
    sr_type = {t: sum(v) / len(v) for t, v in sorted(by_type.items())}
    used_tasks = [r for r in recs if r.used]
    ever = {s["name"] for r in recs for s in r.retrieved}
    ever |= {o.skill_name for r in recs for o in r.ops if o.applied and o.name == "new_skill_insert" and o.skill_name}
    used_names = {n for r in recs for n in r.used}
    ops = [o for r in recs for o in r.ops]
    return {
        "tasks": len(recs),
        "won": sum(1 for r in recs if r.success),
        "sr": _mean([float(r.success) for r in recs]),
        "sr_per_type": sr_type,
        "sr_macro": _mean(list(sr_type.values())),
        "steps": _mean([float(r.steps) for r in recs]),
        "episode_errors": sum(1 for r in recs if r.error),
        # of them, episodes whose env session was lost (its server killed or restarted mid-episode)
        "env_lost": sum(1 for r in recs if r.stop_reason == "env_lost"),
        "retrieval_rate": _mean([float(bool(r.retrieved)) for r in recs]),
        "usage_rate": _mean([float(bool(r.used)) for r in recs]),
        "success_when_used": _mean([float(r.success) for r in used_tasks]),
        "coverage": (len(used_names) / len(ever)) if ever else None,
        "skills_per_example": _mean([float(len(r.used)) for r in recs]),
        "validity_rate": _mean([r.validity_rate for r in recs if r.validity_rate is not None]),
        "curator_errors": sum(1 for r in recs if r.curator_error),
        "op_mix": dict(Counter(f"{o.name or 'unreadable'}:{'applied' if o.applied else 'refused'}" for o in ops)),
        "final_repo_size": next((r.repo_size for r in reversed(recs) if r.repo_size is not None), None),
        "self_judge_agreement": _mean([float(r.self_judged_success == r.success) for r in recs
                                       if r.self_judged_success is not None]),
        "tokens": _mean([float(r.tokens) for r in recs]),
        # the method's own LLM calls (distillation, queries, ranking): the cost beside the executor's
        "writer_tokens": _mean([float(r.method_info.get("writer_tokens", 0)) for r in recs]),
        "examples_rate": _mean([float(bool(r.examples)) for r in recs]),
        "examples_left": sum(1 for r in recs if left_example(r)),
        "success_when_example": _mean([float(r.success) for r in recs if r.examples]),
        "example_follow": _mean([example_follow(r) for r in recs if r.examples]),
        "method_measures": METHODS[run.method].measures(recs) if run.method in METHODS else {},
    }


def summarize(runs: list[StreamRun], config: dict[str, Any]) -> dict[str, Any]:
    per_method: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        per_method[run.method].append({"seed": run.seed, **run_metrics(run)})
    methods: dict[str, Any] = {}
    for method, seeds in per_method.items():
        types = sorted({t for s in seeds for t in s["sr_per_type"]})
        agg = {key: _mean_std([s[key] for s in seeds]) for key in (
            "sr", "sr_macro", "steps", "usage_rate", "success_when_used", "coverage", "skills_per_example",
            "validity_rate", "retrieval_rate", "final_repo_size", "self_judge_agreement", "tokens",
            "writer_tokens", "examples_rate", "success_when_example", "example_follow")}
        measures = sorted({k for s in seeds for k in s["method_measures"]})
        agg["method_measures"] = {k: _mean_std([s["method_measures"].get(k) for s in seeds]) for k in measures}
        agg["sr_per_type"] = {t: _mean_std([s["sr_per_type"].get(t) for s in seeds]) for t in types}
        op_mix: Counter = Counter()
        for s in seeds:
            op_mix.update(s["op_mix"])
        agg["op_mix"] = dict(sorted(op_mix.items()))
        agg["episode_errors"] = sum(s["episode_errors"] for s in seeds)
        agg["env_lost"] = sum(s.get("env_lost", 0) for s in seeds)
        agg["won"] = sum(s.get("won", 0) for s in seeds)
        agg["played"] = sum(s["tasks"] for s in seeds)
        agg["curator_errors"] = sum(s["curator_errors"] for s in seeds)
        agg["examples_left"] = sum(s.get("examples_left", 0) for s in seeds)
        methods[method] = {"aggregate": agg, "seeds": seeds}
    return {"config": config, "methods": methods}


def _fmt(ms: dict[str, float | None] | None, pct: bool = True) -> str:
    if not ms or ms.get("mean") is None:
        return "–"
    scale = 100 if pct else 1
    return f"{ms['mean'] * scale:.1f} ± {ms['std'] * scale:.1f}"


def describe_model(info: dict[str, Any]) -> str:
    """``qwen2.5-coder-1.5b-instruct`` (1.5B, 1.78 B parameters, Q4_K - Medium, 1.1 GB)"""
    bits = []
    if info.get("params_label"):
        bits.append(str(info["params_label"]))
    if info.get("params"):
        bits.append(f"{info['params'] / 1e9:.2f} B parameters")
    if info.get("quant"):
        bits.append(str(info["quant"]))
    if info.get("size_bytes"):
        bits.append(f"{info['size_bytes'] / 1e9:.2f} GB")
    name = info.get("served_as") or info.get("model", "?")
    return f"`{name}`" + (f" ({', '.join(bits)})" if bits else " (size unknown)")


def in_short(methods: dict[str, Any], held: list[str] | None = None) -> str:
    """The comparison in one honest sentence: games won of games played per method, and what N allows.
    ``held``: methods held back (`--hold`) with tasks left: they played fewer tasks than the others."""
    parts, most = [], 0
    for name, m in methods.items():
        agg = m["aggregate"]
        if not agg.get("played"):
            continue
        most = max(most, agg["played"])
        title = "No Memory" if name == "none" else (METHODS[name].title if name in METHODS else name)
        parts.append(f"{title} won {agg.get('won', 0)} of {agg['played']}")
    if not parts:
        return ""
    verdict = ("a short stream proves nothing either way: far too few episodes to tell methods apart; the paired "
               "comparisons (60 games and more, with intervals) are in bench/RESULTS-learning.md" if most < 30
               else "paired statistics: `python -m bench.bench_learning analyze`")
    same = ("on the same tasks and seeds" if not held else
            f"{', '.join(held)} held back with tasks left (`--hold`): compare pairs, not these totals")
    return f"In short: {'; '.join(parts)}, {same}; {verdict}."


def summary_markdown(summary: dict[str, Any]) -> str:
    cfg = summary["config"]
    models = cfg.get("models") or {}
    methods = summary["methods"]
    lines = [f"# SkillOS run: {cfg.get('env')} / {cfg.get('split')}", "", in_short(methods, cfg.get("held")), ""]
    if models:
        lines += ["Models: " + "; ".join(f"{role} {describe_model(info)}" for role, info in models.items()) + ".",
                  ""]
    lines += [(f"{cfg.get('tasks')} tasks × {cfg.get('seeds')} seed(s), order {cfg.get('order')}, "
               f"max turns {cfg.get('max_turns')}, k = {cfg.get('k')}."), ""]
    reuse = cfg.get("baseline_from")
    if isinstance(reuse, dict):   # `skillos run --baseline-from` (harness/reuse.py)
        again = ", ".join(f"{n} ({why})" for why, n in (reuse.get("played_again") or {}).items())
        lines += [(f"No Memory: {reuse.get('taken', 0)} episodes taken from `{reuse.get('from')}` (--baseline-from: "
                   "same task, seed and executor settings, played there, with its timings)"
                   + (f"; played again here: {again}" if again else "")
                   + ("; episodes without a code fingerprint assumed of the same executor code"
                      if reuse.get("assumed_same_code") else "") + "."), ""]
    types = sorted({t for m in methods.values() for t in m["aggregate"]["sr_per_type"]})
    lines += ["## Success rate (%)", "",
              "| method | " + " | ".join(types) + " | macro avg | overall | steps |",
              "|---" * (len(types) + 4) + "|"]
    for name, m in methods.items():
        a = m["aggregate"]
        cells = [_fmt(a["sr_per_type"].get(t)) for t in types]
        lines.append(f"| {name} | " + " | ".join(cells) +
                     f" | {_fmt(a['sr_macro'])} | {_fmt(a['sr'])} | {_fmt(a['steps'], pct=False)} |")
    memory = [n for n in methods if n in METHODS and METHODS[n].uses_repo]
    if memory:
        rows = [("tasks with ≥1 skill retrieved (%)", "retrieval_rate", True),
                ("usage rate (%)", "usage_rate", True), ("success when used (%)", "success_when_used", True),
                ("coverage (%)", "coverage", True), ("skills used per task", "skills_per_example", False),
                ("self-judge agrees with env (%)", "self_judge_agreement", True),
                ("final repo size (skills)", "final_repo_size", False),
                ("executor tokens per task", "tokens", False), ("method's own LLM tokens per task", "writer_tokens", False)]
        lines += ["", "## Skill usage (paper Fig. 6)", "", "| metric | " + " | ".join(memory) + " |",
                  "|---" * (len(memory) + 1) + "|"]
        for label, key, pct in rows:
            lines.append(f"| {label} | " + " | ".join(_fmt(methods[n]["aggregate"][key], pct) for n in memory) + " |")
        lines.append("| learning-step errors | " + " | ".join(str(methods[n]["aggregate"]["curator_errors"])
                                                       for n in memory) + " |")
    if "skillos" in methods:
        a = methods["skillos"]["aggregate"]
        lines += ["", "## SkillOS curation", "", f"Curator call validity r_fc: {_fmt(a['validity_rate'])} %. "
                  "Op mix: " + (", ".join(f"{k} = {v}" for k, v in a["op_mix"].items()) or "no calls")]
    shown = [n for n in methods if (methods[n]["aggregate"].get("examples_rate") or {}).get("mean")]
    if shown:
        rows = [("tasks shown a worked example (%)", "examples_rate", True),
                ("success when shown one (%)", "success_when_example", True),
                ("its key steps followed, in order (%)", "example_follow", True)]
        lines += ["", "## Worked examples", "", "| metric | " + " | ".join(shown) + " |",
                  "|---" * (len(shown) + 1) + "|"]
        for label, key, pct in rows:
            lines.append(f"| {label} | " + " | ".join(_fmt(methods[n]["aggregate"].get(key), pct) for n in shown) + " |")
        lines.append("| successes that left an example on a skill | " + " | ".join(
            str(methods[n]["aggregate"].get("examples_left", 0)) for n in shown) + " |")
        lines += ["", ("Followed: the share of an example's key actions (take, put, change, use) the episode took in "
                  "order; any success of the same kind follows it, so compare with the paired No Memory episode "
                  "(`python -m bench.bench_learning analyze`).")]
    for name in memory:
        measures = methods[name]["aggregate"].get("method_measures") or {}
        if measures and name != "skillos":
            title = METHODS[name].title if name in METHODS else name
            lines += ["", f"## {title}: its own measures (mean ± std over seeds)", "", "| measure | value |", "|---|---|"]
            lines += [f"| {k.replace('_', ' ')} | {_fmt(v, pct=False)} |" for k, v in measures.items()]
    errors = {n: m["aggregate"]["episode_errors"] for n, m in methods.items()}
    if any(errors.values()):
        lost = {n: m["aggregate"].get("env_lost", 0) for n, m in methods.items()}
        lines += ["", "Episodes that failed with an error (counted as failures): " +
                  ", ".join(f"{n}: {e}" + (f" ({lost[n]} lost their env session: its server was killed or "
                                            "restarted mid-episode)" if lost[n] else "")
                            for n, e in errors.items())]
    lines += ["", (f"Plots: `{SUCCESS_PLOT}`, `{REPO_SIZE_PLOT}`, `{OP_MIX_PLOT}`. "
                   "Per-task records: `tasks/`. Final repos: `repo/`."), ""]
    return "\n".join(lines)


def write_plots(runs: list[StreamRun], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    written: list[Path] = []
    by_method: dict[str, list[StreamRun]] = defaultdict(list)
    for run in runs:
        by_method[run.method].append(run)
    labels = {name: cls.title for name, cls in METHODS.items()} | {"none": "No Memory (baseline)"}

    fig, ax = plt.subplots(figsize=(7, 4))
    for method, mruns in by_method.items():
        # up to each stream's first gap (a held stream may have finished later positions, not earlier ones)
        played = [[x for i, x in enumerate(sorted(r.records, key=lambda x: x.position)) if x.position == i]
                  for r in mruns]
        n = max((len(p) for p in played), default=0)
        if n == 0:
            continue
        curve = []
        for i in range(n):
            vals = [sum(x.success for x in p[: i + 1]) / (i + 1) for p in played if len(p) > i]
            curve.append(100 * sum(vals) / len(vals))
        ax.plot(range(1, n + 1), curve, marker="o", label=labels.get(method, method))
    ax.set_xlabel("task position in the stream")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("cumulative success rate (%)")
    ax.set_ylim(-5, 105)
    ax.set_title("Success over the stream (mean over seeds)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    written.append(RunFolder(out).plot(SUCCESS_PLOT))
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    with_repo = [run for run in runs if run.method in METHODS and METHODS[run.method].uses_repo]
    for run in with_repo:
        xs = [r.position + 1 for r in run.records if r.repo_size is not None]
        ys = [r.repo_size for r in run.records if r.repo_size is not None]
        ax.step(xs, ys, where="post", marker="o", label=f"{labels.get(run.method, run.method)}, seed {run.seed}")
    ax.set_xlabel("task position in the stream")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("skills in the repo")
    ax.set_title("Repo size after each task")
    ax.grid(alpha=0.3)
    if with_repo:
        ax.legend()
    fig.tight_layout()
    written.append(RunFolder(out).plot(REPO_SIZE_PLOT))
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    names = ["new_skill_insert", "skill_update", "skill_delete", "unreadable"]
    applied = Counter()
    refused = Counter()
    for run in by_method.get("skillos", []):
        for r in run.records:
            for o in r.ops:
                key = o.name if o.name in names else "unreadable"
                (applied if o.applied else refused)[key] += 1
    xs = range(len(names))
    ax.bar(xs, [applied[n] for n in names], label="applied", color="tab:green")
    ax.bar(xs, [refused[n] for n in names], bottom=[applied[n] for n in names], label="refused",
           color="tab:red")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("calls (all seeds)")
    ax.set_title("Curator op mix")
    ax.legend()
    fig.tight_layout()
    written.append(RunFolder(out).plot(OP_MIX_PLOT))
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


class RunLog:
    """The live part of a run's report folder, written while the run goes on (the console follows it);
    the files and their rows are `skillos.protocol.runs`'s:

    * ``run.json`` (`RunState`): status, start and end, config, tasks to play (all streams), repos, error;
      replaced atomically at start and end;
    * ``tasks.jsonl`` (`TaskEntry` per line): one line per task as it ends, the task's record
      (``TaskRecord.to_dict()``), in the order tasks end. A reader takes complete lines only (a line is
      written with one write call).
    """

    def __init__(self, out: Path, config: dict[str, Any], total: int, repos: list[str],
                 previous: RunState | None = None):
        """``previous``: the folder's state when the run resumes (`harness.resume`): its start is kept, the
        resume is added to ``resumed_at``, and ``tasks.jsonl`` is continued, not emptied."""
        self.out = out
        self.folder = RunFolder(out)
        out.mkdir(parents=True, exist_ok=True)
        self.state = RunState(status="running", started_at=previous.started_at if previous else time.time(),
                              finished_at=None, config=config, total=total, repos=repos, error=None,
                              resumed_at=[*previous.resumed_at, time.time()] if previous else [])
        self.tasks_path = self.folder.tasks_log
        if previous is None:
            self.tasks_path.write_text("")
        else:
            self._end_partial_line()
            # a held run's finish wrote them; readers take them over tasks.jsonl, and they would go stale
            shutil.rmtree(self.folder.tasks_dir, ignore_errors=True)
            for stale in (self.folder.summary, self.folder.summary_md):
                stale.unlink(missing_ok=True)
        self._write_state()

    def _end_partial_line(self) -> None:
        """A run killed mid-write can leave a partial last line; the next line must not be glued to it."""
        try:
            with self.tasks_path.open("rb") as f:
                f.seek(0, os.SEEK_END)
                if f.tell() == 0:
                    return
                f.seek(-1, os.SEEK_END)
                last = f.read(1)
        except FileNotFoundError:
            return
        if last != b"\n":
            with self.tasks_path.open("a", encoding="utf-8") as f:
                f.write("\n")

    def _write_state(self) -> None:
        path = self.folder.run_state
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(to_dict(self.state), indent=2, ensure_ascii=False, default=str))
        os.replace(tmp, path)

    def task(self, record: TaskRecord) -> None:
        # a model's text parsed from JSON can hold a lone surrogate, which UTF-8 cannot: recorded as U+FFFD
        line = without_lone_surrogates(json.dumps(to_dict(TaskEntry.model_validate(record.to_dict())),
                                                  ensure_ascii=False, default=str)) + "\n"
        with self.tasks_path.open("a", encoding="utf-8") as f:
            f.write(line)

    def finish(self, error: str | None = None, held: bool = False) -> None:
        """``held``: streams were held back (``--hold``) with tasks left: a later resume plays them on."""
        self.state = self.state.model_copy(update={"status": "failed" if error else "held" if held else "done",
                                                   "finished_at": time.time(), "error": error})
        self._write_state()


def write_task_records(runs: list[StreamRun], out: Path) -> None:
    folder = RunFolder(out)
    folder.tasks_dir.mkdir(parents=True, exist_ok=True)
    for run in runs:
        for r in run.records:
            path = folder.task_file(run.method, run.seed, r.position)
            path.write_text(without_lone_surrogates(json.dumps(to_dict(TaskEntry.model_validate(r.to_dict())),
                                                               indent=2, ensure_ascii=False, default=str)))


def write_summary(summary: dict[str, Any], out: Path) -> None:
    folder = RunFolder(out)
    folder.summary.write_text(json.dumps(to_dict(RunSummary.model_validate(summary)), indent=2, ensure_ascii=False,
                                         default=str))
    folder.summary_md.write_text(summary_markdown(summary))


def export_skills(skills: list[Any], folder: Path) -> int:
    """Write each skill as <folder>/<name>/SKILL.md (the SKILL.md folder convention), its worked examples as
    <folder>/<name>/examples/NN-<id>.md (as the skill repo exports them)."""
    folder.mkdir(parents=True, exist_ok=True)
    for skill in skills:
        d = folder / skill.name
        d.mkdir(exist_ok=True)
        (d / "SKILL.md").write_text(skill.content)
        examples = getattr(skill, "examples", None) or []
        if examples:
            (d / "examples").mkdir(exist_ok=True)
            for i, example in enumerate(examples):
                (d / "examples" / file_name(i, example)).write_text(to_file(example))
    return len(skills)

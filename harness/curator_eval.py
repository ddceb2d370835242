"""A trained curator against the untrained one on groups training never saw (issue 27, item 3).

Both arms are the training loop's own rollouts (`services.trainer.rollouts.curator`) without an update:
the same groups of a split, the same seeds, the same frozen executor, skill repo and content judge, and
Eq. 1's reward computed by the same code. The one difference is the adapter llama-server samples the
curator policy with: none (the untrained policy: a fresh LoRA adds zero) or the trained one.

Rows go to ``eval.jsonl`` as each group finishes, so a rerun of the same command skips the (arm, group)s
already played. The untrained arm does not depend on the adapter: ``untrained_from`` takes its rows from an
earlier evaluation of the same plan (split, groups, rollouts, sampling, reward) with another adapter, so the
points of a learning curve (the adapters of steps 5, 10, ...) each cost one arm. The stack (the executor's
model, the judge) is not in the plan: reuse rows played on the same stack.

``eval.md`` pairs the arms per group (the groups are the independent units; a group's value is the mean over
its rollouts) with a paired bootstrap 95 % CI, and per task (same group, rollout index and executor seed) with
McNemar for success.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.stats import paired
from services.trainer.config import TrainConfig
from services.trainer.grpo.policy import load_tokenizer
from services.trainer.grpo.served import ServedGenerator
from services.trainer.rollouts.curator import run_curator_group
from services.trainer.settings import TrainerSettings
from services.trainer.trainer import curator_context, load_groups, served_policy
from skillos.logging import get_logger
from skillos.protocol.runs import ADAPTER_GGUF, ADAPTERS_DIR, RunFolder

log = get_logger("harness.curator_eval")

UNTRAINED = "untrained"
TRAINED = "trained"
METRICS = ("total", "task", "fc", "cnt", "comp")


class EvalError(ValueError):
    """The evaluation cannot start as asked (no adapter there, a config that is not the served loop)."""


def find_adapter(path: Path) -> Path:
    """The llama.cpp adapter GGUF at ``path``: the file itself, an adapter folder holding one, or a training
    run folder (its latest ``adapters/step-*``)."""
    if path.is_file():
        return path
    if (path / ADAPTER_GGUF).is_file():
        return path / ADAPTER_GGUF
    steps = [d / ADAPTER_GGUF for d in RunFolder(path).adapter_dirs() if (d / ADAPTER_GGUF).is_file()]
    if steps:
        return steps[-1]
    raise EvalError(f"no adapter at {path}: give an {ADAPTER_GGUF}, a folder holding one, or a training run "
                    f"folder with {ADAPTERS_DIR}/step-*/{ADAPTER_GGUF}")


@dataclass
class EvalPlan:
    cfg: TrainConfig
    adapter: Path
    split: str
    groups: int
    rollouts: int
    out: Path
    untrained_from: Path | None = None
    played: list[str] = field(default_factory=list)  # the plan's group ids, once read from the split


def _rows(path: Path) -> list[dict[str, Any]]:
    """The groups played so far; a line cut short by a killed process is skipped (that group plays again).
    A group played twice (a dropped one retried) counts with its last line."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            rows[(row["arm"], row["group"])] = row
    return list(rows.values())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


PLAN_FILE = "eval-plan.json"
ADAPTER_KEY = "adapter_sha256"


def _plan_record(plan: EvalPlan, groups: list) -> dict[str, Any]:
    """What the rows of ``eval.jsonl`` are played with: adapter, split, groups and their tasks, rollouts,
    sampling, reward."""
    return {ADAPTER_KEY: _sha256(plan.adapter), "split": plan.split, "rollouts": plan.rollouts,
            "groups": {g.id: [t.id for t in g.tasks] for g in groups},
            "config": plan.cfg.model_dump(mode="json", include={
                "seed", "temperature", "top_p", "max_prompt_tokens", "max_response_tokens", "lambda_fc",
                "lambda_cnt", "lambda_comp", "model", "rollout", "sync", "data"})}


def _plan_differs(have: dict[str, Any], want: dict[str, Any], skip: tuple[str, ...] = ()) -> list[str]:
    """The keys in which two plans disagree. Groups agree when one plan's groups, in order and with their
    tasks, begin the other's: the groups are the split's first N, so a plan of more groups extends one of
    fewer (the rows played stay valid)."""
    out = [k for k in want if k not in skip and k != "groups" and have.get(k) != want[k]]
    have_groups, want_groups = list((have.get("groups") or {}).items()), list((want.get("groups") or {}).items())
    k = min(len(have_groups), len(want_groups))
    if have_groups[:k] != want_groups[:k]:
        out.append("groups")
    return sorted(out)


def _check_plan(plan: EvalPlan, want: dict[str, Any]) -> None:
    """Kept in ``eval-plan.json``: a rerun into the same folder resumes only the same evaluation, or extends it
    to more groups (``--groups`` raised: the plan file then names them all)."""
    path = plan.out / PLAN_FILE
    if path.is_file():
        have = json.loads(path.read_text())
        differ = _plan_differs(have, want)
        if differ:
            raise EvalError(f"{plan.out} holds another evaluation (it differs in {', '.join(differ)}): "
                            "give another --out, or delete it to start again")
        if len(want["groups"]) > len(have.get("groups") or {}):
            path.write_text(json.dumps(want, indent=2))   # extended: the plan names every group now
    else:
        path.write_text(json.dumps(want, indent=2))


def reuse_untrained(plan: EvalPlan, want: dict[str, Any]) -> int:
    """Copy into this evaluation's ``eval.jsonl`` the untrained arm's completed groups from
    ``plan.untrained_from``, whose plan must be this one but for the adapter and how many groups (the first N
    of the same split); how many were copied."""
    src = plan.untrained_from
    if src is None:
        return 0
    if not (src / PLAN_FILE).is_file():
        raise EvalError(f"--untrained-from {src}: no {PLAN_FILE} there (not an eval-curator folder)")
    have = json.loads((src / PLAN_FILE).read_text())
    differ = _plan_differs(have, want, skip=(ADAPTER_KEY,))
    if differ:
        raise EvalError(f"--untrained-from {src} played another plan (it differs in {', '.join(differ)}): its "
                        "untrained arm is not this one's")
    log_path = plan.out / "eval.jsonl"
    done = {r["group"] for r in _rows(log_path) if r["arm"] == UNTRAINED and "dropped" not in r}
    rows = [r for r in _rows(src / "eval.jsonl")
            if r["arm"] == UNTRAINED and "dropped" not in r and r["group"] not in done and r["group"] in want["groups"]]
    with log_path.open("a") as f:
        for r in rows:
            # the folder that played it (a row the source had copied keeps its own origin)
            f.write(json.dumps({**r, "copied_from": r.get("copied_from", str(src))}) + "\n")
    return len(rows)


def _row(arm: str, group, result) -> dict[str, Any]:
    if result.dropped:
        return {"arm": arm, "group": group.id, "family": group.tasks[0].type, "dropped": result.reason}
    return {"arm": arm, "group": group.id, "family": group.tasks[0].type, "tasks": [t.id for t in group.tasks],
            "rollouts": [{"rollout": r.rollout, "reward": r.reward.as_dict(), "successes": r.successes,
                          "repo_size": (r.records[-1].repo_size or 0) if r.records else 0,
                          "calls": sum(d.num_calls for d in r.decisions),
                          "valid_calls": sum(d.num_valid for d in r.decisions),
                          "ops": dict(sum((Counter(d.op_counts) for d in r.decisions), Counter())),
                          "seconds": round(r.seconds, 1)} for r in result.rollouts]}


async def _play(plan: EvalPlan, settings: TrainerSettings) -> None:
    cfg = plan.cfg
    groups = load_groups(cfg, settings)[:plan.groups]
    if not groups:
        raise EvalError(f"no groups of {cfg.data.env} on split {plan.split!r}")
    want = _plan_record(plan, groups)
    plan.played = list(want["groups"])
    _check_plan(plan, want)
    copied = reuse_untrained(plan, want)
    if copied:
        log.info("eval_untrained_reused", groups=copied, source=str(plan.untrained_from))
    log_path = plan.out / "eval.jsonl"
    done = {(r["arm"], r["group"]) for r in _rows(log_path) if "dropped" not in r}   # a dropped group plays again
    tokenizer = load_tokenizer(cfg.model.path, cfg.model.gguf_file)
    served = served_policy(cfg, plan.out)
    try:
        for arm, adapter in ((UNTRAINED, None), (TRAINED, plan.adapter)):
            todo = [g for g in groups if (arm, g.id) not in done]
            if not todo:
                continue
            served.restart(adapter)
            batcher = ServedGenerator(served, cfg.max_response_tokens, cfg.temperature, cfg.top_p, seed=cfg.seed)
            ctx, clients = curator_context(cfg, settings, tokenizer, batcher, None, run_id=f"eval-{arm}-{uuid.uuid4().hex[:6]}")
            try:
                async def one(group, arm=arm, ctx=ctx):
                    t0 = time.perf_counter()
                    # step 0 and the same seed in both arms: the executor plays each task with the same seed
                    result = await run_curator_group(ctx, group, plan.rollouts, 0, cfg.rollout.retries,
                                                     seed=cfg.seed * 100_003)
                    with log_path.open("a") as f:   # one line per group, as it finishes: a rerun resumes
                        f.write(json.dumps(_row(arm, group, result)) + "\n")
                    log.info("eval_group_done", arm=arm, group=group.id, dropped=result.dropped,
                             seconds=round(time.perf_counter() - t0, 1))

                await asyncio.gather(*(one(g) for g in todo))
            finally:
                for c in (*clients, batcher):
                    await c.aclose()
    finally:
        served.stop()


def compare(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Pair the arms over the groups both completed."""
    by = defaultdict(dict)
    for r in rows:
        by[r["group"]][r["arm"]] = r
    both = sorted(g for g, arms in by.items()
                  if all(a in arms and "dropped" not in arms[a] for a in (UNTRAINED, TRAINED)))
    dropped = sorted(g for g, arms in by.items() if any("dropped" in a for a in arms.values()))
    unlike = [g for g in both if by[g][UNTRAINED]["tasks"] != by[g][TRAINED]["tasks"]
              or len(by[g][UNTRAINED]["rollouts"]) != len(by[g][TRAINED]["rollouts"])]
    if unlike:   # `_check_plan` keeps this from happening in one folder; rows merged by hand would
        raise EvalError(f"the arms played different tasks or rollout counts in {', '.join(unlike)}: not a pair")
    out: dict[str, Any] = {"groups": len(both), "dropped_groups": dropped, "metrics": {}}
    if not both:
        return out

    def group_mean(arm: str, key) -> list[float]:
        return [sum(key(x) for x in by[g][arm]["rollouts"]) / len(by[g][arm]["rollouts"]) for g in both]

    keys = {f"r_{m}" if m != "total" else "reward": (lambda x, m=m: x["reward"][m]) for m in METRICS}
    keys["success"] = lambda x: sum(x["successes"]) / len(x["successes"])
    keys["repo_size"] = lambda x: x["repo_size"]
    keys["valid_call_rate"] = lambda x: x["valid_calls"] / max(1, x["calls"])
    for name, key in keys.items():
        res = paired(group_mean(TRAINED, key), group_mean(UNTRAINED, key))
        out["metrics"][name] = {"trained": res.mean_a, "untrained": res.mean_b, "diff": res.diff,
                                "ci": [res.ci_low, res.ci_high], "n": res.n}
    # success per task: same group, rollout index and executor seed in both arms. The pairs are not independent
    # (a group's rollouts share tasks, a rollout's tasks share its repo): McNemar's p is descriptive here; the
    # group bootstrap above is the comparison
    a, b = [], []
    for g in both:
        for ra, rb in zip(by[g][TRAINED]["rollouts"], by[g][UNTRAINED]["rollouts"]):
            a += [float(s) for s in ra["successes"]]
            b += [float(s) for s in rb["successes"]]
    res = paired(a, b)
    out["task_pairs"] = {"n": res.n, "trained": res.mean_a, "untrained": res.mean_b, "diff": res.diff,
                         "ci": [res.ci_low, res.ci_high], "discordant": [res.b, res.c], "mcnemar_p": res.p_value}
    return out


def report(summary: dict[str, Any], plan: EvalPlan, command: str) -> str:
    lines = [f"# Trained vs untrained curator, {plan.cfg.data.env} `{plan.split}`", "",
             f"`{command}`", "",
             (f"Adapter `{plan.adapter}`; {summary['groups']} groups played by both arms, {plan.rollouts} rollouts "
             f"each, temperature {plan.cfg.temperature}; per group the mean over its rollouts, paired bootstrap "
             "95 % CI over groups (trained minus untrained).")]
    for src, n in summary.get("untrained_copied", {}).items():
        lines.append(f"{n} of the untrained arm's groups were played in `{src}` (the same plan but the adapter) "
                     "and copied here.")
    if summary["dropped_groups"]:
        lines.append(f"Left out (a rollout failed in either arm): {', '.join(summary['dropped_groups'])}.")
    lines += ["", "| measure | untrained | trained | Δ [95 % CI] |", "|---|---|---|---|"]
    for name, m in summary["metrics"].items():
        lines.append(f"| {name} | {m['untrained']:.3f} | {m['trained']:.3f} | {m['diff']:+.3f} "
                     f"[{m['ci'][0]:+.3f}, {m['ci'][1]:+.3f}] |")
    t = summary.get("task_pairs")
    if t:
        lines += ["", (f"Per task ({t['n']} pairs: same group, rollout index and seed): success "
                      f"{100 * t['untrained']:.1f} % → {100 * t['trained']:.1f} %, Δ {100 * t['diff']:+.1f} "
                      f"[{100 * t['ci'][0]:+.1f}, {100 * t['ci'][1]:+.1f}], McNemar discordant "
                      f"{t['discordant'][0]}/{t['discordant'][1]}, p = {t['mcnemar_p']:.3g} (descriptive: the "
                      "pairs of a group share its tasks and repos; the group intervals above are the comparison).")]
    return "\n".join(lines) + "\n"


def evaluate(plan: EvalPlan, settings: TrainerSettings | None = None, command: str = "") -> dict[str, Any]:
    if plan.cfg.sync.backend != "llamacpp_lora":
        raise EvalError("the evaluation serves the curator with llama-server and an adapter GGUF: use a config with "
                        "sync.backend: llamacpp_lora (configs/train/cpu-qwen0.5b-served.yaml)")
    plan.out.mkdir(parents=True, exist_ok=True)
    settings = settings or TrainerSettings()
    asyncio.run(_play(plan, settings))
    # this command's groups: a folder extended to more groups and then asked for fewer reports those
    rows = [r for r in _rows(plan.out / "eval.jsonl") if r["group"] in set(plan.played)]
    summary = compare(rows)
    summary.update({"adapter": str(plan.adapter), "split": plan.split, "rollouts": plan.rollouts,
                    "command": command,
                    "untrained_copied": dict(Counter(r["copied_from"] for r in rows
                                                     if r["arm"] == UNTRAINED and "copied_from" in r))})
    (plan.out / "eval.json").write_text(json.dumps(summary, indent=2))
    (plan.out / "eval.md").write_text(report(summary, plan, command))
    return summary

"""Test data of the console, made the way the system makes it: skills through the skill repo's API
(curator ops with their origin, REST writes, imports) and run folders written by the real report code
of `skillos run` (`RunLog`, `summarize`, `write_summary`, `write_task_records`, `write_plots`) and by
the trainer's `MetricsWriter` / `write_rollouts`.

Used by the console's HTTP and browser tests and by bench/bench_console.py.
"""

from __future__ import annotations

import io
import json
import random
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.report import (
    RunLog,
    StreamRun,
    summarize,
    write_plots,
    write_summary,
    write_task_records,
)
from skillos.clients.skillrepo import SkillRepoClient
from skillos.stream import OpRecord, TaskRecord

TYPES = ("pick", "clean", "heat", "cool", "look", "pick2")
OBJECTS = ("apple", "mug", "potato", "egg", "tomato", "bread", "lettuce", "cup", "plate", "knife")
PLACES = ("countertop", "fridge", "microwave", "sinkbasin", "cabinet", "drawer", "shelf", "stoveburner")
# what an LLM may write into a skill: script, an event handler, a javascript: link, raw HTML
HOSTILE_NAME = "xss-probe"
HOSTILE_BODY = ('<script>window.__xss = "script"</script>\n\n'
                '<img src=x onerror="window.__xss = \'onerror\'">\n\n'
                '[click me](javascript:window.__xss=\'link\')\n\n'
                '<iframe src="javascript:alert(1)"></iframe>\n\n'
                '1. take the knife\n2. **slice** the bread\n')


def skill_md(name: str, description: str, body: str, **meta: str) -> str:
    # JSON strings are YAML strings: a description may hold ':' or quotes
    extra = "".join(f"{k}: {json.dumps(v)}\n" for k, v in meta.items())
    return f"---\nname: {name}\ndescription: {json.dumps(description)}\n{extra}---\n\n{body}\n"


def skill_name(i: int) -> str:
    t, o, p = TYPES[i % 6], OBJECTS[(i // 6) % 10], PLACES[(i // 60) % 8]
    return f"{t}-{o}-{p}-{i}"


def skill_doc(i: int, version: int = 1) -> str:
    name = skill_name(i)
    t, o, p = name.split("-")[:3]
    body = (f"# {t.title()} the {o}\n\n1. go to the {p}\n2. take the {o}\n3. {t} the {o}\n"
            f"4. put the {o} where the task says\n\nRevision {version}: check the {p} first.\n")
    return skill_md(name, f"How to {t} a {o} found on or in the {p}.", body, domain="alfworld")


def big_archive(n: int) -> bytes:
    """A tar.gz of n <name>/SKILL.md folders (the skill repo's import format)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i in range(n):
            data = skill_doc(i).encode()
            info = tarfile.TarInfo(f"{skill_name(i)}/SKILL.md")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _turns(rng: random.Random, n: int, obj: str, place: str) -> list[dict]:
    out = []
    for k in range(n):
        out.append({"observation": f"You arrive at {place} {k + 1}. On it you see a {obj} {k + 1}, a cup 2 and a "
                                   f"spoon 1. " + "The room is quiet. " * rng.randint(1, 6),
                    "thought": f"I should take the {obj} and bring it to the {place}.",
                    "action": rng.choice([f"go to {place} {k + 1}", f"take {obj} {k + 1} from {place} 1",
                                          f"put {obj} {k + 1} in/on {place} 1", "look"]),
                    "valid": rng.random() > 0.1})
    return out


@dataclass
class StreamPlan:
    """A `skillos run` report to write: tasks per stream, methods, seeds."""
    run_id: str
    tasks: int
    seeds: int = 1
    methods: tuple[str, ...] = ("skillos", "none")
    turns: int = 4
    seed: int = 0
    repo_skills: list[str] = field(default_factory=list)


def task_records(plan: StreamPlan, method: str, seed: int) -> list[TaskRecord]:
    """Records as the stream loop makes them, with ops that grow a repo of ``<run_id>-s<seed>``."""
    rng = random.Random(f"{plan.seed}-{method}-{seed}")
    records, known = [], list(plan.repo_skills)
    repo = f"{plan.run_id}-s{seed}" if method == "skillos" else None
    for pos in range(plan.tasks):
        t, obj, place = TYPES[(pos // max(1, plan.tasks // 6)) % 6], rng.choice(OBJECTS), rng.choice(PLACES)
        rec = TaskRecord(position=pos, task_id=f"valid_seen/{t}-{obj}-{pos:04d}/trial_1", task_type=t,
                         instruction=f"{t} some {obj} and put it in {place}.", method=method, seed=seed,
                         success=rng.random() < (0.3 + 0.4 * pos / max(1, plan.tasks)), reward=0.0,
                         steps=plan.turns, stop_reason="done", turns=_turns(rng, plan.turns, obj, place),
                         repo=repo, episode_s=round(rng.uniform(1, 9), 2))
        if method == "skillos":
            given = rng.sample(known, min(len(known), 3))
            rec.retrieved = [{"name": n, "version": 1, "score": round(rng.uniform(1, 9), 3)} for n in given]
            rec.used = given[:1] if given and rng.random() < 0.5 else []
            rec.self_judged_success = rec.success if rng.random() < 0.8 else not rec.success
            name = f"{t}-{obj}-{pos}"
            if pos % 3 == 2 and known:
                target = rng.choice(known)
                rec.ops = [OpRecord("skill_update", target, True, True, None, version=2)]
            else:
                rec.ops = [OpRecord("new_skill_insert", name, True, True, None, version=1)]
                known.append(name)
            if pos % 5 == 4:
                rec.ops.append(OpRecord("skill_delete", "no-such-skill", False, False,
                                        "skill_not_found: skill 'no-such-skill' does not exist"))
            rec.validity_rate = sum(o.valid for o in rec.ops) / len(rec.ops)
            rec.repo_size = len(known)
            rec.curator_completion = json.dumps({"calls": [{"name": rec.ops[0].name,
                                                            "arguments": {"skill_name": rec.ops[0].skill_name}}]})
            rec.curator_call_id = f"call{pos:04d}{seed}"
        records.append(rec)
    return records


def write_stream_run(out: Path, plan: StreamPlan, *, finish: bool = True, plots: bool = True) -> RunLog:
    """A whole run folder (or, with finish=False, one that is still running: run.json + tasks.jsonl)."""
    config = {"env": "alfworld", "split": "valid_seen", "methods": list(plan.methods), "tasks": plan.tasks,
              "seeds": plan.seeds, "order": "grouped", "k": 5, "max_turns": 10, "run_id": plan.run_id,
              "models": {role: {"model": "smollm2-135m-instruct", "params_label": "135M"}
                         for role in ("executor", "curator", "judge")}}
    plans = [(m, s) for s in range(plan.seeds) for m in plan.methods]
    live = RunLog(out, config, total=plan.tasks * len(plans),
                  repos=[f"{plan.run_id}-s{s}" for m, s in plans if m == "skillos"])
    if not finish:
        return live
    runs = []
    for m, s in plans:
        records = task_records(plan, m, s)
        for r in records:
            live.task(r)
        runs.append(StreamRun(m, s, f"{plan.run_id}-s{s}" if m == "skillos" else None, records))
    write_task_records(runs, out)
    write_summary(summarize(runs, config), out)
    if plots:
        write_plots(runs, out)
    live.finish()
    return live


def apply_run_ops(client: SkillRepoClient, plan: StreamPlan, seed: int = 0, create: bool = True) -> str:
    """Make the skillos stream's repo of ``plan`` with the ops its records say, each batch with its origin."""
    repo = f"{plan.run_id}-s{seed}"
    if create:
        client.create_repo(repo)
    for rec in task_records(plan, "skillos", seed):
        ops = []
        for o in rec.ops:
            if o.name == "new_skill_insert":
                ops.append({"name": o.name, "arguments": {"skill_name": o.skill_name, "content": skill_md(
                    o.skill_name, f"What task {rec.position} taught: {rec.instruction}",
                    f"1. find the object\n2. {rec.task_type} it\n3. put it in place\n")}})
            elif o.name == "skill_update":
                ops.append({"name": o.name, "arguments": {"skill_name": o.skill_name, "new_content": skill_md(
                    o.skill_name, f"Updated after task {rec.position}", f"1. look first\n2. {rec.task_type} it\n")}})
            else:
                ops.append({"name": o.name, "arguments": {"skill_name": o.skill_name}})
        client.apply_ops(repo, ops, idempotency_key=f"{repo}:{rec.position}:{rec.task_id}", atomic=False,
                         origin={"source": "run", "run": plan.run_id, "seed": seed, "position": rec.position,
                                 "task_id": rec.task_id, "curator_call": rec.curator_call_id})
    return repo


def write_train_run(out: Path, steps: int, *, finish: bool = True) -> None:
    """A `skillos train` output_dir: config.json, metrics.jsonl, rollouts/, summary.json."""
    from services.trainer.metrics import MetricsWriter

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"steps": steps, "model": {"path": "HuggingFaceTB/SmolLM2-135M-Instruct",
                                                                           "lora": True},
                                                 "data": {"env": "alfworld", "split": "train"},
                                                 "groups_per_step": 2, "rollouts_per_group": 4}))
    metrics = MetricsWriter(out, tensorboard=False)
    for step in range(1, steps + 1):
        write_train_step(out, metrics, step)
    metrics.close()
    if finish:
        (out / "summary.json").write_text(json.dumps({"start_step": 0, "end_step": steps}))


def write_train_step(out: Path, metrics, step: int) -> None:
    rng = random.Random(step)
    task = rng.uniform(0, 1)
    metrics.write(step, {"groups": {"sampled": 2, "dropped": 0, "dropped_reasons": []},
                         "reward": {"total": task + 0.1, "task": task, "fc": 0.9, "cnt": 0.5, "comp": -0.1},
                         "success_rate": rng.uniform(0, 1), "signal": {"groups_nonzero_std_frac": 0.5,
                                                                       "adv_abs_mean": 0.2, "call_valid_rate": 0.9},
                         "ops": {"new_skill_insert": 0.6, "skill_update": 0.3, "invalid": 0.1},
                         "repo": {"skills_mean": step * 1.5},
                         "time": {"rollout_s": 30.0, "update_s": 4.0, "sync_s": 0.2}})
    path = out / "rollouts" / f"step-{step:06d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for r in range(2):
            f.write(json.dumps({"group": "clean-0", "rollout": r, "reward": {"total": 0.5, "task": 0.4, "fc": 1.0,
                                                                             "cnt": 0.5, "comp": 0.0},
                                "advantage": 0.1 * (r - 0.5), "successes": [True, False, True],
                                "decisions": [{"completion": '{"calls": []}', "calls": [
                                    {"name": "new_skill_insert", "valid": True, "applied": True, "reason": None,
                                     "arguments": {"skill_name": "clean-mug"}}],
                                               "parse_ok": True, "judge": 0.5, "repo_tokens": 120,
                                               "context_tokens": 900}]}) + "\n")

"""`skillos group ...` (task grouping, App. B.2) and `skillos train --config FILE` (GRPO).

Imports inside the commands are deliberate: every part's cli.py is loaded whenever any `skillos` command
starts (registration), so what only one command needs stays in it: the trainer (torch, transformers, peft, DeepSpeed when present) and the grouping's clients.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from skillos.cli.common import fail, print_json
from skillos.protocol.runs import METRICS, RunFolder

group_app = typer.Typer(no_args_is_help=True, help="Build grouped task streams for curator training (App. B.2).")


def _read_tasks_jsonl(path: Path) -> list[dict]:
    tasks = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            fail(f"{path}:{n}: not JSON: {e}")
        text = row.get("instruction") or row.get("question") or row.get("problem")
        if not row.get("id") or not text:
            fail(f"{path}:{n}: each task needs 'id' and 'instruction' (or 'question'/'problem')")
        tasks.append({"id": str(row["id"]), "type": row.get("type", ""), "instruction": text,
                      "difficulty": row.get("difficulty")})
    if not tasks:
        fail(f"{path}: no tasks")
    return tasks


def _env_tasks(env: str, split: str | None, url: str | None) -> list[dict]:
    from services.trainer.settings import TrainerSettings
    from skillos.clients.envs import EnvClient, EnvError

    s = TrainerSettings()
    base = url or s.env_url(env)
    try:
        with EnvClient(base, token=s.api_token or None) as c:
            return [t.model_dump() for t in c.tasks(split=split)]
    except EnvError as e:
        fail(f"could not list {env} tasks from {base}: {e} (start it with `skillos serve {env}` or pass --env-url)")
    return []


@group_app.command("agentic")
def group_agentic(
    env: str = typer.Option("alfworld", help="alfworld or webshop"),
    split: str = typer.Option("valid_train", help="the env split to group"),
    size: int = typer.Option(10, help="tasks per group (Table 4: 10)"),
    distribution: str = typer.Option("natural", help="natural (data frequencies) or uniform (per type)"),
    num_groups: int = typer.Option(None, help="cap on the number of groups"),
    seed: int = typer.Option(0),
    env_url: str = typer.Option(None, help="env server URL (default: SKILLOS_<ENV>_URL)"),
    tasks_file: Path = typer.Option(None, help="JSONL of tasks {id, type, instruction} instead of a server"),
    out: Path = typer.Option(Path("groups.jsonl"), help="output JSONL; the report goes beside it"),
) -> None:
    """Groups of same-type tasks (ALFWorld's 6 types, WebShop's categories)."""
    from types import SimpleNamespace

    from services.trainer.grouping.agentic import group_by_type
    from services.trainer.grouping.io import group_statistics, write_groups, write_report

    if env not in ("alfworld", "webshop"):
        fail("--env must be alfworld or webshop (reasoning tasks: `skillos group reasoning`)")
    if distribution not in ("natural", "uniform"):
        fail("--distribution must be natural or uniform")
    rows = _read_tasks_jsonl(tasks_file) if tasks_file else _env_tasks(env, split, env_url)
    try:
        groups, extra = group_by_type([SimpleNamespace(**r) for r in rows], env, size, distribution,
                                      num_groups, seed)
    except ValueError as e:
        fail(str(e))
    write_groups(out, groups)
    stats = group_statistics(groups, extra)
    write_report(out.with_name(out.stem + ".report"), stats)
    print_json(stats)


@group_app.command("annotate")
def group_annotate(
    tasks_file: Path = typer.Option(None, help="JSONL of tasks {id, instruction|question, difficulty?}"),
    env_url: str = typer.Option(None, help="or: list the tasks of this reasoning env server"),
    split: str = typer.Option(None),
    cache: Path = typer.Option(Path("annotations.jsonl"), help="annotation cache (JSONL, appended)"),
    concurrency: int = typer.Option(4),
    limit: int = typer.Option(None, help="annotate only the first N tasks"),
    json_style: str = typer.Option("openai", help="response_format dialect: openai (vLLM, OpenAI) or llama_cpp"),
) -> None:
    """Stage 1: LLM annotation (judge role, SKILLOS_JUDGE_LLM_*) with a JSON schema, cached."""
    import asyncio
    import time

    from services.trainer.grouping.annotate import AnnotationCache, annotate_tasks
    from skillos.llm import LLMClient, LLMSettings

    rows = _read_tasks_jsonl(tasks_file) if tasks_file else _env_tasks("reasoning", split, env_url)
    rows = rows[:limit] if limit else rows
    store = AnnotationCache(cache)

    async def go():
        async with LLMClient(LLMSettings.for_role("judge")) as client:
            return await annotate_tasks(rows, client, store, concurrency, json_style=json_style)

    before = {k for k, row in store.entries.items() if row.get("ok")}
    start = time.perf_counter()
    result = asyncio.run(go())
    elapsed = time.perf_counter() - start
    empty = sum(1 for a in result.values() if not any(a.model_dump().values()))
    fresh = [row for k, row in store.entries.items() if k not in before
             and row["task_id"] in result]
    print_json({"annotated": len(result), "empty": empty, "from_cache": len(result) - len(fresh),
                "llm_annotated": len(fresh), "valid": sum(r["ok"] for r in fresh),
                "valid_first_try": sum(r["ok"] and r.get("attempts") == 1 for r in fresh),
                "seconds": round(elapsed, 1),
                "seconds_per_llm_task": round(elapsed / len(fresh), 2) if fresh else 0.0,
                "cache": str(cache)})


@group_app.command("reasoning")
def group_reasoning(
    tasks_file: Path = typer.Option(None, help="JSONL of tasks {id, instruction|question, difficulty?}"),
    env_url: str = typer.Option(None, help="or: the reasoning env server"),
    split: str = typer.Option(None),
    annotations: Path = typer.Option(Path("annotations.jsonl"), help="cache written by `group annotate`"),
    num_groups: int = typer.Option(100),
    size_min: int = typer.Option(5, help="Table 4: Random(5, 12)"),
    size_max: int = typer.Option(12),
    seed: int = typer.Option(0),
    out: Path = typer.Option(Path("groups.jsonl")),
    by: str = typer.Option(None, "--by", help=(
        "family: random groups of Random(size-min, size-max) tasks of one reasoning-gym family (no "
        "annotation); attributes: Stage 2 over the annotations; default: family when every task is a "
        "reasoning-gym one (id rg/...), else attributes")),
) -> None:
    """Groups of related reasoning tasks: same reasoning-gym family, or Stage 2 (soft-Jaccard groups with
    the dependency gate and curriculum, Table 5) over the annotations."""
    from services.trainer.grouping.io import group_statistics, write_groups, write_report

    if by not in (None, "family", "attributes"):
        fail(f"unknown --by {by!r}: use family or attributes")
    rows = _read_tasks_jsonl(tasks_file) if tasks_file else _env_tasks("reasoning", split, env_url)
    if by is None:
        by = "family" if all(str(r["id"]).startswith("rg/") for r in rows) else "attributes"
    if by == "family":
        from types import SimpleNamespace

        from services.trainer.grouping.families import group_by_family

        if split is None and any(r.get("split") == "train" for r in rows):
            rows = [r for r in rows if r.get("split") == "train"]   # never train on valid/test tasks
        try:
            groups, extra = group_by_family([SimpleNamespace(**r) for r in rows], "reasoning", size_min,
                                            size_max, num_groups, seed)
        except ValueError as e:
            fail(str(e))
        extra["split"] = split or ("train" if any(r.get("split") == "train" for r in rows) else None)
        stats = group_statistics(groups, extra)
        write_report(out.with_name(out.stem + ".report"), stats)
        write_groups(out, groups)
        print_json({k: v for k, v in stats.items() if k != "params"})
        return

    from services.trainer.grouping.annotate import AnnotationCache, cache_key
    from services.trainer.grouping.reasoning import GroupBuilder, GroupingParams, Item
    from services.trainer.grouping.similarity import PhraseEncoder
    from skillos.llm import LLMSettings

    store = AnnotationCache(annotations)
    model = LLMSettings.for_role("judge").model
    items, missing = [], 0
    for r in rows:
        ann = store.get(cache_key(model, r["instruction"]))
        if ann is None:
            missing += 1
            continue
        items.append(Item(r["id"], r["instruction"], ann, r.get("difficulty")))
    if len(items) < size_min:
        fail(f"only {len(items)} annotated tasks ({missing} missing): run `skillos group annotate` first")
    params = GroupingParams(size_min=size_min, size_max=size_max)
    groups, extra = GroupBuilder(items, PhraseEncoder(), params, seed=seed).build(num_groups)
    extra["tasks_without_annotation"] = missing
    stats = group_statistics(groups, extra)
    report = out.with_name(out.stem + ".report")
    write_report(report, stats)
    if not groups:   # an empty groups file would only fail later, in `skillos train`
        fail(f"no group of {size_min}+ tasks passed the dependency gate "
             f"(gate failures: {extra['gate_failures']}); see {report}.md")
    write_groups(out, groups)
    print_json({k: v for k, v in stats.items() if k != "params"})


def train(
    config: Path = typer.Option(..., "--config", help="YAML training config (configs/train/*.yaml)"),
    steps: int = typer.Option(None, help="override the config's steps"),
    output_dir: Path = typer.Option(None, help="override the config's output_dir"),
    overrides: list[str] = typer.Option([], "--set", help="KEY=VALUE over the config, dotted for nested "
                                        "fields, the value read as YAML (--set agent.method=sapo)"),
) -> None:
    """GRPO training of the skill curator, or with `policy: agent` of the agent acting with a method's
    skills (SkillRL, SAPO, Skill1); resumes from output_dir's last checkpoint."""
    from services.trainer.config import TrainConfig
    from services.trainer.settings import TrainerSettings
    from skillos.cli.common import init_logging

    try:
        cfg = TrainConfig.from_options(config, steps, output_dir, overrides)
    except FileNotFoundError as e:
        fail(str(e))
    except ValueError as e:   # pydantic's ValidationError too
        fail(f"{config}: {e}")
    settings = TrainerSettings()
    init_logging(settings)
    from services.trainer.trainer import Trainer

    print_json(Trainer(cfg, settings).run())


def train_report(run_dir: Path = typer.Argument(..., help="a training output_dir")) -> None:
    """The run's report: metrics.jsonl plotted into report.png, and report.md (a row per step, the reward by family)."""
    from services.trainer.metrics import write_report

    folder = RunFolder(run_dir)
    if not folder.metrics.is_file():
        fail(f"{run_dir}/{METRICS} not found")
    for path in write_report(run_dir):
        typer.echo(str(path))


def register(app: typer.Typer, serve_app: typer.Typer) -> None:
    app.add_typer(group_app, name="group")
    app.command("train")(train)
    app.command("train-report")(train_report)

"""The main job behind `skillos run`: pick tasks, play the streams (method × seed), write the report."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from harness.report import (
    RunLog,
    StreamRun,
    export_skills,
    summarize,
    write_plots,
    write_summary,
    write_task_records,
)
from harness.resume import (
    ResumeError,
    check_models,
    check_positions,
    finished_records,
    fresh_repo,
    last_prefix,
    load_state,
    options_config,
    restore_snapshot,
    resume_point,
    run_lock,
    save_snapshot,
)
from harness.reuse import BASELINE, baseline_records, executor_code
from harness.stack import ENVS
from skillos.acting.options import ActingOptions, from_pairs
from skillos.clients.curator import AsyncCuratorClient
from skillos.clients.envs import AsyncEnvClient
from skillos.clients.executor import DEFAULT_TIMEOUT_S as DEFAULT_EPISODE_TIMEOUT_S
from skillos.clients.executor import AsyncExecutorClient
from skillos.clients.skillrepo import AsyncSkillRepoClient, SkillRepoError
from skillos.llm import LLMClient, LLMSettings
from skillos.methods import METHODS, MethodConfigError, StreamContext, build_method, method_params
from skillos.methods.bank import STREAM_POLICY
from skillos.models import MODELS
from skillos.protocol.runs import RUN_STATE, UTILITY, RunFolder
from skillos.protocol.skillrepo import SEARCH_MODES
from skillos.stream import StreamConfig, TaskRecord, TaskSlots, TaskSpec, run_stream

# the methods' first dense search on a fresh skill repo loads its encoder (~8 s idle, more on a busy machine)
REPO_TIMEOUT_S = 180.0
DEFAULT_SPLITS = {"alfworld": "valid_seen", "webshop": "test", "reasoning": "test"}


@dataclass
class RunOptions:
    env: str
    split: str | None  # None: the env's usual evaluation split (see default_split)
    methods: list[str]  # names of `skillos.methods.METHODS`, played on the same tasks
    limit: int | None = None
    task_type: str | None = None  # only tasks of these types, comma-separated (pick,clean; gsm_symbolic,chain_sum)
    per_type: int | None = None   # the first N tasks of each type (a balanced sample), before limit
    seeds: int = 1
    order: str = "grouped"
    concurrency: int = 1
    k: int = 5
    retrieval: str = "bm25"  # bm25 | dense | hybrid: how the executor searches the repo
    max_turns: int = 30
    history_len: int = 30
    out: Path = Path("runs")
    self_judge: bool = True
    curator_temperature: float | None = None
    urls: dict[str, str] = field(default_factory=dict)  # skillrepo, executor, curator, env
    token: str | None = None
    llms: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> {"base_url", "model"}
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # method -> its parameters
    from_repo: str | None = None  # each stream's repo starts as a fork of this one (a library to start from)
    acting: ActingOptions | None = None  # how the executor decides (None: the executor service's settings)
    resume: bool = False  # play on in ``out``, an earlier run's folder, from its last finished tasks
    baseline_from: Path | None = None  # take No Memory's episodes from this earlier run folder (harness.reuse)
    assume_same_code: bool = False     # ... also those whose records carry no executor code fingerprint
    hold: tuple[str, ...] = ()  # resumed run: methods whose streams keep what they finished and play nothing now


def held_methods(methods: Sequence[str], hold: str) -> tuple[str, ...]:
    """``--hold`` checked against the run's methods: ValueError names what is wrong."""
    held = tuple(dict.fromkeys(m.strip() for m in hold.split(",") if m.strip()))
    unknown = [m for m in held if m not in methods]
    if unknown:
        raise ValueError(f"--hold {','.join(unknown)}: the run plays {', '.join(methods)}")
    if set(held) >= set(methods):
        raise ValueError("--hold names every method of the run: there would be nothing to play")
    return held


def resumed_options(folder: Path) -> RunOptions:
    """The options of the run whose folder ``folder`` is, to resume it (`harness.resume`); ResumeError if
    it cannot be."""
    c = options_config(load_state(folder))
    unknown = [m for m in c["methods"] if m not in METHODS]
    if unknown:
        raise ResumeError(f"{RUN_STATE} names methods this version lacks: {', '.join(unknown)}")
    params = {m: dict(c["params"].get(m, {})) for m in c["methods"]}
    try:
        for m, p in params.items():   # as run.json has them, checked again by building the method
            build_method(m, p)
        acting = ActingOptions.model_validate(c["acting"]) if c["acting"] else None
    except ValueError as e:
        raise ResumeError(f"{RUN_STATE}'s options no longer check out: {e}") from None
    return RunOptions(env=c["env"], split=c["split"], methods=c["methods"], limit=c["limit"],
                      task_type=c["task_type"], per_type=c["per_type"], seeds=c["seeds"], order=c["order"],
                      concurrency=c["concurrency"], k=c["k"], retrieval=c["retrieval"], max_turns=c["max_turns"],
                      history_len=c["history_len"], out=Path(folder), self_judge=c["self_judge"], params=params,
                      from_repo=c["from_repo"], acting=acting, resume=True)


def run_options(*, env: str, split: str | None, method: str, param: Sequence[str], baseline: bool,
                from_repo: str | None, limit: int | None, task_type: str | None, per_type: int | None, seeds: int,
                order: str, concurrency: int, k: int, retrieval: str, max_turns: int, history_len: int,
                acting: Sequence[str], oracle_judge: bool, baseline_from: Path | None = None,
                assume_same_code: bool = False) -> RunOptions:
    """`skillos run`'s options, checked, as a `RunOptions` (a ValueError says what to fix). Where the
    services are (``urls``, ``token``, ``llms``) and the report folder are the command's to fill in once
    it knows the stack it runs on."""
    if env not in ENVS:
        raise ValueError(f"unknown env {env!r}: use one of {', '.join(ENVS)}")
    methods = list(dict.fromkeys(m.strip() for m in method.split(",") if m.strip()))
    if baseline and methods and "none" not in methods:
        methods.append("none")
    if not methods:
        raise MethodConfigError("--method is empty: name at least one method")
    params = method_params(methods, param)
    if order not in ("grouped", "shuffled"):
        raise ValueError(f"unknown order {order!r}: use grouped or shuffled")
    if retrieval not in SEARCH_MODES:
        raise ValueError(f"unknown retrieval {retrieval!r}: use {', '.join(SEARCH_MODES)}")
    if assume_same_code and baseline_from is None:
        raise ValueError("--assume-same-executor-code goes with --baseline-from")
    if baseline_from is not None and BASELINE not in methods:
        raise ValueError("--baseline-from gives the No Memory baseline's episodes: drop --no-baseline, or add "
                         f"{BASELINE} to --method")
    return RunOptions(env=env, split=split, methods=methods, limit=limit, seeds=seeds, task_type=task_type,
                      per_type=per_type, order=order, concurrency=concurrency, k=k, retrieval=retrieval,
                      max_turns=max_turns, history_len=history_len, self_judge=not oracle_judge, params=params,
                      from_repo=from_repo, acting=from_pairs(list(acting)), baseline_from=baseline_from,
                      assume_same_code=assume_same_code)


def repo_name(run_id: str, method: str, seed: int) -> str:
    """The repo of one stream: ``<run_id>-s<seed>`` for SkillOS (as ever), ``<run_id>-<method>-s<seed>``
    for the other methods with a memory."""
    return f"{run_id}-s{seed}" if method == "skillos" else f"{run_id}-{method}-s{seed}"


def episode_timeout_s(max_turns: int) -> float:
    """How long the run waits for one episode: the executor bounds each of its LLM calls (the executor role's
    timeout) and env calls, so a turn can take that long; a fixed bound cut episodes of a loaded CPU server
    (30 turns of a 1.5B beside other work took over the 30 min default) that the executor was still playing."""
    llm = LLMSettings.for_role("executor")   # as this process's environment says (`skillos up` shares it)
    per_turn = (llm.max_retries + 1) * llm.timeout_s + 120.0   # 120: the executor's env call bound
    return max(DEFAULT_EPISODE_TIMEOUT_S, max_turns * per_turn + 60.0)


def writer_llm(llms: dict[str, dict[str, str]]):
    """The methods' own writer: the curator role's LLM, where the stack says it is (else the settings)."""
    settings = LLMSettings.for_role("curator")
    served = llms.get("curator") or {}
    if served.get("base_url"):
        settings = settings.model_copy(update={"base_url": served["base_url"], "model": served.get("model")
                                                or settings.model})
    return LLMClient(settings)


def order_tasks(tasks: list[TaskSpec], order: str, seed: int) -> list[TaskSpec]:
    """grouped: related tasks (same type) next to each other, types in first-seen order, as in the
    paper's grouped streams; shuffled: a random order drawn from ``seed``."""
    if order == "shuffled":
        shuffled = list(tasks)
        random.Random(seed).shuffle(shuffled)
        return shuffled
    if order != "grouped":
        raise ValueError(f"unknown order {order!r}: use grouped or shuffled")
    first_seen: dict[str, int] = {}
    for t in tasks:
        first_seen.setdefault(t.type, len(first_seen))
    return sorted(tasks, key=lambda t: first_seen[t.type])  # stable: keeps the split's order within a type


async def default_split(env_client: AsyncEnvClient, env: str) -> str:
    """ALFWorld valid_seen, else "test", else the server's first split."""
    splits = await env_client.splits()
    preferred = DEFAULT_SPLITS.get(env)
    if preferred in splits:
        return preferred
    if "test" in splits:
        return "test"
    if not splits:
        raise ValueError(f"the {env} server has no splits")
    return splits[0]


async def select_tasks(env_client: AsyncEnvClient, split: str, limit: int | None,
                       task_type: str | None = None, per_type: int | None = None) -> list[TaskSpec]:
    infos = await env_client.tasks(split)
    if not infos:
        raise ValueError(f"split {split!r} has no tasks")
    specs = [TaskSpec(id=t.id, type=t.type, instruction=t.instruction) for t in infos]
    if task_type:  # one type or several, comma-separated: "pick,clean", "gsm_symbolic,chain_sum"
        types = sorted({t.type for t in specs})
        wanted = [task_type] if task_type in types else [w.strip() for w in task_type.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in types] or ([] if wanted else [task_type])
        if unknown:
            raise ValueError(f"split {split!r} has no tasks of type {', '.join(map(repr, unknown))}; "
                             f"types: {', '.join(types)}")
        specs = [t for t in specs if t.type in wanted]
    if per_type:
        seen: dict[str, int] = {}
        kept = []
        for t in specs:
            seen[t.type] = seen.get(t.type, 0) + 1
            if seen[t.type] <= per_type:
                kept.append(t)
        specs = kept
    return specs[:limit] if limit else specs


async def run_job(opts: RunOptions, *, on_task: Callable[[str, TaskRecord], None] | None = None,
                  on_start: Callable[[int, int], None] | None = None) -> tuple[Path, dict[str, Any]]:
    """Play every (method, seed) stream and write the report folder; returns (folder, summary).
    ``on_start(total, finished)``: the tasks to play over all streams, and how many a resumed run
    (``opts.resume``) finished before."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = opts.out
    out.mkdir(parents=True, exist_ok=True)
    with run_lock(out):
        return await _run_job(opts, out, stamp, on_task, on_start)


async def _run_job(opts: RunOptions, out: Path, stamp: str, on_task, on_start) -> tuple[Path, dict[str, Any]]:
    previous = load_state(out) if opts.resume else None
    if previous is not None and previous.status == "done":
        raise ResumeError(f"the run in {out} has finished (every task played); there is nothing to resume")
    run_id = previous.config["run_id"] if previous else f"run-{stamp}-{random.randrange(16**6):06x}"
    attempt = len(previous.resumed_at) + 1 if previous else 0
    env_url = opts.urls["env"]
    async with AsyncEnvClient(env_url, token=opts.token) as env_client, \
            AsyncSkillRepoClient(opts.urls["skillrepo"], token=opts.token,
                                 timeout=REPO_TIMEOUT_S) as repo_client, \
            AsyncCuratorClient(opts.urls["curator"], token=opts.token) as curator, \
            AsyncExecutorClient(opts.urls["executor"], token=opts.token, timeout=episode_timeout_s(opts.max_turns)) \
            as executor, \
            writer_llm(opts.llms) as writer:
        if not opts.split:
            opts.split = await default_split(env_client, opts.env)
        tasks = await select_tasks(env_client, opts.split, opts.limit, opts.task_type, opts.per_type)
        for m in opts.methods:
            METHODS[m].check_tasks(opts.env, {t.type for t in tasks})
        semaphore = TaskSlots(opts.concurrency)   # the streams' episodes, earliest task first: pairs advance together
        plans = [(m, s) for s in range(opts.seeds) for m in opts.methods]
        finished = finished_records(out) if previous else {}
        # each stream's start, decided (and checked) before the folder or any repo is touched
        starts: dict[tuple[str, int], tuple[dict[int, TaskRecord], str]] = {}
        for m, s in plans:
            done = finished.get((m, s), {})
            check_positions(done, [t.id for t in order_tasks(tasks, opts.order, s)], f"{m} seed {s}")
            how = "fresh" if previous else "new"   # a repo of a stream that plays from its first task
            if build_method(m, opts.params.get(m, {})).sequential:
                # after the finished prefix, and no further than its newest snapshot (harness.resume)
                keep = resume_point(out, repo_name(run_id, m, s), last_prefix(done)) if done else 0
                done = {p: r for p, r in done.items() if p < keep}
                how = "restore" if done else how
            starts[(m, s)] = (done, how if METHODS[m].uses_repo else "none")
        if opts.from_repo and any(how in ("new", "fresh") for _, how in starts.values()):
            try:
                await repo_client.get_repo(opts.from_repo)
            except SkillRepoError as e:
                raise ValueError(f"--from-repo {opts.from_repo!r}: {e.message}") from None
        models = await describe_models(opts.llms)
        if previous:
            check_models(previous.config.get("models") or {}, models)
        acting = opts.acting.model_dump() if opts.acting is not None else None
        reused: list[TaskRecord] = []
        reuse_note = None
        if opts.baseline_from is not None and not previous:   # a resumed run has them in its log already
            seeds = [s for m, s in plans if m == BASELINE]
            found, skipped = baseline_records(
                opts.baseline_from, {"env": opts.env, "split": opts.split, "max_turns": opts.max_turns,
                                     "history_len": opts.history_len, "acting": acting, "models": models},
                {s: [t.id for t in order_tasks(tasks, opts.order, s)] for s in seeds}, opts.assume_same_code)
            reuse_note = {"from": str(opts.baseline_from), "taken": sum(len(r) for r in found.values()),
                          "played_again": skipped, "assumed_same_code": opts.assume_same_code}
            for s, records in found.items():
                done, how = starts[(BASELINE, s)]
                starts[(BASELINE, s)] = ({**records, **done}, how)
                reused += records.values()
        config = {"env": opts.env, "split": opts.split, "methods": opts.methods, "tasks": len(tasks),
                  "limit": opts.limit, "task_type": opts.task_type, "per_type": opts.per_type, "seeds": opts.seeds,
                  "order": opts.order, "k": opts.k, "retrieval": opts.retrieval, "from_repo": opts.from_repo,
                  "max_turns": opts.max_turns, "history_len": opts.history_len, "concurrency": opts.concurrency,
                  "acting": acting, "run_id": run_id, "urls": opts.urls, "self_judge": opts.self_judge,
                  "params": {m: METHODS[m].Params(**opts.params.get(m, {})).model_dump(mode="json")
                             for m in opts.methods},
                  "models": models,
                  "baseline_from": reuse_note or (previous.config.get("baseline_from") if previous else None),
                  **({"held": list(opts.hold)} if opts.hold else {})}
        live = RunLog(out, config, total=len(tasks) * len(plans),
                      repos=[repo_name(run_id, m, s) for m, s in plans if METHODS[m].uses_repo], previous=previous)
        for record in reused:   # the run's own from now on: a resume, the report and the analysis read them
            live.task(record)
        if on_start:
            on_start(len(tasks) * len(plans), sum(len(done) for done, _ in starts.values()))

        async def play(method: str, seed: int) -> StreamRun:
            built = build_method(method, opts.params.get(method, {}))
            done, how = starts[(method, seed)]
            if method in opts.hold:   # its repo is left as it is: the resume that plays it on restores it
                return StreamRun(method=method, seed=seed, repo=None, records=[done[p] for p in sorted(done)])
            repo = repo_name(run_id, method, seed) if METHODS[method].uses_repo else None
            if how == "restore":
                await restore_snapshot(out, repo_client, method, repo, max(done))
            elif how == "fresh":
                await fresh_repo(repo_client, method, repo, opts.from_repo)
            elif how == "new" and opts.from_repo:
                await repo_client.fork_repo(opts.from_repo, repo, policy=STREAM_POLICY)
            elif how == "new":
                await repo_client.create_repo(repo, STREAM_POLICY)
            stream = StreamConfig(env=opts.env, method=method, repo=repo, k=opts.k, retrieval=opts.retrieval,
                                  max_turns=opts.max_turns, acting=opts.acting,
                                  history_len=opts.history_len, seed=seed, self_judge=opts.self_judge,
                                  curator_temperature=opts.curator_temperature, run_id=run_id, attempt=attempt,
                                  params=opts.params.get(method, {}))
            ctx = StreamContext(stream, executor, curator=curator if METHODS[method].uses_curator else None,
                                repo=repo_client, llm=writer if METHODS[method].uses_writer else None)

            async def ended(record: TaskRecord) -> None:
                record.method_info.setdefault("executor_code", executor_code())   # what decided it (harness.reuse)
                if repo and built.sequential:   # the repos this task left, before its record (harness.resume)
                    try:
                        await save_snapshot(out, repo_client, method, repo, record.position)
                    except (SkillRepoError, OSError) as e:   # the run goes on; a resume replays from the one before
                        record.method_info["snapshot_error"] = f"{type(e).__name__}: {e}"[:500]
                live.task(record)
                if on_task:
                    on_task(method, record)

            records = await run_stream(order_tasks(tasks, opts.order, seed), built, ctx,
                                       semaphore=semaphore, on_task=ended, finished=done)
            return StreamRun(method=method, seed=seed, repo=repo, records=records)

        try:
            runs = list(await asyncio.gather(*(play(m, s) for m, s in plans)))
            for run in runs:
                if run.repo:
                    try:
                        skills = await repo_client.list_skills(run.repo)
                    except SkillRepoError:
                        skills = []
                    folder = f"seed{run.seed}" if run.method == "skillos" else f"{run.method}-seed{run.seed}"
                    export_skills(skills, RunFolder(out).repo_dir(folder))
                    try:   # the same numbers as `skillos repo stats` on the stream's repo
                        utility = await repo_client.utility(run.repo)
                        (RunFolder(out).repo_dir(folder) / UTILITY).write_text(utility.model_dump_json(indent=2))
                    except SkillRepoError:
                        pass
            summary = summarize(runs, config)
            write_task_records(runs, out)
            write_summary(summary, out)
            write_plots(runs, out)
        except BaseException as e:
            live.finish(error=f"{type(e).__name__}: {e}"[:2000])
            raise
    live.finish(held=any(r.method in opts.hold and len(r.records) < len(tasks) for r in runs))
    return out, summary


async def describe_models(llms: dict[str, dict[str, str]]) -> dict[str, dict[str, Any]]:
    """What each LLM role ran on, as its server reports it (``GET /v1/models``: llama.cpp gives the
    parameter count, file size and quantization), else as the registry knows it, else the name alone:
    so a report never passes a 135M model off as a bigger one."""
    if not llms:
        llms = {r: {"base_url": (s := LLMSettings.for_role(r)).base_url, "model": s.model}
                for r in ("executor", "curator", "judge")}
    out: dict[str, dict[str, Any]] = {}
    async with httpx.AsyncClient(timeout=10) as client:
        for role, llm in llms.items():
            info: dict[str, Any] = {"model": llm["model"], "base_url": llm["base_url"]}
            try:
                data = (await client.get(llm["base_url"].rstrip("/") + "/models")).json()["data"]
                served = next((m for m in data if m.get("id") == llm["model"]), data[0] if len(data) == 1 else None)
            except (httpx.HTTPError, ValueError, KeyError, TypeError, IndexError):
                served = None
            if served:
                meta = served.get("meta") or {}
                info.update(served_as=served.get("id"), params=meta.get("n_params"), size_bytes=meta.get("size"),
                            quant=meta.get("ftype"), context=meta.get("n_ctx"))
            spec = MODELS.get(str(info.get("served_as") or llm["model"]))
            if spec:
                info.setdefault("title", spec.title)
                info["params_label"] = spec.params
                info["quant"] = info.get("quant") or spec.quant
                info["size_bytes"] = info.get("size_bytes") or spec.size
            out[role] = info
    return out

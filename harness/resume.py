"""`skillos run --resume`: play on from the last finished task of a stopped run (killed, interrupted, out of
time) instead of from the start.

What a run folder keeps for it (`skillos.protocol.runs`): ``run.json``'s config (the run's options and its
run id, so the streams keep their repo names), ``tasks.jsonl`` (the records of the tasks that ended), and for
each learning stream ``resume/<repo>@<position>.tar.gz``, the stream's repos as the task at that position left
them. A learning stream's snapshot is written before its record, so a record always has its snapshot; a
snapshot without its record (a stop between the two) is of a task that is played again, from the snapshot
before it.

A resumed learning stream gets its repos back from the snapshot of its last finished task, whatever the skill
repo holds now (a task killed after its curation but before its record left the repo one task ahead), and the
method's ``resume`` hook runs instead of its ``setup``. Streams without a memory, and the gold skills (a
fixed repo), just skip their finished tasks.
"""

from __future__ import annotations

import fcntl
import os
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from skillos.clients.skillrepo import SkillRepoError
from skillos.methods import METHODS
from skillos.methods.bank import STREAM_POLICY, Bank, ensure_stream_repo
from skillos.protocol.runs import RUN_STATE, RunFolder, RunState, TaskEntry, read_json, read_jsonl
from skillos.stream import TaskRecord
from skillos.stream.types import OpRecord

KEEP_SNAPSHOTS = 2   # the last task's, and the one before (its record may not be written yet)


class ResumeError(ValueError):
    """The folder cannot be resumed; the message says why and what to do."""


def options_config(state: RunState) -> dict[str, Any]:
    """The run's options as `harness.runner.run_options` takes them, from its run.json config (a folder
    written before ``limit`` was kept there: its task count is the limit that reproduces its task list)."""
    c = state.config
    try:
        return {"env": c["env"], "split": c["split"], "methods": list(c["methods"]),
                "limit": c.get("limit", c.get("tasks")), "task_type": c.get("task_type"),
                "per_type": c.get("per_type"), "seeds": int(c["seeds"]), "order": c["order"], "k": int(c["k"]),
                "retrieval": c.get("retrieval", "bm25"), "from_repo": c.get("from_repo"),
                "max_turns": int(c["max_turns"]), "history_len": int(c["history_len"]),
                "concurrency": int(c.get("concurrency") or 1), "self_judge": bool(c.get("self_judge", True)),
                "params": {m: dict(p) for m, p in (c.get("params") or {}).items()}, "acting": c.get("acting"),
                "run_id": c["run_id"]}
    except (KeyError, TypeError, ValueError) as e:
        raise ResumeError(f"{RUN_STATE}'s config lacks what a resume needs ({type(e).__name__}: {e}); "
                          "start a new run") from None


def load_state(folder: Path) -> RunState:
    state = read_json(RunFolder(folder).run_state, RunState)
    if state is None or not state.config.get("run_id"):
        raise ResumeError(f"{folder} is not a stream run folder (no readable {RUN_STATE} with a run id); "
                          "--resume takes the --out folder of an earlier `skillos run`")
    return state


def stream_repos(method: str, repo: str) -> list[str]:
    """A stream's repos: its own and its method's companions (SAPO's temporary bank, SkillRL's trajectories)."""
    bank = Bank(None, repo, method)
    return [repo] + [bank.companion(suffix).name for suffix in METHODS[method].companions]


def record_from_entry(entry: TaskEntry) -> TaskRecord:
    data = entry.model_dump()
    known = TaskRecord.__dataclass_fields__
    data["ops"] = [OpRecord(**{k: v for k, v in op.items() if k in OpRecord.__dataclass_fields__})
                   for op in data.get("ops") or []]
    return TaskRecord(**{k: v for k, v in data.items() if k in known})


def finished_records(folder: Path) -> dict[tuple[str, int], dict[int, TaskRecord]]:
    """The records ``tasks.jsonl`` holds, by stream (method, seed) and position (`check_positions` holds
    each against the task the run now plays there)."""
    out: dict[tuple[str, int], dict[int, TaskRecord]] = defaultdict(dict)
    for entry in read_jsonl(RunFolder(folder).tasks_log, TaskEntry):
        record = record_from_entry(entry)
        out[(record.method, record.seed)][record.position] = record
    return dict(out)


@contextmanager
def run_lock(folder: Path) -> Iterator[None]:
    """One `skillos run` at a time in a folder: a second one (a resume of a run still playing, or two
    resumes) would play the same repos and append to the same log."""
    path = RunFolder(folder).lock
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise ResumeError(f"another `skillos run` is playing in {folder} (pid {f.read().strip() or '?'}); "
                              "stop it first, or resume once it has stopped") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def check_models(before: dict[str, Any], now: dict[str, Any]) -> None:
    """A resumed run must play on the models it started with, or its report would credit every task to
    the new ones."""
    name = lambda info: (info or {}).get("served_as") or (info or {}).get("model")
    changed = [f"{role}: {name(before[role])} then, {name(now.get(role))} now" for role in before
               if role in now and name(before[role]) != name(now[role])]
    if changed:
        raise ResumeError("the stack serves other models than the run started with (" + "; ".join(changed)
                          + "); resume it on the same models, or start a new run")


def check_positions(finished: dict[int, TaskRecord], ordered_ids: list[str], stream: str) -> None:
    for position, record in finished.items():
        if position >= len(ordered_ids) or ordered_ids[position] != record.task_id:
            raise ResumeError(f"{stream}: the record at position {position} is of task {record.task_id!r}, but the "
                              f"run now plays {ordered_ids[position] if position < len(ordered_ids) else 'nothing'!r}"
                              " there (the split's tasks changed); start a new run")


def last_prefix(finished: dict[int, TaskRecord]) -> int:
    """How many tasks from the start of a sequential stream are finished (it resumes after them)."""
    n = 0
    while n in finished:
        n += 1
    return n


def snapshot_positions(folder: Path, repo: str) -> list[int]:
    """The positions a repo has a snapshot for, in order."""
    run = RunFolder(folder)
    out = []
    for path in run.resume_dir.glob(f"{repo}@*.tar.gz"):
        pos = path.name[len(repo) + 1:-len(".tar.gz")]
        if pos.isdigit() and run.repo_snapshot(repo, int(pos)) == path:
            out.append(int(pos))
    return sorted(out)


def resume_point(folder: Path, repo: str, prefix: int) -> int:
    """How many of a learning stream's first ``prefix`` finished tasks it keeps: up to the newest snapshot
    among them (one that could not be written, or was lost, costs the tasks after the one before it)."""
    kept = [p for p in snapshot_positions(folder, repo) if p < prefix]
    return kept[-1] + 1 if kept else 0


async def save_snapshot(folder: Path, repo_client: Any, method: str, repo: str, position: int) -> None:
    """The stream's repos after the task at ``position``, each written whole (tmp + rename), older ones pruned."""
    run = RunFolder(folder)
    run.resume_dir.mkdir(parents=True, exist_ok=True)
    for name in stream_repos(method, repo):
        try:
            data = await repo_client.export(name)
        except SkillRepoError as e:
            if e.status == 404:   # a companion the method has not created yet
                continue
            raise
        path = run.repo_snapshot(name, position)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        for old in snapshot_positions(folder, name)[:-KEEP_SNAPSHOTS]:
            run.repo_snapshot(name, old).unlink(missing_ok=True)


async def restore_snapshot(folder: Path, repo_client: Any, method: str, repo: str, position: int) -> None:
    """Make the stream's repos what the task at ``position`` left (created where the skill repo lacks them;
    a companion that had no snapshot then did not exist yet, and is dropped)."""
    run = RunFolder(folder)
    for name in stream_repos(method, repo):
        path = run.repo_snapshot(name, position)
        if not path.is_file():
            await _drop(repo_client, name)
            continue
        await ensure_stream_repo(repo_client, name)
        await repo_client.import_(name, path.read_bytes(), replace=True)


async def _drop(repo_client: Any, name: str) -> None:
    try:
        await repo_client.delete_repo(name)
    except SkillRepoError as e:
        if e.status != 404:
            raise


async def fresh_repo(repo_client: Any, method: str, repo: str, from_repo: str | None) -> None:
    """A stream that starts again from its first task: its repos as a new run would find them (the method's
    setup makes the companions)."""
    for name in stream_repos(method, repo):
        await _drop(repo_client, name)
    if from_repo:
        await repo_client.fork_repo(from_repo, repo, policy=STREAM_POLICY)
    else:
        await repo_client.create_repo(repo, STREAM_POLICY)

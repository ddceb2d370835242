"""`skillos run --baseline-from FOLDER`: take the No Memory episodes an earlier run already played instead of
playing them again.

No Memory plays without a repo, so its episode of a task depends only on the task, the seed and how the
executor decides: the env and split, max turns, history length, the acting options and the executor's model.
An evaluation that adds a method to an earlier comparison (gold, the expert-seeded curator beside a finished
SkillOS-base vs No Memory run) then plays only the new method, and pairs it with the same baseline episodes
the earlier comparison used: on a 2-core machine that is a third to a half of a run's hours. The completion
cache (`skillos.llm.cache`) does this within one machine; a run folder committed under `bench/evidence/`
does it across machines.

What is reused: the folder's `none` records whose (task, seed) the new run plays, that ended without a
harness error, when every setting above is the same in both runs (else the run is refused, with the
differing settings named). They are written to the new run's ``tasks.jsonl`` as its own (at the new run's
positions), marked ``method_info["reused_from"]``, so a resume, the report and `bench.bench_learning analyze`
treat them as played. A (task, seed) the folder lacks is played.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from harness.resume import finished_records
from skillos.protocol.runs import RUN_STATE, RunFolder, RunState, read_json
from skillos.stream import TaskRecord

BASELINE = "none"
# what a No Memory episode depends on, besides the task and the seed (the run's config keys)
SAME = ("env", "split", "max_turns", "history_len", "acting")


class BaselineError(ValueError):
    """The folder's No Memory episodes cannot stand for this run's; the message says why and what to do."""


def _executor(models: dict[str, Any] | None) -> tuple:
    info = (models or {}).get("executor") or {}
    return (info.get("served_as") or info.get("model"), info.get("quant"), info.get("size_bytes"))


def check_baseline_folder(folder: Path) -> dict[str, Any]:
    """The config of ``folder``'s run, if it is a run folder that played the No Memory baseline; else
    `BaselineError` saying what to fix. The settings are compared once the stack is known
    (`baseline_records`)."""
    state = read_json(RunFolder(folder).run_state, RunState)
    if state is None or not state.config.get("run_id"):
        raise BaselineError(f"--baseline-from {folder}: not a `skillos run` folder (no readable {RUN_STATE}); "
                            "give the --out folder of an earlier run that played the No Memory baseline")
    if BASELINE not in (state.config.get("methods") or []):
        raise BaselineError(f"--baseline-from {folder}: that run played "
                          f"{', '.join(state.config.get('methods') or []) or 'nothing'}, not the No Memory baseline "
                          f"({BASELINE})")
    return state.config


def baseline_records(folder: Path, config: dict[str, Any],
                     orders: dict[int, list[str]]) -> dict[int, dict[int, TaskRecord]]:
    """The reusable No Memory records of ``folder`` for a run with ``config`` (its run.json config) that plays
    the task ids ``orders[seed]`` in that order: {seed: {position: record}}. Raises `BaselineError` naming
    what to fix when the folder is not a run folder, played no No Memory, or played it with other settings."""
    before = check_baseline_folder(folder)
    differ = [f"{key} {before.get(key)!r} there, {config.get(key)!r} here" for key in SAME
              if before.get(key) != config.get(key)]
    if _executor(before.get("models")) != _executor(config.get("models")):
        differ.append(f"executor {_executor(before.get('models'))} there, {_executor(config.get('models'))} here")
    if differ:
        raise BaselineError(f"--baseline-from {folder}: its No Memory episodes were played with other settings ("
                          + "; ".join(differ) + "); reuse a run with the same ones, or drop --baseline-from")
    played = finished_records(folder)
    out: dict[int, dict[int, TaskRecord]] = {}
    for seed, ids in orders.items():
        by_task = {r.task_id: r for r in played.get((BASELINE, seed), {}).values() if not r.error}
        out[seed] = {}
        for position, task_id in enumerate(ids):
            if task_id in by_task:
                record = dataclasses.replace(by_task[task_id], position=position)
                record.method_info = {**record.method_info, "reused_from": str(folder)}
                out[seed][position] = record
    return out

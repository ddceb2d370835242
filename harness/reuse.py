"""`skillos run --baseline-from FOLDER`: take the No Memory episodes an earlier run already played instead of
playing them again.

No Memory plays without a repo, so its episode of a task depends on the task, the seed and how the executor
decides: the env and split, max turns, history length, the acting options, the executor's model and context,
and the executor's decision code (`skillos/acting`, `services/executor`: every record carries its
fingerprint, `method_info["executor_code"]`). These are compared; what a run cannot see is not: the executor
service's own settings (sampling temperature and max tokens, action format, and the acting defaults when
``--acting`` is not given) are assumed the same, so play both runs on one `skillos up` configuration. Even
then a taken episode is another draw of the same distribution, not the same episode (llama.cpp batches the
slots in flight, and its numerics follow), and its ``episode_s`` is of the earlier run's machine and load.
An evaluation that adds a method to an earlier comparison (gold, the expert-seeded curator beside a finished
SkillOS-base vs No Memory run) then plays only the new method, and pairs it with the same baseline episodes
the earlier comparison used: on a 2-core machine that is a third to a half of a run's hours. The completion
cache (`skillos.llm.cache`) does this within one machine; a run folder committed under `bench/evidence/`
does it across machines.

What is reused: the folder's `none` records whose (task, seed) the new run plays, that ended without a
harness error, when every setting above is the same in both runs (else the run is refused, with the
differing settings named); a record whose code fingerprint differs, or that has none (played before records
carried it), is played again unless ``assume_same_code``. They are written to the new run's ``tasks.jsonl``
as its own (at the new run's positions), marked ``method_info["reused_from"]``, so a resume, the report and
`bench.bench_learning analyze` treat them as played. A (task, seed) the folder lacks is played. The
fingerprint lives in each record, not in run.json: a resumed run may play on newer code than it began with.
"""

from __future__ import annotations

import dataclasses
import hashlib
from functools import cache
from pathlib import Path
from typing import Any

from harness.resume import finished_records
from skillos.protocol.runs import RUN_STATE, RunFolder, RunState, read_json
from skillos.stream import TaskRecord

BASELINE = "none"
# what a No Memory episode depends on, besides the task and the seed (the run's config keys)
SAME = ("env", "split", "max_turns", "history_len", "acting")
ROOT = Path(__file__).resolve().parents[1]
DECISION_CODE = ("skillos/acting", "services/executor")   # what decides an episode, demonstrations included


@cache
def executor_code() -> str:
    """A fingerprint of the executor's decision code in this checkout (the prompts, the state line, the held-back
    actions, the demonstrations, the service), stamped on every task record a run writes."""
    h = hashlib.sha256()
    for folder in DECISION_CODE:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def played_with(folder: Path) -> set[str]:
    """The executor code fingerprints of the episodes ``folder``'s run has finished (records without one, played
    before records carried it, add nothing)."""
    return {code for records in finished_records(folder).values() for r in records.values()
            if (code := r.method_info.get("executor_code"))}


class BaselineError(ValueError):
    """The folder's No Memory episodes cannot stand for this run's; the message says why and what to do."""


def _executor(models: dict[str, Any] | None) -> tuple:
    """The executor's weights and context as the server reported them (the file's size tells two quantizations
    apart; the quantization's name differs between llama.cpp and the registry, so it is not compared)."""
    info = (models or {}).get("executor") or {}
    return (info.get("served_as") or info.get("model"), info.get("size_bytes"), info.get("context"))


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


def baseline_records(folder: Path, config: dict[str, Any], orders: dict[int, list[str]],
                     assume_same_code: bool = False) -> tuple[dict[int, dict[int, TaskRecord]], dict[str, int]]:
    """The reusable No Memory records of ``folder`` for a run with ``config`` (its run.json config) that plays
    the task ids ``orders[seed]`` in that order: ({seed: {position: record}}, {why not taken: count}). Raises
    `BaselineError` naming what to fix when the folder is not a run folder, played no No Memory, or played it
    with other settings."""
    before = check_baseline_folder(folder)
    differ = [f"{key} {before.get(key)!r} there, {config.get(key)!r} here" for key in SAME
              if before.get(key) != config.get(key)]
    if _executor(before.get("models")) != _executor(config.get("models")):
        differ.append(f"executor {_executor(before.get('models'))} there, {_executor(config.get('models'))} here")
    if differ:
        hint = " (without --acting a run uses the executor service's own defaults)" if any(
            d.startswith("acting") for d in differ) else ""
        raise BaselineError(f"--baseline-from {folder}: its No Memory episodes were played with other settings ("
                            + "; ".join(differ) + f"){hint}; reuse a run with the same ones, or drop --baseline-from")
    played = finished_records(folder)
    now = executor_code()
    out: dict[int, dict[int, TaskRecord]] = {}
    skipped = {"other executor code": 0, "no code fingerprint": 0, "harness error": 0}
    for seed, ids in orders.items():
        by_task: dict[str, TaskRecord] = {}
        for r in played.get((BASELINE, seed), {}).values():
            code = r.method_info.get("executor_code")
            why = ("harness error" if r.error else "no code fingerprint" if code is None and not assume_same_code
                   else "other executor code" if code is not None and code != now else None)
            if why is None:
                by_task[r.task_id] = r
            elif r.task_id in ids:
                skipped[why] += 1
        out[seed] = {}
        for position, task_id in enumerate(ids):
            if task_id in by_task:
                record = dataclasses.replace(by_task[task_id], position=position)
                # where it was first played, however many runs it passed through since
                record.method_info = {"reused_from": str(folder), **record.method_info}
                if record.method_info.get("executor_code") is None:
                    record.method_info["executor_code_assumed"] = now
                out[seed][position] = record
    return out, {k: v for k, v in skipped.items() if v}

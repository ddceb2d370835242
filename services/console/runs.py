"""Report folders of `skillos run` and `skillos train`, as the console reads them.

The folders, their files and their rows are the run folder's contract, `skillos.protocol.runs`. A stream
run (`skillos run`, `harness.report`) has ``run.json`` (status, config, repos) and ``tasks.jsonl`` (a
line per task as it ends) while it goes on, then ``summary.json``, ``tasks/*.json`` and plots; older
folders have only the latter. A training run (`skillos train`) has ``config.json``, ``metrics.jsonl``
(a line per step), ``rollouts/step-NNNNNN.jsonl`` and, at the end, ``summary.json``.

Nothing is loaded whole per request. Each run's task (or step) index holds a few light fields per
line and the line's byte range; it grows incrementally, reading only the bytes appended since the last
look (complete lines only), which is also how a live run is followed. A task page reads its one line.
Every row is read through its model, which allows extra fields and defaults the ones older reports did
not write; a line or file that is not of its shape is skipped.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillos.protocol.runs import (
    METRICS,
    RUN_STATE,
    SUMMARY,
    TASK_FILE,
    TASKS_DIR,
    TASKS_LOG,
    TRAIN_CONFIG,
    MetricsRow,
    RunFolder,
    RunState,
    RunSummary,
    TaskEntry,
    TrainRunConfig,
    TrainSummary,
    parse_line,
    read_json,
    to_dict,
)

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
OP_KINDS = ("new_skill_insert", "skill_update", "skill_delete")


class RunNotFound(LookupError):
    pass


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _int(v: Any, default: int | None = None) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None   # NaN / inf are not plotted


@dataclass
class RunInfo:
    id: str
    path: Path
    kind: str                       # stream | train
    status: str                     # running | done | failed | held | stopped | unknown
    started_at: float | None
    updated_at: float
    config: dict[str, Any]
    total: int | None               # tasks (stream, all streams) or steps (train) planned
    repos: list[str]
    run_id: str | None
    summary: dict[str, Any] | None
    error: str | None = None

    @property
    def title(self) -> str:
        c = self.config
        if self.kind == "train":
            data = c.get("data") if isinstance(c.get("data"), dict) else {}
            return f"training · {data.get('env', '?')}"
        return f"{c.get('env', '?')} / {c.get('split', '?')}"

    def repo_of(self, method: str, seed: Any) -> str | None:
        """The repo a stream's tasks used (`skillos run` names them <run_id>-s<seed>)."""
        if method != "skillos" or not self.run_id or seed is None:
            return None
        return f"{self.run_id}-s{seed}"


@dataclass(slots=True)
class TaskRow:
    """What the run page needs of one task; the whole record stays on disk."""
    n: int                          # order in which the task ended
    method: str
    seed: int | None
    position: int
    task_id: str
    task_type: str
    instruction: str
    success: bool
    steps: int
    error: bool
    retrieved: tuple[str, ...]
    used: tuple[str, ...]
    ops: tuple[tuple[str | None, bool, str | None, int | None], ...]   # name, applied, skill, version
    repo_size: int | None
    repo: str | None
    curator_error: bool
    offset: int = 0                 # byte range in tasks.jsonl, or
    length: int = 0
    file: str | None = None         # the tasks/ file of an older report

    @property
    def key(self) -> tuple[str, int | None, int]:
        return (self.method, self.seed, self.position)


def task_row(rec: TaskEntry, n: int, info: RunInfo) -> TaskRow:
    method = rec.method or "?"
    ops = tuple((o.name, o.applied, o.skill_name, o.version) for o in rec.ops)
    retrieved = tuple(str(s.get("name")) for s in rec.retrieved if s.get("name"))
    repo = rec.repo if rec.repo is not None else info.repo_of(method, rec.seed)
    return TaskRow(n=n, method=method, seed=rec.seed, position=rec.position,
                   task_id=rec.task_id, task_type=rec.task_type, instruction=rec.instruction[:300],
                   success=rec.success, steps=rec.steps, error=bool(rec.error), retrieved=retrieved,
                   used=tuple(rec.used), ops=ops, repo_size=rec.repo_size, repo=repo if method != "none" else None,
                   curator_error=bool(rec.curator_error))


class _Lines:
    """Complete lines appended to a JSONL file since the last look."""

    def __init__(self, path: Path):
        self.path, self.pos, self.ino = path, 0, None

    def new_lines(self) -> tuple[bool, list[tuple[int, bytes]]]:
        """(restarted: the file was replaced or truncated, [(offset, line)])."""
        try:
            st = self.path.stat()
        except OSError:
            return False, []
        restarted = False
        if self.ino is not None and (st.st_ino != self.ino or st.st_size < self.pos):
            self.pos, restarted = 0, True
        self.ino = st.st_ino
        if st.st_size == self.pos:
            return restarted, []
        with self.path.open("rb") as f:
            f.seek(self.pos)
            data = f.read(st.st_size - self.pos)
        end = data.rfind(b"\n")
        if end < 0:
            return restarted, []
        out, start = [], 0
        for line in data[:end + 1].split(b"\n")[:-1]:
            if line.strip():
                out.append((self.pos + start, line))
            start += len(line) + 1
        self.pos += end + 1
        return restarted, out


class TaskIndex:
    """The tasks of one stream run, in the order they ended."""

    def __init__(self, info: RunInfo):
        self.info = info
        self.rows: list[TaskRow] = []
        self.by_key: dict[tuple[str, int | None, int], TaskRow] = {}
        self.version = 0
        self._lines = _Lines(RunFolder(info.path).tasks_log)
        self._dir_mtime: float | None = None
        self._lock = threading.Lock()

    def refresh(self) -> TaskIndex:
        with self._lock:
            if RunFolder(self.info.path).tasks_log.exists():
                restarted, lines = self._lines.new_lines()
                if restarted:
                    self.rows, self.by_key = [], {}
                for offset, line in lines:
                    rec = parse_line(line, TaskEntry)
                    if rec is not None:
                        task = task_row(rec, len(self.rows), self.info)
                        task.offset, task.length = offset, len(line)
                        self._add(task)
                if lines or restarted:
                    self.version += 1
            else:
                self._load_dir()
        return self

    def _add(self, row: TaskRow) -> None:
        self.rows.append(row)
        self.by_key[row.key] = row

    def _load_dir(self) -> None:
        """An older report: tasks/<method>-seed<seed>-<pos>.json, written once at the end."""
        folder = RunFolder(self.info.path).tasks_dir
        mtime = _mtime(folder)
        if mtime is None or mtime == self._dir_mtime:
            return
        self._dir_mtime = mtime
        self.rows, self.by_key = [], {}
        for name in sorted(os.listdir(folder)):
            if not TASK_FILE.match(name):
                continue
            rec = read_json(folder / name, TaskEntry)
            if rec is not None:
                task = task_row(rec, len(self.rows), self.info)
                task.file = name
                self._add(task)
        self.version += 1

    def record(self, row: TaskRow) -> dict[str, Any]:
        """The whole record of one task, read from disk (the fields it has, and its extra ones)."""
        folder = RunFolder(self.info.path)
        if row.file is not None:
            rec = read_json(folder.tasks_dir / row.file, TaskEntry)
        else:
            with folder.tasks_log.open("rb") as f:
                f.seek(row.offset)
                rec = parse_line(f.read(row.length), TaskEntry)
        return to_dict(rec) if rec is not None else {}

    # --- what the run page shows -------------------------------------------------------------

    def live_summary(self) -> list[dict[str, Any]]:
        """Per method: tasks done, success rate, steps, usage and curation so far (all seeds)."""
        by_method: dict[str, list[TaskRow]] = defaultdict(list)
        for r in self.rows:
            by_method[r.method].append(r)
        out = []
        for method, rows in by_method.items():
            n = len(rows)
            ops = [o for r in rows for o in r.ops]
            out.append({"method": method, "tasks": n, "seeds": len({r.seed for r in rows}),
                        "sr": sum(r.success for r in rows) / n, "steps": sum(r.steps for r in rows) / n,
                        "retrieval_rate": sum(bool(r.retrieved) for r in rows) / n,
                        "usage_rate": sum(bool(r.used) for r in rows) / n,
                        "ops_applied": sum(o[1] for o in ops), "ops_refused": sum(not o[1] for o in ops),
                        "errors": sum(r.error for r in rows)})
        return out

    def series(self) -> dict[str, Any]:
        """Data of the run page's charts, x = task position in the stream (1-based)."""
        streams: dict[tuple[str, int | None], list[TaskRow]] = defaultdict(list)
        for r in self.rows:
            streams[(r.method, r.seed)].append(r)
        for rows in streams.values():
            rows.sort(key=lambda r: r.position)
        n = max((r.position + 1 for r in self.rows), default=0)
        xs = list(range(1, n + 1))
        # success over the stream: cumulative success rate per method, mean over its seeds
        success: dict[str, list[float | None]] = {}
        for method in sorted({m for m, _ in streams}):
            curves = []
            for (m, _), rows in streams.items():
                if m != method:
                    continue
                curve: list[float | None] = [None] * n
                wins = 0
                for done, r in enumerate(rows, 1):
                    wins += r.success
                    if r.position < n:
                        curve[r.position] = 100 * wins / done
                curves.append(curve)
            success[method] = [_mean_defined([c[i] for c in curves]) for i in range(n)]
        # repo size per stream of every method with a memory ("seed N" alone when SkillOS is the only one)
        memory = sorted({m for m, _ in streams if m != "none"})
        sizes = {(f"seed {seed}" if memory == ["skillos"] else f"{m} seed {seed}"):
                 _at_positions(rows, n, lambda r: r.repo_size) for (m, seed), rows in sorted(streams.items(), key=lambda kv: str(kv[0])) if m != "none"}
        # op mix: cumulative calls over the stream by op and verdict (all seeds of skillos)
        mix_at: dict[str, list[int]] = {k: [0] * n for k in
                                        [*(f"{o} applied" for o in OP_KINDS), "refused"]}
        for (m, _), rows in streams.items():
            if m != "skillos":
                continue
            for r in rows:
                if r.position >= n:
                    continue
                for name, applied, _, _ in r.ops:
                    key = f"{name} applied" if applied and name in OP_KINDS else "refused"
                    mix_at[key][r.position] += 1
        mix = {k: _cumulative(v) for k, v in mix_at.items() if any(v)}
        return {"x": xs, "success": success, "repo_size": sizes, "op_mix": mix, "version": self.version}

    def usage(self, repo: str) -> dict[str, list[int]]:
        """skill name -> [tasks that retrieved it, tasks that used it], for the tasks that used ``repo``."""
        out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in self.rows:
            if r.repo != repo:
                continue
            for name in r.retrieved:
                out[name][0] += 1
            for name in r.used:
                out[name][1] += 1
        return out


def _mean_defined(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return round(sum(vals) / len(vals), 3) if vals else None


def _at_positions(rows: list[TaskRow], n: int, value) -> list[Any]:
    out: list[Any] = [None] * n
    for r in rows:
        if r.position < n:
            out[r.position] = value(r)
    return out


def _cumulative(xs: list[int]) -> list[int]:
    total, out = 0, []
    for x in xs:
        total += x
        out.append(total)
    return out


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out


# panels of the training run page: (title, metric keys of metrics.jsonl, flattened)
TRAIN_PANELS = [
    ("Reward parts per step", ["reward/total", "reward/task", "reward/fc", "reward/cnt", "reward/comp"]),
    ("Success rate of the rollouts", ["success_rate"]),
    ("Op mix per decision", ["ops/new_skill_insert", "ops/skill_update", "ops/skill_delete", "ops/invalid"]),
    ("Repo size (skills, mean over rollouts)", ["repo/skills_mean"]),
    ("Learning signal", ["signal/groups_nonzero_std_frac", "signal/adv_abs_mean", "signal/call_valid_rate"]),
    ("Time per step (s)", ["time/rollout_s", "time/update_s", "time/sync_s"]),
    # the agent-policy mode (docs/training.md): outcome, and the credit each segment got
    ("Agent: outcome of the episodes", ["reward/outcome"]),
    ("Agent: mean |advantage| per segment", ["signal/adv_abs_mean/act", "signal/adv_abs_mean/query",
                                             "signal/adv_abs_mean/rerank", "signal/adv_abs_mean/distill",
                                             "signal/adv_abs_mean/induce"]),
]


class StepIndex:
    """The steps of one training run (metrics.jsonl), numbers only."""

    def __init__(self, info: RunInfo):
        self.info = info
        self.rows: list[dict[str, float | None]] = []
        self.version = 0
        self._lines = _Lines(RunFolder(info.path).metrics)
        self._lock = threading.Lock()

    def refresh(self) -> StepIndex:
        with self._lock:
            restarted, lines = self._lines.new_lines()
            if restarted:
                self.rows = []
            for _, line in lines:
                rec = parse_line(line, MetricsRow)
                if rec is not None:
                    flat = _flatten(to_dict(rec))
                    self.rows.append({k: _num(v) for k, v in flat.items() if _num(v) is not None})
            if lines or restarted:
                self.version += 1
        return self

    def series(self) -> dict[str, Any]:
        xs = [r.get("step") for r in self.rows]
        panels = []
        for title, keys in TRAIN_PANELS:
            lines = {k.split("/", 1)[-1]: [r.get(k) for r in self.rows] for k in keys
                     if any(k in r for r in self.rows)}
            if lines:
                panels.append({"title": title, "series": lines})
        return {"x": xs, "panels": panels, "version": self.version}


class RunStore:
    """The runs directory: run folders one level deep, with their indexes (most recently used kept)."""

    def __init__(self, root: Path, max_indexes: int = 64):
        self.root = Path(root)
        self.max_indexes = max_indexes
        self._infos: dict[str, tuple[tuple, RunInfo]] = {}
        self._indexes: OrderedDict[str, TaskIndex | StepIndex] = OrderedDict()
        self._lock = threading.Lock()

    # --- run folders ---------------------------------------------------------------------------

    def list(self) -> list[RunInfo]:
        """Every run, newest first."""
        try:
            entries = [e for e in os.scandir(self.root) if RUN_ID.match(e.name) and e.is_dir()]
        except OSError:
            return []
        infos = [i for i in (self._info(Path(e.path)) for e in entries) if i is not None]
        return sorted(infos, key=lambda i: (i.started_at or i.updated_at), reverse=True)

    def get(self, run_id: str) -> RunInfo:
        if not RUN_ID.match(run_id or ""):
            raise RunNotFound(run_id)
        path = self.root / run_id
        info = self._info(path) if path.is_dir() else None
        if info is None:
            raise RunNotFound(run_id)
        return info

    def by_run_id(self, run_id: str) -> RunInfo | None:
        """The folder of the run whose config.run_id is ``run_id`` (the op log's origin.run)."""
        for info in self.list():
            if info.run_id == run_id or info.id == run_id:
                return info
        return None

    def _signature(self, path: Path) -> tuple:
        names = (RUN_STATE, SUMMARY, TASKS_LOG, TASKS_DIR, METRICS, TRAIN_CONFIG)
        return tuple(_mtime(path / n) for n in names)

    def _info(self, path: Path) -> RunInfo | None:
        sig = self._signature(path)
        if not any(sig):
            return None
        with self._lock:
            cached = self._infos.get(path.name)
        if cached and cached[0] == sig:
            return cached[1]
        info = self._read_info(path, sig)
        if info is not None:
            with self._lock:
                self._infos[path.name] = (sig, info)
        return info

    @staticmethod
    def _read_info(path: Path, sig: tuple) -> RunInfo | None:
        folder = RunFolder(path)
        state = read_json(folder.run_state, RunState)
        updated = max(t for t in sig if t is not None)
        if folder.metrics.exists() or (folder.train_config.exists() and state is None
                                       and not folder.tasks_dir.exists()):
            train_config = read_json(folder.train_config, TrainRunConfig)
            config = to_dict(train_config) if train_config is not None else {}
            train_summary = read_json(folder.summary, TrainSummary)
            summary = to_dict(train_summary) if train_summary is not None else None
            done = summary is not None and "end_step" in summary
            status = "done" if done else ("running" if time.time() - updated < 1800 else "stopped")
            return RunInfo(id=path.name, path=path, kind="train", status=status,
                           started_at=_mtime(folder.train_config), updated_at=updated, config=config,
                           total=train_config.steps if train_config is not None else None, repos=[],
                           run_id=None, summary=summary)
        stream_summary = read_json(folder.summary, RunSummary)
        summary = to_dict(stream_summary) if stream_summary is not None else None
        if state is None and summary is None and not folder.tasks_dir.exists() and not folder.tasks_log.exists():
            return None
        if state is not None and "config" in state.model_fields_set:
            config = state.config
        else:
            config = stream_summary.config if stream_summary is not None else {}
        run_id = config.get("run_id") if isinstance(config.get("run_id"), str) else None
        if state is not None and "repos" in state.model_fields_set:
            repos = state.repos
        else:
            seeds = _int(config.get("seeds"), 0) or 0
            repos = [f"{run_id}-s{s}" for s in range(seeds)] if run_id and "skillos" in (config.get("methods") or []) \
                else []
        status = state.status if state is not None else ("done" if summary is not None else "unknown")
        total = state.total if state is not None else None
        if total is None and config.get("tasks") is not None:
            total = (_int(config.get("tasks"), 0) or 0) * (_int(config.get("seeds"), 1) or 1) * \
                max(1, len(config.get("methods") or []))
        started = state.started_at if state is not None else None
        return RunInfo(id=path.name, path=path, kind="stream", status=status,
                       started_at=started if started is not None else _mtime(path),
                       updated_at=updated, config=config, total=total, repos=list(repos),
                       run_id=run_id, summary=summary,
                       error=state.error if state is not None and state.error else None)

    # --- indexes -------------------------------------------------------------------------------

    def tasks(self, info: RunInfo) -> TaskIndex:
        idx = self._index(info, TaskIndex)
        idx.info = info
        return idx.refresh()

    def steps(self, info: RunInfo) -> StepIndex:
        idx = self._index(info, StepIndex)
        idx.info = info
        return idx.refresh()

    def _index(self, info: RunInfo, cls):
        key = f"{cls.__name__}:{info.id}"
        with self._lock:
            idx = self._indexes.get(key)
            if idx is None:
                idx = cls(info)
                self._indexes[key] = idx
                while len(self._indexes) > self.max_indexes:
                    self._indexes.popitem(last=False)
            else:
                self._indexes.move_to_end(key)
        return idx

    def progress(self, info: RunInfo) -> int:
        """Tasks (stream) or steps (train) done so far."""
        if info.kind == "train":
            return len(self.steps(info).rows)
        return len(self.tasks(info).rows)

    def usage(self, repo: str) -> dict[str, list[int]]:
        """skill name -> [times retrieved, times used] over every run that used ``repo``."""
        total: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for info in self.list():
            if info.kind == "stream" and repo in info.repos:
                for name, (ret, used) in self.tasks(info).usage(repo).items():
                    total[name][0] += ret
                    total[name][1] += used
        return dict(total)

    def tasks_with_skill(self, repo: str, skill: str, limit: int = 20) -> list[tuple[RunInfo, TaskRow]]:
        out = []
        for info in self.list():
            if info.kind != "stream" or repo not in info.repos:
                continue
            for row in self.tasks(info).rows:
                if row.repo == repo and skill in row.retrieved:
                    out.append((info, row))
                    if len(out) >= limit:
                        return out
        return out


@dataclass
class Filters:
    method: str | None = None
    seed: int | None = None
    outcome: str | None = None        # success | failure

    def match(self, r: TaskRow) -> bool:
        if self.method and r.method != self.method:
            return False
        if self.seed is not None and r.seed != self.seed:
            return False
        if self.outcome == "success" and not r.success:
            return False
        return not (self.outcome == "failure" and r.success)

    @property
    def any(self) -> bool:
        return bool(self.method or self.seed is not None or self.outcome)

"""The run folder, as a written contract: what `skillos run` and `skillos train` write, and what is read back.

A **stream run** (`skillos run`; written by `harness.report`):

    run.json                   RunState: status, start and end, the run's config, tasks to play, repos
                               (replaced atomically at start and end)
    tasks.jsonl                TaskEntry per line, one per task as it ends, in the order tasks end
                               (a reader takes complete lines only: a line is written with one write call)
    tasks/<method>-seed<seed>-<position:04d>.json
                               TaskEntry, one file per task, written at the end
    summary.json, summary.md   RunSummary (config, per-method aggregates and seeds) and its Markdown
    success_over_stream.png, repo_size.png, op_mix.png
    repo/<folder>/<skill>/SKILL.md
                               the skills each stream's repo ended with
    repo/<folder>/utility.json the repo's measured utility per skill at the end (`UtilityReport`: each task's
                               outcome counted for the skills it was shown; no skill name has a dot)
    resume/<repo>@<position:04d>.tar.gz
                               a learning stream's repos (the stream's and its companions) as the task at
                               that position left them, written before its tasks.jsonl line (the last two
                               kept): `skillos run --resume` restores them and plays on from there
    .lock                      held by the `skillos run` playing in the folder (its pid)

Older stream folders have only ``summary.json`` and ``tasks/*.json``; a live one only ``run.json`` and
``tasks.jsonl``.

A **training run** (`skillos train`'s ``output_dir``; written by `services.trainer`):

    config.json                TrainRunConfig: the trainer's whole config (`services.trainer.config.TrainConfig`)
    metrics.jsonl              MetricsRow per line, one per step (nested metric families, free-form)
    rollouts/step-<step:06d>.jsonl
                               RolloutRow per line, one per rollout of that step (rewritten when a step is redone)
    summary.json               TrainSummary, at the end: first and last step, the report's two files
    report.png, report.md, tensorboard/, checkpoints/, adapters/

Every model allows extra fields: a row may carry free-form data (a method's own measures, a metric
family), and a writer may add fields without breaking older readers. Fields are optional with the
default an older folder implies, so every folder under bench/evidence/ still reads
(tests/test_run_folder_contract.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# --- file names ---------------------------------------------------------------------------------

RUN_STATE = "run.json"
TASKS_LOG = "tasks.jsonl"
TASKS_DIR = "tasks"
SUMMARY = "summary.json"
SUMMARY_MD = "summary.md"
SUCCESS_PLOT = "success_over_stream.png"
REPO_SIZE_PLOT = "repo_size.png"
OP_MIX_PLOT = "op_mix.png"
STREAM_PLOTS = (SUCCESS_PLOT, REPO_SIZE_PLOT, OP_MIX_PLOT)
REPO_DIR = "repo"
UTILITY = "utility.json"
RESUME_DIR = "resume"
RUN_LOCK = ".lock"
TRAIN_CONFIG = "config.json"
METRICS = "metrics.jsonl"
ROLLOUTS_DIR = "rollouts"
TRAIN_REPORT = "report.png"
TRAIN_REPORT_MD = "report.md"
TENSORBOARD_DIR = "tensorboard"
CHECKPOINTS_DIR = "checkpoints"
ADAPTERS_DIR = "adapters"        # a LoRA run's adapter per checkpoint: peft's files and the llama.cpp GGUF
ADAPTER_GGUF = "adapter.gguf"

# tasks/<method>-seed<seed>-<position>.json (a method's name may have a hyphen: skillos-expert)
TASK_FILE = re.compile(r"^(?P<method>[A-Za-z0-9_][A-Za-z0-9_-]*?)-seed(?P<seed>-?\d+|None)-(?P<pos>\d+)\.json$")
ROLLOUTS_FILE = re.compile(r"^step-(?P<step>\d+)\.jsonl$")
ADAPTER_FOLDER = re.compile(r"^step-(?P<step>\d+)$")   # not a half-written step-N.incoming


def task_file_name(method: str, seed: int | None, position: int) -> str:
    return f"{method}-seed{seed}-{position:04d}.json"


def rollouts_file_name(step: int) -> str:
    return f"step-{step:06d}.jsonl"


@dataclass(frozen=True)
class RunFolder:
    """The paths of one run folder (stream or training)."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def run_state(self) -> Path:
        return self.path / RUN_STATE

    @property
    def tasks_log(self) -> Path:
        return self.path / TASKS_LOG

    @property
    def tasks_dir(self) -> Path:
        return self.path / TASKS_DIR

    def task_file(self, method: str, seed: int | None, position: int) -> Path:
        return self.tasks_dir / task_file_name(method, seed, position)

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    @property
    def summary_md(self) -> Path:
        return self.path / SUMMARY_MD

    def plot(self, name: str) -> Path:
        return self.path / name

    def repo_dir(self, folder: str) -> Path:
        """Where a stream's final skills are exported (``seed<seed>`` for SkillOS, else ``<method>-seed<seed>``)."""
        return self.path / REPO_DIR / folder

    @property
    def lock(self) -> Path:
        """Held (flock) by the `skillos run` playing in this folder; holds its pid."""
        return self.path / RUN_LOCK

    @property
    def resume_dir(self) -> Path:
        return self.path / RESUME_DIR

    def repo_snapshot(self, repo: str, position: int) -> Path:
        """A stream repo's export after the task at ``position`` (`skillos run --resume` restores it)."""
        return self.resume_dir / f"{repo}@{position:04d}.tar.gz"

    @property
    def train_config(self) -> Path:
        return self.path / TRAIN_CONFIG

    @property
    def metrics(self) -> Path:
        return self.path / METRICS

    @property
    def rollouts_dir(self) -> Path:
        return self.path / ROLLOUTS_DIR

    def rollouts(self, step: int) -> Path:
        return self.rollouts_dir / rollouts_file_name(step)

    @property
    def train_report(self) -> Path:
        return self.path / TRAIN_REPORT

    @property
    def train_report_md(self) -> Path:
        return self.path / TRAIN_REPORT_MD

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / TENSORBOARD_DIR

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / CHECKPOINTS_DIR

    def adapter_dir(self, step: int) -> Path:
        return self.path / ADAPTERS_DIR / f"step-{step:06d}"

    def adapter_dirs(self) -> list[Path]:
        """The kept adapters' folders (``adapters/step-N``, written whole), in step order."""
        try:
            found = [p for p in (self.path / ADAPTERS_DIR).iterdir() if ADAPTER_FOLDER.match(p.name)]
        except OSError:
            return []
        return sorted(found, key=lambda p: int(ADAPTER_FOLDER.match(p.name)["step"]))

    def task_files(self) -> list[Path]:
        """The ``tasks/*.json`` files of a finished run, sorted by name."""
        try:
            return sorted(p for p in self.tasks_dir.iterdir() if TASK_FILE.match(p.name))
        except OSError:
            return []


# --- rows and files -----------------------------------------------------------------------------

class _Row(BaseModel):
    model_config = ConfigDict(extra="allow")


class RunState(_Row):
    """``run.json`` of a stream run."""

    status: Literal["running", "done", "failed", "held"] = "running"  # held: `--hold`, tasks left
    started_at: float | None = None
    finished_at: float | None = None
    config: dict[str, Any] = Field(default_factory=dict)   # what `skillos run` was asked (env, methods, seeds, ...)
    total: int | None = None                               # tasks to play, all streams
    repos: list[str] = Field(default_factory=list)
    error: str | None = None
    resumed_at: list[float] = Field(default_factory=list)  # each `skillos run --resume` of this folder


class OpEntry(_Row):
    """One curator call of a task (`skillos.stream.types.OpRecord`)."""

    name: str | None = None
    skill_name: str | None = None
    valid: bool = False
    applied: bool = False
    reason: str | None = None
    version: int | None = None


class TaskEntry(_Row):
    """One task of a stream: a line of ``tasks.jsonl`` and a ``tasks/*.json`` file
    (`skillos.stream.types.TaskRecord.to_dict()`, field for field and in its order)."""

    position: int
    task_id: str
    task_type: str = ""
    instruction: str = ""
    method: str
    seed: int | None = None
    success: bool = False
    reward: float = 0.0
    steps: int = 0
    stop_reason: str = ""
    error: str | None = None
    self_judged_success: bool | None = None
    judge_error: str | None = None
    retrieved: list[dict[str, Any]] = Field(default_factory=list)   # the skills given (name, version, ...)
    used: list[str] = Field(default_factory=list)
    ops: list[OpEntry] = Field(default_factory=list)
    validity_rate: float | None = None
    curator_error: str | None = None
    curator_completion: str = ""
    repo_size: int | None = None
    tokens: int = 0
    episode_s: float = 0.0
    curate_s: float = 0.0
    turns: list[dict[str, Any]] = Field(default_factory=list)
    repo: str | None = None
    curator_call_id: str = ""
    rollouts: int = 1          # older folders: one episode per task
    examples: list[dict[str, Any]] = Field(default_factory=list)  # worked examples shown (id, skill, kind, actions)
    example: dict[str, Any] | None = None   # the worked example this task's success left (id, steps, kept on)
    method_info: dict[str, Any] = Field(default_factory=dict)   # the method's own measures (free-form)


class RunSummary(_Row):
    """``summary.json`` of a stream run (`harness.report.summarize`)."""

    config: dict[str, Any] = Field(default_factory=dict)
    methods: dict[str, Any] = Field(default_factory=dict)   # method -> {"aggregate": {...}, "seeds": [...]}


class TrainRunConfig(_Row):
    """``config.json`` of a training run: the trainer's config (`services.trainer.config.TrainConfig`), of which
    readers need only a few fields."""

    steps: int | None = None
    data: dict[str, Any] = Field(default_factory=dict)      # env, split, ...
    output_dir: str | None = None


class MetricsRow(_Row):
    """A line of ``metrics.jsonl``: the step and its metric families (reward, signal, ops, repo, time, ...)."""

    step: int


class RolloutRow(_Row):
    """A line of ``rollouts/step-*.jsonl``: one rollout of the step's group (`RolloutResult.log_row`, the
    agent mode's `AgentRolloutResult.log_row`)."""

    group: str
    rollout: int


class TrainSummary(_Row):
    """``summary.json`` of a training run, written at its end."""

    start_step: int = 0
    report: str | None = None   # the plotted report.png (when metrics were written)
    report_md: str | None = None   # report.md beside it: a row per step, the reward by task family
    end_step: int | None = None


# --- reading and writing ------------------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)


def to_dict(model: BaseModel) -> dict[str, Any]:
    """What a writer writes of a row: the fields it set and its extra fields, in order."""
    return model.model_dump(exclude_unset=True)


def read_json(path: Path, model: type[M]) -> M | None:
    """A JSON file of the contract; None when it is missing, unreadable or not of that shape."""
    try:
        return model.model_validate_json(Path(path).read_bytes())
    except (OSError, ValidationError):
        return None


def parse_line(line: bytes | str, model: type[M]) -> M | None:
    """One line of a JSONL file of the contract; None when it is not of that shape."""
    try:
        return model.model_validate_json(line)
    except ValidationError:
        return None


def read_jsonl(path: Path, model: type[M]) -> Iterator[M]:
    """The rows of a JSONL file of the contract; blank lines, and a line not of the shape (the partial last
    line of a live file), are skipped."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return
    for line in data.splitlines():
        if line.strip():
            parsed = parse_line(line, model)
            if parsed is not None:
                yield parsed


def read_tasks(folder: RunFolder | Path) -> list[TaskEntry]:
    """Every task of a stream run: ``tasks/*.json`` of a finished run, else ``tasks.jsonl`` of a live one."""
    folder = folder if isinstance(folder, RunFolder) else RunFolder(folder)
    files = folder.task_files()
    if files:
        return [t for t in (read_json(p, TaskEntry) for p in files) if t is not None]
    return list(read_jsonl(folder.tasks_log, TaskEntry))

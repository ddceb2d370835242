"""Groups on disk: one JSON object per line, and the statistics report beside them."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from skillos.textguard import without_lone_surrogates


@dataclass
class GroupTask:
    id: str
    type: str = ""
    instruction: str = ""
    difficulty: float | None = None
    from_fallback: bool = False     # reasoning: this extension came from the fallback pool


@dataclass
class TaskGroup:
    id: str
    env: str
    tasks: list[GroupTask]
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. {"type": "pick", "mode": "natural"}

    def to_json(self) -> str:
        return without_lone_surrogates(json.dumps(asdict(self), ensure_ascii=False))   # (a model's text in meta)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskGroup:
        if not isinstance(d.get("tasks"), list) or len(d["tasks"]) < 2:
            raise ValueError(f"group {d.get('id')!r} needs a 'tasks' list of at least 2 tasks")
        return cls(id=str(d["id"]), env=str(d.get("env", "")),
                   tasks=[GroupTask(**t) for t in d["tasks"]], meta=dict(d.get("meta", {})))


def write_groups(path: Path, groups: list[TaskGroup]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(g.to_json() + "\n" for g in groups))
    tmp.replace(path)


def read_groups(path: Path) -> list[TaskGroup]:
    groups = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            groups.append(TaskGroup.from_dict(json.loads(line)))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}:{n}: not a task group: {e}") from e
    if not groups:
        raise ValueError(f"{path}: no groups")
    return groups


def group_statistics(groups: list[TaskGroup], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    sizes = [len(g.tasks) for g in groups]
    all_ids = [t.id for g in groups for t in g.tasks]
    types = Counter(t.type for g in groups for t in g.tasks)
    group_types = Counter(g.meta.get("type", "mixed") for g in groups)
    fallback = sum(t.from_fallback for g in groups for t in g.tasks)
    stats: dict[str, Any] = {
        "groups": len(groups),
        "tasks_total": len(all_ids),
        "tasks_distinct": len(set(all_ids)),
        "group_size_min": min(sizes) if sizes else 0,
        "group_size_max": max(sizes) if sizes else 0,
        "group_size_mean": round(sum(sizes) / len(sizes), 3) if sizes else 0,
        "task_types": dict(sorted(types.items())),
        "group_types": dict(sorted(group_types.items())),
        "fallback_extensions": fallback,
    }
    if extra:
        stats.update(extra)
    return stats


def write_report(path: Path, stats: dict[str, Any]) -> None:
    """JSON statistics plus a short Markdown rendering for people."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # suffixes appended, not replaced: "groups.report" → groups.report.json (with_suffix gave groups.json)
    path.with_name(path.name + ".json").write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n")
    lines = ["# Task grouping report", "", "| statistic | value |", "|---|---|"]
    for k, v in stats.items():
        lines.append(f"| {k} | {json.dumps(v, ensure_ascii=False)} |")
    path.with_name(path.name + ".md").write_text("\n".join(lines) + "\n")

"""MemP-style procedural memory (Fang et al., 2025; a baseline of the SkillOS paper, §4.1), built,
retrieved and kept by rules, no LLM:

* **build**: a task the executor judges successful becomes a procedure — the script of actions that
  solved it, keyed by its instruction;
* **retrieve**: the top ``k`` procedures whose instruction is most like the new task's;
* **consolidate**: a procedure for the same instruction (object numbers aside) is replaced when the new
  script is shorter, else kept (one procedure per key: re-indexing instead of duplicates);
* **update / forget**: every retrieved procedure counts its uses and the outcomes of the tasks it was
  given to; one used at least ``forget_after`` times whose success rate is below ``forget_below`` is
  deleted (deprecated: it keeps failing).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from skillos.methods.bank import clip_description, unique_name
from skillos.methods.base import Method, MethodParams, StreamContext, info_values, mean
from skillos.protocol.executor import EpisodeResponse, SkillText
from skillos.protocol.skillrepo import SearchMode
from skillos.stream import TaskRecord, TaskSpec


class Params(MethodParams):
    k: int = Field(2, ge=0, le=20, description="procedures given per task")
    retrieval: SearchMode = Field("dense", description="how procedures are found by their instruction")
    forget_after: int = Field(3, ge=1, le=1000, description="uses before a procedure may be deprecated")
    forget_below: float = Field(0.34, ge=0.0, le=1.0, description="success rate under which it is deprecated")
    max_steps: int = Field(40, ge=1, le=200, description="actions kept in a script")


def task_key(instruction: str) -> str:
    """The instruction without object numbers, case or punctuation: tasks with one key are one task."""
    return " ".join(re.sub(r"[^a-z ]+", " ", re.sub(r"\d+", " ", instruction.lower())).split())


def script_of(episode: EpisodeResponse, max_steps: int) -> list[str]:
    """The actions that solved the task: admissible ones only, in order (invalid tries taught nothing)."""
    return [t.action for t in episode.turns if t.valid and t.action][:max_steps]


def procedure_body(instruction: str, script: Sequence[str]) -> str:
    steps = "\n".join(f"{i}. {a}" for i, a in enumerate(script, 1))
    return (f"A procedure that completed the task \"{instruction}\". Follow it for the same kind of task; "
            f"object numbers may differ in another game.\n\n{steps}")


def after_use(meta: dict[str, Any], success: bool) -> dict[str, Any]:
    """A retrieved procedure's counters after a task it was given to."""
    return {**meta, "uses": int(meta.get("uses", 0)) + 1,
            "successes": int(meta.get("successes", 0)) + int(success),
            "failures": int(meta.get("failures", 0)) + int(not success)}


def should_forget(meta: dict[str, Any], forget_after: int, forget_below: float) -> bool:
    uses = int(meta.get("uses", 0))
    return uses >= forget_after and int(meta.get("successes", 0)) / uses < forget_below


class MemP(Method):
    name = "memp"
    title = "MemP"
    Params = Params

    async def select(self, position: int, spec: TaskSpec, ctx: StreamContext,
                     record: TaskRecord) -> list[SkillText]:
        return await self.nearest(spec, ctx, self.p.k, self.p.retrieval)

    async def learn(self, position: int, spec: TaskSpec, episode: EpisodeResponse, ctx: StreamContext,
                    record: TaskRecord) -> None:
        success = await self.judged(spec, episode, ctx, record)
        bank = ctx.bank(self.name)
        skills = await bank.skills()
        forgotten, updated = [], []
        for given in episode.skills:
            skill = skills.get(given.name)
            if skill is None:
                continue
            meta = after_use(skill.metadata, success)
            if should_forget(meta, self.p.forget_after, self.p.forget_below):
                await bank.delete(skill.name)
                del skills[skill.name]
                forgotten.append(skill.name)
            else:
                skills[skill.name] = await bank.write(skill.name, skill.description, skill.body, meta)
                updated.append(skill.name)
        built = None
        script = script_of(episode, self.p.max_steps)
        instruction = episode.instruction or spec.instruction or spec.id
        if success and script:
            key = task_key(instruction)
            same = next((s for s in skills.values() if s.metadata.get("key") == key), None)
            if same is None or len(script) < int(same.metadata.get("steps", 1 << 30)):
                name = same.name if same else unique_name(f"procedure {key}", skills, fallback="procedure")
                counters = {k: same.metadata[k] for k in ("uses", "successes", "failures")
                            if same and k in same.metadata}
                await bank.write(name, clip_description(f"Procedure for: {instruction}", instruction),
                                 procedure_body(instruction, script),
                                 {"key": key, "steps": len(script), "source_task": spec.id[:200],
                                  "position": position, **counters})
                built = {"name": name, "replaced": same is not None, "steps": len(script)}
        record.method_info.update(judged=success, updated=updated, forgotten=forgotten, built=built)

    @classmethod
    def measures(cls, records: Sequence[TaskRecord]) -> dict[str, float | None]:
        built = [b for b in info_values(records, "built") if b]
        return {"procedures_built": float(sum(not b["replaced"] for b in built)),
                "procedures_replaced": float(sum(b["replaced"] for b in built)),
                "procedures_forgotten": float(sum(len(f) for f in info_values(records, "forgotten"))),
                "procedure_steps": mean([b["steps"] for b in built])}

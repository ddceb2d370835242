"""SkillRL's hierarchical skill bank (SkillRL paper, §3.1–3.3, Alg. 1), kept over a stream:

* **two tiers** (metadata ``tier``): *general* skills, all of them always in context, and *task-specific*
  skills per category (metadata ``category``: the task type), of which the top ``k`` most similar to the
  instruction with cosine ≥ ``delta`` are given;
* **distillation** of every trajectory by the writer, differently by outcome: a success gives a skill
  (the decision points and the pattern that transfers), a failure a concise lesson (where it failed,
  the flawed action, what to do instead, the principle); a near-duplicate of a skill of its category
  (cosine ≥ ``dedup``) is not added;
* **recursive evolution** every ``evolve_every`` tasks (the paper's validation interval): categories
  whose success so far is below ``evolve_below`` get up to ``max_new`` new skills written from their
  failed trajectories, picked round-robin over those categories, worst first (most invalid actions),
  at most ``max_failures``; the first round also writes the general tier from every trajectory so far.

Every trajectory is kept (as a document with its outcome) in the companion repo ``<repo>-trajectories``,
so evolution reads the run's own record, not the process's memory. Training (cold-start SFT, then GRPO
with the bank in context) is the trainer's agent-policy mode, not this class.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from skillos.methods.bank import Bank, clip_description, skill_text, unique_name
from skillos.methods.base import Method, MethodParams, StreamContext, info_values, mean
from skillos.methods.writer import parse_items, parse_json_list, trajectory_text, write
from skillos.protocol.executor import EpisodeResponse, SkillText
from skillos.protocol.skillrepo import Skill
from skillos.stream import TaskRecord, TaskSpec

SYSTEM = "You distil agent trajectories into concise, actionable skills. Answer in the format asked, nothing else."

FROM_SUCCESS = """A successful trajectory of a {category} task.

Task: {task}

Trajectory:
{trajectory}

Identify the critical decision points, the reasoning behind the correct actions and the pattern that
transfers beyond this task instance. Write ONE skill:
Title: <3-5 words>
Description: <when to apply it>
Content: <the principle in 1-2 sentences, then the key steps>"""

FROM_FAILURE = """A FAILED trajectory of a {category} task.

Task: {task}

Trajectory:
{trajectory}

Write ONE concise failure lesson: (1) the point of failure, (2) the flawed reasoning or action, (3) what
should have been done, (4) the general principle that prevents similar failures.
Title: <3-5 words>
Description: <when to apply it>
Content: <the lesson, 2-4 sentences>"""

EVOLVE = """Analyse these failed agent trajectories and suggest NEW skills to add.

FAILED TRAJECTORIES:
{failures}

EXISTING SKILL TITLES: {titles}

Suggest 1-{n} NEW actionable skills that address failure patterns the existing skills miss.
Return ONLY a JSON array: [{{"title": "...", "principle": "...", "when_to_apply": "...", "category": "one of: {categories}"}}]"""

GENERAL = """Analyse these agent trajectories (successful and failed).

{trajectories}

Generate {n} GENERAL skills that apply across ALL task types of this environment (exploration, state
tracking, verifying preconditions, error recovery). Each concise, actionable, transferable, failure-aware.
Return ONLY a JSON array: [{{"title": "...", "principle": "...", "when_to_apply": "..."}}]"""


class Params(MethodParams):
    k: int = Field(6, ge=0, le=20, description="task-specific skills per task (paper: K = 6)")
    delta: float = Field(0.3, ge=-1.0, le=1.0, description="least cosine of a task-specific skill (paper: unstated)")
    dedup: float = Field(0.9, ge=0.0, le=1.0, description="cosine at which a distilled skill is a duplicate")
    evolve_every: int = Field(5, ge=1, le=10_000, description="tasks between evolution rounds (paper: 5 steps)")
    evolve_below: float = Field(0.4, ge=0.0, le=1.0, description="categories under this success evolve (paper: 0.4)")
    max_failures: int = Field(10, ge=1, le=100, description="failed trajectories read per round (paper: 10)")
    max_new: int = Field(3, ge=1, le=10, description="new skills per round (paper: 1-3)")
    general_skills: int = Field(4, ge=0, le=20, description="general skills written once (paper: 8-12 at scale)")
    pool: int = Field(20, ge=1, le=50, description="dense hits searched before the category filter")
    max_tokens: int = Field(512, ge=64, le=4096)
    distill: bool = Field(True, description="distil every trajectory (training: off, the bank changes by evolution)")


def failure_severity(meta: dict[str, Any]) -> tuple[int, int]:
    """Worst first: more invalid actions, then more steps (the paper ranks by negative reward)."""
    return (-int(meta.get("invalid", 0)), -int(meta.get("steps", 0)))


def categories_to_evolve(outcomes: dict[str, list[bool]], below: float) -> list[str]:
    """Categories whose success so far is under ``below`` (and that have failures to learn from)."""
    return sorted(c for c, xs in outcomes.items() if xs and not all(xs) and sum(xs) / len(xs) < below)


def round_robin(failures: dict[str, list[Any]], limit: int) -> list[Any]:
    """One from each category in turn (each already worst first), so no category crowds out the rest."""
    picked: list[Any] = []
    queues = {c: list(v) for c, v in sorted(failures.items())}
    while len(picked) < limit and any(queues.values()):
        for c in list(queues):
            if queues[c] and len(picked) < limit:
                picked.append(queues[c].pop(0))
    return picked


def _skill_fields(obj: dict[str, Any]) -> tuple[str, str, str] | None:
    title = str(obj.get("title") or obj.get("name") or "").strip()
    principle = str(obj.get("principle") or obj.get("content") or "").strip()
    when = str(obj.get("when_to_apply") or obj.get("description") or "").strip()
    if not (title or principle):
        return None
    return title or principle[:60], when or principle, principle or when


class SkillRL(Method):
    name = "skillrl"
    title = "SkillRL"
    Params = Params
    uses_writer = True

    companions = ("trajectories",)

    async def select(self, position: int, spec: TaskSpec, ctx: StreamContext,
                     record: TaskRecord) -> list[SkillText]:
        bank = ctx.bank(self.name)
        skills = await bank.skills()
        # a skill without a tier (a library the stream was forked from) is general: always in context
        general = [s for s in skills.values() if s.metadata.get("tier", "general") == "general"]
        specific = []
        if self.p.k and any(s.metadata.get("tier") == "specific" for s in skills.values()):
            hits = await bank.search(spec.instruction or spec.id, self.p.pool, "dense", skills)
            specific = [h.skill for h in hits if h.skill.metadata.get("tier") == "specific"
                        and h.skill.metadata.get("category") == spec.type and h.score >= self.p.delta][:self.p.k]
        record.method_info.update(general=[s.name for s in general], specific=[s.name for s in specific])
        return [skill_text(s) for s in general + specific]

    async def learn(self, position: int, spec: TaskSpec, episode: EpisodeResponse, ctx: StreamContext,
                    record: TaskRecord) -> None:
        success = await self.judged(spec, episode, ctx, record)
        category = episode.task_type or spec.type or "task"
        task = episode.instruction or spec.instruction or spec.id
        await self.companion(ctx, "trajectories").write(
            f"t{position:05d}", clip_description(task, spec.id), trajectory_text(episode),
            {"category": category, "success": success, "position": position, "invalid": episode.invalid_actions,
             "steps": episode.steps, "source_task": spec.id[:200]})
        info = record.method_info
        info.update(judged=success, distilled=None, duplicate_of=None)
        if not self.p.distill:
            return
        template = FROM_SUCCESS if success else FROM_FAILURE
        text, tokens = await write(ctx.llm, SYSTEM, template.format(category=category, task=task,
                                                                    trajectory=trajectory_text(episode)),
                                   max_tokens=self.p.max_tokens, seed=ctx.config.seed)
        record.curator_completion = text
        info["writer_tokens"] = tokens
        bank = ctx.bank(self.name)
        skills = await bank.skills()
        items = parse_items(text, 1)
        if items:
            item = items[0]
            twin = await self._duplicate(bank, f"{item.title}. {item.description}. {item.content}", category, skills)
            if twin:
                info["duplicate_of"] = twin
            else:
                name = unique_name(f"{category} {item.title}", skills, fallback=f"{category}-skill")
                skills[name] = await bank.write(name, clip_description(item.description, item.title), item.content,
                                                {"tier": "specific", "category": category,
                                                 "kind": "skill" if success else "lesson",
                                                 "source_task": spec.id[:200], "position": position})
                info["distilled"] = name

    async def boundary(self, position: int, ctx: StreamContext, record: TaskRecord) -> None:
        if (position + 1) % self.p.evolve_every == 0:
            report = await self.evolve(position, ctx, await ctx.bank(self.name).skills())
            record.method_info["evolution"] = report
            record.method_info["writer_tokens"] = record.method_info.get("writer_tokens", 0) + report["writer_tokens"]

    async def _duplicate(self, bank: Bank, text: str, category: str, skills: dict[str, Skill]) -> str | None:
        if not any(s.metadata.get("category") == category for s in skills.values()):
            return None
        for hit in await bank.search(text, 5, "dense", skills):
            if hit.skill.metadata.get("category") == category and hit.score >= self.p.dedup:
                return hit.skill.name
        return None

    async def evolve(self, position: int, ctx: StreamContext, skills: dict[str, Skill]) -> dict[str, Any]:
        """One evolution round over every trajectory recorded so far."""
        bank = ctx.bank(self.name)
        recorded = sorted((await self.companion(ctx, "trajectories").skills()).values(),
                          key=lambda s: int(s.metadata.get("position", 0)))
        outcomes: dict[str, list[bool]] = defaultdict(list)
        for t in recorded:
            outcomes[str(t.metadata.get("category"))].append(bool(t.metadata.get("success")))
        weak = categories_to_evolve(outcomes, self.p.evolve_below)
        report: dict[str, Any] = {"round": (position + 1) // self.p.evolve_every,
                                  "success": {c: round(sum(v) / len(v), 4) for c, v in sorted(outcomes.items())},
                                  "evolved": weak, "added": [], "writer_tokens": 0}
        if not any(s.metadata.get("tier", "general") == "general" for s in skills.values()) \
                and self.p.general_skills and recorded:
            sample = "\n\n".join(f"[{'success' if t.metadata.get('success') else 'failure'}] {t.description}\n"
                                 f"{t.body[-1200:]}" for t in recorded[-6:])
            text, tokens = await write(ctx.llm, SYSTEM, GENERAL.format(trajectories=sample, n=self.p.general_skills),
                                       max_tokens=self.p.max_tokens, seed=ctx.config.seed)
            report["writer_tokens"] += tokens
            for obj in parse_json_list(text)[:self.p.general_skills]:
                fields = _skill_fields(obj)
                if fields:
                    name = unique_name(f"general {fields[0]}", skills, fallback="general-skill")
                    skills[name] = await bank.write(name, clip_description(fields[1], fields[0]), fields[2],
                                                    {"tier": "general", "evolution_round": report["round"]})
                    report["added"].append(name)
        if weak:
            failures = defaultdict(list)
            for t in sorted(recorded, key=lambda t: failure_severity(t.metadata)):
                if not t.metadata.get("success") and t.metadata.get("category") in weak:
                    failures[t.metadata["category"]].append(t)
            picked = round_robin(failures, self.p.max_failures)
            listing = "\n\n".join(f"[{t.metadata.get('category')}] {t.description}\n{t.body[-1000:]}" for t in picked)
            titles = ", ".join(sorted(skills)) or "(none)"
            text, tokens = await write(ctx.llm, SYSTEM, EVOLVE.format(failures=listing, titles=titles, n=self.p.max_new,
                                                                      categories=", ".join(weak)),
                                       max_tokens=self.p.max_tokens, seed=ctx.config.seed)
            report["writer_tokens"] += tokens
            for obj in parse_json_list(text)[:self.p.max_new]:
                fields = _skill_fields(obj)
                if not fields:
                    continue
                category = str(obj.get("category") or "") if obj.get("category") in weak else weak[0]
                name = unique_name(f"{category} {fields[0]}", skills, fallback=f"{category}-skill")
                skills[name] = await bank.write(name, clip_description(fields[1], fields[0]), fields[2],
                                                {"tier": "specific", "category": category, "kind": "evolved",
                                                 "evolution_round": report["round"]})
                report["added"].append(name)
            report["failures_read"] = [t.name for t in picked]
        return report

    @classmethod
    def measures(cls, records: Sequence[TaskRecord]) -> dict[str, float | None]:
        rounds = info_values(records, "evolution")
        return {"evolution_rounds": float(len(rounds)),
                "skills_added_by_evolution": float(sum(len(r["added"]) for r in rounds)),
                "skills_distilled": float(sum(bool(d) for d in info_values(records, "distilled"))),
                "duplicates_skipped": float(sum(bool(d) for d in info_values(records, "duplicate_of"))),
                "general_in_context": mean([len(g) for g in info_values(records, "general")]),
                "specific_in_context": mean([len(s) for s in info_values(records, "specific")])}

"""Skill1-style library (Skill1 paper, §3): one policy — here the frozen writer LLM — writes a search
query for the task, the repo's MiniLM encoder returns ``candidates`` skills, the policy ranks them and
the executor acts with the top one only; afterwards a skill is distilled from the trajectory.

Bookkeeping (each skill's metadata): ``utility`` u, the trend, an EMA of task outcomes
u ← (1 − α)·u + α·r, updated for *every* retrieved candidate (co-retrieval is evidence of relevance);
``selected`` n, how often it was the one acted with. A distilled skill is credited by its *variation*
r − u*, u* the best trend among the candidates before this task (0 with none), and admitted only when
the variation is positive: the rollout did better than the library already does. A library over
``capacity`` retires the skill with the lowest score u·ln(2 + n) (low utility and little used go
first). The paper's text lost its formulas: the EMA, the variation and admission follow its prose;
the initial utility and the retirement score are our choices, documented in docs/methods.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from skillos.methods.bank import Hit, clip_description, number, skill_text, unique_name
from skillos.methods.base import Method, MethodParams, StreamContext, info_values, mean
from skillos.methods.writer import parse_json_object, tagged, trajectory_text, write
from skillos.protocol.executor import EpisodeResponse, SkillText
from skillos.protocol.skillrepo import SearchMode
from skillos.stream import TaskRecord, TaskSpec

SYSTEM = "You are an agent that keeps a library of lessons from past tasks. Answer in the format asked, nothing else."

QUERY = """Task: {task}

Write a one-sentence search query to find relevant past experiences for this task. Do NOT output an action.
Example: <query>{example}</query>
<query>"""
# The paper's example is an ALFWorld one; in a WebShop stream the 0.5B writer copied it
# ("tips for heating an object with a microwave" for a pair of shorts), so each env has its own.
QUERY_EXAMPLES = {"alfworld": "tips for heating an object with a microwave then placing it",
                  "webshop": "how to find a product with the requested attributes and options under a price limit",
                  "reasoning": "how to set up equations for a problem and check the answer"}

RANK = """Task: {task}

Below are {n} past experiences retrieved from memory. Each is labeled with an ID.
{candidates}
Rank these experiences from MOST useful to LEAST useful for the current task.
Output ONLY the ranked IDs as a comma-separated list within <rank> </rank> tags."""

DISTILL = """Your task was to: {task}
The task was {outcome} completed. Trajectory of the attempt:
{trajectory}

Analyse the subtasks, what worked and what failed, and the most valuable lesson. Then answer with one JSON object:
{{"action_lesson": "...", "navigation_lesson": "...", "description_head": "WHEN this lesson is useful -- the general task type, not this task"}}"""


class Params(MethodParams):
    candidates: int = Field(5, ge=1, le=20, description="K skills retrieved for the policy to rank (paper: 5)")
    alpha: float = Field(0.05, gt=0.0, le=1.0, description="utility EMA rate α (paper Table 6: 0.05)")
    initial_utility: float = Field(0.5, ge=0.0, le=1.0, description="u of a newly admitted skill (our choice)")
    capacity: int = Field(5000, ge=1, le=100_000, description="library size before retirement (paper: 5000)")
    retrieval: SearchMode = Field("dense", description="the frozen encoder's search (paper: MiniLM)")
    max_tokens: int = Field(384, ge=64, le=4096)
    distill: Literal["positive", "always"] = Field(
        "positive", description="distil after every task, or only when it can be admitted (training: always)")


def ema(u: float, r: float, alpha: float) -> float:
    """The trend after one outcome: u ← (1 − α)·u + α·r."""
    return (1 - alpha) * u + alpha * r


def variation(r: float, utilities: Sequence[float]) -> float:
    """How much this outcome beat the library: r − u*, u* the best candidate's trend (0 when none)."""
    return r - max(utilities, default=0.0)


def retirement_score(u: float, n: int) -> float:
    """Grows with utility and with use; the lowest is retired first."""
    return u * math.log(2 + n)


def parse_rank(text: str, n: int) -> list[int] | None:
    """0-based candidate order from ``<rank>2, 1, 3</rank>`` (IDs 1..n; unknown and repeated IDs dropped,
    the rest appended in retrieval order), or None when no ID could be read."""
    inside = tagged(text, "rank") or text
    order: list[int] = []
    for m in re.findall(r"\d+", inside):
        i = int(m) - 1
        if 0 <= i < n and i not in order:
            order.append(i)
    if not order:
        return None
    return order + [i for i in range(n) if i not in order]


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


class Skill1(Method):
    name = "skill1"
    title = "Skill1"
    Params = Params
    uses_writer = True

    async def select(self, position: int, spec: TaskSpec, ctx: StreamContext,
                     record: TaskRecord) -> list[SkillText]:
        task = spec.instruction or spec.id
        example = QUERY_EXAMPLES.get(ctx.config.env, QUERY_EXAMPLES["alfworld"])
        text, tokens = await write(ctx.llm, SYSTEM, QUERY.format(task=task, example=example), max_tokens=64, seed=ctx.config.seed,
                                   purpose="query")
        query = _first_line(re.sub(r"</?query>", " ", tagged("<query>" + text, "query") or ""))[:300]
        # written as it goes: if a later call fails, learn still sees the candidates and their trends
        info = record.method_info
        info.update(query=query or task, query_read=bool(query), writer_tokens=tokens)
        hits: list[Hit] = await ctx.bank(self.name).search(query or task, self.p.candidates, self.p.retrieval)
        info["candidates"] = [h.skill.name for h in hits]
        info["candidate_utilities"] = [number(h.skill.metadata, "utility", self.p.initial_utility) for h in hits]
        if not hits:
            return []
        order = list(range(len(hits)))
        info["ranked"] = [h.skill.name for h in hits]
        if len(hits) > 1:
            listing = "\n".join(f"[{i}] {h.skill.description}\n{h.skill.body[:600]}" for i, h in enumerate(hits, 1))
            text, tokens = await write(ctx.llm, SYSTEM, RANK.format(task=task, n=len(hits), candidates=listing),
                                       max_tokens=48, seed=ctx.config.seed, temperature=0.0, purpose="rerank")
            info["writer_tokens"] += tokens
            parsed = parse_rank(text, len(hits))
            info["rank_read"] = parsed is not None
            order = parsed or order  # unreadable: the encoder's order (greedy)
            info["ranked"] = [hits[i].skill.name for i in order]
        return [skill_text(hits[order[0]].skill)]

    async def learn(self, position: int, spec: TaskSpec, episode: EpisodeResponse, ctx: StreamContext,
                    record: TaskRecord) -> None:
        r = 1.0 if await self.judged(spec, episode, ctx, record) else 0.0
        bank = ctx.bank(self.name)
        skills = await bank.skills()
        info = record.method_info
        before = info.get("candidate_utilities", [])
        info["variation"] = var = variation(r, before)
        chosen = episode.skills[0].name if episode.skills else None  # the one it acted with
        for name in info.get("candidates", []):
            skill = skills.get(name)
            if skill is None:
                continue
            u = ema(number(skill.metadata, "utility", self.p.initial_utility), r, self.p.alpha)
            n = int(skill.metadata.get("selected", 0)) + int(name == chosen)
            skills[name] = await bank.update_metadata(skill, utility=round(u, 6), selected=n)
        info["admitted"] = None
        # a frozen writer distils only what can be admitted; a policy in training distils every rollout, so
        # that a negative variation can discourage redundant distillation (paper §3.2)
        if var > 0 or self.p.distill == "always":
            text, tokens = await write(ctx.llm, SYSTEM, DISTILL.format(
                task=episode.instruction or spec.instruction, outcome="successfully" if r else "unsuccessfully",
                trajectory=trajectory_text(episode)), max_tokens=self.p.max_tokens, seed=ctx.config.seed,
                purpose="distill")
            info["writer_tokens"] = info.get("writer_tokens", 0) + tokens
            record.curator_completion = text
            lesson = parse_json_object(text) or {}
            body = "\n".join(f"- {lesson[k]}" for k in ("action_lesson", "navigation_lesson")
                             if isinstance(lesson.get(k), str) and lesson[k].strip()) or text.strip()
            head = lesson.get("description_head") if isinstance(lesson.get("description_head"), str) else ""
            if body and var > 0:
                name = unique_name(head or (episode.task_type or spec.type) + " lesson", skills, fallback="lesson")
                skills[name] = await bank.write(name, clip_description(head, f"Lesson from: {spec.instruction}"), body,
                                                {"utility": self.p.initial_utility, "selected": 0,
                                                 "source_task": spec.id[:200], "position": position,
                                                 "variation": round(var, 6)})
                info["admitted"] = name
                info["distill_read"] = bool(lesson)
        info["retired"] = []
        while len(skills) > self.p.capacity:
            worst = min(skills.values(), key=lambda s: (retirement_score(
                number(s.metadata, "utility", self.p.initial_utility), int(s.metadata.get("selected", 0))), s.name))
            await bank.delete(worst.name)
            del skills[worst.name]
            info["retired"].append(worst.name)

    @classmethod
    def measures(cls, records: Sequence[TaskRecord]) -> dict[str, float | None]:
        variations = info_values(records, "variation")
        return {"admitted": float(sum(bool(a) for a in info_values(records, "admitted"))),
                "retired": float(sum(len(r) for r in info_values(records, "retired"))),
                "positive_variation_rate": mean([float(v > 0) for v in variations]),
                "mean_variation": mean(variations),
                "queries_read": mean([float(q) for q in info_values(records, "query_read")]),
                "ranks_read": mean([float(q) for q in info_values(records, "rank_read")])}

"""SAPO's skill validation (SAPO paper, §4, App. A): a skill is stored only after it proved useful.

Per task the rollout budget is split: ``base_rollouts`` episodes with the retrieved skills only, then a
candidate skill is induced by the writer from the task, those skills and the base trajectories, then
``augmented_rollouts`` episodes with the same skills plus the candidate. The candidate's marginal
utility is the gap U = mean(r of augmented) − mean(r of base), r the judged outcome (the env's reward
with ``--oracle-judge``). Candidates wait in a temporary bank (the companion repo ``<repo>-candidates``,
metadata ``status: pending``); every ``promote_every`` tasks, the pending ones with U > 0, in the top
``top_fraction`` by U and with no skill of the long-term bank as similar as ``dedup`` (cosine) are
promoted to the long-term bank (the stream's repo); the rest are marked ``discarded``. Over
``capacity`` the lowest-U skills are pruned. Retrieval takes a similarity pool of ``pool`` skills and
keeps the ``k`` with the highest U (the paper reranks by the trained generator's likelihood, which a
frozen writer does not have: the validated utility is the score it stands for here).

The task's recorded outcome is its first base rollout (what every other method's single episode is);
``rollouts`` and ``tokens`` count them all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from skillos.methods.bank import clip_description, number, skill_text, unique_name
from skillos.methods.base import Method, MethodParams, StreamContext, info_values, mean
from skillos.methods.writer import parse_json_object, trajectory_text, write
from skillos.protocol.executor import EpisodeResponse, SkillText
from skillos.protocol.skillrepo import SearchMode, Skill
from skillos.stream import TaskRecord, TaskSpec, play_episode, verdict

SYSTEM = "You write reusable skills for an agent from its attempts. Answer with one JSON object, nothing else."

INDUCE = """Task: {task}

Skills the agent already had:
{skills}

Attempts of the agent at this task:
{trajectories}

Write ONE new skill that would make the next attempt succeed more often, general enough for similar tasks.
Return exactly one JSON object: {{"name": "...", "description": "when to use it", "content": "the instructions"}}"""


class Params(MethodParams):
    base_rollouts: int = Field(1, ge=1, le=16, description="episodes with retrieved skills only (paper: 4)")
    augmented_rollouts: int = Field(1, ge=1, le=16, description="episodes with the candidate added (paper: 4)")
    k: int = Field(3, ge=0, le=20, description="skills injected (paper: 3)")
    pool: int = Field(6, ge=1, le=50, description="similarity pool reranked by utility (paper: 6 ALFWorld, 10 WebShop)")
    promote_every: int = Field(5, ge=1, le=10_000, description="tasks between promotions (paper: 5 steps)")
    top_fraction: float = Field(0.2, gt=0.0, le=1.0, description="share of candidates promotable (paper: 0.2)")
    dedup: float = Field(0.8, ge=0.0, le=1.0, description="cosine at which a candidate duplicates (paper: 0.8)")
    capacity: int = Field(45, ge=1, le=10_000, description="long-term bank size (paper: 45)")
    retrieval: SearchMode = "dense"
    max_tokens: int = Field(512, ge=64, le=4096)


def marginal_utility(base: Sequence[float], augmented: Sequence[float]) -> float:
    """U = mean(augmented) − mean(base)."""
    return sum(augmented) / len(augmented) - sum(base) / len(base)


def promotable(utilities: dict[str, float], top_fraction: float) -> list[str]:
    """Candidates with U > 0 among the top ⌈fraction·n⌉ by U (ties by name), best first."""
    ranked = sorted(utilities, key=lambda n: (-utilities[n], n))[:math.ceil(top_fraction * len(utilities))]
    return [n for n in ranked if utilities[n] > 0]


def to_prune(utilities: dict[str, float], capacity: int) -> list[str]:
    """The lowest-U skills beyond ``capacity``."""
    ranked = sorted(utilities, key=lambda n: (-utilities[n], n))
    return ranked[capacity:]


def _u(skill: Skill) -> float:
    return number(skill.metadata, "utility", 0.0)


class SAPO(Method):
    name = "sapo"
    title = "SAPO"
    Params = Params
    uses_writer = True

    companions = ("candidates",)

    async def select(self, position: int, spec: TaskSpec, ctx: StreamContext,
                     record: TaskRecord) -> list[SkillText]:
        hits = await ctx.bank(self.name).search(spec.instruction or spec.id, self.p.pool, self.p.retrieval)
        ranked = sorted(hits, key=lambda h: (-_u(h.skill), -h.score))[:self.p.k]
        return [skill_text(h.skill) for h in ranked]

    async def _reward(self, episode: EpisodeResponse, spec: TaskSpec, ctx: StreamContext) -> float:
        if not ctx.config.self_judge:
            return float(episode.reward)
        scratch = TaskRecord(position=0, task_id=spec.id, task_type=spec.type, instruction=spec.instruction,
                             method=self.name, seed=ctx.config.seed)
        return 1.0 if await verdict(ctx.executor, episode, spec, ctx.config, scratch) else 0.0

    async def _more(self, spec: TaskSpec, ctx: StreamContext, record: TaskRecord, skills: list[SkillText],
                    count: int, first_seed: int) -> list[EpisodeResponse]:
        """``count`` more rollouts of the task, counted in the record as they end (tokens, rollouts)."""
        played = []
        for i in range(count):
            ep = await play_episode(ctx.executor, spec, ctx.config, None, skills=skills or None,
                                    seed=first_seed + 1000 * i)
            record.rollouts += 1
            record.tokens += ep.tokens.total
            played.append(ep)
        return played

    async def learn(self, position: int, spec: TaskSpec, episode: EpisodeResponse, ctx: StreamContext,
                    record: TaskRecord) -> None:
        cfg = ctx.config
        seed = cfg.seed or 0
        given = [skill_text(s) for s in episode.skills]
        info = record.method_info
        info["candidate"] = None
        base_eps = [episode, *await self._more(spec, ctx, record, given, self.p.base_rollouts - 1, seed + 1000)]
        # the scored episode's verdict is the record's (self-judged once); the extra rollouts are judged alike
        first = await self.judged(spec, episode, ctx, record)
        base = [float(first) if cfg.self_judge else float(episode.reward)]
        base += [await self._reward(e, spec, ctx) for e in base_eps[1:]]
        info["base"] = base
        task = episode.instruction or spec.instruction or spec.id
        listing = "\n".join(f"- {s.name}: {s.description}" for s in given) or "(none)"
        attempts = "\n\n".join(f"Attempt {i + 1} ({'success' if r > 0 else 'failure'}):\n"
                               f"{trajectory_text(e, 2500)}" for i, (e, r) in enumerate(zip(base_eps, base)))
        text, tokens = await write(ctx.llm, SYSTEM, INDUCE.format(task=task, skills=listing, trajectories=attempts),
                                   max_tokens=self.p.max_tokens, seed=cfg.seed, purpose="induce")
        record.curator_completion = text
        info["writer_tokens"] = tokens
        obj = parse_json_object(text) or {}
        content = str(obj.get("content") or "").strip() or (text.strip() if not obj else "")
        if not content:
            return
        candidates = self.companion(ctx, "candidates")
        title = str(obj.get("name") or obj.get("description") or f"{episode.task_type or spec.type} skill")
        name = unique_name(title, await candidates.skills(), fallback="candidate")
        candidate = SkillText(name=name, description=clip_description(str(obj.get("description") or ""), title),
                              body=content)
        aug_eps = await self._more(spec, ctx, record, [*given, candidate], self.p.augmented_rollouts,
                                   seed + 1000 * self.p.base_rollouts)
        augmented = [await self._reward(e, spec, ctx) for e in aug_eps]
        meta: dict[str, Any] = {"base": base, "augmented": augmented, "source_task": spec.id[:200],
                                "position": position, "round": position // self.p.promote_every}
        broken = [e.error for e in [*base_eps, *aug_eps] if e.error]
        if broken:
            # a rollout lost to an LLM or env failure says nothing of the skill: no utility, never promoted
            meta.update(status="invalid", error=broken[0][:300])
            info.update(candidate=name, invalid=broken[0][:300], read=bool(obj))
        else:
            utility = marginal_utility(base, augmented)
            meta.update(status="pending", utility=round(utility, 6))
            info.update(candidate=name, augmented=augmented, utility=utility, read=bool(obj))
        await candidates.write(name, candidate.description, candidate.body, meta)

    async def boundary(self, position: int, ctx: StreamContext, record: TaskRecord) -> None:
        if (position + 1) % self.p.promote_every == 0:
            record.method_info["promotion"] = await self.promote(ctx)

    async def promote(self, ctx: StreamContext) -> dict[str, Any]:
        """Move the validated candidates to the long-term bank; mark the rest discarded; prune."""
        bank, candidates = ctx.bank(self.name), self.companion(ctx, "candidates")
        pending = {s.name: s for s in (await candidates.skills()).values() if s.metadata.get("status") == "pending"}
        chosen = promotable({n: _u(s) for n, s in pending.items()}, self.p.top_fraction)
        longterm = await bank.skills()
        promoted, duplicates = [], []
        for name in chosen:
            cand = pending[name]
            twins = [h for h in await bank.search(f"{cand.description}\n{cand.body}", 1, "dense", longterm)
                     if h.score >= self.p.dedup] if longterm else []
            if twins:
                duplicates.append(name)
                continue
            target = unique_name(name, longterm, fallback="skill")
            longterm[target] = await bank.write(target, cand.description, cand.body,
                                                {"utility": _u(cand), "source_task": cand.metadata.get("source_task"),
                                                 "promoted_from": name})
            promoted.append(target)
        for name, cand in pending.items():
            status = "promoted" if name in chosen and name not in duplicates else "discarded"
            await candidates.update_metadata(cand, status=status)
        pruned = to_prune({n: _u(s) for n, s in longterm.items()}, self.p.capacity)
        for name in pruned:
            await bank.delete(name)
        return {"pending": len(pending), "promoted": promoted, "duplicates": duplicates, "pruned": pruned}

    @classmethod
    def measures(cls, records: Sequence[TaskRecord]) -> dict[str, float | None]:
        rounds = info_values(records, "promotion")
        return {"candidates": float(sum(bool(c) for c in info_values(records, "candidate"))),
                "invalid_candidates": float(len(info_values(records, "invalid"))),
                "mean_utility": mean(info_values(records, "utility")),
                "positive_utility_rate": mean([float(u > 0) for u in info_values(records, "utility")]),
                "promotion_rounds": float(len(rounds)),
                "promoted": float(sum(len(r["promoted"]) for r in rounds)),
                "pruned": float(sum(len(r["pruned"]) for r in rounds)),
                "rollouts_per_task": mean([float(r.rollouts) for r in records])}

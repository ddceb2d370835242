"""A method's bank: its skills in the skill repo, with the method's bookkeeping in their metadata.

Every method keeps its state where a person (and a resumed run) can read it: skills in a repo, their
numbers (utilities, counts, tiers, status) as frontmatter metadata, every change a new version in the
repo's history. Nothing a method decides with lives only in the process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from skillos.clients.skillrepo import SkillRepoError
from skillos.protocol.executor import RetrievedSkill, SkillText
from skillos.protocol.skillrepo import RepoPolicy, SearchMode, Skill
from skillos.skills import DESCRIPTION_MAX, NAME_MAX, normalize_name


@dataclass
class Hit:
    """A search hit joined with its skill (for the metadata a search hit does not carry)."""
    skill: Skill
    score: float


def skill_text(skill: Skill | RetrievedSkill) -> SkillText:
    """A skill (from the repo, or as an episode echoed it) as the executor takes it inline."""
    return SkillText(name=skill.name, description=skill.description, body=skill.body, version=skill.version)


def unique_name(text: str, taken: Iterable[str], fallback: str = "skill") -> str:
    """A valid skill name from free text, not in ``taken`` (a short hash of the text when it is)."""
    base = normalize_name(text, strict=False) or fallback
    taken = set(taken)
    if base not in taken:
        return base
    digest = hashlib.sha1(text.encode()).hexdigest()
    for i in range(0, 40, 6):
        name = f"{base[:NAME_MAX - 7].rstrip('-')}-{digest[i:i + 6]}"
        if name not in taken:
            return name
    raise ValueError(f"no free name for {text[:60]!r}")


def number(meta: dict[str, Any], key: str, default: float) -> float:
    """A number a method keeps in a skill's metadata (``default`` when absent or not a number)."""
    try:
        return float(meta.get(key, default))
    except (TypeError, ValueError):
        return default


def clip_description(text: str, fallback: str) -> str:
    text = " ".join((text or "").split())
    return (text or fallback)[:DESCRIPTION_MAX]


# A stream's repos apply its curator's ops at once, whatever the service's default review policy: the paper's
# method learns from each task before the next one, with no person in the loop.
STREAM_POLICY = RepoPolicy(review=False)


async def ensure_stream_repo(client: Any, name: str) -> None:
    """Create a stream's repo with `STREAM_POLICY`, or find it; one that exists with review on is refused (its
    ops would wait for a person and the method would change without a word)."""
    try:
        await client.create_repo(name, STREAM_POLICY)
        return
    except SkillRepoError as e:
        if e.status != 409:
            raise
    policy = await client.get_policy(name)
    if policy.review:
        raise SkillRepoError(409, "repo_reviewed", f"repo {name!r} holds curator op batches for review: a stream "
                             f"learns from each task before the next. Name another repo, or have an operator "
                             f"turn review off (skillos repo policy {name} --no-review)")
    if policy.candidates:
        raise SkillRepoError(409, "repo_candidates", f"repo {name!r} keeps what op batches write as candidates, "
                             f"not served until promoted: a stream learns from each task before the next. Name "
                             f"another repo, or have an operator turn it off (skillos repo policy {name} "
                             f"--no-candidates)")


class Bank:
    """One repo of one method's stream. ``repo`` is the skill repo client (`AsyncSkillRepoClient`)."""

    def __init__(self, repo: Any, name: str, method: str):
        self.repo = repo
        self.name = name
        self.method = method

    async def skills(self) -> dict[str, Skill]:
        return {s.name: s for s in await self.repo.list_skills(self.name)}

    async def search(self, query: str, k: int, mode: SearchMode, skills: dict[str, Skill] | None = None) -> list[Hit]:
        """Top ``k`` by the repo's own search, each with its whole skill (metadata included)."""
        if k <= 0:
            return []
        hits = await self.repo.search(self.name, query[:2000], k=k, mode=mode)
        if not hits:
            return []
        skills = skills if skills is not None else await self.skills()
        return [Hit(skills[h.name], h.score) for h in hits if h.name in skills]

    async def write(self, name: str, description: str, body: str, metadata: dict[str, Any]) -> Skill:
        """Create or replace one skill (a new version); ``metadata`` is tagged with the method."""
        return await self.repo.put_skill(self.name, {"name": name, "description": description, "body": body,
                                                     "metadata": {"method": self.method, **metadata}})

    async def update_metadata(self, skill: Skill, **changes: Any) -> Skill:
        """The same skill with some metadata changed (a new version, so the history shows every change)."""
        return await self.write(skill.name, skill.description, skill.body, {**skill.metadata, **changes})

    async def delete(self, name: str) -> None:
        await self.repo.delete_skill(self.name, name)

    def companion(self, suffix: str) -> Bank:
        """A second repo of the same stream (SAPO's temporary bank, SkillRL's trajectories)."""
        return Bank(self.repo, f"{self.name}-{suffix}"[-128:].lstrip("-._"), self.method)

    async def ensure(self) -> None:
        """Create the repo unless it exists (a resumed stream finds it)."""
        await ensure_stream_repo(self.repo, self.name)

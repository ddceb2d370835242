"""A skill's life: a person's promote / retire / restore, the policy's
measured-utility rule, and the states a search filters by (cached per repo by its ``state_gen``)."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

from services.skillrepo.errors import answers_api_errors
from services.skillrepo.lifecycle import store as sql
from services.skillrepo.review import store as review
from services.skillrepo.review.serving import default_policy
from services.skillrepo.store import RepoNotFound, SkillNotFound
from services.skillrepo.utility import store as outcomes
from services.skillrepo.utility.serving import utility_of
from skillos.auth import Grant
from skillos.errors import APIError
from skillos.protocol.skillrepo import (
    RepoPolicy,
    SkillStateChange,
    SkillStateEntry,
    SkillStateList,
    SkillUtility,
)
from skillos.utility import Z99

if TYPE_CHECKING:
    from services.skillrepo.review.serving import SkillRepoService

# the served-task count before `retire_harmful` acts where `promote_after` is not set
RETIRE_AFTER = 10


def _entry(r: sql.StateRow) -> SkillStateEntry:
    return SkillStateEntry(name=r.name, state=r.state, traffic=r.traffic, updated_at=r.updated_at,
                           updated_by=r.updated_by, reason=r.reason)


def checkpoint(served: int, every: int) -> bool:
    """Whether a skill served ``served`` times is judged now: at N, 2N, 4N, ... (N = ``every``)."""
    return served >= every and served % every == 0 and not (served // every) & (served // every - 1)


def rule_verdict(state: str, u: SkillUtility, policy: RepoPolicy) -> tuple[str, str] | None:
    """(new state, reason) by the policy's measured-utility rule for a skill written from traffic, or None.
    ``u`` carries the 99 % interval of outcomes since its text was written."""
    if not checkpoint(u.served, policy.promote_after or RETIRE_AFTER) or u.interval is None:
        return None
    lo, hi = u.interval
    numbers = f"served in {u.served} tasks, 99 % interval [{lo:+.2f}, {hi:+.2f}]"
    if state == "candidate" and policy.promote_after and lo >= 0:
        return "active", f"promoted by policy: {numbers} from {'/'.join(policy.utility_sources)}"
    if state in ("candidate", "active") and policy.retire_harmful and hi < 0:
        return "retired", f"retired by policy: {numbers} lies below 0"
    return None


class Lifecycle:
    """Skill states of one skill repo service."""

    def __init__(self, svc: SkillRepoService, cache_repos: int = 4096):
        self.svc = svc
        self._hidden: dict[int, tuple[int, dict[str, str]]] = {}
        self._lock = threading.Lock()
        self._cache_repos = cache_repos

    def hidden(self, repo_id: int, gen: int) -> dict[str, str]:
        """{name: state} of the repo's candidates and retired skills as of state generation ``gen``."""
        if gen == 0:
            return {}
        cached = self._hidden.get(repo_id)
        if cached is not None and cached[0] >= gen:
            return cached[1]
        with self.svc.store.engine.connect() as conn:
            found = sql.hidden(conn, repo_id)
        with self._lock:
            if len(self._hidden) >= self._cache_repos:
                self._hidden.pop(next(iter(self._hidden)))
            self._hidden[repo_id] = (gen, found)
        return found

    def _repo_id(self, repo: str) -> int:
        try:
            return self.svc.store.get_repo(repo, count=False).id
        except RepoNotFound:
            raise APIError(404, "repo_not_found", f"repo {repo!r} does not exist") from None

    def state_of(self, repo: str, name: str) -> str:
        repo_id = self._repo_id(repo)
        with self.svc.store.engine.connect() as conn:
            r = sql.row(conn, repo_id, name)
        return r.state if r else "active"

    def states_of(self, repo: str) -> dict[str, str]:
        repo_id = self._repo_id(repo)
        with self.svc.store.engine.connect() as conn:
            return {r.name: r.state for r in sql.rows(conn, repo_id)}

    def listed(self, repo: str, state: str | None) -> SkillStateList:
        repo_id = self._repo_id(repo)
        with self.svc.store.engine.connect() as conn:
            return SkillStateList(skills=[_entry(r) for r in sql.rows(conn, repo_id, state)])

    @answers_api_errors
    def set_state(self, repo: str, name: str, change: SkillStateChange, grant: Grant) -> SkillStateEntry:
        """Promote, retire or restore a skill: an operator or a reviewer the repo's policy names."""
        with self.svc.store.write(repo) as tx:
            policy = review.policy_of(tx.conn, tx.repo.id, default_policy(self.svc))
            if not (grant.operator or grant.token_label in policy.reviewers):
                raise APIError(403, "not_a_reviewer", f"token {grant.token_label!r} may not change the states of "
                                                      f"{repo!r}'s skills: an operator's token or one the repo's "
                                                      "policy names in `reviewers` does")
            head = tx.head(name)
            if head is None or head[1] is None:
                raise SkillNotFound(repo, name)
            before = sql.row(tx.conn, tx.repo.id, name)
            old = before.state if before else "active"
            traffic = before.traffic if before else False
            if change.state == "active" and not traffic:
                sql.clear(tx.conn, tx.repo.id, [name])     # a person's skill: back to plain
            elif old != change.state or before is None or (change.note or None) != before.reason:
                sql.mark(tx.conn, tx.repo.id, name, change.state, traffic, grant.token_label, change.note, tx.now)
            tx.log_as("state", entries=json.dumps([{"index": 0, "name": "state", "status": "applied",
                                                     "skill_name": name,
                                                     "message": f"{old} -> {change.state}"
                                                                + (f": {change.note}" if change.note else "")}]))
            after = sql.row(tx.conn, tx.repo.id, name)
        return _entry(after) if after else SkillStateEntry(name=name, state="active", traffic=False)

    def judge(self, repo: str, repo_id: int, served: list[str]) -> list[SkillStateEntry]:
        """Apply the policy's measured-utility rule to the skills an outcome was served with (their served count
        just grew). Each is looked at when that count reaches N, 2N, 4N, ... since its text was written, with a
        99 % interval: looking after every task would promote a skill of no use about one time in six."""
        store = self.svc.store
        with store.engine.connect() as conn:
            policy = review.policy_of(conn, repo_id, default_policy(self.svc))
            if policy is None or not policy.candidates or not (policy.promote_after or policy.retire_harmful):
                return []
            verdicts: dict[str, tuple[str, str]] = {}
            for name in sorted(set(served)):
                r = sql.row(conn, repo_id, name)
                if r is None or not r.traffic or r.state == "retired":
                    continue
                counted = outcomes.counts(conn, repo_id, list(policy.utility_sources), name, r.since)
                found = rule_verdict(r.state, utility_of(name, counted.get(name, {}), Z99), policy)
                if found is not None:
                    verdicts[name] = found
        if not verdicts:
            return []
        changed: list[Any] = []
        with store.write(repo) as tx:
            for name, (state, reason) in verdicts.items():
                now = sql.row(tx.conn, tx.repo.id, name)
                if now is None or not now.traffic or now.state == state or now.state == "retired":
                    continue    # changed meanwhile (a person's decision stands)
                sql.mark(tx.conn, tx.repo.id, name, state, True, "policy", reason, tx.now)
                changed.append({"index": len(changed), "name": "state", "status": "applied", "skill_name": name,
                                "message": f"{now.state} -> {state}: {reason}"})
            if changed:
                tx.log_as("state", entries=json.dumps(changed))
            rows = [sql.row(tx.conn, tx.repo.id, c["skill_name"]) for c in changed]
        return [_entry(r) for r in rows if r is not None]

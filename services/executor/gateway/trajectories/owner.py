"""Who may use a gateway trajectory (issue 51): its transcript is the caller's conversation, system prompts and
tool outputs included, and its outcome makes the curator write skills served to others.

The caller who opened it (`Grant.caller_id`, kept as its ``owner``) continues it, reports its outcome and reads
it; an operator's token (rw, no prefix) reads it too. Any other token, even one that reaches the repo, gets 403.
A trajectory opened before owners were recorded keeps the old rule: any token that reaches its repo.
"""

from __future__ import annotations

from services.executor.gateway.errors import gateway_error
from services.executor.gateway.trajectories.store import TrajectoryRow
from skillos.auth import Grant


def require_owner(row: TrajectoryRow, grant: Grant, *, read: bool, param: str) -> None:
    """Nothing, or 403 when ``grant`` is not the trajectory's caller (nor, to ``read``, an operator)."""
    if row.owner is None or row.owner == grant.caller_id or (read and grant.operator):
        return
    raise gateway_error(403, "forbidden", f"trajectory {row.id!r} was opened with another token: only that token "
                                          "continues it, reports its outcome or reads it", param=param)

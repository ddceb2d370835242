"""The skill repo's storage refusals as the HTTP API's errors (one place for the service and its parts)."""

from __future__ import annotations

import functools

from services.skillrepo.store import (
    RepoExists,
    RepoNotFound,
    SkillNotFound,
    SnapshotExists,
    SnapshotNotFound,
    StoreError,
)
from skillos.errors import APIError


def http_error(e: StoreError) -> APIError:
    """The API's answer to a storage refusal: status, code and message are part of the HTTP API."""
    match e:
        case RepoNotFound():
            return APIError(404, "repo_not_found", f"repo {e.repo!r} does not exist: create it with POST /v1/repos")
        case SkillNotFound():
            return APIError(404, "skill_not_found", f"skill {e.name!r} does not exist in repo {e.repo!r}")
        case SnapshotNotFound():
            return APIError(404, "snapshot_not_found", f"repo {e.repo!r} has no snapshot {e.label!r}")
        case RepoExists():
            return APIError(409, "repo_exists", f"repo {e.repo!r} already exists: pick another name")
        case SnapshotExists():
            return APIError(409, "snapshot_exists",
                            f"repo {e.repo!r} already has a snapshot {e.label!r}: pick another label")
    return APIError(500, "storage_error", str(e))


def answers_api_errors(method):
    """A service method whose storage refusals reach its caller as `APIError`s."""
    @functools.wraps(method)
    def call(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except StoreError as e:
            raise http_error(e) from e

    return call

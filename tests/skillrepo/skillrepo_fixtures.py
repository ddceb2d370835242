"""Fixtures of the skill repo tests: the real service on SQLite or PostgreSQL, started on loopback."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from conftest import pg_database, run_service

from skillos.clients.skillrepo import SkillRepoClient


@contextmanager
def database(backend: str, request, tmp_path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path}/skillrepo.db"
    else:
        with pg_database(request.getfixturevalue("pg_server_url")) as url:
            yield url


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def backend_url(request, tmp_path_factory) -> Iterator[str]:
    with database(request.param, request, tmp_path_factory.mktemp(request.param)) as url:
        yield url


@pytest.fixture(scope="module")
def repo_service(backend_url, tmp_path_factory):
    """One service per backend for the module; tests use their own repo names."""
    with run_service(["skillrepo"], env={"SKILLOS_DATABASE_URL": backend_url, "SKILLOS_MAX_BODY_BYTES": "4096",
                                         "SKILLOS_MAX_OPS_PER_BATCH": "8"},
                     tmp_path=tmp_path_factory.mktemp("svc"), ready_timeout=300) as svc:
        yield svc


@pytest.fixture
def client(repo_service) -> Iterator[SkillRepoClient]:
    with SkillRepoClient(repo_service.url) as c:
        yield c


@pytest.fixture
def repo(client) -> str:
    name = f"r-{uuid.uuid4().hex[:10]}"
    client.create_repo(name)
    return name


def skill_md(name: str, description: str, body: str = "steps") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n\n{body}\n"

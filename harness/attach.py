"""Before `skillos run` uses services that are already running, check that they serve what was asked:
the environment (its name, the split, the data directory of ``SKILLOS_<ENV>_DATA``) and, for a stack of
`skillos up`, the model of every LLM role. A mismatch is said in words; `run` then starts a stack of
its own on free ports instead of playing the wrong tasks or the wrong model."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import httpx

from harness.stack import SERVICES, StackState
from skillos.llm import LLMSettings
from skillos.settings import EnvDataSettings


def expected_data_dir(env: str) -> Path | None:
    """The data directory this process would give the env server (None: the env's built-in set)."""
    value = getattr(EnvDataSettings(), f"{env}_data", None)
    return Path(value).resolve() if value else None


def env_problems(url: str, env: str, split: str | None, token: str | None = None) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        r = httpx.get(url.rstrip("/") + "/v1/splits", headers=headers, timeout=10)
        r.raise_for_status()
        info = r.json()
    except (httpx.HTTPError, ValueError) as e:
        return [f"the {env} server at {url} did not answer /v1/splits: {e}"]
    problems = []
    if info.get("env") != env:
        problems.append(f"the server at {url} is the {info.get('env')!r} env, not {env!r}")
    if split and split not in info.get("splits", []):
        problems.append(f"the {env} server at {url} serves splits {info.get('splits')}, not {split!r}")
    wanted, served = expected_data_dir(env), info.get("data_dir")
    if wanted is not None and served and Path(served) != wanted:
        problems.append(f"the {env} server at {url} reads {served}, but SKILLOS_{env.upper()}_DATA is {wanted}")
    return problems


def llm_problems(state: StackState) -> list[str]:
    """Roles whose model in the running stack differs from the model configured now."""
    problems = []
    for role, llm in state.role_llms.items():
        wanted = LLMSettings.for_role(role).model
        explicit = os.environ.get(f"SKILLOS_{role.upper()}_LLM_MODEL") or os.environ.get("SKILLOS_LLM_MODEL")
        if explicit and llm.get("model") != wanted:
            problems.append(f"the running stack's {role} uses {llm.get('model')!r}, but {wanted!r} is configured")
    return problems


def _port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port_offset(names: list[str], start: int = 0, step: int = 100, tries: int = 50) -> int:
    """The first port offset (``start``, ``start + step``, …) at which every default port of ``names``
    (and the extra LLM ports) is free: 0 when nothing runs on the defaults."""
    ports = [SERVICES[n][0] for n in names if n in SERVICES] + [SERVICES["llm"][0] + i for i in range(3)]
    for k in range(tries):
        offset = start + k * step
        if all(_port_free(p + offset) for p in ports):
            return offset
    raise RuntimeError("no free port offset found for a second stack")

"""`skillos up` / `skillos down`: the whole embedded stack as local processes.

Skill repo (SQLite), env servers, the embedded LLM server(s), executor and curator, each a real
`skillos serve <name>` process on loopback. Each LLM role (executor, curator, judge) gets the model of
its settings (`skillos.llm.LLMSettings.for_role`): one embedded server per distinct model ("llm" on
8080 for the executor's, "llm-2" on 8081, …), unless the role's base URL is set in the environment
(an external server: vLLM, a hosted API) or ``--llm-url`` names one server for every role. The state file (default ``.skillos/stack.json`` in the
working directory; ``SKILLOS_STACK_DIR`` moves it) lists pids, URLs and log files so that
`skillos down` and `skillos run` can find a running stack.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from skillos.llm import LLMSettings
from skillos.models import MODELS

ENVS = ("alfworld", "webshop", "reasoning")
# service -> (default port, env var naming its URL for the other services)
SERVICES = {
    "llm": (8080, None),
    "skillrepo": (8001, "SKILLOS_SKILLREPO_URL"),
    "alfworld": (8010, "SKILLOS_ALFWORLD_URL"),
    "webshop": (8011, "SKILLOS_WEBSHOP_URL"),
    "reasoning": (8012, "SKILLOS_REASONING_URL"),
    "executor": (8002, "SKILLOS_EXECUTOR_URL"),
    "curator": (8003, "SKILLOS_CURATOR_URL"),
    "console": (8004, "SKILLOS_CONSOLE_URL"),
}


def stack_dir() -> Path:
    return Path(os.environ.get("SKILLOS_STACK_DIR", ".skillos")).resolve()


@dataclass
class ProcInfo:
    name: str
    pid: int
    url: str
    log: str


@dataclass
class StackState:
    services: dict[str, ProcInfo] = field(default_factory=dict)
    started_at: float = 0.0
    owner_pid: int = 0
    llm_url: str = ""  # the executor's LLM base URL
    role_llms: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> {"base_url", "model"}

    def url(self, name: str) -> str | None:
        info = self.services.get(name)
        return info.url if info else None

    def env(self) -> dict[str, str]:
        """Environment variables that point every SkillOS client at this stack."""
        env = {}
        for name, info in self.services.items():
            var = SERVICES.get(name, (0, None))[1]
            if var:
                env[var] = info.url
        for role, llm in self.role_llms.items():
            env[f"SKILLOS_{role.upper()}_LLM_BASE_URL"] = llm["base_url"]
            env[f"SKILLOS_{role.upper()}_LLM_MODEL"] = llm["model"]
        return env

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"started_at": self.started_at, "owner_pid": self.owner_pid,
                                    "llm_url": self.llm_url, "role_llms": self.role_llms,
                                    "services": {k: asdict(v) for k, v in self.services.items()}}, indent=2))

    @classmethod
    def load(cls, path: Path) -> StackState | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return cls(services={k: ProcInfo(**v) for k, v in data.get("services", {}).items()},
                   started_at=data.get("started_at", 0.0), owner_pid=data.get("owner_pid", 0),
                   llm_url=data.get("llm_url", ""), role_llms=data.get("role_llms", {}))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        return httpx.get(url.rstrip("/") + "/healthz", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def running_stack(path: Path | None = None) -> StackState | None:
    """The stack recorded in the state file, if all its processes are alive and healthy."""
    state = StackState.load(path or stack_dir() / "stack.json")
    if not state or not state.services:
        return None
    if all(_alive(p.pid) and healthy(p.url) for p in state.services.values()):
        return state
    return None


ROLES = ("executor", "curator", "judge")


@dataclass
class LLMPlan:
    """Which LLM server each role uses: embedded servers to start (name -> model) and every role's URL."""

    servers: dict[str, str] = field(default_factory=dict)      # "llm", "llm-2", … -> registry model
    ports: dict[str, int] = field(default_factory=dict)
    roles: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> {"base_url", "model"}


def plan_llms(host: str, port_offset: int = 0, llm_url: str | None = None,
              ports: dict[str, int] | None = None) -> LLMPlan:
    """One embedded server per distinct model among the roles whose base URL is not set explicitly
    (``SKILLOS_<ROLE>_LLM_BASE_URL`` or ``SKILLOS_LLM_BASE_URL``); ``llm_url`` serves every role."""
    plan = LLMPlan()
    for role in ROLES:
        settings = LLMSettings.for_role(role)
        if llm_url:
            plan.roles[role] = {"base_url": llm_url, "model": settings.model}
            continue
        if os.environ.get(f"SKILLOS_{role.upper()}_LLM_BASE_URL") or os.environ.get("SKILLOS_LLM_BASE_URL"):
            plan.roles[role] = {"base_url": settings.base_url, "model": settings.model}
            continue
        if settings.model not in MODELS:
            raise ValueError(f"the {role} role's model {settings.model!r} is not an embedded model "
                             f"({', '.join(MODELS)}): set SKILLOS_{role.upper()}_LLM_BASE_URL to the server that "
                             "serves it, or pick an embedded model")
        name = next((n for n, m in plan.servers.items() if m == settings.model), None)
        if name is None:
            name = "llm" if not plan.servers else f"llm-{len(plan.servers) + 1}"
            plan.servers[name] = settings.model
            plan.ports[name] = (ports or {}).get(name, SERVICES["llm"][0] + len(plan.servers) - 1 + port_offset)
        plan.roles[role] = {"base_url": f"http://{host}:{plan.ports[name]}/v1", "model": settings.model}
    return plan


class Stack:
    """Start, watch and stop the stack's processes."""

    def __init__(self, envs: tuple[str, ...] = ENVS, *, directory: Path | None = None,
                 ports: dict[str, int] | None = None, host: str = "127.0.0.1",
                 extra_env: dict[str, str] | None = None, llm_args: list[str] | None = None,
                 llm_url: str | None = None, port_offset: int = 0, console: bool = False):
        """``llm_url``: an OpenAI-compatible base URL (".../v1") to use for every role instead of
        starting embedded LLM servers; ``port_offset`` shifts every default port (several stacks on
        one machine); ``console``: also the web console (run folders from SKILLOS_CONSOLE_RUNS_DIR, ./runs)."""
        unknown = set(envs) - set(ENVS)
        if unknown:
            raise ValueError(f"unknown env(s) {sorted(unknown)}; choose from {', '.join(ENVS)}")
        self.llm_url = llm_url
        self.host = host
        self.llms = plan_llms(host, port_offset, llm_url, ports)
        self.names = [*self.llms.servers, "skillrepo", *envs, "executor", "curator"] + \
            (["console"] if console else [])
        self.dir = directory or stack_dir()
        self.ports = {n: (ports or {}).get(n, SERVICES[n][0] + port_offset) for n in self.names
                      if n not in self.llms.servers}
        self.ports.update(self.llms.ports)
        self.extra_env = extra_env or {}
        self.llm_args = llm_args or []
        self.procs: dict[str, subprocess.Popen] = {}
        self.state = StackState(owner_pid=os.getpid())

    @property
    def state_path(self) -> Path:
        return self.dir / "stack.json"

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "SKILLOS_LOG_FORMAT": "json"}
        for name in self.names:
            var = SERVICES.get(name, (0, None))[1]
            if var:
                env[var] = f"http://{self.host}:{self.ports[name]}"
        for role, llm in self.llms.roles.items():
            env[f"SKILLOS_{role.upper()}_LLM_BASE_URL"] = llm["base_url"]
            env[f"SKILLOS_{role.upper()}_LLM_MODEL"] = llm["model"]
        env.setdefault("SKILLOS_DATABASE_URL", f"sqlite:///{self.dir / 'skillrepo.db'}")
        # one replica of each env and no load balancer: nothing to drain to, `skillos down` stops at once
        env.setdefault("SKILLOS_ENV_DRAIN_TIMEOUT_S", "0")
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 600.0, on_progress=None) -> StackState:
        """Start every service, wait until all answer /healthz; on failure stop what started."""
        busy = [n for n in self.names if healthy(f"http://{self.host}:{self.ports[n]}", timeout=0.5)]
        if busy:
            raise RuntimeError(f"ports already serving SkillOS services: {', '.join(busy)} "
                               f"(stop them with `skillos down`, or pass other ports)")
        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = self._env()
        for name in self.names:
            log_path = logs / f"{name}.log"
            kind = "llm" if name in self.llms.servers else name
            cmd = [sys.executable, "-m", "skillos.cli", "serve", kind, "--host", self.host,
                   "--port", str(self.ports[name])]
            if kind == "llm":
                cmd += ["--model", self.llms.servers[name], *self.llm_args]
            with open(log_path, "ab") as out:
                # own session: Ctrl-C in the terminal reaches `skillos up`, which stops the children in order
                self.procs[name] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                                    start_new_session=True)
            self.state.services[name] = ProcInfo(name, self.procs[name].pid,
                                                 f"http://{self.host}:{self.ports[name]}", str(log_path))
        self.state.started_at = time.time()
        self.state.llm_url = self.llms.roles["executor"]["base_url"]
        self.state.role_llms = self.llms.roles
        self.state.save(self.state_path)
        deadline = time.monotonic() + timeout
        waiting = set(self.names)
        try:
            while waiting:
                for name in sorted(waiting):
                    proc = self.procs[name]
                    if proc.poll() is not None:
                        tail = Path(self.state.services[name].log).read_text(errors="replace")[-2000:]
                        raise RuntimeError(f"{name} exited with code {proc.returncode} while starting:\n{tail}")
                    if healthy(self.state.services[name].url, timeout=1.0):
                        waiting.discard(name)
                        if on_progress:
                            on_progress(name)
                if waiting and time.monotonic() > deadline:
                    raise RuntimeError(f"not healthy after {timeout:.0f}s: {', '.join(sorted(waiting))} "
                                       f"(logs in {logs})")
                if waiting:
                    time.sleep(0.3)
        except BaseException:
            self.stop()
            raise
        return self.state

    def stop(self) -> None:
        stop_state(self.state, self.state_path)


def stop_state(state: StackState, path: Path | None = None, grace: float = 15.0) -> list[str]:
    """Stop every process of ``state`` (SIGTERM to its process group, SIGKILL after ``grace``)."""
    stopped = []
    # reverse order: clients of a service stop before it
    for info in reversed(list(state.services.values())):
        if not _alive(info.pid):
            continue
        try:
            os.killpg(info.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            continue
        stopped.append(info.name)
    deadline = time.monotonic() + grace
    for info in state.services.values():
        while _alive(info.pid) and time.monotonic() < deadline:
            _reap(info.pid)
            time.sleep(0.1)
        if _alive(info.pid):
            try:
                os.killpg(info.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _reap(info.pid)
    if path is not None and path.exists():
        path.unlink()
    return stopped


def _reap(pid: int) -> None:
    """Collect a child that exited (when we are its parent), so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass

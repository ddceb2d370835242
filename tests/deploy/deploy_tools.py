"""Helpers of the deployment checks: the real tools (helm, kubectl, hadolint, check-jsonschema),
Kubernetes schema validation, and the compose file loaded the way `docker compose config` does
(YAML anchors and merge keys, ${VAR} interpolation, env files)."""

from __future__ import annotations

import functools
import importlib
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
CHART = ROOT / "deploy" / "helm" / "skillos"
COMPOSE = ROOT / "docker-compose.yml"
ENV_FILE = ROOT / "deploy" / "skillos.env"
GPU_ENV = ROOT / "deploy" / "gpu.env"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# the versions every default render is validated against (a render without --kube-version picks the GA
# API versions, autoscaling/v2 and policy/v1, that 1.23 and newer serve) ...
K8S_VERSIONS = ("1.27.0", "1.33.0")
# ... and the oldest Kubernetes the chart is rendered for in the tests: the local cluster of `make k8s-check`
# (Chart.yaml's kubeVersion allows 1.19 on; `--kube-version 1.20.2` picks v2beta2 HPAs, v1beta1 PDBs)
K8S_OLDEST = "1.20.2"
# SkillOS services of the compose file and the part whose settings class each one reads
SKILLOS_SERVICES = {"skillrepo": "skillrepo", "alfworld": "envs", "webshop": "envs", "reasoning": "envs",
                    "executor": "executor", "curator": "curator", "llm": "llm", "trainer": "trainer",
                    "console": "console", "mcp": "mcp"}
PORTS = {"skillrepo": 8001, "executor": 8002, "curator": 8003, "console": 8004, "mcp": 8005, "alfworld": 8010,
         "webshop": 8011, "reasoning": 8012, "llm": 8080}


def skip_or_fail(msg: str) -> NoReturn:
    """Skip on a developer machine; fail under CI=true, where nothing a consistency test checks may be
    missing (a renamed module or an absent tool would otherwise pass silently)."""
    if IN_CI:
        pytest.fail(f"{msg} (CI=true: a deploy consistency test may not skip)", pytrace=False)
    pytest.skip(msg)


def import_or_fail(module: str, what: str) -> ModuleType:
    """`importlib.import_module(module)`; a module that cannot be imported skips the test outside CI
    and fails it under CI=true (unlike `pytest.importorskip`, which always skips)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        skip_or_fail(f"{what} ({module}) cannot be imported: {e}")


def tool(name: str) -> str:
    """Path of a real binary; fails in CI (scripts/setup.sh installs them), skips elsewhere."""
    local = VENV_BIN / name
    path = str(local) if local.exists() else shutil.which(name)
    if path is None:
        skip_or_fail(f"{name} not found in .venv/bin or PATH "
                     "(bash scripts/install-k8s-tools.sh / pip install -e .[dev])")
    return path


def run(*args: str, check: bool = True, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), capture_output=True, text=True, cwd=cwd, timeout=300, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


# ---------------------------------------------------------------------------------------------- helm
def helm_template(*values: str, sets: tuple[str, ...] = (), release: str = "skillos", chart: Path = CHART,
                  kube_version: str | None = None) -> list[dict]:
    args = [tool("helm"), "template", release, str(chart), "--namespace", "skillos"]
    if kube_version:
        args += ["--kube-version", kube_version]
    for v in values:
        args += ["-f", str(CHART / v)]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(run(*args).stdout) if d]


def values_files() -> list[str]:
    return sorted(p.name for p in CHART.glob("values*.yaml"))


# --------------------------------------------------------------------------------- kubernetes schemas
def validate_k8s(objs: list[dict], versions: tuple[str, ...] = K8S_VERSIONS) -> list[str]:
    """Validate every object against the Kubernetes OpenAPI schemas shipped in kubernetes-validate
    (strict: unknown fields are errors), for each version in K8S_VERSIONS; every error is reported.
    Custom resources (ServiceMonitor) are checked against tests/deploy/schemas/."""
    import jsonschema

    errors = []
    for obj in objs:
        where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        for version in versions:
            validator = _k8s_validator(version, obj["kind"], obj["apiVersion"])
            if validator is None:
                schema = crd_schema(obj)
                if schema is None:
                    errors.append(f"{where}: no schema for {obj['apiVersion']} {obj['kind']}")
                else:
                    errors += [f"{where} ({obj['kind']} CRD schema): {e.message} at {list(e.path)}"
                               for e in jsonschema.Draft7Validator(schema).iter_errors(obj)]
                break
            errors += [f"{where} (k8s {version}): {e.message} at {list(e.path)}"
                       for e in validator.iter_errors(obj)]
    return errors


@functools.cache
def _k8s_definitions(schema_dir: str, version: str):
    from kubernetes_validate.utils import Resource, schema_contents

    return Resource.from_contents(schema_contents(f"kubernetes-json-schema/{schema_dir}/_definitions.json", version))


@functools.cache
def _k8s_validator(version: str, kind: str, api_version: str):
    """kubernetes-validate's own schema lookup (kubernetes_validate.utils.validate), compiled once."""
    import jsonschema
    from kubernetes_validate.utils import Registry, Resource, all_versions, major_minor, schema_contents

    schema_version = [v for v in all_versions() if major_minor(v) <= major_minor(version)][-1]
    schema_dir = f"v{schema_version}-local-strict"
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = schema_contents(f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{group}.json", version)
    except FileNotFoundError:
        return None
    registry = _k8s_definitions(schema_dir, version) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def crd_schema(obj: dict) -> dict | None:
    import json

    name = f"{obj['kind'].lower()}-{obj['apiVersion'].replace('/', '-')}.json"
    path = Path(__file__).parent / "schemas" / name
    return json.loads(path.read_text()) if path.exists() else None


# -------------------------------------------------------------------------------------------- compose
_VAR = re.compile(r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])((?:[^{}]|\{[^{}]*\})*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


class MissingVariable(ValueError):
    pass


def interpolate(text: str, variables: dict[str, str]) -> str:
    """Compose-spec interpolation: $$, $VAR, ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}, ${VAR?err}."""
    def repl(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3)
        value = variables.get(name)
        if op in (":-", "-"):
            unset = value is None or (op == ":-" and value == "")
            return interpolate(arg, variables) if unset else value
        if op in (":?", "?"):
            if value is None or (op == ":?" and value == ""):
                raise MissingVariable(f"{name}: {arg}")
            return value
        return value or ""
    return _VAR.sub(repl, text)


def read_env_file(path: Path, variables: dict[str, str] | None = None) -> dict[str, str]:
    """NAME=value lines. With ``variables`` (what is set before this file: the environment, earlier env files),
    a value is interpolated as Compose v2 reads an `--env-file` (deploy/gpu.env requires VLLM_API_KEY with
    ${VLLM_API_KEY:?...}): a required variable that is unset raises MissingVariable."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value if variables is None else interpolate(value, {**variables, **env})
    return env


def commented_env_names(path: Path) -> set[str]:
    """Names listed as `# NAME=` lines: kept at the code default on purpose."""
    return set(re.findall(r"^#\s*(SKILLOS_[A-Z0-9_]+)=\s*$", path.read_text(), re.MULTILINE))


def load_compose(variables: dict[str, str]) -> dict:
    return yaml.safe_load(interpolate(COMPOSE.read_text(), variables))


def service_env(compose: dict, service: str) -> dict[str, str]:
    """The environment a compose service's container gets: its env files, then `environment`."""
    svc = compose["services"][service]
    env: dict[str, str] = {}
    for entry in svc.get("env_file", []) or []:
        path = entry["path"] if isinstance(entry, dict) else entry
        env.update(read_env_file(ROOT / path))
    environment = svc.get("environment", {}) or {}
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    env.update({k: "" if v is None else str(v) for k, v in environment.items()})
    return env

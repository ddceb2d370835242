"""Every setting the services read is set or defaulted in compose and in the Helm values, under
the same name as in the code, and the values given there are valid for the code's settings classes.

The list of settings comes from the code (deploy_inventory.collect()); a part whose settings module
does not exist is skipped with the reason on a developer machine and fails under CI=true."""

from __future__ import annotations

import base64
import re

import pytest
import yaml
from deploy_inventory import all_part_modules, collect, is_secret
from deploy_tools import (
    CHART,
    COMPOSE,
    ENV_FILE,
    ROOT,
    SKILLOS_SERVICES,
    commented_env_names,
    helm_template,
    load_compose,
    service_env,
    skip_or_fail,
    values_files,
)

# what an operator puts in .env: compose refuses to start without either
TOKEN = {"SKILLOS_API_TOKEN": "t0ken-for-tests", "POSTGRES_PASSWORD": "pg-passw0rd-for-tests"}
INV = collect()
NAME = re.compile(r"\bSKILLOS_[A-Z0-9_]*[A-Z0-9]\b")
# SKILLOS_ names in the deployment files that are not settings: none may exist, they would be typos;
# HEALTHCHECK_PORT, IMAGE_TAG etc. are deliberately not SKILLOS_-prefixed.
DEPLOY_FILES = [COMPOSE, ENV_FILE, ROOT / "deploy" / "gpu.env", ROOT / "deploy" / "smollm2.env",
                ROOT / "deploy" / "Dockerfile",
                *sorted(CHART.rglob("*.yaml")), *sorted(CHART.rglob("*.tpl")),
                *sorted((ROOT / "k8s").rglob("*.yaml")), *sorted((ROOT / "k8s").rglob("*.env"))]


def part_names(part: str) -> set[str]:
    """Settings one part reads (its class' fields, or the LLM role settings for `llm`)."""
    if part in INV.missing_parts:
        skip_or_fail(f"settings of part {part!r} not checked: {INV.missing_parts[part]}")
    if part == "llm":
        return {n for n, s in INV.settings.items() if s.required and "LLM_" in n}
    cls = INV.classes[part]
    return {(cls.model_config.get("env_prefix", "") + f).upper() for f in cls.model_fields}


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose(TOKEN)


@pytest.fixture(scope="module")
def helm_values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


@pytest.fixture(scope="module")
def helm_env() -> dict[str, str]:
    """The environment every SkillOS pod gets from the default chart: ConfigMap + Secret."""
    objs = helm_template("values.yaml")
    env = dict(next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "skillos-config")["data"])
    secret = next(o for o in objs if o["kind"] == "Secret")
    env.update({k: base64.b64decode(v).decode() for k, v in secret["data"].items()})
    return env


@pytest.mark.parametrize("part", list(all_part_modules()))
def test_every_setting_is_set_or_defaulted_in_compose(part, compose):
    names = part_names(part)
    documented = commented_env_names(ENV_FILE)
    if part == "common":
        services = list(SKILLOS_SERVICES)
    elif part == "llm":
        services = ["executor", "curator", "llm"]
    else:
        # a part without a compose service of its own must find its settings in the shared env file
        services = [s for s, p in SKILLOS_SERVICES.items() if p == part] or ["executor"]
    for service in services:
        env = service_env(compose, service)
        missing = sorted(n for n in names if n not in env and n not in documented)
        assert not missing, (f"compose service {service} lacks {missing}: add them to deploy/skillos.env "
                             f"(NAME=value, or '# NAME=' to keep the code default); "
                             f"`.venv/bin/python tests/deploy/deploy_inventory.py --write-missing` does it")


@pytest.mark.parametrize("part", list(all_part_modules()))
def test_every_setting_is_set_or_defaulted_in_helm(part, helm_values, helm_env):
    names = part_names(part)
    listed = set(helm_values["config"]) | set(helm_values["secretConfig"])
    missing = sorted(n for n in names if n not in listed and n not in helm_env)
    assert not missing, (f"add {missing} to config (or secretConfig) in deploy/helm/skillos/values.yaml "
                         f"(`.venv/bin/python tests/deploy/deploy_inventory.py --write-missing`)")


def test_no_unknown_setting_names_in_deployment_files():
    """A SKILLOS_ name the code does not read is a typo that silently does nothing."""
    known = INV.known
    unknown = {}
    for path in DEPLOY_FILES:
        for name in set(NAME.findall(path.read_text())) - known:
            unknown.setdefault(name, []).append(str(path.relative_to(ROOT)))
    if INV.missing_parts:
        # names a part without a settings module yet may read: only its own prefix is tolerated
        unknown = {n: p for n, p in unknown.items()
                   if not any(n.startswith(f"SKILLOS_{part.upper()}_") for part in INV.missing_parts)}
    assert not unknown, f"not read by any settings class or CLI option: {unknown}"


def test_secrets_stay_out_of_config_maps(helm_values):
    assert not [k for k in helm_values["config"] if is_secret(k)]
    for values in values_files():
        for obj in helm_template(values):
            if obj["kind"] == "ConfigMap":
                assert not [k for k in obj.get("data", {}) if is_secret(k)], (values, obj["metadata"]["name"])
    k8s_env = (ROOT / "k8s" / "base" / "skillos.env").read_text()
    assert not [n for n in NAME.findall(k8s_env) if is_secret(n)]


def _settings_from(env: dict[str, str], monkeypatch) -> dict[str, object]:
    """Instantiate every part's settings class from exactly this environment."""
    import os

    for key in [k for k in os.environ if k.startswith("SKILLOS_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    built = {part: cls(_env_file=None) for part, cls in INV.classes.items()}
    from skillos.llm.settings import LLMSettings

    monkeypatch.chdir(ROOT / "deploy")  # no .env here: only the given environment counts
    built.update({f"llm:{role}": LLMSettings.for_role(role) for role in ("executor", "curator", "judge")})
    return built


@pytest.mark.parametrize("service", [s for s in SKILLOS_SERVICES if s != "trainer"])
def test_compose_values_are_valid_for_the_code(service, compose, monkeypatch):
    env = service_env(compose, service)
    built = _settings_from(env, monkeypatch)
    common = built["common"]
    hosts = set(compose["services"])
    for url in (common.skillrepo_url, common.executor_url, common.curator_url, common.alfworld_url,
                common.webshop_url, common.reasoning_url):
        assert url.split("//")[1].split(":")[0] in hosts, url
    assert str(common.alfworld_data) == "/data/alfworld" and common.api_token == TOKEN["SKILLOS_API_TOKEN"]
    for role in ("executor", "curator", "judge"):
        host = built[f"llm:{role}"].base_url.split("//")[1].split(":")[0]
        assert host in hosts, f"{role} LLM at {host}"
    if "skillrepo" in built:
        assert built["skillrepo"].auth_mode == "tokens" and built["skillrepo"].redis_url


@pytest.mark.parametrize("values", ["values.yaml", "values-gpu.yaml", "values-external-db.yaml"])
def test_helm_values_are_valid_for_the_code(values, monkeypatch):
    objs = helm_template(values)
    env = dict(next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "skillos-config")["data"])
    secret = next(o for o in objs if o["kind"] == "Secret")
    env.update({k: base64.b64decode(v).decode() for k, v in secret["data"].items()})
    built = _settings_from(env, monkeypatch)
    services = {o["metadata"]["name"] for o in objs if o["kind"] == "Service"}
    common = built["common"]
    for url in (common.skillrepo_url, common.executor_url, common.alfworld_url):
        assert url.split("//")[1].split(":")[0] in services, url
    for role in ("executor", "curator", "judge"):
        assert built[f"llm:{role}"].base_url.split("//")[1].split(":")[0] in services
    if "skillrepo" in built:
        repo = built["skillrepo"]
        assert repo.database_url.startswith("postgresql+psycopg://")
        assert repo.auth_mode == "tokens" and repo.auth_tokens.endswith(":rw") and common.api_token

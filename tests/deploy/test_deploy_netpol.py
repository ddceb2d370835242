"""The chart's NetworkPolicies and the vLLM key (issue 51, item 9: each service reachable only by its callers;
no vLLM without its key).

Who calls whom is read from the code and the rendered objects, not listed by hand: each pod's settings class
(the part its container serves, `skillos serve <command>`; the trainer Job's TrainerSettings and its config's
sync.vllm_url and rendezvous address; the `helm test` pod's script), the addresses it reads (fields ending in
`_url`; the LLM roles its part asks for, `LLMSettings.for_role("...")` under services/<part>/), their values in
the pod's rendered ConfigMap, Secret and env, resolved to Services. Every Service must have one NetworkPolicy
selecting its pods whose ingress comes from exactly those readers' pods (besides the configured extra peers),
on the port the Service targets; a control shows the check catches a policy that lets in one pod too many."""

from __future__ import annotations

import base64
import copy
import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from deploy_inventory import collect
from deploy_tools import CHART, ROOT, SKILLOS_SERVICES, helm_template, run, tool

COMPONENT = "app.kubernetes.io/component"
INV = collect()
# the env server's own address, handed to its callers with each session (the pod's IP): not one it calls
OWN_ADDRESS = {"env_advertise_url"}
ROLE_CALL = re.compile(r"""for_role\(\s*["'](\w+)["']""")
ENV_READ = re.compile(r"""os\.environ(?:\.get\(|\[)\s*["'](SKILLOS_\w+_URL)["']""")

VARIANTS = [
    ("values.yaml", ()), ("values-cpu.yaml", ()), ("values-gpu.yaml", ()), ("values-training.yaml", ()),
    ("values-external-db.yaml", ()), ("values-external-llm.yaml", ()),
    ("values-gpu.yaml", ("llm.vllm.judgeRole=executor",)),
    ("values.yaml", ("tests.enabled=false", "services.console.enabled=false")),
    ("values.yaml", ("trainer.enabled=true", "trainer.gpusPerNode=0")),
]


def by_kind(objs: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def pod_specs(objs: list[dict]) -> dict[str, dict]:
    """component -> pod spec of every workload (Deployments, StatefulSets, the Job, the helm test Pod)"""
    pods = {}
    for o in objs:
        if o["kind"] in ("Deployment", "StatefulSet", "Job"):
            pods[o["spec"]["template"]["metadata"]["labels"][COMPONENT]] = o["spec"]["template"]["spec"]
        elif o["kind"] == "Pod":
            pods[o["metadata"]["labels"][COMPONENT]] = o["spec"]
    return pods


def pod_env(spec: dict, objs: list[dict]) -> dict[str, str]:
    """What the pod's first container sees: envFrom (ConfigMap, Secret), then env (values, Secret keys)."""
    maps = {n: o.get("data", {}) for n, o in by_kind(objs, "ConfigMap").items()}
    secrets = {n: {k: base64.b64decode(v).decode() for k, v in o.get("data", {}).items()}
               for n, o in by_kind(objs, "Secret").items()}
    c = spec["containers"][0]
    env: dict[str, str] = {}
    for ref in c.get("envFrom", []):
        if "configMapRef" in ref:
            env.update(maps.get(ref["configMapRef"]["name"], {}))
        if "secretRef" in ref:
            env.update(secrets.get(ref["secretRef"]["name"], {}))
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "secretKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["secretKeyRef"]
            if ref["key"] in secrets.get(ref["name"], {}):
                env[e["name"]] = secrets[ref["name"]][ref["key"]]
    return env


def part_of(component: str, spec: dict) -> str | None:
    """The part whose settings a pod reads: `skillos serve <command>`'s, the trainer's, none for other images."""
    c = spec["containers"][0]
    if component == "trainer":
        return "trainer"
    args = c.get("args", [])
    if args[:1] == ["serve"]:
        return SKILLOS_SERVICES[args[1]]
    return None


def llm_roles(part: str) -> set[str]:
    """The LLM roles a part's code asks for (`LLMSettings.for_role("...")` anywhere under services/<part>/)."""
    folder = ROOT / "services" / part
    return {role for path in folder.rglob("*.py") for role in ROLE_CALL.findall(path.read_text())} \
        if folder.is_dir() else set()


def addresses(component: str, spec: dict, objs: list[dict]) -> set[str]:
    """Every URL the pod's code reads, with the values it gets in this render."""
    env = pod_env(spec, objs)
    urls: set[str] = set()
    part = part_of(component, spec)
    if component == "test":   # the helm test pod's script: what it reads from its environment
        names = set(ENV_READ.findall(spec["containers"][0]["args"][0]))
        assert names, "the helm test pod reads no address: the regex no longer matches its script"
        return {env[n] for n in names}
    if part is None:
        return urls
    # the embedded LLM server has no settings class: it reads `skillos serve llm`'s options (model, slots,
    # threads; no address) and calls nobody
    cls = INV.classes.get(part)
    assert cls is not None or part == "llm", f"no settings class for part {part!r}"
    for field in (cls.model_fields if cls else ()):
        if field.endswith("_url") and field not in OWN_ADDRESS:
            value = env.get(f"SKILLOS_{field.upper()}")
            if value:
                urls.add(value)
    for role in llm_roles(part):
        value = env.get(f"SKILLOS_{role.upper()}_LLM_BASE_URL") or env.get("SKILLOS_LLM_BASE_URL")
        if value:
            urls.add(value)
    if component == "trainer":
        train = yaml.safe_load(by_kind(objs, "ConfigMap")["skillos-trainer-config"]["data"]["train.yaml"])
        sync = train.get("sync") or {}
        if str(sync.get("backend", "")).startswith("vllm"):
            urls.add(sync["vllm_url"])
        master = next(a for a in spec["containers"][0]["args"] if a.startswith("--master-addr="))
        urls.add("tcp://" + master.split("=", 1)[1])
    return urls


def service_of(url: str, services: dict[str, dict]) -> str | None:
    host = urlsplit(url).hostname or ""
    labels = host.split(".")
    for i in range(len(labels)):   # a Service name, or <pod>.<headless Service>
        if labels[i] in services:
            return labels[i]
    return None


def expected_callers(objs: list[dict]) -> dict[str, set[str]]:
    """Service name -> the components of the pods whose code reads an address of it."""
    services = by_kind(objs, "Service")
    callers: dict[str, set[str]] = {name: set() for name in services}
    for component, spec in pod_specs(objs).items():
        for url in addresses(component, spec, objs):
            svc = service_of(url, services)
            if svc is not None:
                callers[svc].add(component)
    return callers


def _ours(peer: dict) -> str | None:
    """The component of a peer that is one of the release's own pods (a bare podSelector), else None."""
    labels = peer.get("podSelector", {}).get("matchLabels", {})
    if set(peer) == {"podSelector"} and labels.get("app.kubernetes.io/instance") == "skillos" and COMPONENT in labels:
        return labels[COMPONENT]
    return None


def target_port(svc: dict, pods: dict[str, dict]) -> int:
    target = svc["spec"]["ports"][0].get("targetPort", svc["spec"]["ports"][0]["port"])
    if isinstance(target, int):
        return target
    spec = pods[svc["spec"]["selector"][COMPONENT]]
    return next(p["containerPort"] for c in spec["containers"] for p in c.get("ports", []) if p.get("name") == target)


def policy_problems(objs: list[dict], extra: dict[str, list] | None = None) -> list[str]:
    """What is wrong with the NetworkPolicies of a render: a Service without exactly one policy selecting its pods,
    a policy whose own-pod peers are not exactly the Service's callers, a rule open to everyone, a wrong port."""
    extra = extra or {}
    problems = []
    policies = list(by_kind(objs, "NetworkPolicy").values())
    pods = pod_specs(objs)
    callers = expected_callers(objs)
    for name, svc in by_kind(objs, "Service").items():
        component = svc["spec"]["selector"][COMPONENT]
        mine = [p for p in policies if p["spec"]["podSelector"].get("matchLabels") == svc["spec"]["selector"]]
        if len(mine) != 1:
            problems.append(f"Service {name}: {len(mine)} NetworkPolicies select its pods")
            continue
        spec = mine[0]["spec"]
        if spec.get("policyTypes") != ["Ingress"]:
            problems.append(f"{name}: policyTypes {spec.get('policyTypes')}")
        found, others = set(), []
        # every port, when the callers are the pods of the same Job (the trainer's collectives pick theirs)
        port = None if callers[name] == {component} else target_port(svc, pods)
        for rule in spec.get("ingress", []):
            if not rule.get("from"):
                problems.append(f"{name}: an ingress rule without `from` lets everyone in")
                continue
            for peer in rule["from"]:
                (found.add(_ours(peer)) if _ours(peer) else others.append(peer))
            ports = [(p["port"], p.get("protocol", "TCP")) for p in rule.get("ports", [])]
            if ports != ([] if port is None else [(port, "TCP")]):
                problems.append(f"{name}: a rule on ports {ports}, the Service targets {port}")
        if found != callers[name]:
            problems.append(f"{name}: lets in {sorted(found)}, but its callers are {sorted(callers[name])}")
        if [p for p in others if p not in extra.get(component, [])]:
            problems.append(f"{name}: lets in peers nobody configured: {others}")
    return problems


@pytest.mark.parametrize("values, sets", VARIANTS, ids=lambda v: v if isinstance(v, str) else ",".join(v) or "-")
def test_every_service_is_reachable_only_by_the_pods_that_call_it(values, sets):
    objs = helm_template(values, sets=sets)
    assert by_kind(objs, "NetworkPolicy"), "networkPolicy.enabled is the default"
    metrics = {}
    monitor = by_kind(objs, "ServiceMonitor")
    if monitor:   # Prometheus' peers, on every scraped service
        peers = yaml.safe_load((CHART / values).read_text())["networkPolicy"]["metricsFrom"]
        scraped = monitor["skillos"]["spec"]["selector"]["matchExpressions"][0]["values"]
        metrics = {c: peers for c in scraped}
    assert policy_problems(objs, metrics) == []


def test_the_callers_of_the_default_render_read_as_intended():
    """The derivation above, spelled out for the default chart and a training release."""
    def callers(objs):
        return {svc: found for svc, found in expected_callers(objs).items()}

    assert callers(helm_template("values.yaml")) == {
        "skillos-skillrepo": {"executor", "curator", "console", "test"},
        "skillos-executor": {"test"},          # the skill gateway: clients come through networkPolicy.extraFrom
        "skillos-curator": {"executor"},
        "skillos-alfworld": {"executor"}, "skillos-webshop": {"executor"}, "skillos-reasoning": {"executor"},
        "skillos-console": set(),              # people, through port-forward or networkPolicy.extraFrom
        "skillos-llm": {"executor", "curator"},
        "skillos-postgresql": {"skillrepo", "executor"},
        "skillos-redis": {"skillrepo"},
    }
    training = callers(helm_template("values-training.yaml"))
    assert training["skillos-vllm-executor"] == {"executor"}
    assert training["skillos-vllm-curator"] == {"curator", "trainer"}
    assert training["skillos-trainer"] == {"trainer"}
    assert training["skillos-alfworld"] == {"executor", "trainer"}


def test_the_check_catches_a_policy_that_lets_in_too_much_or_is_missing():
    """Control: one pod too many on PostgreSQL, a rule open to all, a missing policy are each reported."""
    objs = helm_template("values.yaml")
    assert policy_problems(objs) == []
    pg = next(o for o in objs if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "skillos-postgresql")
    console = copy.deepcopy(pg["spec"]["ingress"][0]["from"][0])
    console["podSelector"]["matchLabels"][COMPONENT] = "console"
    pg["spec"]["ingress"][0]["from"].append(console)
    assert any("skillos-postgresql: lets in ['console', 'executor', 'skillrepo']" in p for p in policy_problems(objs))
    pg["spec"]["ingress"][0]["from"] = []
    assert any("without `from`" in p for p in policy_problems(objs))
    objs.remove(pg)
    assert "Service skillos-postgresql: 0 NetworkPolicies select its pods" in policy_problems(objs)


def test_extra_peers_and_prometheus_reach_only_the_ports_they_are_given():
    ingress = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
    agents = {"podSelector": {"matchLabels": {"app": "my-agent"}}}
    objs = helm_template("values.yaml", sets=(
        "networkPolicy.extraFrom.console[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=ingress-nginx",
        "networkPolicy.extraFrom.executor[0].podSelector.matchLabels.app=my-agent"))
    assert policy_problems(objs, {"console": [ingress], "executor": [agents]}) == []
    policies = by_kind(objs, "NetworkPolicy")
    assert policies["skillos-console"]["spec"]["ingress"] == [{"from": [ingress], "ports": [{"port": 8004, "protocol": "TCP"}]}]
    assert agents in policies["skillos-executor"]["spec"]["ingress"][0]["from"]
    assert policies["skillos-postgresql"]["spec"]["ingress"][0]["from"] == policy_peers(objs, "skillrepo", "executor")
    # without extra peers the console lets nobody in (an empty `ingress`, never a rule without `from`)
    assert by_kind(helm_template("values.yaml"), "NetworkPolicy")["skillos-console"]["spec"]["ingress"] == []
    # off: no policies at all
    assert not by_kind(helm_template("values.yaml", sets=("networkPolicy.enabled=false",)), "NetworkPolicy")


def policy_peers(objs: list[dict], *components: str) -> list[dict]:
    """The podSelector peers the chart writes for these components, sorted as it sorts them."""
    return [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "skillos", "app.kubernetes.io/instance": "skillos",
                                             COMPONENT: c}}} for c in sorted(components)]


@pytest.mark.parametrize("sets, message", [
    (("networkPolicy.extraFrom.consol[0].podSelector.matchLabels.app=x",),
     "networkPolicy.extraFrom.consol: this release has no such component"),
    (("serviceMonitor.enabled=true",), "serviceMonitor.enabled with networkPolicy.enabled needs networkPolicy.metricsFrom"),
    (("networkPolicy.extraFrom.console[0].podSelectr.app=x",), "Additional property podSelectr is not allowed"),
    # vLLM serves one key: a role's own key that differs from it would be refused on every call
    (("llm.mode=vllm", "modelCache.enabled=true", "secretConfig.SKILLOS_CURATOR_LLM_API_KEY=other"),
     "secretConfig: SKILLOS_CURATOR_LLM_API_KEY differs from SKILLOS_LLM_API_KEY"),
])
def test_bad_network_and_key_values_fail_with_a_message(sets, message):
    args = [tool("helm"), "template", "skillos", str(CHART)]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------------------ the vLLM key
LOOKUP = '{{- $existing := lookup "v1" "Secret" .root.Release.Namespace .secret -}}'


def chart_with_cluster_secret(tmp_path: Path, data: dict[str, str]) -> Path:
    """A copy of the chart whose `lookup` of a Secret answers as a cluster holding `my-secrets` with ``data`` would
    (`helm template` has no cluster: the real lookup answers nothing there)."""
    chart = tmp_path / "skillos"
    shutil.copytree(CHART, chart)
    helpers = chart / "templates" / "_helpers.tpl"
    text = helpers.read_text()
    assert text.count(LOOKUP) == 1, "the Secret lookup of _helpers.tpl changed: update this test's stub"
    encoded = " ".join(f'"{k}" "{base64.b64encode(v.encode()).decode()}"' for k, v in data.items())
    stub = ('{{- $existing := dict -}}{{- if eq .secret "my-secrets" }}'
            f'{{{{- $existing = dict "data" (dict {encoded}) -}}}}{{{{- end }}}}')
    helpers.write_text(text.replace(LOOKUP, stub))
    return chart


@pytest.mark.parametrize("data, message", [
    ({"SKILLOS_API_TOKEN": "t0ken"}, "existingSecret my-secrets has no SKILLOS_LLM_API_KEY: llm.mode=vllm starts"),
    ({"SKILLOS_API_TOKEN": "t0ken", "SKILLOS_LLM_API_KEY": ""}, "existingSecret my-secrets has no SKILLOS_LLM_API_KEY"),
    ({"SKILLOS_LLM_API_KEY": "k", "SKILLOS_EXECUTOR_LLM_API_KEY": "other"},
     "existingSecret my-secrets: SKILLOS_EXECUTOR_LLM_API_KEY differs from SKILLOS_LLM_API_KEY"),
    ({"SKILLOS_LLM_API_KEY": "k", "SKILLOS_EXECUTOR_LLM_API_KEY": "k"}, None),
])
def test_an_existing_secret_without_the_vllm_key_fails_the_install(data, message, tmp_path):
    chart = chart_with_cluster_secret(tmp_path, data)
    args = [tool("helm"), "template", "skillos", str(chart), "-f", str(CHART / "values-gpu.yaml"),
            "--set", "existingSecret=my-secrets"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    if message is None:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr
        assert "kubectl -n default patch secret my-secrets" in proc.stderr or "differs" in message
    # the same chart, for a release without vLLM: nothing asked of the Secret
    run(tool("helm"), "template", "skillos", str(chart), "--set", "existingSecret=my-secrets")


def test_without_a_cluster_the_vllm_pods_still_need_the_key():
    """`helm template` cannot read an existingSecret: the render goes through, and the key stays required where the
    pods start (a non-optional Secret key; the container's guard, below)."""
    objs = helm_template("values-gpu.yaml", sets=("existingSecret=my-secrets",))
    for name in ("skillos-vllm-executor", "skillos-vllm-curator"):
        c = by_kind(objs, "Deployment")[name]["spec"]["template"]["spec"]["containers"][0]
        ref = next(e for e in c["env"] if e["name"] == "VLLM_API_KEY")["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "my-secrets", "key": "SKILLOS_LLM_API_KEY"}, "optional would start vLLM without a key"


@pytest.mark.parametrize("key, starts", [(None, False), ("", False), ("CHANGE-ME", False), ("changeme", False),
                                         ("Change_Me", False), ("k3y-0f-y0ur-own", True)])
def test_the_vllm_container_refuses_to_start_without_a_real_key(key, starts, tmp_path):
    """The chart's vLLM command as the container runs it (`/bin/sh -c <guard> vllm-serve <args>`), a stand-in
    `vllm` on PATH: no key, an empty one or a template placeholder stops it with a message naming the Secret."""
    from skillos.placeholders import PLACEHOLDERS

    objs = helm_template("values-gpu.yaml")
    c = by_kind(objs, "Deployment")["skillos-vllm-curator"]["spec"]["template"]["spec"]["containers"][0]
    for placeholder in PLACEHOLDERS:
        assert placeholder in c["args"][0]
    fake = tmp_path / "vllm"
    fake.write_text('#!/bin/sh\necho "vllm $*"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", **({} if key is None else {"VLLM_API_KEY": key})}
    proc = subprocess.run([*c["command"], *c["args"]], capture_output=True, text=True, timeout=30, check=False, env=env)
    if starts:
        assert proc.returncode == 0 and proc.stdout.strip() == "vllm serve " + " ".join(c["args"][2:]), proc
    else:
        assert proc.returncode == 1 and not proc.stdout
        assert "VLLM_API_KEY (SKILLOS_LLM_API_KEY of Secret skillos-secrets) is empty or a placeholder" in proc.stderr


def test_kustomize_gpu_overlay_holds_the_vllm_key_as_a_placeholder():
    """k8s/overlays/gpu: the key in the generated Secret (a placeholder the vLLM containers refuse), the vLLM
    servers reading it, every SkillOS service getting it with the Secret; the base and cpu overlay have none."""
    def kustomize(path):
        out = run(tool("kubectl"), "kustomize", str(ROOT / "k8s" / path)).stdout
        return [d for d in yaml.safe_load_all(out) if d]

    objs = kustomize("overlays/gpu")
    secret = next(o for o in objs if o["kind"] == "Secret")
    assert base64.b64decode(secret["data"]["SKILLOS_LLM_API_KEY"]).decode() == "CHANGE-ME"
    for dep in (o for o in objs if o["kind"] == "Deployment"):
        c = dep["spec"]["template"]["spec"]["containers"][0]
        if dep["metadata"]["name"].startswith("skillos-vllm-"):
            ref = next(e for e in c["env"] if e["name"] == "VLLM_API_KEY")["valueFrom"]["secretKeyRef"]
            assert ref == {"name": secret["metadata"]["name"], "key": "SKILLOS_LLM_API_KEY"}
            assert "change-me" in c["args"][0]
        elif dep["metadata"]["name"] in ("skillos-executor", "skillos-curator"):
            assert {"secretRef": {"name": secret["metadata"]["name"]}} in c["envFrom"]
    for path in ("base", "overlays/cpu"):
        secret = next(o for o in kustomize(path) if o["kind"] == "Secret")
        assert "SKILLOS_LLM_API_KEY" not in secret["data"]
    # the NetworkPolicies come along, and the gpu overlay's let Prometheus scrape
    policies = {o["metadata"]["name"]: o for o in objs if o["kind"] == "NetworkPolicy"}
    assert {"skillos-vllm-executor", "skillos-vllm-curator", "skillos-postgresql", "skillos-skillrepo"} <= set(policies)
    assert any("namespaceSelector" in p for r in policies["skillos-executor"]["spec"]["ingress"] for p in r["from"])

"""What the chart meets on a real API server and a plain `helm template` does not show: the Secret it
keeps and reads back with `lookup` on every upgrade, the API versions an older cluster serves, the
Kubernetes versions it accepts, and requests that fit a small node. `make k8s-check`
(deploy/k8s_check.py) runs the same on the local v1.20.2 cluster; these tests keep what it found fixed.

`lookup` returns nothing under `helm template`, so the upgrade tests render a copy of the chart whose
one `lookup` reads the Secret of the previous render from a file instead of the API server."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from deploy_tools import CHART, K8S_OLDEST, helm_template, tool, validate_k8s, values_files

LOOKUP = 'lookup "v1" "Secret" .root.Release.Namespace .secret'


def chart_with_kept_secret(tmp_path: Path, kept: dict | None) -> Path:
    """A copy of the chart whose `lookup` of its own Secret returns `kept` (None: no Secret yet)."""
    chart = tmp_path / "skillos"
    if chart.exists():
        shutil.rmtree(chart)
    shutil.copytree(CHART, chart)
    helpers = chart / "templates" / "_helpers.tpl"
    text = helpers.read_text()
    assert text.count(LOOKUP) == 1, "the chart reads its Secret back in one place"
    helpers.write_text(text.replace(LOOKUP, '(.root.Files.Get "kept-secret.yaml" | fromYaml)'))
    (chart / "kept-secret.yaml").write_text(yaml.safe_dump(kept or {}))
    return chart


def the_secret(objs: list[dict]) -> dict:
    return next(o for o in objs if o["kind"] == "Secret" and o["metadata"]["name"] == "skillos-secrets")


def decoded(secret: dict) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def release_life(tmp_path: Path, values: tuple[str, ...], *upgrades: tuple[str, ...],
                 install_sets: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """Install, then each upgrade with its --set values: the Secret's data after each step, every
    render reading back the Secret the one before it left (as `helm upgrade` does on a cluster)."""
    kept = None
    out = []
    for sets in (install_sets, *upgrades):
        objs = helm_template(*values, sets=sets, chart=chart_with_kept_secret(tmp_path, kept))
        kept = the_secret(objs)
        out.append(decoded(kept))
    return out


@pytest.mark.parametrize("values", ["values.yaml", "values-cpu.yaml"])
def test_upgrade_keeps_generated_secrets_and_recomputes_the_rest(tmp_path, values):
    """The defect found on a real cluster: every `helm upgrade` read the computed SKILLOS_DATABASE_URL
    back from the kept Secret and failed with "the bundled PostgreSQL needs postgresql.password"."""
    install, upgrade1, upgrade2 = release_life(tmp_path, (values,), (), ("config.SKILLOS_LOG_LEVEL=DEBUG",))
    assert upgrade1 == install and upgrade2 == install, "generated token and password stable across upgrades"
    assert install["SKILLOS_AUTH_TOKENS"] == install["SKILLOS_API_TOKEN"] + ":rw"
    assert f":{install['POSTGRES_PASSWORD']}@skillos-postgresql:5432/" in install["SKILLOS_DATABASE_URL"]
    assert install["SKILLOS_REDIS_URL"] == "redis://skillos-redis:6379/0"


def test_upgrade_follows_changed_values_instead_of_the_kept_secret(tmp_path):
    """Computed keys follow the values of the upgrade: a token given later replaces the generated one
    in SKILLOS_AUTH_TOKENS too (read back, the old token kept the services' own token out), and a
    password given later reaches SKILLOS_DATABASE_URL."""
    install, token, password = release_life(
        tmp_path, ("values.yaml",), ("secretConfig.SKILLOS_API_TOKEN=given-token",),
        ("secretConfig.SKILLOS_API_TOKEN=given-token", "postgresql.password=given-pw"))
    assert token["SKILLOS_API_TOKEN"] == "given-token"
    assert token["SKILLOS_AUTH_TOKENS"] == "given-token:rw"
    assert token["POSTGRES_PASSWORD"] == install["POSTGRES_PASSWORD"]
    assert password["POSTGRES_PASSWORD"] == "given-pw"
    assert ":given-pw@" in password["SKILLOS_DATABASE_URL"]


@pytest.mark.parametrize("values, sets", [
    (("values.yaml",), ("secretConfig.SKILLOS_DATABASE_URL=postgresql+psycopg://u:p@db:5432/x",
                        "postgresql.password=p")),
    (("values-external-db.yaml",), ()),
])
def test_upgrade_keeps_user_given_urls(tmp_path, values, sets):
    install, upgrade = release_life(tmp_path, values, sets, install_sets=sets)
    assert upgrade == install
    if sets:
        assert install["SKILLOS_DATABASE_URL"] == "postgresql+psycopg://u:p@db:5432/x"


def api_versions(objs: list[dict]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for o in objs:
        out.setdefault(o["kind"], set()).add(o["apiVersion"])
    return out


@pytest.mark.parametrize("kube_version, hpa, pdb", [
    (K8S_OLDEST, "autoscaling/v2beta2", "policy/v1beta1"),
    ("1.22.0", "autoscaling/v2beta2", "policy/v1"),
    ("1.27.0", "autoscaling/v2", "policy/v1"),
])
def test_hpa_and_pdb_api_versions_follow_the_cluster(kube_version, hpa, pdb):
    """1.20 serves neither autoscaling/v2 nor policy/v1: a chart that always renders them fails there."""
    found = api_versions(helm_template("values.yaml", kube_version=kube_version))
    assert found["HorizontalPodAutoscaler"] == {hpa}
    assert found["PodDisruptionBudget"] == {pdb}


# the oldest schemas kubernetes-validate ships offline; 1.25 still serves autoscaling/v2beta2 but no
# longer policy/v1beta1, whose PodDisruptionBudget spec is the one of policy/v1 for the fields the chart
# sets (selector, maxUnavailable/minAvailable). `make k8s-check` has the real 1.20 API server validate them.
OLDEST_OFFLINE_SCHEMAS = "1.25.0"


@pytest.mark.parametrize("values", [v for v in values_files() if v != "values-training.yaml"])
def test_renders_for_the_oldest_cluster_are_valid(values):
    """Chart.yaml's kubeVersion lets 1.20 in, and what it renders for 1.20 is valid (strict) against the
    oldest schemas at hand: the beta HPA version, and no field those versions do not know."""
    objs = helm_template(values, kube_version=K8S_OLDEST)
    for o in objs:
        if o["apiVersion"] == "policy/v1beta1":
            assert o["kind"] == "PodDisruptionBudget" and set(o["spec"]) <= {"selector", "maxUnavailable",
                                                                              "minAvailable"}
            o["apiVersion"] = "policy/v1"
    assert validate_k8s(objs, versions=(OLDEST_OFFLINE_SCHEMAS,)) == []


def test_kube_version_gates():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.19.0-0", "seccompProfile (securityContext field) is 1.19's"
    for version, values, sets, message in [
        ("1.18.0", "values.yaml", (), "chart requires kubeVersion"),
        (K8S_OLDEST, "values.yaml", ("trainer.enabled=true",), "trainer.enabled=true needs Kubernetes 1.22"),
    ]:
        args = [tool("helm"), "template", "skillos", str(CHART), "-f", str(CHART / values),
                "--kube-version", version]
        for s in sets:
            args += ["--set", s]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert helm_template("values-training.yaml", kube_version="1.22.0")


def cpu_millis(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def test_cpu_profile_fits_half_a_two_core_node():
    """values.yaml's requests reserve 3.3 cores with one replica each; the CPU profile is for a small
    node (the local cluster has 2 cores and the pods must leave room for the node itself)."""
    total = 0
    for o in helm_template("values-cpu.yaml"):
        if o["kind"] in ("Deployment", "StatefulSet"):
            pod = o["spec"]["template"]["spec"]
            total += o["spec"].get("replicas", 1) * sum(
                cpu_millis(c["resources"]["requests"]["cpu"]) for c in pod["containers"])
    assert 0 < total <= 1000, f"{total}m of CPU requested"


def claims(objs: list[dict]) -> dict[str, dict]:
    out = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "PersistentVolumeClaim"}
    for o in objs:
        if o["kind"] == "StatefulSet":
            for t in o["spec"].get("volumeClaimTemplates", []):
                out[f"{o['metadata']['name']}/{t['metadata']['name']}"] = t["spec"]
    return out


def test_every_claim_takes_the_storage_class_setting():
    sets = ("trainer.enabled=true", "modelCache.enabled=true")
    default = claims(helm_template("values.yaml", sets=sets))
    assert len(default) == 5 and all("storageClassName" not in c for c in default.values()), \
        "no setting: the cluster's default StorageClass"
    fast = claims(helm_template("values.yaml", sets=(*sets, "global.storageClass=fast")))
    assert {c["storageClassName"] for c in fast.values()} == {"fast"}
    own = claims(helm_template("values.yaml", sets=(*sets, "global.storageClass=fast",
                                                    "postgresql.persistence.storageClassName=ssd")))
    assert own["skillos-postgresql/data"]["storageClassName"] == "ssd"
    assert own["skillos-redis/data"]["storageClassName"] == "fast"
    static = claims(helm_template("values.yaml", sets=(*sets, "global.storageClass=-")))
    assert {c["storageClassName"] for c in static.values()} == {""}


def test_helm_test_pod_goes_through_the_services():
    """`helm test`'s pod: a hook, its script valid Python that reaches the skill repo and the executor by
    their Services' URLs (from the ConfigMap) with the release's token (from the Secret)."""
    objs = helm_template("values-cpu.yaml")
    pod = next(o for o in objs if o["kind"] == "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    c = pod["spec"]["containers"][0]
    compile(c["args"][0], "test-stack", "exec")
    assert {"configMapRef": {"name": "skillos-config"}} in c["envFrom"]
    assert {"secretRef": {"name": "skillos-secrets"}} in c["envFrom"]
    config = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "skillos-config")
    assert config["data"]["SKILLOS_SKILLREPO_URL"] == "http://skillos-skillrepo:8001"
    assert config["data"]["SKILLOS_EXECUTOR_URL"] == "http://skillos-executor:8002"
    episode = yaml.safe_load((CHART / "values.yaml").read_text())["tests"]["episode"]
    assert f'"env": "{episode["env"]}"' in c["args"][0]
    assert f'"max_turns": {episode["maxTurns"]},' in c["args"][0]
    few_turns = helm_template("values-cpu.yaml", sets=("tests.episode.maxTurns=1",))
    assert '"max_turns": 1,' in next(o for o in few_turns if o["kind"] == "Pod")["spec"]["containers"][0]["args"][0]
    assert not [o for o in helm_template("values-cpu.yaml", sets=("tests.enabled=false",)) if o["kind"] == "Pod"]
    no_episode = helm_template("values-cpu.yaml", sets=("tests.episode.enabled=false",))
    assert "/v1/episodes" not in next(o for o in no_episode if o["kind"] == "Pod")["spec"]["containers"][0]["args"][0]


def test_skill_repo_waits_for_the_bundled_postgresql():
    """On a real cluster the skill repo exited once on every install (PostgreSQL still initialising)."""
    dep = next(o for o in helm_template("values-cpu.yaml")
               if o["kind"] == "Deployment" and o["metadata"]["name"] == "skillos-skillrepo")
    init = dep["spec"]["template"]["spec"]["initContainers"][0]
    compile(init["args"][0], "wait-for-postgresql", "exec")
    assert '"skillos-postgresql"' in init["args"][0] and "5432" in init["args"][0]
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    external = next(o for o in helm_template("values-external-db.yaml")
                    if o["kind"] == "Deployment" and o["metadata"]["name"] == "skillos-skillrepo")
    assert "initContainers" not in external["spec"]["template"]["spec"]

"""Plain manifests in k8s/: in sync with the chart, and `kubectl kustomize` of the base and of
each overlay yields valid Kubernetes objects with the right LLM backend."""

from __future__ import annotations

import sys

import pytest
import yaml
from deploy_tools import ROOT, run, tool, validate_k8s

OVERLAYS = ("base", "overlays/cpu", "overlays/gpu")


def kustomize(path: str) -> list[dict]:
    out = run(tool("kubectl"), "kustomize", str(ROOT / "k8s" / path)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_k8s_manifests_match_the_chart():
    tool("helm")
    proc = run(sys.executable, "deploy/render_k8s.py", "--check", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", OVERLAYS)
def test_kustomize_output_is_valid_kubernetes(path):
    objs = kustomize(path)
    assert validate_k8s(objs) == []
    assert all(o["metadata"].get("namespace") == "skillos" for o in objs if o["kind"] != "Namespace")


@pytest.mark.parametrize("path, llm_url, gpus", [
    ("overlays/cpu", "http://skillos-llm:8080/v1", False),
    ("overlays/gpu", "http://skillos-vllm-curator:8000/v1", True),
])
def test_overlays_wire_the_llm_backend(path, llm_url, gpus):
    objs = kustomize(path)
    configs = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("skillos-config-")]
    assert len(configs) == 1, "one hashed settings ConfigMap"
    config = configs[0]
    assert config["data"]["SKILLOS_CURATOR_LLM_BASE_URL"] == llm_url
    # kustomize rewrote every reference to the hashed ConfigMap and Secret names
    secret_name = next(o["metadata"]["name"] for o in objs if o["kind"] == "Secret")
    for dep in (o for o in objs if o["kind"] == "Deployment" and not o["metadata"]["name"].startswith("skillos-vllm")):
        c = dep["spec"]["template"]["spec"]["containers"][0]
        refs, name = c["envFrom"], dep["metadata"]["name"]
        assert {"configMapRef": {"name": config["metadata"]["name"]}} in refs
        keyed = {e["valueFrom"]["secretKeyRef"]["name"] for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}
        if name in ("skillos-alfworld", "skillos-webshop", "skillos-reasoning"):   # the token list alone
            assert {"secretRef": {"name": secret_name}} not in refs and keyed == {secret_name}
        elif name == "skillos-llm":                                                   # no credential at all
            assert {"secretRef": {"name": secret_name}} not in refs and not keyed
        else:
            assert {"secretRef": {"name": secret_name}} in refs
    assert ("nvidia.com/gpu" in str(objs)) is gpus
    backend = {o["metadata"]["name"] for o in objs if o["kind"] == "Service"}
    host = llm_url.split("//")[1].split(":")[0]
    assert host in backend, f"{host} has no Service"


def test_kustomize_validation_catches_a_broken_overlay(tmp_path):
    """Control: a patch that breaks an object is caught by the same checks."""
    import shutil

    shutil.copytree(ROOT / "k8s", tmp_path / "k8s")
    overlay = tmp_path / "k8s" / "overlays" / "broken"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": ["../cpu"],
        "patches": [{"target": {"kind": "Deployment", "name": "skillos-executor"},
                     "patch": "- op: add\n  path: /spec/replicas\n  value: many\n"}],
    }))
    out = run(tool("kubectl"), "kustomize", str(overlay)).stdout
    objs = [d for d in yaml.safe_load_all(out) if d]
    assert any("'many' is not of type 'integer'" in e for e in validate_k8s(objs))

"""`make k8s-check`: the Helm chart's whole life on a real Kubernetes cluster.

Brings up the local single-node cluster (../shared/tools/k8s-local: Kubernetes v1.20.2 on this machine's
Docker engine through dockershim; `setup.sh` builds it once, ~9 min), builds the CPU images with BuildKit
on that same engine (so the kubelet runs them as they are: nothing to push or load; packages from the
local index of deploy/pyindex.py, as `make compose-check` does), fills a data claim with the ALFWorld and
WebShop files from a helper pod (`kubectl cp`, what an operator does), then:

  helm install (values-cpu.yaml: embedded LLM, make run's Qwen2.5-Coder-1.5B behind llama-server, bundled
  PostgreSQL and Redis, 1 core of requests) -> every pod Ready -> helm test (a pod writes a skill through
  the skill repo's Service, searches it, has the executor play one ALFWorld episode of at most
  tests.episode.maxTurns turns on that model: no error, at least one turn) -> helm upgrade (a changed setting: the pods roll, the
  generated token stays) -> helm upgrade (two skill-repo and two ALFWorld replicas behind their
  Services) -> helm test -> helm rollback to revision 1 -> the GPU values dry-run on the server ->
  helm uninstall, and what is left of the claims and the Secret.

Every step is timed; the report (steps, seconds, what failed and why) is printed and written to
deploy/k8s-check-report.md (SKILLOS_K8S_REPORT), with logs and pod descriptions of a failure under
~/.cache/skillos/k8s-check/. Takes tens of minutes (the first image build compiles llama.cpp); not part
of `make test`.

Environment (all optional):
  SKILLOS_K8S_LOCAL=DIR        the k8s-local tool (default ../shared/tools/k8s-local)
  KUBECONFIG                   with SKILLOS_K8S_LOCAL= (empty): use this cluster instead; images must then
                               reach it (SKILLOS_K8S_IMAGE_REPO=registry/skillos/skillos, pushed by you)
  SKILLOS_K8S_NAMESPACE=NAME   namespace and release (default skillos-check; never `skillos`)
  SKILLOS_K8S_SKIP_BUILD=1     use the images already in the engine
  SKILLOS_K8S_KEEP=1           leave the release (and the cluster) up at the end
  SKILLOS_K8S_DOWN=1           stop the local cluster at the end (default: leave it up, `up.sh` is 20 s)
  SKILLOS_K8S_READY_TIMEOUT_S  how long pods may take to become Ready (default 1500)
  SKILLOS_PIP_INDEX_URL, SKILLOS_PYINDEX_PORT, SKILLOS_CHECK_NICE: as for `make compose-check`
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
import compose_check as cc
import pyindex
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "skillos"
_K8S_LOCAL = os.environ.get("SKILLOS_K8S_LOCAL", str(ROOT.parent / "shared" / "tools" / "k8s-local"))
K8S_LOCAL = Path(_K8S_LOCAL) if _K8S_LOCAL else None
K8S_STATE = Path(os.environ.get("K8S_LOCAL_STATE", "/var/tmp/k8s-local"))
REPORT = Path(os.environ.get("SKILLOS_K8S_REPORT", str(ROOT / "deploy" / "k8s-check-report.md")))
TARGETS = ("skillrepo", "envs", "executor", "curator", "console", "llm")
IMAGE_REPO = os.environ.get("SKILLOS_K8S_IMAGE_REPO", "local/skillos")
DATA_DIR = ROOT.parent / "shared" / "data"
LOADER = ROOT / "deploy" / "k8s" / "data-loader.yaml"


class CheckFailed(RuntimeError):
    pass


cc.CheckFailed = CheckFailed   # compose_check's helpers raise ours


def log(msg: str) -> None:
    print(f"[k8s-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass
class Step:
    name: str
    status: str = "not run"
    seconds: float | None = None
    detail: str = ""


@dataclass
class Report:
    steps: list[Step] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)

    @contextlib.contextmanager
    def step(self, name: str):
        s = Step(name)
        self.steps.append(s)
        log(f"--- {name}")
        t = time.monotonic()
        try:
            yield s
        except BaseException as e:
            s.status, s.seconds = "FAILED", round(time.monotonic() - t, 1)
            s.detail = (s.detail + " " if s.detail else "") + str(e).strip()[:3000]
            log(f"FAILED {name} after {s.seconds}s: {str(e)[:2000]}")
            raise
        s.status, s.seconds = "ok", round(time.monotonic() - t, 1)
        log(f"ok {name} in {s.seconds}s{': ' + s.detail if s.detail else ''}")

    def markdown(self) -> str:
        ok = all(s.status == "ok" for s in self.steps)
        lines = [f"# `make k8s-check`: {'passed' if ok else 'FAILED'}", "",
                 "Written by `deploy/k8s_check.py` (`make k8s-check`); rerun it to refresh.", ""]
        lines += [f"- {k}: {v}" for k, v in self.facts.items()]
        lines += ["", "| # | step | status | seconds | detail |", "|---|---|---|---|---|"]
        for i, s in enumerate(self.steps, 1):
            detail = s.detail.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {i} | {s.name} | {s.status} | {'' if s.seconds is None else s.seconds} | {detail} |")
        return "\n".join(lines) + "\n"


def sh(argv: list[str], *, timeout: float = 600, check: bool = True, env: dict | None = None,
       logfile: Path | None = None) -> subprocess.CompletedProcess:
    return cc.sh(argv, env=env, timeout=timeout, check=check, logfile=logfile)


# ------------------------------------------------------------------------------------------- cluster
def helm_binary() -> str:
    for c in (ROOT / ".venv" / "bin" / "helm", shutil.which("helm")):
        if c and Path(c).exists():
            return str(c)
    sh(["bash", str(ROOT / "scripts" / "install-k8s-tools.sh")], timeout=900)
    return str(ROOT / ".venv" / "bin" / "helm")


def local_cluster(report: Report) -> dict:
    """setup.sh (once: builds Kubernetes v1.20.2, ~9 min) and up.sh; the environment that reaches it."""
    env = dict(os.environ)
    if K8S_LOCAL is None or not K8S_LOCAL.exists():
        if not env.get("KUBECONFIG"):
            raise CheckFailed(f"no k8s-local tool at {K8S_LOCAL} and no KUBECONFIG")
        return env
    with report.step("cluster: k8s-local setup.sh (build once, cached after)") as s:
        out = sh(["bash", str(K8S_LOCAL / "setup.sh")], timeout=5400).stdout
        s.detail = out.strip().splitlines()[-1][:200] if out.strip() else ""
    # up.sh starts dnsmasq and iptables tools from the sbin directories, which a user's PATH may lack
    path = env["PATH"].split(":")
    env["PATH"] = ":".join(path + [p for p in ("/usr/local/sbin", "/usr/sbin", "/sbin") if p not in path])
    with report.step("cluster: k8s-local up.sh") as s:
        out = sh(["bash", str(K8S_LOCAL / "up.sh")], env=env, timeout=900).stdout
        dead = cluster_dead_parts()
        if dead:  # up.sh does not notice a part that died after it started (dnsmasq missing: no DNS, no PVs)
            log(f"k8s-local parts not running: {', '.join(dead)}; down.sh and up.sh again")
            sh(["bash", str(K8S_LOCAL / "down.sh")], env=env, timeout=600)
            out = sh(["bash", str(K8S_LOCAL / "up.sh")], env=env, timeout=900).stdout
            if dead := cluster_dead_parts():
                raise CheckFailed(f"k8s-local parts not running after up.sh: {', '.join(dead)} "
                                  f"(logs in {K8S_STATE / 'log'})")
        m = re.search(r"export KUBECONFIG=(\S+) PATH=(\S+?):\$PATH", out)
        if not m:
            raise CheckFailed(f"up.sh printed no export line:\n{out[-2000:]}")
        env["KUBECONFIG"] = m.group(1)
        env["PATH"] = f"{m.group(2)}:{env['PATH']}"
        s.detail = f"KUBECONFIG={m.group(1)}"
    return env


def cluster_dead_parts() -> list[str]:
    """The k8s-local processes up.sh recorded that are not running (sync.sh is the volume provisioner and
    keeps the DNS records; dnsmasq answers cluster DNS)."""
    dead = []
    for pidfile in sorted((K8S_STATE / "run").glob("*.pid")):
        if pidfile.stem == "dockerd":
            continue
        try:
            os.kill(int(pidfile.read_text().strip()), 0)
        except (OSError, ValueError):
            dead.append(pidfile.stem)
    return dead


# -------------------------------------------------------------------------------------------- images
def build_images(report: Report, logdir: Path, tag: str) -> str:
    docker = cc.docker_cli()
    cc.ensure_engine(docker)
    log(cc.renice_engine())
    if os.environ.get("SKILLOS_K8S_SKIP_BUILD") == "1":
        report.facts["images"] = "taken from the engine as they were (SKILLOS_K8S_SKIP_BUILD=1)"
        return docker
    server = None
    index_dir = pyindex.default_dir()
    with report.step("images: local package index (deploy/pyindex.py fill, serve)") as s:
        if os.environ.get("SKILLOS_PIP_INDEX_URL"):
            index_url = os.environ["SKILLOS_PIP_INDEX_URL"]
            torch_url = os.environ.get("TORCH_INDEX_URL", index_url)
        else:
            pyindex.fill(index_dir, os.environ.get("SKILLOS_INDEX_PYTHON", sys.executable),
                         os.environ.get("TORCH_INDEX_URL", pyindex.DEFAULT_TORCH_INDEX))
            server, index_url = pyindex.serve(index_dir, int(os.environ.get("SKILLOS_PYINDEX_PORT", "8765")))
            torch_url = index_url
        s.detail = index_url
    try:
        build_log = logdir / "build.log"
        env = {**os.environ, "DOCKER_BUILDKIT": "1"}
        for target in TARGETS:
            image = f"{IMAGE_REPO}-{target}:{tag}"
            with report.step(f"images: build {image}") as s:
                sh([docker, "build", "--network", "host", "--progress", "plain",
                    "--build-arg", f"PIP_INDEX_URL={index_url}", "--build-arg", f"TORCH_INDEX_URL={torch_url}",
                    "-f", "deploy/Dockerfile", "--target", target, "-t", image, "."],
                   env=env, logfile=build_log, timeout=7200)
                size = int(sh([docker, "image", "inspect", "--format", "{{.Size}}", image]).stdout)
                s.detail = f"{size / 1e6:.0f} MB"
        if server is not None:
            with contextlib.suppress(Exception):
                log(cc.export_llama_wheel(docker, index_dir, index_url, torch_url, build_log))
    finally:
        if server is not None:
            server.shutdown()
    return docker


# The official postgres image runs as any non-root uid it is given (runAsUser): it skips its chown and
# privilege switch. The docker-engine tool's Debian stand-in needs root for both, which the chart's
# securityContext (non-root, no capabilities) rightly refuses; this layer gives it the official contract.
PG_NONROOT_ENTRYPOINT = r"""#!/bin/bash
set -e
if [ "$(id -u)" = 0 ]; then exec /usr/local/bin/docker-entrypoint.sh "$@"; fi
export PGDATA=${PGDATA:-/var/lib/postgresql/data}
mkdir -p "$PGDATA" && chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp) && echo "$POSTGRES_PASSWORD" > "$pw"
  initdb -D "$PGDATA" -U "${POSTGRES_USER:-postgres}" --pwfile="$pw" --auth-local=trust --auth-host=scram-sha-256
  rm -f "$pw"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -w start -o "-c listen_addresses=''"
  if [ -n "$POSTGRES_DB" ] && [ "$POSTGRES_DB" != postgres ]; then
    psql -v ON_ERROR_STOP=1 -U "${POSTGRES_USER:-postgres}" -d postgres -c "CREATE DATABASE \"$POSTGRES_DB\""
  fi
  pg_ctl -D "$PGDATA" -m fast -w stop
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
"""


def database_values(docker: str, logdir: Path) -> dict:
    """Values for the bundled PostgreSQL and Redis on this engine: each image's own user as
    podSecurityContext (999 in the official images, others in the stand-ins), and for a PostgreSQL
    image that cannot start as non-root, that image with the official non-root entrypoint on top."""
    values: dict = {}
    text = (CHART / "values.yaml").read_text()
    for part, user in (("postgresql", "postgres"), ("redis", "redis")):
        m = re.search(rf"^{part}:\n(?:  .*\n)*?  image: {{ repository: (\S+), tag: (\S+),", text, re.MULTILINE)
        ref = f"{m.group(1)}:{m.group(2)}"
        entry = sh([docker, "run", "--rm", "--entrypoint", "cat", ref, "/usr/local/bin/docker-entrypoint.sh"],
                   check=False).stdout
        if part == "postgresql" and "setpriv" in entry and "id -u" not in entry:
            ctx = logdir / "postgres-nonroot"
            ctx.mkdir(exist_ok=True)
            (ctx / "nonroot.sh").write_text(PG_NONROOT_ENTRYPOINT)
            (ctx / "Dockerfile").write_text(f"FROM {ref}\nCOPY nonroot.sh /usr/local/bin/nonroot-entrypoint.sh\n"
                                            "RUN chmod 755 /usr/local/bin/nonroot-entrypoint.sh\n"
                                            'ENTRYPOINT ["nonroot-entrypoint.sh"]\nCMD ["postgres"]\n')
            ref = "local/k8s-check-postgres:nonroot"
            sh([docker, "build", "-t", ref, str(ctx)], env={**os.environ, "DOCKER_BUILDKIT": "1"}, timeout=600)
            values.setdefault(part, {})["image"] = {"repository": ref.split(":")[0], "tag": "nonroot",
                                                    "pullPolicy": "Never"}
            log(f"{m.group(1)}:{m.group(2)} needs root to start: running {ref} (the official non-root contract)")
        out = sh([docker, "run", "--rm", "--entrypoint", "id", ref, user], check=False).stdout
        ids = re.search(r"uid=(\d+).*gid=(\d+)", out)
        if ids and (ids.group(1), ids.group(2)) != ("999", "999"):
            uid, gid = int(ids.group(1)), int(ids.group(2))
            values.setdefault(part, {})["podSecurityContext"] = {
                "runAsNonRoot": True, "runAsUser": uid, "runAsGroup": gid, "fsGroup": gid,
                "seccompProfile": {"type": "RuntimeDefault"}}
            log(f"{ref}: user {user} is {uid}:{gid}, not the official image's 999:999")
    return values


# -------------------------------------------------------------------------------------------- checks
class Cluster:
    def __init__(self, env: dict, ns: str, logdir: Path):
        self.env, self.ns, self.logdir = env, ns, logdir
        self.helm_bin = helm_binary()
        self.kubectl_bin = shutil.which("kubectl", path=env["PATH"]) or "kubectl"

    def kubectl(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        return sh([self.kubectl_bin, "-n", self.ns, *args], env=self.env, timeout=timeout, check=check)

    def helm(self, *args: str, timeout: float = 1800, check: bool = True) -> subprocess.CompletedProcess:
        return sh([self.helm_bin, "-n", self.ns, *args], env=self.env, timeout=timeout, check=check)

    def pods(self) -> list[dict]:
        """The release's pods (the data loader and anything else in the namespace aside)."""
        return json.loads(self.kubectl("get", "pods", "-l", f"app.kubernetes.io/instance={self.ns}",
                                       "-o", "json").stdout)["items"]

    def wait_ready(self, timeout: float, what: str = "") -> str:
        """Every pod of the release Ready (hook pods aside); prints each change of the pods' states."""
        t0, last = time.monotonic(), ""
        while True:
            # hook pods (helm test) and pods on their way out (an old ReplicaSet's, draining) aside
            pods = [p for p in self.pods() if "helm.sh/hook" not in (p["metadata"].get("annotations") or {})
                    and not p["metadata"].get("deletionTimestamp")]
            states = {}
            for p in pods:
                conds = {c["type"]: c["status"] for c in p["status"].get("conditions", [])}
                waiting = [cs["state"]["waiting"]["reason"] for cs in p["status"].get("containerStatuses", [])
                           if "waiting" in cs["state"]]
                restarts = sum(cs.get("restartCount", 0) for cs in p["status"].get("containerStatuses", []))
                state = "Ready" if conds.get("Ready") == "True" else (waiting[0] if waiting else p["status"]["phase"])
                states[p["metadata"]["name"]] = state + (f"({restarts} restarts)" if restarts else "")
            line = " ".join(f"{n.removeprefix(self.ns + '-')}={s}" for n, s in sorted(states.items()))
            if line != last:
                log(f"  {line}")
                last = line
            if pods and all(s.startswith("Ready") for s in states.values()):
                return f"{len(pods)} pods Ready {time.monotonic() - t0:.0f}s{' ' + what if what else ''}"
            bad = [n for n, s in states.items() if s.startswith(("CrashLoopBackOff", "ErrImage", "ImagePull",
                                                                  "CreateContainerConfigError", "Failed"))]
            if bad or time.monotonic() - t0 > timeout:
                self.dump(bad or [n for n, s in states.items() if not s.startswith("Ready")])
                raise CheckFailed(f"not Ready after {time.monotonic() - t0:.0f}s: "
                                  + ", ".join(f"{n}={states[n]}" for n in (bad or states) if not
                                              states[n].startswith("Ready")) + f" (logs in {self.logdir})")
            time.sleep(5)

    def dump(self, pods: list[str]) -> None:
        for name in pods:
            with contextlib.suppress(Exception):
                text = self.kubectl("describe", "pod", name, check=False).stdout
                text += "\n--- logs\n" + self.kubectl("logs", name, "--all-containers", "--tail", "200",
                                                      check=False).stdout
                (self.logdir / f"{name}.txt").write_text(text)
        with contextlib.suppress(Exception):
            (self.logdir / "events.txt").write_text(self.kubectl("get", "events", "--sort-by=.lastTimestamp",
                                                                 check=False).stdout)

    def secret(self, key: str) -> str:
        data = json.loads(self.kubectl("get", "secret", f"{self.ns}-secrets", "-o", "json").stdout)["data"]
        return base64.b64decode(data[key]).decode()

    def config(self, key: str) -> str:
        return json.loads(self.kubectl("get", "configmap", f"{self.ns}-config", "-o", "json").stdout)["data"][key]


def fill_data_claim(k: Cluster, tag: str) -> str:
    """deploy/k8s/data-loader.yaml (a claim and a helper pod that mounts it, with our image), then
    `kubectl cp` of the data sets into it, as docs/deployment.md has an operator do."""
    docs = [d for d in yaml.safe_load_all(LOADER.read_text()) if d]
    pod = next(d for d in docs if d["kind"] == "Pod")
    pod["spec"]["containers"][0].update(image=f"{IMAGE_REPO}-envs:{tag}", imagePullPolicy="Never")
    path = k.logdir / "data-loader.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    k.kubectl("apply", "-f", str(path))
    name, claim = pod["metadata"]["name"], pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
    k.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=300s", timeout=330)
    copied = []
    for part in ("alfworld", "webshop"):
        if (DATA_DIR / part).is_dir():
            k.kubectl("cp", str(DATA_DIR / part), f"{name}:/data/{part}", timeout=1200)
            copied.append(part)
    du = k.kubectl("exec", name, "--", "du", "-sh", "/data", check=False).stdout.split()
    k.kubectl("delete", "pod", name, "--grace-period=1", timeout=120)
    return f"{'+'.join(copied)} ({du[0] if du else '?'}) into PVC {claim}"


def helm_test(k: Cluster, release: str) -> str:
    proc = k.helm("test", release, "--logs", "--timeout", "20m", timeout=1500, check=False)
    checks = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"check"')]
    if proc.returncode != 0:
        with contextlib.suppress(Exception):
            k.dump([f"{release}-test-stack"])
        raise CheckFailed(f"helm test exited {proc.returncode}: {proc.stdout[-1500:]} {proc.stderr[-1500:]}")
    step = next((c for c in checks if c["check"].startswith("executor")), None)
    played = (f"; ALFWorld episode on {step['task']}: {step.get('turns')} turns, stop {step.get('stop')}, "
              f"{step['seconds']}s, first action {step['action']!r}" if step else "")
    return f"{sum(c['ok'] for c in checks)}/{len(checks)} checks passed{played}"


# run inside a skill-repo pod (its token from the release's Secret, the repo on localhost): "put" writes
# a skill into the repo k8s-check-keep, "find" searches it and fails when it is not there
KEEP_SCRIPT = """
import json, os, sys, urllib.error, urllib.parse, urllib.request
base, tok = "http://127.0.0.1:8001/v1", os.environ["SKILLOS_API_TOKEN"]
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, {}
if sys.argv[1] == "put":
    print(call("POST", "/repos", {"name": "k8s-check-keep"})[0],
          call("POST", "/repos/k8s-check-keep/skills", {"name": "outlive-the-release", "description":
               "A skill written before helm uninstall.", "body": "It must be found after the next install."})[0])
else:
    code, body = call("GET", "/repos/k8s-check-keep/search?k=3&q=" + urllib.parse.quote("written before uninstall"))
    hits = [h["name"] for h in body.get("hits", [])]
    print(code, hits)
    sys.exit(0 if "outlive-the-release" in hits else 1)
"""


def keep_skill(k: Cluster, mode: str) -> str:
    out = k.kubectl("exec", f"deploy/{k.ns}-skillrepo", "--", "python", "-c", KEEP_SCRIPT, mode, timeout=180)
    return out.stdout.strip()


def dry_run_values_files(k: Cluster, release: str) -> str:
    """Each values file as `helm install --dry-run=server`: the API server validates every object (the GPU
    profile too: vLLM with nvidia.com/gpu requests, node selectors, tolerations, the model cache; no GPU
    node needed). ServiceMonitors off where no Prometheus Operator CRDs are installed; the training Job
    must be refused below 1.22 with the chart's own message."""
    crds = k.kubectl("get", "--raw", "/apis/monitoring.coreos.com/v1", check=False).returncode == 0
    server = json.loads(sh([k.kubectl_bin, "version", "-o", "json"], env=k.env).stdout)["serverVersion"]
    old = (int(server["major"]), int(re.sub(r"\D", "", server["minor"]))) < (1, 22)
    done = []
    for values in sorted(p.name for p in CHART.glob("values*.yaml")):
        args = ["install", f"{release}-dry", str(CHART), "-f", str(CHART / values), "--dry-run=server"]
        if not crds:
            args += ["--set", "serviceMonitor.enabled=false"]
        proc = k.helm(*args, timeout=300, check=False)
        if values == "values-training.yaml" and old:
            if "needs Kubernetes 1.22" not in proc.stderr:
                raise CheckFailed(f"{values} on a pre-1.22 cluster: {proc.returncode} {proc.stderr[-800:]}")
            done.append(f"{values} refused (Indexed Job needs 1.22)")
            continue
        if proc.returncode != 0:
            raise CheckFailed(f"{values}: {proc.stderr[-1500:]}")
        done.append(values)
    return "accepted: " + ", ".join(done) + ("" if crds else " (ServiceMonitor off: no Prometheus Operator CRDs)")


def left_after_uninstall(k: Cluster) -> str:
    pvcs = [line.split()[0] for line in k.kubectl("get", "pvc", "--no-headers", "-o",
                                                  "custom-columns=NAME:.metadata.name").stdout.splitlines()
            if line.strip()]
    secrets = k.kubectl("get", "secret", "-o", "name").stdout.split()
    workloads = k.kubectl("get", "deploy,sts,svc", "-l", f"app.kubernetes.io/instance={k.ns}", "-o",
                          "name").stdout.split()
    pods = k.kubectl("get", "pods", "-l", f"app.kubernetes.io/instance={k.ns}", "-o", "name").stdout.split()
    return (f"claims left: {', '.join(pvcs) or 'none'} (a StatefulSet's claims outlive it; skillos-data is "
            f"the operator's); Secret kept: {any(x.endswith(f'{k.ns}-secrets') for x in secrets)} "
            f"(helm.sh/resource-policy: keep); Deployments, StatefulSets, Services left: {len(workloads)}; "
            f"pods still terminating: {len(pods)}")


def main() -> int:
    ns = os.environ.get("SKILLOS_K8S_NAMESPACE", "skillos-check")
    if ns == "skillos":
        raise CheckFailed("SKILLOS_K8S_NAMESPACE=skillos would uninstall the real release")
    logdir = Path(os.environ.get("SKILLOS_CHECK_LOG_DIR") or pyindex.default_dir().parent / "k8s-check") \
        / time.strftime("%Y%m%d-%H%M%S")
    logdir.mkdir(parents=True, exist_ok=True)
    report = Report()
    tag = re.search(r'^appVersion: "?([^"\s]+)', (CHART / "Chart.yaml").read_text(), re.MULTILINE).group(1)
    report.facts["started"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    report.facts["machine"] = f"{os.cpu_count()} cores, logs {logdir}"
    t_start = time.monotonic()
    k = None
    installed = False
    release = ns
    base = ["-f", str(CHART / "values-cpu.yaml"), "--set", f"image.repository={IMAGE_REPO}",
            "--set", "image.pullPolicy=Never", "--set", "data.existingClaim=skillos-data"]
    values_file = logdir / "values-check.yaml"
    try:
        env = local_cluster(report)
        docker = build_images(report, logdir, tag)
        with report.step("images: the bundled databases' users (podSecurityContext)") as s:
            db_values = database_values(docker, logdir)
            values_file.write_text(json.dumps(db_values))
            s.detail = json.dumps(db_values)[:300] or "official images: nothing to set"
        base += ["-f", str(values_file)]
        k = Cluster(env, ns, logdir)
        report.facts["cluster"] = " ".join(sh([k.kubectl_bin, "version", "--short"], env=env, check=False)
                                           .stdout.split())
        report.facts["helm"] = sh([k.helm_bin, "version", "--short"]).stdout.strip()
        sh([k.kubectl_bin, "delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=600s"],
           env=env, timeout=660)
        sh([k.kubectl_bin, "create", "namespace", ns], env=env)

        with report.step("data: fill a claim with the data sets from a helper pod (kubectl cp)") as s:
            s.detail = fill_data_claim(k, tag)
        with report.step("helm install (values-cpu.yaml, bundled PostgreSQL and Redis)") as s:
            k.helm("install", release, str(CHART), *base, timeout=600)
            installed = True
        with report.step("every pod Ready") as s:
            s.detail = k.wait_ready(float(os.environ.get("SKILLOS_K8S_READY_TIMEOUT_S", "1500")))
            requested = k.kubectl("describe", "node", check=False).stdout
            m = re.search(r"Allocated resources:.*?cpu\s+(\S+ \(\d+%\))", requested, re.DOTALL)
            s.detail += f"; CPU requested on the node: {m.group(1) if m else '?'}"
        token = k.secret("SKILLOS_API_TOKEN")
        with report.step("helm test (skill through the Service, search, one short ALFWorld episode)") as s:
            s.detail = helm_test(k, release)
        with report.step("helm upgrade 1: SKILLOS_LOG_LEVEL=DEBUG (pods roll, token kept)") as s:
            k.helm("upgrade", release, str(CHART), *base, "--set", "config.SKILLOS_LOG_LEVEL=DEBUG",
                   "--wait", "--timeout", "25m")
            if k.config("SKILLOS_LOG_LEVEL") != "DEBUG" or k.secret("SKILLOS_API_TOKEN") != token:
                raise CheckFailed("the upgrade did not apply the setting or changed the token")
            s.detail = k.wait_ready(600, "after the roll") + "; token unchanged"
        with report.step("helm upgrade 2: two skill-repo and two ALFWorld replicas") as s:
            k.helm("upgrade", release, str(CHART), *base, "--set", "config.SKILLOS_LOG_LEVEL=DEBUG",
                   "--set", "services.skillrepo.replicas=2", "--set", "services.alfworld.replicas=2",
                   "--wait", "--timeout", "25m")
            s.detail = k.wait_ready(900, "with 2+2 replicas")
            if k.secret("SKILLOS_API_TOKEN") != token:
                raise CheckFailed("the second upgrade changed the token")
        with report.step("helm test through the replicated Services") as s:
            s.detail = helm_test(k, release)
        with report.step("helm rollback to revision 1") as s:
            k.helm("rollback", release, "1", "--wait", "--timeout", "25m")
            level = k.config("SKILLOS_LOG_LEVEL")
            replicas = json.loads(k.kubectl("get", "deployment", f"{ns}-skillrepo", "-o", "json").stdout)["spec"]
            if level != "INFO" or replicas["replicas"] != 1 or k.secret("SKILLOS_API_TOKEN") != token:
                raise CheckFailed(f"after the rollback: LOG_LEVEL={level}, skillrepo replicas={replicas['replicas']}")
            history = k.helm("history", release, "-o", "json").stdout
            s.detail = (k.wait_ready(900, "after the rollback") + f"; {len(json.loads(history))} revisions, "
                        "settings and replicas of revision 1, token unchanged")
        with report.step("every values file validated by the API server (--dry-run=server)") as s:
            s.detail = dry_run_values_files(k, release)
        with report.step("a skill written to outlive the release") as s:
            s.detail = "POST repo, skill: " + keep_skill(k, "put")
        with report.step("helm uninstall: what is left") as s:
            k.helm("uninstall", release, "--wait", "--timeout", "10m", timeout=900)
            installed = False
            s.detail = left_after_uninstall(k)
            report.facts["after uninstall"] = s.detail
        with report.step("helm install again over what uninstall left (same release name)") as s:
            k.helm("install", release, str(CHART), *base, timeout=600)
            installed = True
            ready = k.wait_ready(900)
            same = k.secret("SKILLOS_API_TOKEN") == token
            s.detail = f"{ready}; token the same: {same}; the skill found again: {keep_skill(k, 'find')}"
            if not same:
                raise CheckFailed("the reinstall generated another token")
        with report.step("helm uninstall again (the check then deletes its namespace: claims, Secret)") as s:
            k.helm("uninstall", release, "--wait", "--timeout", "10m", timeout=900)
            installed = False
            s.detail = left_after_uninstall(k)
    except CheckFailed:
        pass
    except subprocess.TimeoutExpired as e:
        report.steps.append(Step(f"timeout: {' '.join(map(str, e.cmd[:4]))}", "FAILED", None, str(e)[:500]))
    finally:
        if k is not None and os.environ.get("SKILLOS_K8S_KEEP") != "1":
            if installed:
                k.helm("uninstall", release, check=False, timeout=600)
            sh([k.kubectl_bin, "delete", "namespace", ns, "--ignore-not-found", "--wait=false"], env=k.env,
               check=False)
        if os.environ.get("SKILLOS_K8S_DOWN") == "1" and K8S_LOCAL and (K8S_LOCAL / "down.sh").exists():
            sh(["bash", str(K8S_LOCAL / "down.sh")], check=False, timeout=600)
        report.facts["total"] = f"{time.monotonic() - t_start:.0f}s"
        text = report.markdown()
        REPORT.write_text(text)
        (logdir / "report.md").write_text(text)
        print(text, flush=True)
    ok = report.steps and all(s.status == "ok" for s in report.steps)
    print(f"k8s-check {'OK' if ok else 'FAILED'}: report {REPORT}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

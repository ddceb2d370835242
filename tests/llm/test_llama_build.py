"""`make setup` compiles llama.cpp once (scripts/setup.sh): llama-server links the shared libraries in
.venv/lib, and llama-cpp-python, built without its own copy, loads the same code. Two builds would be ~3-6
minutes more of every fresh set-up and CI run, and could drift apart."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

VENV_LIB = Path(sys.prefix).resolve() / "lib"
SERVER = Path(sys.prefix) / "bin" / "llama-server"
LLAMA_LIB = re.compile(r"lib(llama|ggml|mtmd)[\w-]*\.so")


def linked(binary: Path) -> dict[str, Path]:
    """soname -> the file the dynamic loader resolves, for ``binary``'s llama.cpp libraries."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        name, _, where = line.strip().partition(" => ")
        if LLAMA_LIB.match(name):
            found[name] = Path(where.split(" (")[0]).resolve()
    return found


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_llama_server_links_the_venvs_llama_libraries():
    assert SERVER.is_file(), "scripts/setup.sh builds it"
    libs = linked(SERVER)
    assert {"libllama.so.0", "libggml.so.0", "libggml-base.so.0", "libggml-cpu.so.0"} <= set(libs), libs
    assert all(path.parent == VENV_LIB for path in libs.values()), libs


def test_llama_cpp_python_has_no_build_of_its_own_and_maps_llama_servers_libraries():
    import llama_cpp

    llama_cpp.llama_print_system_info()  # the bindings call into the library
    shipped = [f for f in distribution("llama_cpp_python").files or [] if ".so" in f.name]
    assert not shipped, f"llama-cpp-python was built with its own llama.cpp: {shipped}"
    maps = Path("/proc/self/maps").read_text().split()
    mapped = {Path(p).resolve() for p in maps if p.startswith("/") and LLAMA_LIB.match(Path(p).name)}
    assert {p.name.split(".so")[0] for p in mapped} >= {"libllama", "libggml", "libggml-base", "libggml-cpu"}, mapped
    for lib in mapped:
        assert digest(lib) == digest(VENV_LIB / lib.name), f"{lib} is not the build llama-server links"

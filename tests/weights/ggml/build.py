"""Build llama.cpp's C GGUF reader (ggml's ``gguf.cpp``) for the differential tests.

The sources are those vendored in the ``llama-cpp-python`` sdist from PyPI, which
``scripts/setup.sh --test`` downloads into ``.venv/share/rogue-watchdog-tests/``
(nothing of llama.cpp is committed here). Only ggml's base library is compiled (the
GGUF reader, the type traits and the dequantizers: no backend, no CPU kernels), with
``tests/weights/ggml/reader.c`` linked against it. A build takes about 25 s on two
cores; the tests build it once per run (a session fixture) and the bench once per
invocation.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

#: The llama-cpp-python release whose vendored llama.cpp the reader is built from. Its
#: gguf-py is the ``gguf`` 0.19.0 the tests also import.
LLAMA_CPP_PYTHON = "0.3.36"
GGML_VERSION = "0.25.3"
SDIST_NAME = f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
HERE = Path(__file__).resolve().parent
C_SOURCES = ("ggml.c", "ggml-quants.c", "ggml-alloc.c")
CXX_SOURCES = (
    "ggml.cpp",
    "gguf.cpp",
    "ggml-threading.cpp",
    "ggml-backend.cpp",
    "ggml-backend-meta.cpp",
)


class GgmlUnavailable(RuntimeError):
    """The sdist is missing (setup.sh --test not run) or the build failed."""


def sdist_path() -> Path:
    """Where ``scripts/setup.sh --test`` leaves the sdist (next to the interpreter's venv)."""
    return Path(sys.prefix) / "share" / "rogue-watchdog-tests" / SDIST_NAME


def _wanted(rel: str) -> bool:
    """ggml's public headers, its base sources, and the CPU headers ggml-quants.c includes."""
    return (
        rel.startswith("include/")
        or (rel.startswith("src/") and rel.count("/") == 1)
        or (rel.startswith("src/ggml-cpu/") and rel.count("/") == 2 and rel.endswith(".h"))
    )


def _extract(sdist: Path, dest: Path) -> Path:
    prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/ggml/"
    with tarfile.open(sdist) as tar:
        members = [
            m
            for m in tar.getmembers()
            if m.name.startswith(prefix)
            and (m.isfile() or m.isdir())
            and _wanted(m.name[len(prefix) :])
        ]
        tar.extractall(dest, members=members, filter="data")
    root = dest / prefix
    (root / "gen").mkdir(exist_ok=True)
    (root / "gen" / "ggml-version.h").write_text(
        f'#pragma once\n#define GGML_VERSION "{GGML_VERSION}"\n'
        f'#define GGML_COMMIT "llama-cpp-python-{LLAMA_CPP_PYTHON}"\n'
    )
    return root


def _compile(cmd: list[str]) -> None:
    cp = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if cp.returncode:
        raise GgmlUnavailable(f"{' '.join(cmd)} failed:\n{cp.stderr[-2000:]}")


def build_reader(dest: Path, sdist: Path | None = None) -> Path:
    """Compile the reader into ``dest`` and return the executable's path.

    Args:
        dest: An empty or scratch folder; the extracted sources and objects go there.
        sdist: The ``llama-cpp-python`` sdist; default :func:`sdist_path`.

    Raises:
        GgmlUnavailable: The sdist is missing, a compiler is missing, or a compile failed.
    """
    sdist = sdist or sdist_path()
    if not sdist.is_file():
        raise GgmlUnavailable(f"{sdist} missing: run bash scripts/setup.sh --test")
    for tool in ("gcc", "g++"):
        if shutil.which(tool) is None:
            raise GgmlUnavailable(f"{tool} not found")
    dest.mkdir(parents=True, exist_ok=True)
    root = _extract(sdist, dest)
    inc = ["-I", str(root / "include"), "-I", str(root / "src"), "-I", str(root / "gen")]
    flags = ["-O2", "-D_GNU_SOURCE", "-DNDEBUG", *inc]
    jobs: list[list[str]] = []
    objs: list[str] = []
    for name in C_SOURCES + CXX_SOURCES:
        obj = str(dest / f"{name}.o")
        cc = ["gcc", "-std=c11"] if name.endswith(".c") else ["g++", "-std=c++17"]
        jobs.append([*cc, *flags, "-c", str(root / "src" / name), "-o", obj])
        objs.append(obj)
    reader_obj = str(dest / "reader.o")
    jobs.append(["gcc", "-std=c11", *flags, "-c", str(HERE / "reader.c"), "-o", reader_obj])
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(_compile, jobs))
    exe = dest / "ggml-gguf-reader"
    _compile(["g++", *objs, reader_obj, "-o", str(exe), "-lm", "-lpthread"])
    return exe


def sdist_sha256(sdist: Path | None = None) -> str:
    """SHA-256 of the sdist, for the docs' 'checked against' line."""
    return hashlib.sha256((sdist or sdist_path()).read_bytes()).hexdigest()

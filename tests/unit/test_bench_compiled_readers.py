"""bench/compiled_readers.py's C readers give the answers of the product's paths.

Issue 34, item 4 measured them (docs/performance.md); this only checks that what was
measured is the same work: the F16/BF16 single pass agrees with ``any_nonfinite`` on
planted values, and the C /proc walk reads the bytes the Python walk reads. No timing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def load() -> ModuleType:
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_compiled_readers", REPO / "bench" / "compiled_readers.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path[:] = saved  # the script puts bench/ first for its own imports


def test_single_pass_agrees_with_the_product_check(tmp_path: Path) -> None:
    cr = load()
    libs = cr.build(tmp_path)
    assert "C -O2" in libs
    cr.self_test(libs)  # raises SystemExit naming the build, function and value


def test_c_walk_reads_what_the_python_walk_reads(tmp_path: Path) -> None:
    cr = load()
    (tmp_path / "lib").mkdir()
    libs = cr.build(tmp_path / "lib")
    root = tmp_path / "proc"
    big = b"x" * 5000 + b"\0arg\0"  # past one 4096-byte read: the loop must go on
    for pid, cmdline in ((7, b"sleep\x003600\x00"), (1234, big), (99, b"")):
        base = root / str(pid)
        base.mkdir(parents=True)
        (base / "stat").write_bytes(f"{pid} (x) S 1 {pid} {pid} 0 -1 0".encode())
        (base / "cmdline").write_bytes(cmdline)
        (base / "status").write_bytes(b"Name:\tx\nUid:\t0\t0\t0\t0\n")
        os.symlink(f"/usr/bin/prog{pid}", base / "exe")
    (root / "99" / "status").unlink()  # unreadable: None in both walks
    (root / "self").mkdir()  # not a PID: skipped by both
    names = ["stat", "cmdline", "status"]
    python = cr.walk_python(str(root), names, True)
    c = cr.CWalk(libs["C -O2"], str(root), names, True)
    c.data = cr.ctypes.create_string_buffer(64)  # too small at first: it must grow
    assert c() == python
    assert python[1234][1] == big
    assert python[99][2] is None
    assert python[7][3] == b"/usr/bin/prog7"

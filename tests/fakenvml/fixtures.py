"""Helpers for tests that need an NVML library: build the fake, run a snapshot.

Typical use::

    from tests.fakenvml.fixtures import fake_nvml, snapshot_in_subprocess
    lib_dir = fake_nvml(tmp_path, {"devices": [{"uuid": "GPU-a", "total": 10,
                                   "processes": [{"pid": proc.pid, "mem": 5}]}]})
    # then: LD_LIBRARY_PATH=lib_dir, or config `nvml: {library: lib_dir/libnvidia-ml.so.1}`

The library reads ``fake_nvml.conf`` next to itself unless ``FAKE_NVML_CONFIG`` names
another file, so a library directory is self-contained.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.fakenvml.build import CONFIG_NAME, LIB_NAME, build_library, write_config

REPO = Path(__file__).resolve().parent.parent.parent

_SNAPSHOT_CODE = """
import json, sys
from rogue_watchdog.policy.nvml import nvml_snapshot_json
from rogue_watchdog.sources.nvml import NvmlSource
lib, pid_max, rounds = sys.argv[1] or None, int(sys.argv[2]), int(sys.argv[3])
source = NvmlSource(lib)
snaps = [nvml_snapshot_json(source.snapshot(pid_max)) for _ in range(rounds)]
source.close()
print(json.dumps(snaps))
"""


def fake_nvml(tmp_path: Path, spec: dict[str, Any], variant: str = "full") -> Path:
    """Build a fake NVML library directory under ``tmp_path`` with ``spec`` beside it.

    Args:
        tmp_path: A per-test directory (pytest's ``tmp_path``).
        spec: Devices and processes, as documented in ``tests.fakenvml.build``.
        variant: ``full``, ``no_v3``, ``v1_only`` or ``missing`` (empty directory).

    Returns:
        The directory holding ``libnvidia-ml.so.1`` and ``fake_nvml.conf``.
    """
    lib_dir = tmp_path / f"fakenvml-{variant}"
    build_library(lib_dir, variant)
    write_config(lib_dir / CONFIG_NAME, spec)
    return lib_dir


def library_path(lib_dir: Path) -> Path:
    """The ``libnvidia-ml.so.1`` path inside a directory made by :func:`fake_nvml`."""
    return lib_dir / LIB_NAME


def snapshot_in_subprocess(
    lib_dir: Path,
    pid_max: int = 4_194_304,
    *,
    via_ld_library_path: bool = False,
    rounds: int = 1,
    env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Take NVML snapshots in a fresh interpreter (pynvml keeps its library per process).

    Args:
        lib_dir: From :func:`fake_nvml`.
        pid_max: Passed to ``snapshot``.
        via_ld_library_path: Let pynvml find ``libnvidia-ml.so.1`` itself through
            ``LD_LIBRARY_PATH`` instead of passing ``library_path``.
        rounds: Snapshots taken with one ``NvmlSource`` before ``close()``.
        env: Extra environment (e.g. ``FAKE_NVML_LOG``).

    Returns:
        One ``nvml_snapshot_json`` dict per round.
    """
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
    lib_arg = str(lib_dir / LIB_NAME)
    if via_ld_library_path:
        full_env["LD_LIBRARY_PATH"] = str(lib_dir)
        lib_arg = ""
    out = subprocess.run(
        [sys.executable, "-c", _SNAPSHOT_CODE, lib_arg, str(pid_max), str(rounds)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=60,
        check=True,
    )
    result: list[dict[str, Any]] = json.loads(out.stdout)
    return result

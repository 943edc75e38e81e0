"""Compile fake_nvml.c into ``libnvidia-ml.so.1`` and write its configuration file.

Variants (compile-time, see fake_nvml.c):
    ``full``     every listing symbol (_v3, _v2, unversioned).
    ``no_v3``    no ``*_v3`` listing symbols (-DFAKE_NO_V3).
    ``v1_only``  only the unversioned listing symbols, v1 structs (-DFAKE_ONLY_V1).
    ``missing``  no library at all: the directory is left empty.

Spec (a dict, all keys optional)::

    {"driver": "550.54.15", "init_error": 9, "count_error": 15,
     "block": [{"symbol": "nvmlDeviceGetComputeRunningProcesses_v3", "device": 1}],
     "devices": [{"name": "NVIDIA H200", "uuid": "GPU-...", "total": 150_000_000_000,
                  "used": 1_000_000, "handle_error": 15, "mem_error": 3,
                  "mig": 1, "mig_error": 0, "max_mig": 7,
                  "proc_error": 4,            # all three lists; or err_compute/...
                  "processes": [{"pid": 123, "mem": 1024 or None (= NA),
                                 "kind": "compute"|"graphics"|"mps", "gi": 0, "ci": 0}],
                  "mig_devices": [{"index": 0, "name": ..., "uuid": "MIG-...",
                                   "total": ..., "used": ..., "processes": [...]}]}]}
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIB_NAME = "libnvidia-ml.so.1"
CONFIG_NAME = "fake_nvml.conf"
VARIANT_FLAGS: dict[str, list[str]] = {
    "full": [],
    "no_v3": ["-DFAKE_NO_V3"],
    "v1_only": ["-DFAKE_ONLY_V1"],
}
VARIANTS = (*VARIANT_FLAGS, "missing")

CACHE_DIR = Path(__file__).resolve().parents[2] / ".cache" / "fakenvml"

_DEVICE_KEYS = (
    "name", "uuid", "total", "used", "handle_error", "mem_error", "mig", "mig_error",
    "max_mig", "err_compute", "err_graphics", "err_mps",
)  # fmt: skip


def _compiled(variant: str) -> Path:
    """Compile ``variant`` once (keyed by the source's hash) and return its path.

    The build cache is ``.cache/fakenvml/`` in the checkout (git-ignored), not a temporary
    directory per process: test runs and their subprocesses share it and leave nothing
    in /tmp. A compile writes a private name and renames it into place, so parallel
    test processes never load a half-written library.
    """
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    out = CACHE_DIR / f"{variant}-{digest}.so"
    if not out.exists():
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        partial = CACHE_DIR / f".{out.name}.{os.getpid()}"
        cmd = ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-Wextra"]
        cmd += [*VARIANT_FLAGS[variant], "-o", str(partial), str(SOURCE), "-ldl"]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        os.replace(partial, out)
    return out


def build_library(dest_dir: Path, variant: str = "full") -> Path:
    """Put a fake NVML library of ``variant`` at ``dest_dir/libnvidia-ml.so.1``.

    Args:
        dest_dir: Directory to create or reuse.
        variant: One of :data:`VARIANTS`; ``missing`` leaves no library there.

    Returns:
        The library path (which does not exist for ``missing``).

    Raises:
        ValueError: Unknown variant.
        subprocess.CalledProcessError: gcc failed.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown fake NVML variant {variant!r}; one of {VARIANTS}")
    dest_dir.mkdir(parents=True, exist_ok=True)
    lib = dest_dir / LIB_NAME
    if variant != "missing":
        shutil.copyfile(_compiled(variant), lib)
    return lib


def _fields(record: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    return [f"{k}={record[k]}" for k in keys if record.get(k) is not None]


def _proc_lines(procs: list[dict[str, Any]], device: int, mig: int | None) -> list[str]:
    lines = []
    for p in procs:
        mem = "NA" if p.get("mem") is None else str(p["mem"])
        fields = [f"device={device}", f"kind={p.get('kind', 'compute')}", f"pid={p['pid']}"]
        fields.append(f"mem={mem}")
        if mig is not None:
            fields.append(f"mig={mig}")
        fields += _fields(p, ("gi", "ci"))
        lines.append("\t".join(["proc", *fields]))
    return lines


def config_text(spec: dict[str, Any]) -> str:
    """Render a spec (see module docstring) in the TAB-separated format of fake_nvml.c."""
    lines = ["# fake NVML configuration, written by tests/fakenvml/build.py"]
    for key in ("driver", "init_error", "count_error"):
        if spec.get(key) is not None:
            lines.append(f"{key}\t{spec[key]}")
    for block in spec.get("block", []):
        device = block.get("device")
        lines.append(
            "\t".join(
                ["block", block["symbol"], *([f"device={device}"] if device is not None else [])]
            )
        )
    for n, dev in enumerate(spec.get("devices", [])):
        dev = dict(dev)
        if dev.get("proc_error") is not None:
            for kind in ("compute", "graphics", "mps"):
                dev.setdefault(f"err_{kind}", dev["proc_error"])
        lines.append("\t".join(["device", *_fields(dev, _DEVICE_KEYS)]))
        for mig in dev.get("mig_devices", []):
            mig = dict(mig)
            if mig.get("proc_error") is not None:
                for kind in ("compute", "graphics", "mps"):
                    mig.setdefault(f"err_{kind}", mig["proc_error"])
            head = ["mig", f"parent={n}", f"index={mig['index']}"]
            lines.append("\t".join(head + _fields(mig, _DEVICE_KEYS)))
            lines += _proc_lines(mig.get("processes", []), n, int(mig["index"]))
        lines += _proc_lines(dev.get("processes", []), n, None)
    return "\n".join(lines) + "\n"


def write_config(path: Path, spec: dict[str, Any]) -> Path:
    """Write ``spec`` to ``path`` for ``FAKE_NVML_CONFIG`` (or as ``fake_nvml.conf``).

    Strings are written as UTF-8 with surrogate escapes, so a name such as
    ``"H200 \\udcff"`` puts the raw byte 0xff into the fake driver's strings (a GPU name
    or UUID that is not valid UTF-8).
    """
    # Written aside and renamed: the library re-reads the file when it changes, and must
    # never see half of it.
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(config_text(spec).encode("utf-8", "surrogateescape"))
    os.replace(tmp, path)
    return path

"""Packaging: the hash-pinned lock file the Debian build installs, and the wheel."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PACKAGE = REPO / "watchdog"
LOCK = REPO / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+) \\$")


def locked() -> dict[str, tuple[str, list[str]]]:
    """Name → (version, hashes) from requirements.lock."""
    out: dict[str, tuple[str, list[str]]] = {}
    name = ""
    for line in LOCK.read_text().splitlines():
        m = PIN.match(line)
        if m:
            name = canonicalize_name(m.group(1))
            out[name] = (m.group(2), [])
        elif line.strip().startswith("--hash=sha256:") and name:
            out[name][1].append(line.strip().removeprefix("--hash=sha256:").rstrip(" \\"))
    return out


def test_lock_pins_every_dependency_by_hash_within_its_range() -> None:
    lock = locked()
    assert lock
    for spec in PYPROJECT["project"]["dependencies"]:
        req = Requirement(spec)
        version, _ = lock[canonicalize_name(req.name)]
        assert req.specifier.contains(version, prereleases=True), (spec, version)
    for name, (_version, hashes) in lock.items():
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), name
    text = LOCK.read_text()
    assert "--index-url" not in text and "--find-links" not in text  # no machine's mirror


def test_wheel_builds_with_the_entry_point(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    # Platform-tagged: it carries the compiled weights check (setup.py's extension).
    (wheel,) = tmp_path.glob("rogue_watchdog-0.1.0-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry = z.read(info).decode()
        meta = z.read(info.replace("entry_points.txt", "METADATA")).decode()
    # Installed as rogue_watchdog (PyPI's watchdog owns watchdog/: issue 33), every module.
    sources = {f"rogue_watchdog/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.py")}
    assert sources <= names, sorted(sources - names)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert f"rogue_watchdog/weights/_finitec{suffix}" in names
    assert not any(n.startswith(("tests/", "watchdog/")) for n in names)
    assert "rogue-watchdog = rogue_watchdog.__main__:entry" in entry
    requires = sorted(
        canonicalize_name(Requirement(line.split(":", 1)[1].strip()).name)
        for line in meta.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    )
    assert requires == sorted(
        canonicalize_name(Requirement(d).name) for d in PYPROJECT["project"]["dependencies"]
    )


def test_every_package_folder_is_listed_under_the_installed_name() -> None:
    """pyproject.toml lists the packages by hand (the folder watchdog/ is mapped to
    rogue_watchdog, which setuptools' find cannot rename): a new subpackage is listed."""
    folders = {
        ".".join(("rogue_watchdog", *p.parent.relative_to(PACKAGE).parts))
        for p in PACKAGE.rglob("__init__.py")
    }
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"rogue_watchdog": "watchdog"}
    assert sorted(setuptools["packages"]) == sorted(folders)

"""What `scripts/setup.sh --test` must install: every program a test asks for with
``need_program`` (and the few the harnesses run directly) and every build dependency
``debian/control`` names.

A machine that had a package installed by hand hides a gap in the setup script (a fresh
Debian 12 VM had no debhelper, so the package test failed there and nowhere else). So
besides "is it on PATH here", the setup's own apt step (scripts/setup-packages.sh) is run
against a recording ``apt-get``, as on a fresh machine, and what it asks for is checked to
cover each program: the program's Debian package must be one it names, or one apt pulls in
for those (Depends, Pre-Depends, Recommends, as ``apt-get install`` does), or part of every
Debian system (Essential, or Priority required or important), and each Build-Depends must
come from ``apt-get build-dep ./`` over this checkout's debian/ directory.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, need_program

#: Programs the harnesses run without a ``need_program`` of their own (the namespaced
#: systemd, the nobody runner, the package build and the completion test's shells).
RUN_DIRECTLY = ("sh", "findmnt", "systemd", "man", "runuser", "unshare", "nsenter", "mount")


def _needed_programs() -> set[str]:
    """Every string literal passed to ``need_program(...)`` anywhere under tests/."""
    names: set[str] = set()
    for path in (REPO / "tests").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "need_program"
            ):
                names.update(
                    a.value
                    for a in node.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)
                )
    return names


def test_every_program_a_test_needs_is_installed() -> None:
    names = _needed_programs()
    # The scan itself must find the calls (a refactor renaming the helper would make this
    # test vacuous): the suite asks for dozens of programs, cron and gcc among them.
    assert {"cron", "gcc", "sbatch", "podman", "dockerd", "dpkg-buildpackage"} <= names
    missing = sorted(n for n in names if shutil.which(n) is None)
    assert missing == [], f"not on PATH after scripts/setup.sh --test: {missing}"


def test_debian_build_dependencies_are_installed() -> None:
    need_program("dpkg-checkbuilddeps")
    control = Path(REPO, "debian", "control")
    done = subprocess.run(
        ["dpkg-checkbuilddeps", str(control)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


# -- what the setup's apt step asks for, on a fresh machine -----------------------------


def _setup_apt_calls(tmp: Path) -> list[str]:
    """The ``apt-get`` command lines ``scripts/setup-packages.sh --test`` runs where
    nothing is installed yet: ``dpkg-checkbuilddeps`` reports unmet dependencies and the
    package lists were never refreshed; ``apt-get`` only records (cwd, arguments)."""
    stubs = tmp / "bin"
    stubs.mkdir()
    log = tmp / "apt-calls"
    scripts = {
        "apt-get": f'#!/bin/sh\necho "$(pwd) $*" >> {log}\n',
        "dpkg-checkbuilddeps": "#!/bin/sh\nexit 1\n",
        "id": '#!/bin/sh\n[ "$1" = -u ] && echo 0\n',  # root, whoever runs the test
    }
    for name, text in scripts.items():
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "RW_APT_STAMP": str(tmp / "stamp"), "LANG": "C"}
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup-packages.sh"), "--test"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return log.read_text().splitlines()


def _dpkg_status() -> dict[str, dict[str, str]]:
    """Installed packages (``install ok installed``) → their control fields."""
    out: dict[str, dict[str, str]] = {}
    text = Path("/var/lib/dpkg/status").read_text(errors="replace")
    for para in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in para.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Status") == "install ok installed" and "Package" in fields:
            out[fields["Package"]] = fields
    return out


def _alternatives(field: str) -> list[list[str]]:
    """``a (>= 1) | b:any, c`` → ``[["a", "b"], ["c"]]``: names only."""
    groups = []
    for part in field.split(","):
        names = [re.sub(r"\(.*?\)|\[.*?\]|<.*?>", "", alt).strip() for alt in part.split("|")]
        names = [n.split(":")[0] for n in names if n]
        if names:
            groups.append(names)
    return groups


def _closure(roots: set[str], status: dict[str, dict[str, str]]) -> set[str]:
    """Installed packages apt would bring in for ``roots``: each dependency group is met by
    its first installed alternative, a virtual name by its installed providers."""
    providers: dict[str, list[str]] = {}
    for name, fields in status.items():
        for group in _alternatives(fields.get("Provides", "")):
            providers.setdefault(group[0], []).append(name)
    todo, seen = list(roots), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        fields = status.get(name)
        if fields is None:
            todo += providers.get(name, [])
            continue
        for key in ("Pre-Depends", "Depends", "Recommends"):
            for group in _alternatives(fields.get(key, "")):
                hit = next((a for a in group if a in status or a in providers), None)
                if hit is not None:
                    todo.append(hit)
    return seen


def _owners(program: str) -> set[str]:
    """The installed packages that ship ``program`` in a directory of the standard PATH
    (a copy a person put in /usr/local/bin shadows the packaged one, so every directory
    counts, not only the first hit)."""
    out: set[str] = set()
    for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        path = os.path.join(d, program)
        if not os.path.exists(path):
            continue
        # usrmerge: dpkg may know /usr/bin/x as /bin/x, or the other way round.
        for known in dict.fromkeys([path, path.removeprefix("/usr"), os.path.realpath(path)]):
            done = subprocess.run(
                ["dpkg-query", "-S", known], capture_output=True, text=True, check=False
            )
            for line in done.stdout.splitlines():
                if not line.startswith("diversion by") and ": " in line:
                    names = line.split(": ", 1)[0]
                    out.update(n.split(":")[0].strip() for n in names.split(","))
    return out


def test_setup_asks_apt_for_the_test_packages_and_the_checkout_build_deps(tmp_path: Path) -> None:
    calls = _setup_apt_calls(tmp_path)
    packages = (
        "cron at munge slurm-wlm gcc libc6-dev procps util-linux prometheus"
        " prometheus-alertmanager dh-virtualenv build-essential tmux vim chromium git sudo"
        " podman runc conmon busybox-static docker.io"
    )
    assert calls == [
        f"{REPO} update -qq",
        f"{REPO} install -y -qq {packages}",
        # Read from debian/control by apt itself: debhelper-compat (= 13) is debhelper.
        f"{REPO} build-dep -y -qq ./",
    ]


def test_setup_packages_cover_every_program_a_system_test_needs(tmp_path: Path) -> None:
    need_program("dpkg-query")
    calls = _setup_apt_calls(tmp_path)
    installed = next(c for c in calls if " install " in c).split(" install -y -qq ", 1)[1].split()
    assert f"{REPO} build-dep -y -qq ./" in calls
    control = (REPO / "debian" / "control").read_text()
    build_deps = re.search(r"^Build-Depends:(.*(?:\n .*)*)", control, re.M)
    assert build_deps is not None
    status = _dpkg_status()
    base = {
        name for name, f in status.items()
        if f.get("Essential") == "yes" or f.get("Priority") in ("required", "important")
    }  # fmt: skip
    roots = base | set(installed) | {g[0] for g in _alternatives(build_deps.group(1))}
    # python3 and python3-venv: setup.sh's own step when the interpreter lacks them.
    covered = _closure(roots | {"python3", "python3-venv"}, status)
    programs = sorted(_needed_programs() | set(RUN_DIRECTLY))
    uncovered = []
    for program in programs:
        owners = _owners(program)
        if not owners & covered and not _in_venv(program):
            uncovered.append(f"{program} ({', '.join(sorted(owners)) or 'no Debian package'})")
    assert uncovered == [], "not installed by scripts/setup-packages.sh --test on a fresh machine"


def _in_venv(program: str) -> bool:
    found = shutil.which(program)
    return found is not None and Path(found).resolve().is_relative_to(Path(sys.prefix).resolve())


def test_every_build_dependency_comes_from_the_setup(tmp_path: Path) -> None:
    # Whatever debian/control names is what `apt-get build-dep ./` installs; here each
    # one is also met (dpkg's own parser, the check dpkg-buildpackage makes).
    need_program("dpkg-checkbuilddeps")
    done = subprocess.run(
        ["dpkg-checkbuilddeps", str(REPO / "debian" / "control")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert f"{REPO} build-dep -y -qq ./" in _setup_apt_calls(tmp_path)

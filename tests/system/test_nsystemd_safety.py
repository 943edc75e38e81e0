"""The namespaced-systemd harness cannot touch the host's /tmp or sysctls.

A unit without ``DefaultDependencies=no`` (a ``systemd-run`` transient unit is one by
default) pulls in ``sysinit.target``; on a booted system that runs
``systemd-tmpfiles-setup`` (``D /tmp``: empties /tmp) and ``systemd-sysctl``. In the
harness the namespace has its own tmpfs on /tmp and those units are masked, so such a
unit leaves a marker file in the host's /tmp and the host's sysctls alone.

The guards are checked *before* the risky unit is started, so a broken harness fails
the test without ever running it.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.system.nsystemd import MASKED, NamespacedSystemd, nsystemd, paths_hidden_by_private_tmp

__all__ = ["nsystemd"]  # the imported session fixture

pytestmark = pytest.mark.system

SYSCTLS = ("fs/protected_regular", "fs/protected_fifos", "fs/protected_hardlinks")


def _sysctls() -> dict[str, str]:
    out = {}
    for name in SYSCTLS:
        try:
            out[name] = Path(f"/proc/sys/{name}").read_text().strip()
        except OSError:
            out[name] = "?"
    return out


def test_default_dependencies_unit_cannot_empty_host_tmp(nsystemd: NamespacedSystemd) -> None:
    sd = nsystemd
    marker_dir = Path(tempfile.mkdtemp(prefix="rwtest-tmpguard-", dir="/tmp"))
    marker = marker_dir / "marker"
    marker.write_text("must survive\n")
    before = _sysctls()
    unit = "rwtest-defdeps.service"
    try:
        # Guard 1: /tmp inside the namespace is its own tmpfs, not the host's directory.
        fstype = sd.nsenter("findmnt", "-n", "-o", "FSTYPE", "--mountpoint", "/tmp")
        assert fstype.stdout.strip() == "tmpfs"
        seen = sd.nsenter("test", "-e", str(marker), check=False)
        assert seen.returncode == 1, "the namespace sees the host's /tmp"
        # Guard 2: the units that write host state are masked.
        for name in MASKED:
            assert sd.show(name, "LoadState")["LoadState"] == "masked", name

        # The risky case itself: a transient unit with default dependencies.
        run = sd.nsenter(
            "systemd-run", f"--unit={unit}", "--wait", "--collect", "/bin/true",
            check=False, timeout_s=30,
        )  # fmt: skip
        states = sd.show("sysinit.target", "ActiveState")
        tmpfiles = sd.show("systemd-tmpfiles-setup.service", "ActiveState")
        assert marker.read_text() == "must survive\n", run.stderr
        assert states["ActiveState"] == "inactive"
        assert tmpfiles["ActiveState"] == "inactive"
        assert _sysctls() == before
    finally:
        sd.systemctl("stop", unit, check=False)
        sd.systemctl("reset-failed", unit, check=False)
        shutil.rmtree(marker_dir, ignore_errors=True)


def test_the_checkout_runs_inside_whatever_its_path(nsystemd: NamespacedSystemd) -> None:
    # A checkout cloned under /tmp would be hidden by the namespace's private /tmp
    # (`env: '/tmp/…/.venv/bin/python': No such file or directory`): it is bound back,
    # and only it; the staging mount of the host's /tmp is gone once systemd runs.
    sd = nsystemd
    res = sd.nsenter(
        sys.executable,
        "-c",
        "import rogue_watchdog, sys; print(rogue_watchdog.__file__, sys.prefix)",
    )
    assert res.stdout == f"{REPO / 'watchdog' / '__init__.py'} {sys.prefix}\n"
    staged = sd.nsenter("findmnt", "-n", "--mountpoint", str(sd.sandbox / "host-tmp"), check=False)
    assert (staged.returncode, staged.stdout) == (1, "")
    # Only mounts on the namespace's own /tmp count: the copies of whatever the host had
    # under /tmp when the namespace was made (another test's container overlay, in the
    # CI lanes) lie shadowed beneath the tmpfs, where no unit can reach them.
    assert _mounted_on_private_tmp(sd.pid) == paths_hidden_by_private_tmp()


def _unescape(field: str) -> str:
    # proc_pid_mountinfo(5): space, tab, newline and backslash are written as \ooo.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mounted_on_private_tmp(pid: int | None) -> list[str]:
    """Mount points mounted directly on the namespace's /tmp tmpfs, in mount order."""
    assert pid is not None
    rows = []
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split(" ")
        sep = fields.index("-")
        rows.append((fields[0], fields[1], _unescape(fields[4]), fields[sep + 2]))
    tmpfs = [mid for mid, _, target, source in rows if target == "/tmp" and source == "rwtest-tmp"]
    assert len(tmpfs) == 1, rows
    return [target for _, parent, target, _ in rows if parent == tmpfs[0]]

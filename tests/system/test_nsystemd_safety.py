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
    hidden = paths_hidden_by_private_tmp()
    mounts = sd.nsenter("findmnt", "-n", "-l", "-o", "TARGET").stdout.splitlines()
    assert [m for m in mounts if m.startswith("/tmp/")] == hidden

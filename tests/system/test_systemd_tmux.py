"""Real systemd + real tmux: a unit whose ExecStart creates the tmux session that runs the
trainer (``Restart=always``) is the trainer's origin, with the session as detail; a
session a person opens on that same server stays a ``shell`` origin."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import need_program
from tests.system.nsystemd import NamespacedSystemd, nsystemd
from tests.system.test_systemd import TRAINER, scan_inside

__all__ = ["nsystemd"]  # the imported session fixture

pytestmark = pytest.mark.system

UNIT = "svc-tmux.service"


@pytest.fixture
def tmux_unit(nsystemd: NamespacedSystemd) -> Iterator[tuple[NamespacedSystemd, str, str]]:
    need_program("tmux")
    sd = nsystemd
    script = str(sd.write_file("train_job.py", TRAINER))
    sock = str(sd.sandbox / "tmux.sock")
    sd.add_unit(
        UNIT,
        "[Unit]\nDefaultDependencies=no\n\n[Service]\nType=forking\n"
        f"ExecStart=/usr/bin/tmux -S {sock} new-session -d -s svc '/usr/bin/python3 {script}'\n"
        "Restart=always\nRestartSec=1\n",
    )
    sd.systemctl("start", UNIT)
    try:
        yield sd, script, sock
    finally:
        sd.stop_units([UNIT])
        sd.nsenter("tmux", "-S", sock, "kill-server", check=False)


def _job(sd: NamespacedSystemd, cmdline: list[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        data = scan_inside(sd, "nvml:\n  enabled: false\n")
        found = [j for j in data["jobs"] if j["cmdline"] == cmdline]
        if found or time.monotonic() > deadline:
            assert len(found) == 1, data["jobs"]
            job: dict[str, Any] = found[0]
            return job
        time.sleep(0.3)


def test_unit_that_creates_the_tmux_session_is_the_origin(
    tmux_unit: tuple[NamespacedSystemd, str, str],
) -> None:
    sd, script, sock = tmux_unit
    job = _job(sd, ["/usr/bin/python3", script])
    origin = job["origin"]
    assert origin["kind"] == "systemd"
    assert origin["unit"] == UNIT
    assert origin["restart"] == "always"
    assert (origin["tmux_socket"], origin["tmux_session"], origin["tmux_session_id"]) == (
        sock,
        "svc",
        "$0",
    )
    assert origin["remediation"] == (f"systemctl disable --now {UNIT} && systemctl mask {UNIT}")
    assert (
        f"runs in tmux session `svc` ($0) on `{sock}`, which the unit's own ExecStart created "
        f"(`/usr/bin/tmux -S {sock} new-session -d -s svc '/usr/bin/python3 {script}'`)"
    ) in origin["evidence"]

    # A person opens a session of their own on that server (so in the unit's cgroup).
    other = str(sd.write_file("train_adhoc.py", TRAINER))
    sd.nsenter("tmux", "-S", sock, "new-session", "-d", "-s", "adhoc", f"/usr/bin/python3 {other}")
    adhoc = _job(sd, ["/usr/bin/python3", other])["origin"]
    assert adhoc["kind"] == "shell"
    assert (adhoc["tmux_session"], adhoc["tmux_session_id"]) == ("adhoc", "$1")
    assert adhoc["session"] == f"tmux session `adhoc` ($1) on `{sock}`"

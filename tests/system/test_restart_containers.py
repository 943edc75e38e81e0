"""Issue 31, case 5, on a real dockerd (sandboxed, tests/system/containerharness.py): a
``--restart=always`` container's origin says the engine starts it again at once (it does:
the main process is killed and back within seconds), and with the engine unreachable the
policy is said to be unknown and the advice still removes it before stopping.

BEFORE (4ec0a01): evidence "restart policy 'always': the engine starts the container
again (after a daemon restart or reboot) unless the policy is removed"; unreachable:
no word on the policy, remediation a bare `docker stop ID`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import need_program, poll
from tests.system.containerharness import (
    Engine,
    container_sandbox,  # noqa: F401
    docker_engine,
)
from watchdog.lineage import default_resolvers
from watchdog.lineage.base import ResolveContext
from watchdog.model import Origin
from watchdog.scan import resolve_origin
from watchdog.sources.procfs import ProcessTable

pytestmark = pytest.mark.system


def _origin(pid: int) -> Origin:
    table = ProcessTable()
    table.refresh()
    ctx = ResolveContext(table=table, now=datetime.now(UTC))
    return resolve_origin(table.ancestors(pid), ctx, default_resolvers())


@pytest.fixture
def docker(
    container_sandbox: tuple[Path, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Engine]:
    need_program("dockerd", "docker", "containerd-shim-runc-v2")
    with docker_engine(*container_sandbox) as engine:
        monkeypatch.setenv("DOCKER_HOST", engine.env["DOCKER_HOST"])
        yield engine


def test_restart_always_is_at_once_and_unknown_when_the_engine_does_not_answer(
    docker: Engine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cid = docker.run("retrain-always", "--restart=always")
    pid = docker.pid(cid)
    origin = _origin(pid)
    assert [e for e in origin.evidence if "restart policy" in e] == [
        "restart policy 'always': the engine starts the container again at once whenever its "
        "main process ends (and after a daemon restart or reboot), unless the policy is removed"
    ]
    again = origin.restarts()
    assert again is not None
    assert (
        again.line()
        == f"restarts it: at once, Docker restart policy always of container {cid[:12]}"
    )
    stop = f"docker update --restart=no {cid} && docker stop {cid}"
    assert origin.remediation == stop
    assert again.stops == f"stop it and remove the policy first: {stop}"
    # "At once" is what the engine does: our container's main process, killed, is back.
    os.kill(pid, signal.SIGKILL)
    back = poll("the container back", lambda: (p := docker.pid(cid)) != pid and p, 20)

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    origin = _origin(back)
    assert [e for e in origin.evidence if "restart" in e] == [
        "restart policy unknown: `docker inspect` did not answer; the engine may start the "
        "container again once it stops"
    ]
    assert origin.remediation == stop
    again = origin.restarts()
    assert again is not None and again.line() == (
        f"restarts it: unknown, Docker restart policy unknown (the engine did not answer for "
        f"{cid[:12]})"
    )

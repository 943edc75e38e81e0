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
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rogue_watchdog.lineage import default_resolvers
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.model import Origin
from rogue_watchdog.scan import resolve_origin
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import need_program, poll
from tests.system.containerharness import (
    IMAGE,
    Engine,
    container_sandbox,  # noqa: F401
    docker_engine,
)

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
        "restart policy always: the engine starts the container again at once whenever its "
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
    assert again.stops == "disable-source first"  # it acts on Docker (issue 31, item 4)
    # "At once" is what the engine does: our container's main process, killed, is back.
    os.kill(pid, signal.SIGKILL)
    back = poll("the container back", lambda: (p := docker.pid(cid)) != pid and p, 20)

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    origin = _origin(back)
    assert [e for e in origin.evidence if "restart" in e] == [
        "restart policy unknown: ``docker inspect`` did not answer; the engine may start the "
        "container again once it stops"
    ]
    assert origin.remediation == stop
    again = origin.restarts()
    assert again is not None and again.line() == (
        f"restarts it: unknown, Docker restart policy unknown (the engine did not answer for "
        f"{cid[:12]})"
    )


def _cli(tmp_path: Path, *args: str) -> tuple[int, str]:
    """``python -m rogue_watchdog ARGS --config`` (the engine through this process's env)."""
    config = tmp_path / "config.yaml"
    if not config.exists():
        config.write_text(
            f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n"
            "enforcement: {grace_s: 2}\n"
        )
    done = subprocess.run(
        [sys.executable, "-m", "rogue_watchdog", *args, "--config", str(config)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return done.returncode, done.stdout


def _state(engine: Engine, cid: str) -> str:
    return engine.cli(
        "inspect", "--format", "{{.HostConfig.RestartPolicy.Name}} {{.State.Running}}", cid
    )


def test_terminate_says_it_comes_back_and_disable_source_removes_the_policy(
    docker: Engine, tmp_path: Path
) -> None:
    """Issue 31, items 4 and 2 on a real dockerd. `terminate` of a --restart=always
    container's trainer ends `will-return` (it is back at once); `disable-source` sets the
    policy to no and stops the container; `undo` puts the policy back and starts it.
    BEFORE (bd663fe): disable-source said "disabling a container source is not supported"."""
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "train_ctr.py").write_text("import time\ntime.sleep(10**6)\n")
    cid = docker.cli(
        "run", "-d", "--network", "none", "--name", "train-dk", "--restart=always",
        # The host's python, read-only, running a trainer by its script name.
        "-v", "/usr:/usr:ro", "-v", "/lib:/lib:ro", "-v", "/lib64:/lib64:ro",
        "-v", f"{tmp_path}/w:/w:ro", IMAGE, "/usr/bin/python3", "/w/train_ctr.py",
    )  # fmt: skip
    pid = docker.pid(cid)
    rc, out = _cli(tmp_path, "terminate", str(pid))
    lines = out.splitlines()
    assert rc == 1, out
    assert lines[-2:] == [
        "outcome: will-return",
        "will come back: its source restarts it; disable-source first",
    ], out
    pid = poll("the container back", lambda: (p := docker.pid(cid)) not in (0, pid) and p, 30)
    rc, out = _cli(tmp_path, "disable-source", str(pid), "--dry-run")
    assert (rc, out.splitlines()[1:]) == (
        0,
        [
            "  before: restart policy always, running",
            f"  docker update --restart=no {cid}",
            f"  docker stop {cid}",
        ],
    ), out
    assert _state(docker, cid) == "always true"
    rc, out = _cli(tmp_path, "disable-source", str(pid))
    assert rc == 0, out
    assert out.splitlines()[-1] == "the running job has stopped too (it ended with its source)"
    assert _state(docker, cid) == "no false"
    m = re.search(r"undo with: rogue-watchdog undo --config \S+ (\d+)", out)
    assert m is not None, out
    rc, out = _cli(tmp_path, "undo", m.group(1))
    assert (rc, out.splitlines()[1:]) == (
        0,
        [f"  docker update --restart=always {cid}", f"  docker start {cid}", "outcome: ok"],
    ), out
    assert _state(docker, cid) == "always true"

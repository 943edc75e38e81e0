"""Real podman and docker: the container origin of a process running in each.

The engines run sandboxed (tests/system/containerharness.py); the resolver asks them
through their ordinary CLIs, found through ``CONTAINERS_CONF`` / ``DOCKER_HOST`` in this
process's environment as an administrator's shell would have them. The systemd-driver
cgroup shapes (``libpod-ID.scope``, ``docker-ID.scope``) need systemd as the engines'
cgroup manager, which these machines do not run: tests/unit/test_cgroup.py holds them.
"""

from __future__ import annotations

import shlex
import subprocess
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
    podman_engine,
)

pytestmark = pytest.mark.system


def _origin(pid: int) -> tuple[Origin, ProcessTable]:
    table = ProcessTable()
    table.refresh()
    ctx = ResolveContext(table=table, now=datetime.now(UTC))
    return resolve_origin(table.ancestors(pid), ctx, default_resolvers()), table


def _run_remediation(engine: Engine, text: str) -> None:
    # Exactly the printed commands (a shell comment ends them), without a shell.
    for part in text.split("  #", 1)[0].split(" && "):
        subprocess.run(shlex.split(part), env=engine.env, check=True, timeout=60)


@pytest.fixture
def podman(
    container_sandbox: tuple[Path, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Engine]:
    need_program("podman", "runc", "conmon")
    with podman_engine(*container_sandbox) as engine:
        for key in ("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF"):
            monkeypatch.setenv(key, engine.env[key])
        yield engine


@pytest.fixture
def docker(
    container_sandbox: tuple[Path, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Engine]:
    need_program("dockerd", "docker", "containerd-shim-runc-v2")
    with docker_engine(*container_sandbox) as engine:
        monkeypatch.setenv("DOCKER_HOST", engine.env["DOCKER_HOST"])
        yield engine


def test_podman_container_origin_and_stop(podman: Engine) -> None:
    cid = podman.run("retrain-pm", "--restart=always")
    image_id = podman.cli("image", "inspect", "--format", "{{.Id}}", IMAGE)
    pid = podman.pid(cid)
    origin, table = _origin(pid)
    assert origin.kind == "container"
    assert origin.fields == {
        "container_id": cid,
        "pod_uid": None,
        "runtime": "podman",
        "namespace": None,
        "image": IMAGE,
        "image_id": f"sha256:{image_id}",
        "name": "retrain-pm",
        "restart_policy": "always",
    }
    conmon = table.ancestors(pid)[1]
    assert origin.evidence[0].startswith(f"ancestor PID {conmon.pid} is conmon: ")
    assert f"cgroup of PID {pid} names container {cid}" in origin.evidence
    assert f"9:name=systemd:/libpod_parent/libpod-{cid}" in origin.evidence
    assert origin.remediation == f"podman stop {cid}  # then recreate it without --restart=always"
    _run_remediation(podman, origin.remediation)
    assert podman.cli("inspect", "--format", "{{.State.Status}}", cid) == "exited"
    poll("the container's process to end", lambda: table.refresh().get(pid) is None, 30)


def test_docker_container_origin_disables_restart_and_stops(docker: Engine) -> None:
    cid = docker.run("retrain-dk", "--restart=always")
    image_id = docker.cli("image", "inspect", "--format", "{{.Id}}", IMAGE)
    pid = docker.pid(cid)
    origin, table = _origin(pid)
    assert origin.kind == "container"
    assert origin.fields == {
        "container_id": cid,
        "pod_uid": None,
        "runtime": "docker",
        "namespace": "moby",
        "image": IMAGE,
        "image_id": image_id,
        "name": "retrain-dk",
        "restart_policy": "always",
    }
    shim = table.ancestors(pid)[1]
    assert origin.evidence[0].startswith(
        f"ancestor PID {shim.pid} is containerd-shim-runc-v2: "
        f"`/usr/bin/containerd-shim-runc-v2 -namespace moby -id {cid}"  # host text, quoted
    )
    assert f"9:name=systemd:/docker/{cid}" in origin.evidence
    assert origin.remediation == f"docker update --restart=no {cid} && docker stop {cid}"
    _run_remediation(docker, origin.remediation)
    state = docker.cli(
        "inspect", "--format", "{{.State.Status}} {{.HostConfig.RestartPolicy.Name}}", cid
    )
    assert state == "exited no"
    poll("the container's process to end", lambda: table.refresh().get(pid) is None, 30)


def test_docker_without_restart_policy_is_only_stopped(docker: Engine) -> None:
    cid = docker.run("oneshot-dk")
    origin, _ = _origin(docker.pid(cid))
    assert origin.fields["restart_policy"] == "no"
    assert origin.remediation == f"docker stop {cid}"


def test_podman_disable_source_stops_it_and_undo_starts_it(podman: Engine, tmp_path: Path) -> None:
    """Issue 31, item 4 on real podman 4 (no `update --restart`): disable-source stops the
    container, after which its always policy does not act (podman-run(1)); undo starts it.
    BEFORE (bd663fe): "disabling a container source is not supported"."""
    import re
    import sys

    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "train_pm.py").write_text("import time\ntime.sleep(10**6)\n")
    cid = podman.cli(
        "run", "-d", "--network", "none", "--name", "train-pm", "--restart=always",
        "--stop-timeout", "1", "-v", "/usr:/usr:ro", "-v", "/lib:/lib:ro",
        "-v", "/lib64:/lib64:ro", "-v", f"{tmp_path}/w:/w:ro", IMAGE,
        "/usr/bin/python3", "/w/train_pm.py",
    )  # fmt: skip
    pid = podman.pid(cid)
    config = tmp_path / "c.yaml"
    config.write_text(f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n")

    def cli(*args: str) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "-m", "rogue_watchdog", *args, "--config", str(config)],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert done.returncode in (0, 1), done.stderr[-3000:]
        return done.returncode, done.stdout

    rc, out = cli("disable-source", str(pid))
    lines = out.splitlines()
    assert (rc, lines[1:3]) == (0, [f"  podman stop {cid}", "outcome: ok; undo with: "
                                    f"rogue-watchdog undo --config {config} 1"]), out  # fmt: skip
    state = "{{.State.Running}} {{.HostConfig.RestartPolicy.Name}}"
    assert podman.cli("inspect", "--format", state, cid) == "false always"
    m = re.search(r"undo --config \S+ (\d+)", out)
    assert m is not None
    rc, out = cli("undo", m.group(1))
    assert (rc, out.splitlines()[1:]) == (0, [f"  podman start {cid}", "outcome: ok"]), out
    assert podman.cli("inspect", "--format", state, cid) == "true always"

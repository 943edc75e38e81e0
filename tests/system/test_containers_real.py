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

from tests.conftest import need_program, poll
from tests.system.containerharness import (
    IMAGE,
    Engine,
    container_sandbox,  # noqa: F401
    docker_engine,
    podman_engine,
)
from watchdog.lineage import default_resolvers
from watchdog.lineage.base import ResolveContext
from watchdog.model import Origin
from watchdog.scan import resolve_origin
from watchdog.sources.procfs import ProcessTable

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
        f"/usr/bin/containerd-shim-runc-v2 -namespace moby -id {cid}"
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

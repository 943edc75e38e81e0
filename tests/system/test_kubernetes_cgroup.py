"""A real cgroup in the kubelet's cgroupfs layout, made by a real dockerd, resolved as a pod.

dockerd with ``--cgroup-parent /kubepods/burstable/pod<uid>`` puts the container where
the kubelet (cgroupfs driver, Docker runtime) puts a pod's container:
``/kubepods/burstable/pod<uid>/<id>`` in every hierarchy. The pod's metadata comes from
the stand-in API server (tests/kubeapi.py), since no API server runs here.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client

from rogue_watchdog.lineage import default_resolvers
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.lineage.kubernetes import KubeApi, KubernetesResolver
from rogue_watchdog.scan import resolve_origin
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import need_program
from tests.kubeapi import FIX, serve
from tests.system.containerharness import (
    Engine,
    container_sandbox,  # noqa: F401
    docker_engine,
)

pytestmark = pytest.mark.system
CGROUP_ROOT = Path("/sys/fs/cgroup")
PODS_PATH = "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-07"


def _hierarchies() -> list[Path]:
    return [p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink()] + [CGROUP_ROOT]


@pytest.fixture
def kubepods_parent() -> Iterator[str]:
    """``/kubepods/burstable/pod<uid>``; the directories the test creates are removed."""
    uid = str(uuid.uuid4())
    levels = ["kubepods", "kubepods/burstable", f"kubepods/burstable/pod{uid}"]
    existed = {(h, lvl) for h in _hierarchies() for lvl in levels if (h / lvl).is_dir()}
    try:
        yield f"/kubepods/burstable/pod{uid}"
    finally:
        for h in _hierarchies():
            for lvl in reversed(levels):
                if (h, lvl) not in existed and (h / lvl).is_dir():
                    # Not empty (someone else's) or read-only: leave it.
                    with contextlib.suppress(OSError):
                        os.rmdir(h / lvl)


@pytest.fixture
def docker(
    container_sandbox: tuple[Path, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Engine]:
    need_program("dockerd", "docker", "containerd-shim-runc-v2")
    with docker_engine(*container_sandbox) as engine:
        monkeypatch.setenv("DOCKER_HOST", engine.env["DOCKER_HOST"])
        yield engine


def _pod_list(uid: str, cid: str) -> bytes:
    recorded = json.loads((FIX / "pods-gpu-node-07.json").read_text())
    pod = recorded["items"][2]  # the bare pod "scratch", Docker runtime
    pod["metadata"]["uid"] = uid
    pod["status"]["containerStatuses"][0]["containerID"] = f"docker://{cid}"
    recorded["items"] = [pod]
    return json.dumps(recorded).encode()


def test_real_kubepods_cgroup_resolves_to_the_pod(kubepods_parent: str, docker: Engine) -> None:
    # kubepods_parent first: its teardown (rmdir) runs after the container is removed.
    cid = docker.run("k8s_notebook_scratch", "--cgroup-parent", kubepods_parent)
    pid = docker.pid(cid)
    uid = kubepods_parent.rsplit("/pod", 1)[1]
    table = ProcessTable()
    table.refresh()
    lineage = table.ancestors(pid)
    assert f"name=systemd:{kubepods_parent}/{cid}" in "\n".join(lineage[0].cgroup)
    ctx = ResolveContext(table=table, now=datetime.now(UTC))

    # No API reachable (outside a cluster): the pod UID and container from the cgroup only.
    blind = resolve_origin(lineage, ctx, default_resolvers())
    assert blind.kind == "kubernetes"
    assert (blind.fields["pod_uid"], blind.fields["container_id"]) == (uid, cid)
    # The shim ancestor (containerd-shim-runc-v2 -namespace moby) says Docker.
    assert (blind.fields["runtime"], blind.fields["qos_class"]) == ("docker", "Burstable")
    assert blind.fields["pod"] is None
    assert blind.remediation == f"crictl stop {cid}"

    with serve({PODS_PATH: (200, _pod_list(uid, cid))}) as api:
        cfg = client.Configuration()
        cfg.host = api.url
        resolver = KubernetesResolver(KubeApi(cfg, node_name="gpu-node-07"))
        origin = resolver.resolve(lineage, ResolveContext(table=table, now=datetime.now(UTC)))
    assert origin is not None
    f = origin.fields
    assert (f["namespace"], f["pod"], f["container"]) == ("ml-team", "scratch", "notebook")
    assert (f["owner_kind"], f["owner_name"]) == ("Pod", "scratch")
    assert origin.remediation == "kubectl -n ml-team delete pod scratch"

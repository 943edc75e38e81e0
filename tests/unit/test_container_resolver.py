"""ContainerResolver on fake proc trees (real cgroup layouts) and on a real shim-named process."""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rogue_watchdog.command import CommandResult, RecordingRunner
from rogue_watchdog.lineage.base import ResolveContext, split_answer
from rogue_watchdog.lineage.container import ContainerResolver, cgroup_container
from rogue_watchdog.model import Origin
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import Spawned, process_picture
from tests.fixtures.proc.fakeproc import FakeProc, lineage, make_context

CID = "3f4e8c0b5a6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f"
POD = "5f1c0a2e-7b3d-4c8e-9f10-1a2b3c4d5e6f"
INIT = FakeProc(1, 0, ["/sbin/init"])
CONTAINERD = FakeProc(100, 1, ["/usr/bin/containerd"])
TRAIN = ["/usr/bin/python3", "/workspace/train.py"]


def _shim(*args: str, pid: int = 200) -> FakeProc:
    return FakeProc(pid, 1, ["/usr/bin/containerd-shim-runc-v2", *args])


def _resolve(ctx: ResolveContext, pid: int) -> Origin | None:
    return ContainerResolver().resolve(lineage(ctx, pid), ctx)


def test_docker_shim_arguments(tmp_path: Path) -> None:
    shim = _shim("-namespace", "moby", "-id", CID, "-address", "/run/containerd/containerd.sock")
    cg = ("9:name=systemd:/docker/" + CID, "0::/")
    procs = [INIT, CONTAINERD, shim, FakeProc(210, 200, TRAIN, cgroup=cg)]
    ctx = make_context(tmp_path, procs)
    origin = _resolve(ctx, 210)
    assert origin is not None and origin.kind == "container"
    assert origin.fields == {
        "container_id": CID,
        "pod_uid": None,
        "runtime": "docker",
        "namespace": "moby",
        "image": None,  # no docker CLI answered
        "image_id": None,
        "name": None,
        "restart_policy": None,
    }
    # The engine did not answer: its restart policy is unknown, and said so (issue 31,
    # case 5; before: a bare `docker stop`).
    assert origin.remediation == f"docker update --restart=no {CID} && docker stop {CID}"
    assert origin.evidence[0].startswith("ancestor PID 200 is containerd-shim-runc-v2: ")
    assert (
        "restart policy unknown: ``docker inspect`` did not answer; the engine may start the "
        "container again once it stops"
    ) in origin.evidence


def test_image_from_the_runtime_cli(tmp_path: Path) -> None:
    template = (
        "[{{json .Config.Image}},{{json .Image}},{{json .Name}},"
        "{{json .HostConfig.RestartPolicy.Name}}]"
    )
    inspect = ("docker", "inspect", "--format", template, CID)
    answer = '["registry.example/retrain:2024-06","sha256:ab12","/retrain\\nx","always"]\n'
    rec = RecordingRunner({inspect: CommandResult(0, answer, "")})
    cg = (f"0::/system.slice/docker-{CID}.scope",)
    ctx = make_context(tmp_path, [INIT, FakeProc(210, 1, TRAIN, cgroup=cg)], rec)
    origin = _resolve(ctx, 210)
    assert origin is not None and origin.fields["image"] == "registry.example/retrain:2024-06"
    assert (origin.fields["image_id"], origin.fields["name"]) == ("sha256:ab12", "retrain\nx")
    assert origin.fields["restart_policy"] == "always"
    assert origin.remediation == f"docker update --restart=no {CID} && docker stop {CID}"
    assert _resolve(ctx, 210) is not None
    assert rec.calls == [inspect]  # cached for the scan


def test_kubernetes_systemd_driver_pod(tmp_path: Path) -> None:
    path = (
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        + POD.replace("-", "_")
        + f".slice/cri-containerd-{CID}.scope"
    )
    shim = _shim("-namespace", "k8s.io", "-id", "a" * 64)
    procs = [INIT, shim, FakeProc(210, 200, TRAIN, cgroup=(f"0::{path}",))]
    ctx = make_context(tmp_path, procs)
    origin = _resolve(ctx, 210)
    assert origin is not None
    # The cgroup names the container itself; the shim id is its pod sandbox's.
    assert origin.fields["container_id"] == CID
    assert origin.fields["pod_uid"] == POD
    assert origin.fields["runtime"] == "containerd"
    assert origin.remediation == f"crictl stop {CID}"
    assert any("its controller will recreate" in e for e in origin.evidence)
    assert ctx.run_cmd.calls == [  # type: ignore[attr-defined]
        ("crictl", "inspect", "-o", "go-template", "--template", "{{.status.image.image}}", CID)
    ]


def test_kubernetes_cgroupfs_pod_without_visible_shim(tmp_path: Path) -> None:
    cg = (f"4:memory:/kubepods/besteffort/pod{POD}/{CID}",)
    ctx = make_context(tmp_path, [INIT, FakeProc(210, 1, TRAIN, cgroup=cg)])
    clue = cgroup_container(cg)
    assert clue is not None and (clue.runtime, clue.pod_uid) == ("containerd", POD)
    origin = _resolve(ctx, 210)
    assert origin is not None and origin.remediation == f"crictl stop {CID}"


def test_podman_conmon(tmp_path: Path) -> None:
    conmon = FakeProc(
        200,
        1,
        ["/usr/bin/conmon", "--api-version", "1", "-c", CID, "-u", CID, "-r", "/usr/bin/crun"],
    )
    cg = (f"0::/machine.slice/libpod-{CID}.scope/container",)
    ctx = make_context(tmp_path, [INIT, conmon, FakeProc(210, 200, TRAIN, cgroup=cg)])
    origin = _resolve(ctx, 210)
    assert origin is not None
    assert (origin.fields["runtime"], origin.fields["container_id"]) == ("podman", CID)
    assert origin.remediation == (
        f"podman stop {CID}  # restart policy unknown: podman inspect --format "
        f"'{{{{.HostConfig.RestartPolicy.Name}}}}' {CID}"
    )


def test_crio_conmon(tmp_path: Path) -> None:
    conmon = FakeProc(200, 1, ["/usr/bin/conmon", "-c", CID, "--exit-dir", "/var/run/crio/exits"])
    ctx = make_context(tmp_path, [INIT, conmon, FakeProc(210, 200, TRAIN)])
    origin = _resolve(ctx, 210)
    assert origin is not None
    assert origin.fields["runtime"] == "cri-o"
    assert origin.remediation == f"crictl stop {CID}"


def test_docker_systemd_driver_cgroup_only(tmp_path: Path) -> None:
    cg = (f"0::/system.slice/docker-{CID}.scope",)
    ctx = make_context(tmp_path, [INIT, FakeProc(210, 1, TRAIN, cgroup=cg)])
    origin = _resolve(ctx, 210)
    assert origin is not None
    assert origin.remediation == f"docker update --restart=no {CID} && docker stop {CID}"
    assert origin.evidence[0] == f"cgroup of PID 210 names container {CID}"


def test_plain_containerd_namespace(tmp_path: Path) -> None:
    shim = _shim("-namespace", "default", "-id", "trainer")
    ctx = make_context(tmp_path, [INIT, shim, FakeProc(210, 200, TRAIN)])
    origin = _resolve(ctx, 210)
    assert origin is not None
    assert origin.fields["container_id"] == "trainer"
    assert origin.remediation == "ctr -n default task kill trainer"


def test_not_a_container(tmp_path: Path) -> None:
    procs = [
        INIT,
        FakeProc(50, 1, ["/usr/sbin/cron", "-f"]),
        FakeProc(60, 50, TRAIN, cgroup=("4:memory:/slurm/uid_0/job_3/step_batch",)),
    ]
    ctx = make_context(tmp_path, procs)
    assert _resolve(ctx, 60) is None


def test_real_process_under_a_shim_named_binary(tmp_path: Path, spawned: Spawned) -> None:
    """A real bash copied to ``containerd-shim-runc-v2`` keeps the shim's argv visible.

    ``bash -c SCRIPT ARG0 ARGS...`` leaves the trailing words in /proc/PID/cmdline,
    so the fake shim carries ``-namespace moby -id ID`` like the real one does.
    """
    shim_exe = tmp_path / "containerd-shim-runc-v2"
    shutil.copy2("/bin/bash", shim_exe)
    train = tmp_path / "train_fake.py"
    train.write_text("import time\ntime.sleep(60)\n")
    script = f"/usr/bin/python3 {train}; exit 0"  # '; exit' keeps bash as the parent
    shim = spawned.start(
        [str(shim_exe), "-c", script, "shim", "-namespace", "moby", "-id", CID],
        env={"PATH": "/usr/bin:/bin"},
    )
    table = ProcessTable()
    child = None
    deadline = time.monotonic() + 30  # a loaded CI host may take seconds to exec python
    while child is None and time.monotonic() < deadline:
        table.refresh()
        kids = table.children(shim.pid)
        table.watched.update(kids)  # bash's fork before its exec: read it again next time
        found = [p for k in kids if (p := table.get(k)) and p.cmdline[-1:] == (str(train),)]
        child = found[0] if found else None
        time.sleep(0.05)
    assert child is not None, (
        f"fake trainer did not start under the fake shim\n{process_picture(str(shim_exe))}"
    )
    ctx = ResolveContext(table=table, now=datetime.now(UTC), run_cmd=RecordingRunner())
    origin = ContainerResolver().resolve(table.ancestors(child.pid), ctx)
    assert origin is not None
    assert origin.fields["container_id"] == CID
    assert origin.fields["runtime"] == "docker"
    assert origin.remediation == f"docker update --restart=no {CID} && docker stop {CID}"
    assert origin.evidence[0].startswith(f"ancestor PID {shim.pid} is containerd-shim-runc-v2:")


@pytest.mark.parametrize(
    ("exe", "exe_uid", "uid", "why"),
    [
        # exec -a containerd-shim-runc-v2 python3 ...: argv says shim, the kernel runs python.
        ("/usr/bin/python3", 0, 1000, "its executable /usr/bin/python3 is not a shim"),
        # A user's own copy of a shim binary.
        (
            "/home/u/containerd-shim-runc-v2",
            1000,
            1000,
            "the owner of its executable /home/u/containerd-shim-runc-v2 is UID 1000, not root",
        ),
        # The real binary, started by a user with another container's id.
        ("/usr/bin/containerd-shim-runc-v2", 0, 1000, "it runs as UID 1000, not root"),
    ],
)
def test_shim_look_alike_does_not_name_someone_elses_container(
    tmp_path: Path, exe: str, exe_uid: int, uid: int, why: str
) -> None:
    argv = ["/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", CID]
    fake = FakeProc(200, 1, argv, exe=exe, exe_uid=exe_uid, uid=uid)
    rec = RecordingRunner()
    ctx = make_context(tmp_path, [INIT, fake, FakeProc(210, 200, TRAIN, uid=uid)], rec)
    origin, notes = split_answer(_resolve(ctx, 210))
    assert origin is None
    assert list(notes) == [
        "ancestor PID 200 looks like a container shim (`/usr/bin/containerd-shim-runc-v2 "
        f"-namespace moby -id {CID}`) but is not: {why}"
    ]
    assert rec.calls == []  # no runtime asked for that container's image

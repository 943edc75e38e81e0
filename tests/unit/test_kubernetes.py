"""Kubernetes pods: every kubelet cgroup layout, and the API path against recorded replies.

No Kubernetes API server can run on the test machines: the API replies below are recorded,
real-shaped JSON (tests/fixtures/kubernetes) served by a local HTTP server on 127.0.0.1,
and the official ``kubernetes`` client talks to it as it would to an API server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kubernetes import client

from rogue_watchdog.config import parse_config
from rogue_watchdog.lineage import default_resolvers
from rogue_watchdog.lineage.cgroup import parse_cgroup
from rogue_watchdog.lineage.container import cgroup_container
from rogue_watchdog.lineage.kubernetes import (
    KubeApi,
    KubernetesResolver,
    PodMeta,
    cgroup_pod,
    remediation_for_pod,
)
from rogue_watchdog.model import Job, Origin, origin_from_json
from rogue_watchdog.policy.allowlist import judge
from tests.fixtures.proc.fakeproc import FakeProc, lineage, make_context
from tests.kubeapi import FIX, FakeApiServer, serve

UID = "5f1c0a2e-7b3d-4c8e-9f10-1a2b3c4d5e6f"
UID_ = UID.replace("-", "_")
CID = "3f4e8c0b5a6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f"
DEP_UID = "0d6b3f0e-2c4a-4e55-8f3c-7a9d1e2b3c4d"
DEP_CID = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
BARE_UID = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
BARE_CID = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"
TRAIN = ["/usr/bin/python3", "/workspace/train.py"]
SUSPEND = """kubectl -n ml-team patch cronjob nightly-retrain -p '{"spec":{"suspend":true}}'"""

# (cgroup lines, pod UID, container id, QoS, runtime) for every layout the kubelet uses.
SHAPES = [
    pytest.param(
        [f"4:memory:/kubepods/burstable/pod{UID}/{CID}",
         f"1:name=systemd:/kubepods/burstable/pod{UID}/{CID}"],
        "Burstable", "containerd", id="cgroupfs-burstable",
    ),
    pytest.param(
        [f"0::/kubepods/besteffort/pod{UID}/{CID}"], "BestEffort", "containerd",
        id="cgroupfs-besteffort-v2",
    ),
    pytest.param(
        [f"0::/kubepods/pod{UID}/{CID}"], "Guaranteed", "containerd",
        id="cgroupfs-guaranteed-no-qos-level",
    ),
    pytest.param(
        [f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope"],
        "Burstable", "containerd", id="systemd-cri-containerd",
    ),
    pytest.param(
        [f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{CID}.scope"],
        "BestEffort", "cri-o", id="systemd-crio",
    ),
    pytest.param(
        [f"1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/docker-{CID}.scope"],
        "Burstable", "docker", id="systemd-docker",
    ),
    pytest.param(
        [f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope"],
        "Guaranteed", "containerd", id="systemd-guaranteed-no-qos-slice",
    ),
    pytest.param(
        [f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope"],
        "BestEffort", "containerd", id="kind-nested-systemd",
    ),
    pytest.param(
        [f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope"],
        "Guaranteed", "containerd", id="kind-nested-guaranteed",
    ),
    pytest.param(
        [f"12:pids:/kubelet/kubepods/burstable/pod{UID}/{CID}", "0::/"],
        "Burstable", "containerd", id="kind-nested-cgroupfs",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("lines", "qos", "runtime"), SHAPES)
def test_pod_and_container_from_every_cgroup_shape(
    lines: list[str], qos: str, runtime: str
) -> None:
    clue = cgroup_pod(lines)
    assert clue is not None
    assert (clue.pod_uid, clue.container_id, clue.qos_class) == (UID, CID, qos)
    rt = cgroup_container(lines)
    assert rt is not None and rt.runtime == runtime


def test_non_pod_paths_are_not_pods() -> None:
    assert cgroup_pod([f"0::/system.slice/docker-{CID}.scope"]) is None
    assert cgroup_pod(["0::/kubepods.slice/kubepods-burstable.slice"]) is None
    assert cgroup_pod(["0::/user.slice/user-1000.slice/session-2.scope"]) is None
    # A UID with a dash under the systemd driver is not how the kubelet names slices.
    info = parse_cgroup([f"0::/kubepods.slice/kubepods-pod{UID}.slice/cri-containerd-{CID}.scope"])
    assert info is not None and info.pod_uid is None


# -- the API path ------------------------------------------------------------------------


PODS_PATH = "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-07"
ROUTES: dict[str, tuple[int, str | bytes]] = {
    PODS_PATH: (200, "pods-gpu-node-07"),
    "/apis/batch/v1/namespaces/ml-team/jobs/nightly-retrain-29406420": (
        200,
        "job-nightly-retrain-29406420",
    ),
    "/apis/batch/v1/namespaces/ml-team/cronjobs/nightly-retrain": (200, "cronjob-nightly-retrain"),
    "/apis/apps/v1/namespaces/ml-team/replicasets/finetune-7d9f8b6c5": (
        200,
        "replicaset-finetune-7d9f8b6c5",
    ),
}


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serve(ROUTES) as fake:
        yield fake


def _api(url: str) -> KubeApi:
    cfg = client.Configuration()
    cfg.host = url
    return KubeApi(cfg, node_name="gpu-node-07", timeout_s=2.0)


def _resolve(tmp_path: Path, resolver: KubernetesResolver, cgroup: str) -> Origin | None:
    procs = [FakeProc(1, 0, ["/sbin/init"]), FakeProc(210, 1, TRAIN, cgroup=(cgroup,))]
    ctx = make_context(tmp_path, procs)
    return resolver.resolve(lineage(ctx, 210), ctx)


CJ_CGROUP = (
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
    f"cri-containerd-{CID}.scope"
)


def test_cronjob_pod_owner_chain_schedule_and_remediation(
    tmp_path: Path, apiserver: FakeApiServer
) -> None:
    resolver = KubernetesResolver(_api(apiserver.url))
    origin = _resolve(tmp_path, resolver, CJ_CGROUP)
    assert origin is not None and origin.kind == "kubernetes"
    assert origin.fields == {
        "pod_uid": UID,
        "container_id": CID,
        "runtime": "containerd",
        "qos_class": "Burstable",
        "namespace": "ml-team",
        "pod": "nightly-retrain-29406420-x7k2p",
        "container": "trainer",
        "service_account": "retrain-sa",
        "node": "gpu-node-07",
        "owner_kind": "CronJob",
        "owner_name": "nightly-retrain",
        "owner_chain": ["Job/nightly-retrain-29406420", "CronJob/nightly-retrain"],
        "image": "registry.example/ml/retrain:2024-06",
        "image_id": "registry.example/ml/retrain@sha256:"
        "9b2f4c1d8e7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c",
        "api": "ok",
        "schedule": "0 3 * * 0",
        "time_zone": "Europe/Berlin",
        # ctx.now is Sunday 2026-11-29 12:00 UTC: the next Sunday 03:00 in Berlin (CET).
        "next_run": "2026-12-06T03:00:00+01:00",
        "suspended": False,
    }
    assert origin.remediation == SUSPEND
    assert origin.describe() == (
        "Kubernetes pod ml-team/nightly-retrain-29406420-x7k2p of CronJob nightly-retrain"
        " (0 3 * * 0)"
    )
    assert (
        "owner chain: Pod/nightly-retrain-29406420-x7k2p <- Job/nightly-retrain-29406420"
        " <- CronJob/nightly-retrain" in origin.evidence
    )
    assert apiserver.requests == [
        PODS_PATH,
        "/apis/batch/v1/namespaces/ml-team/jobs/nightly-retrain-29406420",
        "/apis/batch/v1/namespaces/ml-team/cronjobs/nightly-retrain",
    ]
    # Cached per pod UID: a second scan asks nothing.
    assert _resolve(tmp_path / "again", resolver, CJ_CGROUP) == origin
    assert len(apiserver.requests) == 3


def test_deployment_pod_through_replicaset_on_crio(
    tmp_path: Path, apiserver: FakeApiServer
) -> None:
    cg = f"0::/kubepods.slice/kubepods-pod{DEP_UID.replace('-', '_')}.slice/crio-{DEP_CID}.scope"
    origin = _resolve(tmp_path, KubernetesResolver(_api(apiserver.url)), cg)
    assert origin is not None
    f = origin.fields
    assert (f["runtime"], f["qos_class"], f["container"]) == ("cri-o", "Guaranteed", "trainer")
    assert f["owner_chain"] == ["ReplicaSet/finetune-7d9f8b6c5", "Deployment/finetune"]
    assert (f["owner_kind"], f["owner_name"]) == ("Deployment", "finetune")
    assert "schedule" not in f
    assert origin.remediation == "kubectl -n ml-team scale deployment finetune --replicas=0"


def test_bare_pod_under_docker(tmp_path: Path, apiserver: FakeApiServer) -> None:
    cg = f"4:memory:/kubepods/besteffort/pod{BARE_UID}/{BARE_CID}"
    origin = _resolve(tmp_path, KubernetesResolver(_api(apiserver.url)), cg)
    assert origin is not None
    assert (origin.fields["owner_kind"], origin.fields["owner_name"]) == ("Pod", "scratch")
    assert origin.fields["container"] == "notebook"
    assert origin.remediation == "kubectl -n ml-team delete pod scratch"


def test_forbidden_owner_is_a_stated_gap(tmp_path: Path, apiserver: FakeApiServer) -> None:
    apiserver.routes["/apis/apps/v1/namespaces/ml-team/replicasets/finetune-7d9f8b6c5"] = (
        403,
        "status-forbidden-replicaset",
    )
    cg = f"0::/kubepods.slice/kubepods-pod{DEP_UID.replace('-', '_')}.slice/crio-{DEP_CID}.scope"
    origin = _resolve(tmp_path, KubernetesResolver(_api(apiserver.url)), cg)
    assert origin is not None
    assert origin.fields["owner_chain"] == ["ReplicaSet/finetune-7d9f8b6c5"]
    assert (
        "owner not readable: ReplicaSet ml-team/finetune-7d9f8b6c5: HTTP 403 Forbidden"
        in origin.evidence
    )
    assert origin.remediation == (
        "kubectl -n ml-team scale replicaset finetune-7d9f8b6c5 --replicas=0"
        "  # this owner's own controller could not be read: it may recreate it"
    )


def test_unreachable_api_degrades_to_pod_uid_only(tmp_path: Path) -> None:
    clock = [1000.0]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = srv.server_address[1]
    srv.server_close()  # nothing listens on this port any more
    resolver = KubernetesResolver(_api(f"http://127.0.0.1:{port}"), clock=lambda: clock[0])
    origin = _resolve(tmp_path, resolver, CJ_CGROUP)
    assert origin is not None and origin.kind == "kubernetes"
    f = origin.fields
    assert (f["pod_uid"], f["container_id"], f["namespace"], f["pod"], f["owner_kind"]) == (
        UID, CID, None, None, None,
    )  # fmt: skip
    assert f["api"].startswith("unavailable: MaxRetryError") or f["api"].startswith(
        "unavailable: NewConnectionError"
    ), f["api"]
    assert origin.remediation == f"crictl stop {CID}"
    assert any("pod UID only" in e for e in origin.evidence)
    assert origin.describe().startswith(f"Kubernetes pod {UID} (API: unavailable: ")


def test_failed_api_is_not_retried_every_scan(tmp_path: Path, apiserver: FakeApiServer) -> None:
    clock = [1000.0]
    apiserver.routes[PODS_PATH] = (503, "status-forbidden-replicaset")
    resolver = KubernetesResolver(_api(apiserver.url), clock=lambda: clock[0])
    first = _resolve(tmp_path / "1", resolver, CJ_CGROUP)
    assert first is not None and first.fields["api"] == "unavailable: HTTP 503 Service Unavailable"
    clock[0] += 30
    assert _resolve(tmp_path / "2", resolver, CJ_CGROUP) is not None
    assert apiserver.requests == [PODS_PATH]
    apiserver.routes[PODS_PATH] = (200, "pods-gpu-node-07")
    clock[0] += 31
    again = _resolve(tmp_path / "3", resolver, CJ_CGROUP)
    assert again is not None and again.fields["owner_name"] == "nightly-retrain"


def test_outside_a_cluster_no_api_is_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    origin = _resolve(tmp_path, KubernetesResolver(), CJ_CGROUP)
    assert origin is not None
    assert origin.fields["api"].startswith("unavailable: no in-cluster configuration")


def test_registry_puts_pods_before_plain_containers(tmp_path: Path) -> None:
    names = [r.name for r in default_resolvers()]
    assert names.index("kubernetes") == names.index("container") - 1


def test_remediation_quotes_hostile_names() -> None:
    pod = PodMeta(
        uid=UID, namespace="ml team", name="x", node=None, service_account=None,
        containers={}, images={}, owners=(("CronJob", "a;rm -rf /"),),
    )  # fmt: skip
    assert remediation_for_pod(pod, CID) == (
        "kubectl -n 'ml team' patch cronjob 'a;rm -rf /' -p '{\"spec\":{\"suspend\":true}}'"
    )


# -- allowlist -----------------------------------------------------------------------------


def _job(origin: Origin) -> Job:
    return Job(
        root_pid=210, pids=[210], user="root", cmdline=tuple(TRAIN), start_ticks=1,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[], origin=origin,
    )  # fmt: skip


CONFIG = """
sanctioned:
  - name: nightly
    cmdline: "*train.py"
    origin:
      k8s_namespace: ml-team
      k8s_owner: "CronJob/nightly-*"
      k8s_service_account: retrain-sa
"""


def test_allowlist_k8s_keys(tmp_path: Path, apiserver: FakeApiServer) -> None:
    cfg = parse_config(CONFIG, "c.yaml")
    origin = _resolve(tmp_path, KubernetesResolver(_api(apiserver.url)), CJ_CGROUP)
    assert origin is not None
    job = _job(origin)
    (job,) = judge([job], cfg)
    assert (job.verdict, job.rule) == ("sanctioned", "nightly")
    other = origin_from_json({**origin.to_json(), "owner_name": "adhoc"})
    job = _job(other)
    (job,) = judge([job], cfg)
    assert job.verdict == "rogue"
    assert job.reason == (
        "not sanctioned: rule 'nightly' matches the command line but "
        "origin must be Kubernetes owner 'CronJob/nightly-*'"
    )


def test_allowlist_says_when_the_api_was_blind(tmp_path: Path) -> None:
    cfg = parse_config(CONFIG, "c.yaml")
    blind = origin_from_json({"kind": "kubernetes", "pod_uid": UID, "api": "unavailable: HTTP 503"})
    job = _job(blind)
    (job,) = judge([job], cfg)
    assert job.reason.endswith(
        "origin must be Kubernetes namespace 'ml-team';"
        " unknown: Kubernetes API unavailable: HTTP 503"
    )


def test_config_rejects_k8s_keys_mixed_with_other_kinds() -> None:
    bad = "sanctioned:\n  - {name: a, cmdline: x, origin: {k8s_namespace: a, cron_file: b}}\n"
    with pytest.raises(Exception, match=r"c\.yaml:2: sanctioned\[0\]\.origin: keys of different"):
        parse_config(bad, "c.yaml")


def test_recorded_replies_are_json() -> None:
    for path in FIX.glob("*.json"):
        assert isinstance(json.loads(path.read_text()), dict)

"""Kubernetes origin: the process runs in a container of a Kubernetes pod.

The pod is found from the cgroup path the kubelet gave the container, in every layout in
use (elastic apm-agent-python PR #631 and falcosecurity/libs #815 list them):

* cgroupfs driver: ``/kubepods/burstable/pod<uid>/<id>``, ``/kubepods/besteffort/...``,
  and guaranteed QoS without a QoS level: ``/kubepods/pod<uid>/<id>``;
* systemd driver, the UID's dashes turned to underscores:
  ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/``
  followed by ``cri-containerd-<id>.scope``, ``crio-<id>.scope`` or ``docker-<id>.scope``;
  guaranteed pods sit directly in ``kubepods-pod<uid_>.slice``;
* kind (Kubernetes in Docker) nests all of it under ``/kubelet.slice/kubelet-kubepods.slice``
  with a ``kubelet-`` prefix on every slice (cgroupfs: ``/kubelet/kubepods/...``).

The pod's name, namespace, node, service account, container name and owner chain
(ReplicaSet → Deployment, Job → CronJob) come from the Kubernetes API through the official
``kubernetes`` client with the in-cluster configuration (the DaemonSet's ServiceAccount,
read-only: list/get pods, get replicasets, jobs, cronjobs). Answers are cached per pod UID.
When the API cannot be reached the origin still names the pod UID and the container, and
says what it could not see.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..hosttext import code_span, plain_or_code
from ..model import ContainerOrigin, KubernetesOrigin, Origin, Proc
from .base import Answer, ResolveContext, split_answer, with_notes
from .cgroup import parse_cgroup
from .container import ContainerResolver, cgroup_container

API_TIMEOUT_S = 5.0
# A failed API call is not retried for this long: one scan per interval would otherwise
# wait API_TIMEOUT_S per pod on every tick while the API server is down.
FAILURE_RETRY_S = 60.0
MAX_CACHED_PODS = 4096
# robfig/cron (the CronJob controller's parser) predefined schedules.
_CRON_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# How a person stops each top-level owner kind (kubectl(1) verbs).
_SCALABLE = {"Deployment": "deployment", "StatefulSet": "statefulset", "ReplicaSet": "replicaset"}


class KubeApiError(Exception):
    """The Kubernetes API could not answer (unreachable, forbidden, malformed reply)."""


@dataclass(frozen=True)
class PodClue:
    """A Kubernetes pod found in a cgroup path.

    Attributes:
        pod_uid: Pod UID in its dashed form (``metadata.uid``).
        container_id: 64-hex container id when the path goes down to the container.
        qos_class: ``Guaranteed``, ``Burstable`` or ``BestEffort`` from the QoS level.
        line: The ``/proc/PID/cgroup`` line it came from.
    """

    pod_uid: str
    container_id: str | None
    qos_class: str
    line: str


def cgroup_pod(cgroup: Sequence[str]) -> PodClue | None:
    """Find a Kubernetes pod (and container) in ``/proc/PID/cgroup`` lines.

    Args:
        cgroup: The lines as read, ``HIERARCHY:CONTROLLERS:PATH``.

    Returns:
        The pod found, or None outside ``kubepods``.
    """
    info = parse_cgroup(cgroup)
    if info is None or info.pod_uid is None:
        return None
    uid = info.pod_uid
    under = uid.replace("-", "_")
    line = next((ln for ln in cgroup if uid in ln or under in ln), info.path)
    qos = "Guaranteed"
    if "besteffort" in line:
        qos = "BestEffort"
    elif "burstable" in line:
        qos = "Burstable"
    return PodClue(uid, info.container_id, qos, line)


@dataclass(frozen=True)
class PodMeta:
    """What the Kubernetes API said about one pod.

    Attributes:
        uid: ``metadata.uid``.
        namespace: ``metadata.namespace``.
        name: ``metadata.name``.
        node: ``spec.nodeName``.
        service_account: ``spec.serviceAccountName``.
        containers: Container id (runtime prefix removed) → container name, from
            ``status.containerStatuses`` (and init / ephemeral ones).
        images: Container name → (``image``, ``imageID``) from the same statuses.
        owners: Controller chain from the pod upward, nearest first, as (kind, name).
        cronjob: The owning CronJob's ``spec`` fields (``schedule``, ``timeZone``,
            ``suspend``) when the chain ends in one.
        gaps: What could not be read along the chain (e.g. a 403 on a ReplicaSet).
    """

    uid: str
    namespace: str
    name: str
    node: str | None
    service_account: str | None
    containers: Mapping[str, str]
    images: Mapping[str, tuple[str | None, str | None]]
    owners: tuple[tuple[str, str], ...] = ()
    cronjob: Mapping[str, Any] | None = None
    gaps: tuple[str, ...] = ()


def _controller(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    if not isinstance(refs, list):
        return None
    chosen = None
    for ref in refs:
        if not isinstance(ref, dict):
            continue
        kind, name = ref.get("kind"), ref.get("name")
        if isinstance(kind, str) and isinstance(name, str):
            if ref.get("controller") is True:
                return kind, name
            chosen = chosen or (kind, name)
    return chosen


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_pod(obj: Mapping[str, Any]) -> PodMeta | None:
    """Read a ``v1.Pod`` JSON object into :class:`PodMeta` (owner chain not followed).

    Returns:
        The pod, or None when ``metadata.uid``/``name``/``namespace`` are missing.
    """
    meta, spec, status = obj.get("metadata"), obj.get("spec"), obj.get("status")
    spec = spec if isinstance(spec, dict) else {}
    status = status if isinstance(status, dict) else {}
    if not isinstance(meta, dict):
        return None
    uid, name, ns = _str(meta.get("uid")), _str(meta.get("name")), _str(meta.get("namespace"))
    if uid is None or name is None or ns is None:
        return None
    containers: dict[str, str] = {}
    images: dict[str, tuple[str | None, str | None]] = {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        statuses = status.get(key)
        for st in statuses if isinstance(statuses, list) else ():
            if not isinstance(st, dict) or not isinstance(st.get("name"), str):
                continue
            cid = _str(st.get("containerID"))
            if cid is not None:
                # "containerd://ID", "cri-o://ID", "docker://ID"
                containers[cid.split("://", 1)[-1]] = st["name"]
            images[st["name"]] = (_str(st.get("image")), _str(st.get("imageID")))
    owner = _controller(obj)
    return PodMeta(
        uid=uid,
        namespace=ns,
        name=name,
        node=_str(spec.get("nodeName")),
        service_account=_str(spec.get("serviceAccountName")),
        containers=containers,
        images=images,
        owners=(owner,) if owner else (),
    )


class KubeApi:
    """Read-only access to the Kubernetes API through the official ``kubernetes`` client.

    Only these calls are made (the RBAC in deploy/kubernetes grants exactly them): list
    pods (on this node when its name is known), get replicasets, jobs and cronjobs.

    Args:
        configuration: A ``kubernetes.client.Configuration`` (host, credentials, CA).
        node_name: This node's name (the DaemonSet passes ``spec.nodeName`` as
            ``NODE_NAME``); pods are then listed with ``fieldSelector=spec.nodeName=...``.
        timeout_s: Connect and read timeout of each request, in seconds.
    """

    def __init__(
        self, configuration: Any, node_name: str | None = None, timeout_s: float = API_TIMEOUT_S
    ) -> None:
        from kubernetes import client

        configuration.retries = False  # fail fast; the resolver degrades and retries later
        self._api = client.ApiClient(configuration)
        self._core = client.CoreV1Api(self._api)
        self._apps = client.AppsV1Api(self._api)
        self._batch = client.BatchV1Api(self._api)
        self.node_name = node_name
        self.timeout_s = timeout_s

    @classmethod
    def in_cluster(cls, environ: Mapping[str, str] | None = None) -> KubeApi:
        """Client from the pod's service account (``load_incluster_config``).

        Raises:
            KubeApiError: Not running in a Kubernetes pod (no ``KUBERNETES_SERVICE_HOST``
                or no service-account token).
        """
        from kubernetes import client, config

        env = os.environ if environ is None else environ
        cfg = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except config.ConfigException as exc:
            raise KubeApiError(f"no in-cluster configuration: {exc}") from None
        return cls(cfg, _str(env.get("NODE_NAME")))

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException, OpenApiException
        from urllib3.exceptions import HTTPError

        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.timeout_s, **kwargs)
            data = json.loads(resp.data)
        except ApiException as exc:
            raise KubeApiError(f"HTTP {exc.status} {exc.reason}") from None
        except (HTTPError, OpenApiException, OSError, ValueError) as exc:
            raise KubeApiError(f"{type(exc).__name__}: {exc}") from None
        if not isinstance(data, dict):
            raise KubeApiError("reply is not a JSON object")
        return data

    def list_pods(self) -> list[dict[str, Any]]:
        """Pods on this node (every pod when the node name is unknown).

        Raises:
            KubeApiError: The API did not answer with a pod list.
        """
        kwargs = {}
        if self.node_name:
            kwargs["field_selector"] = f"spec.nodeName={self.node_name}"
        data = self._call(self._core.list_pod_for_all_namespaces, **kwargs)
        items = data.get("items")
        if not isinstance(items, list):
            raise KubeApiError("pod list has no items")
        return [i for i in items if isinstance(i, dict)]

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One ReplicaSet, Job or CronJob; None for a kind this client does not read.

        Raises:
            KubeApiError: The API refused or could not be reached.
        """
        fn = {
            "ReplicaSet": self._apps.read_namespaced_replica_set,
            "Job": self._batch.read_namespaced_job,
            "CronJob": self._batch.read_namespaced_cron_job,
        }.get(kind)
        if fn is None:
            return None
        return self._call(fn, name, namespace)


def follow_owners(api: KubeApi, pod: PodMeta) -> PodMeta:
    """Walk the controller chain upward: ReplicaSet → Deployment, Job → CronJob.

    A link that cannot be read ends the chain there and is recorded in ``gaps``.

    Returns:
        ``pod`` with ``owners``, ``cronjob`` and ``gaps`` filled.
    """
    owners = list(pod.owners)
    gaps: list[str] = []
    cronjob: Mapping[str, Any] | None = None
    while owners and len(owners) < 8:
        kind, name = owners[-1]
        try:
            obj = api.get(kind, pod.namespace, name)
        except KubeApiError as exc:
            gaps.append(f"{kind} {pod.namespace}/{name}: {exc}")
            break
        if obj is None:
            break
        if kind == "CronJob":
            spec = obj.get("spec")
            cronjob = spec if isinstance(spec, dict) else {}
            break
        nxt = _controller(obj)
        if nxt is None:
            break
        owners.append(nxt)
    return PodMeta(
        uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        node=pod.node,
        service_account=pod.service_account,
        containers=pod.containers,
        images=pod.images,
        owners=tuple(owners),
        cronjob=cronjob,
        gaps=tuple(gaps),
    )


def cronjob_next_run(spec: Mapping[str, Any], now: datetime) -> tuple[str | None, str | None]:
    """Next fire time of a CronJob, as the CronJob controller computes it.

    Args:
        spec: The CronJob's ``spec`` (``schedule``, optional ``timeZone``).
        now: Current time, timezone-aware.

    Returns:
        (ISO 8601 next run, or None when the schedule cannot be evaluated;
        the time zone used, or None when ``timeZone`` is unset and UTC was assumed —
        the controller then uses kube-controller-manager's local zone).
    """
    schedule = _str(spec.get("schedule"))
    if schedule is None:
        return None, None
    tz_name = _str(spec.get("timeZone"))
    expr = schedule.strip()
    for prefix in ("CRON_TZ=", "TZ="):
        if expr.startswith(prefix) and " " in expr:
            tz_name, expr = expr[len(prefix) :].split(" ", 1)
            break
    expr = _CRON_MACROS.get(expr.strip(), expr.strip())
    try:
        tz = ZoneInfo(tz_name) if tz_name else ZoneInfo("UTC")
        start = now.astimezone(tz)
        return next(CronSim(expr, start)).isoformat(), tz_name
    except (CronSimError, ZoneInfoNotFoundError, StopIteration, ValueError):
        return None, tz_name


def remediation_for_pod(pod: PodMeta | None, container_id: str | None) -> str | None:
    """The command that stops what keeps recreating the pod.

    Returns:
        ``kubectl -n NS patch cronjob NAME -p '{"spec":{"suspend":true}}'`` for a CronJob,
        ``kubectl -n NS scale deployment NAME --replicas=0`` for a Deployment,
        StatefulSet or bare ReplicaSet, ``kubectl -n NS delete job NAME`` for a Job,
        ``kubectl -n NS delete daemonset NAME`` for a DaemonSet, ``kubectl -n NS delete
        pod NAME`` for a bare pod; without API answers ``crictl stop ID`` (the pod's
        controller, unseen, may recreate it). Every word is shell-quoted; a chain cut
        short by an unreadable owner says so in a trailing comment.
    """
    if pod is None:
        return shlex.join(["crictl", "stop", container_id]) if container_id else None
    kind, name = pod.owners[-1] if pod.owners else ("Pod", pod.name)
    ns = ["kubectl", "-n", pod.namespace]
    if kind == "CronJob":
        cmd = shlex.join([*ns, "patch", "cronjob", name, "-p", '{"spec":{"suspend":true}}'])
    elif kind in _SCALABLE:
        cmd = shlex.join([*ns, "scale", _SCALABLE[kind], name, "--replicas=0"])
    elif kind == "Job":
        cmd = shlex.join([*ns, "delete", "job", name])
    elif kind == "DaemonSet":
        cmd = shlex.join([*ns, "delete", "daemonset", name])
    elif kind == "Pod":
        cmd = shlex.join([*ns, "delete", "pod", name])
    else:
        cmd = shlex.join([*ns, "get", kind.lower(), name]) + "  # unrecognised owner kind"
    if pod.gaps:
        cmd += "  # this owner's own controller could not be read: it may recreate it"
    return cmd


@dataclass
class _PodCache:
    pods: dict[str, PodMeta] = field(default_factory=dict)
    listed_at: float | None = None
    failed_at: float | None = None
    error: str | None = None


class KubernetesResolver:
    """Names the Kubernetes pod, container and owning workload of a process.

    Origin fields: ``pod_uid``, ``container_id``, ``runtime``, ``qos_class``,
    ``namespace``, ``pod``, ``container``, ``service_account``, ``node``, ``owner_kind``,
    ``owner_name``, ``owner_chain`` (``Kind/name`` nearest first), ``image``,
    ``image_id``, ``schedule``, ``time_zone``, ``next_run``, ``suspended`` (CronJob
    origins), ``api`` (``ok`` or why the API was not asked / did not answer). Fields the
    API did not give are None.

    Args:
        api: The API client; None tries the in-cluster configuration once, on the first
            pod seen (outside a cluster that fails at once, with no network traffic).
        use_api: False never asks the API ("pod UID only").
        clock: Monotonic clock in seconds (tests step it).
    """

    name = "kubernetes"

    def __init__(
        self,
        api: KubeApi | None = None,
        *,
        use_api: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._use_api = use_api
        self._tried_incluster = api is not None
        self._clock = clock
        self._cache = _PodCache()
        self._containers = ContainerResolver()

    def _client(self) -> KubeApi | None:
        if self._api is None and self._use_api and not self._tried_incluster:
            self._tried_incluster = True
            try:
                self._api = KubeApi.in_cluster()
            except KubeApiError as exc:
                self._cache.error = str(exc)
            except ImportError:
                self._cache.error = "the kubernetes client library is not installed"
        return self._api

    def pod(self, uid: str) -> tuple[PodMeta | None, str]:
        """The pod with ``uid`` (cached), and ``ok`` or why it is unknown.

        A pod missing from the cache triggers one listing of the node's pods (which
        fills the cache for every pod there); failures are not retried for
        :data:`FAILURE_RETRY_S` seconds.
        """
        cache = self._cache
        if uid in cache.pods:
            return cache.pods[uid], "ok"
        if not self._use_api:
            return None, "not asked (kubernetes API disabled)"
        api = self._client()
        if api is None:
            return None, f"unavailable: {cache.error or 'no API client'}"
        now = self._clock()
        if cache.failed_at is not None and now - cache.failed_at < FAILURE_RETRY_S:
            return None, f"unavailable: {cache.error}"
        try:
            items = api.list_pods()
        except KubeApiError as exc:
            cache.failed_at, cache.error = now, str(exc)
            return None, f"unavailable: {exc}"
        cache.failed_at, cache.listed_at = None, now
        # Owners are followed only for the pod asked about, when a process of it is seen.
        found = next((m for m in map(parse_pod, items) if m is not None and m.uid == uid), None)
        if found is None:
            return None, "unavailable: the API lists no pod with this UID on this node"
        full = follow_owners(api, found)
        if len(cache.pods) >= MAX_CACHED_PODS:
            cache.pods.pop(next(iter(cache.pods)))
        cache.pods[uid] = full
        return full, "ok"

    def resolve(self, lineage: Sequence[Proc], ctx: ResolveContext) -> Answer:
        """See :class:`~watchdog.lineage.base.OriginResolver`; with the container
        resolver's notes (it is asked about the pod's container)."""
        notes: list[str] = []
        return with_notes(self._resolve(lineage, ctx, notes), notes)

    def _resolve(
        self, lineage: Sequence[Proc], ctx: ResolveContext, notes: list[str]
    ) -> Origin | None:
        if not lineage:
            return None
        clue = cgroup_pod(lineage[0].cgroup)
        if clue is None:
            return None
        base, said = split_answer(self._containers.resolve(lineage, ctx))
        notes.extend(said)
        bf = base if isinstance(base, ContainerOrigin) else ContainerOrigin()
        cid = clue.container_id or bf.container_id
        # The container resolver weighs the shim ancestor against the cgroup (a bare id
        # under kubepods may be containerd's or Docker's); its answer wins.
        clue_rt = cgroup_container(lineage[0].cgroup)
        runtime = bf.runtime or (clue_rt.runtime if clue_rt else None)
        pod, api_state = self.pod(clue.pod_uid)
        evidence = [
            f"cgroup of PID {lineage[0].pid} is in Kubernetes pod {clue.pod_uid} "
            f"(QoS {clue.qos_class})",
            plain_or_code(clue.line, 300),
        ]
        origin = KubernetesOrigin(
            pod_uid=clue.pod_uid,
            container_id=cid,
            runtime=runtime,
            qos_class=clue.qos_class,
            image=bf.image,
            api=api_state,
        )
        if pod is None:
            evidence.append(
                f"Kubernetes API {api_state}: pod UID only; namespace, pod name and owner "
                "unknown, and the pod's controller may recreate a stopped container"
            )
            return replace(
                origin, evidence=tuple(evidence), remediation=remediation_for_pod(None, cid)
            )
        container = pod.containers.get(cid) if cid else None
        chain = [f"{kind}/{name}" for kind, name in pod.owners]
        owner_kind, owner_name = pod.owners[-1] if pod.owners else ("Pod", pod.name)
        image, image_id = pod.images.get(container, (None, None)) if container else (None, None)
        origin = replace(
            origin,
            namespace=pod.namespace,
            pod=pod.name,
            container=container,
            service_account=pod.service_account,
            node=pod.node,
            owner_kind=owner_kind,
            owner_name=owner_name,
            owner_chain=tuple(chain),
            image=image or origin.image,
            image_id=image_id,
        )
        evidence.append(
            f"Kubernetes API: pod {pod.namespace}/{pod.name} on node {pod.node}, container "
            f"{container or '(not in the pod status)'}, service account {pod.service_account}"
        )
        if chain:
            evidence.append("owner chain: " + " <- ".join([f"Pod/{pod.name}", *chain]))
        evidence.extend(f"owner not readable: {gap}" for gap in pod.gaps)
        if pod.cronjob is not None:
            nxt, tz = cronjob_next_run(pod.cronjob, ctx.now)
            suspended = pod.cronjob.get("suspend") is True
            origin = replace(
                origin,
                schedule=_str(pod.cronjob.get("schedule")),
                time_zone=tz,
                next_run=None if suspended else nxt,
                suspended=suspended,
            )
            zone = tz or "UTC assumed: no timeZone set, the controller uses its local zone"
            # Optional parts are said as unknown, never as a Python None.
            sched = code_span(origin.schedule) if origin.schedule else "unknown"
            nxt_text = nxt or "unknown (the schedule could not be evaluated)"
            evidence.append(
                f"CronJob {pod.namespace}/{owner_name} schedule {sched} "
                f"({zone})" + (", suspended" if suspended else f", next run {nxt_text}")
            )
        return replace(origin, evidence=tuple(evidence), remediation=remediation_for_pod(pod, cid))

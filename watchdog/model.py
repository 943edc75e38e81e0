"""Plain data shared by every layer: processes, GPUs, origins, jobs and findings.

Nothing in this module performs I/O. Sources fill these records, lineage resolvers read
them, policy judges them, and the CLI renders them.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal, get_args

Verdict = Literal["sanctioned", "rogue", "excess", "ignored"]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
# Verdicts of jobs no rule allows to run as they are: they get findings, listening
# sockets and remediation; sanctioned and ignored jobs get none of these.
UnsanctionedVerdict = Literal["rogue", "excess"]
UNSANCTIONED_VERDICTS: tuple[UnsanctionedVerdict, ...] = get_args(UnsanctionedVerdict)
# Ascending: a sink's ``min_severity`` compares by position in SEVERITIES.
Severity = Literal["info", "warning", "high", "critical"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
# Findings at these severities make `scan` and `status` exit 1; `info` ones do not.
REPORTED_SEVERITIES: tuple[Severity, ...] = SEVERITIES[SEVERITIES.index("warning") :]
# The log level a finding's events are written at: the level follows the severity.
LOG_LEVELS: dict[str, str] = {
    "info": "info",
    "warning": "warning",
    "high": "error",
    "critical": "critical",
}
OriginKind = Literal[
    "cron",
    "systemd",
    "slurm",
    "container",
    "kubernetes",
    "shell",
    "at",
    "supervisor",
    "orphan",
    "unknown",
]
ORIGIN_KINDS: tuple[OriginKind, ...] = get_args(OriginKind)
# Every kind of Finding the code emits; mypy checks each ``Finding(kind=...)`` against it,
# so an alert rule's ``kinds:`` can be validated against FINDING_KINDS with no hand-kept
# list. docs/scan-json-schema.md describes each kind (a unit test holds the two equal).
# The order is the one config errors list them in (unchanged from the old hand-kept copy).
FindingKind = Literal[
    "binding-mismatch", "component-degraded", "deploy-stale", "excess-instances",
    "gpu-memory-unexplained", "gpu-pid-invisible", "gpu-processes-hidden", "gpu-query-failed",
    "gpu-query-hung", "limited-visibility",
    "nvml-unavailable", "pid-namespace", "poisoned-weights", "proc-unavailable",
    "queue-output-malformed", "queue-unavailable", "queue-unsanctioned",
    "remediation-failed", "respawned", "rogue-job", "rogue-service", "ship-gate-degraded",
    "state-recovered", "weights-unverified", "zombie-gpu-memory",
    "slurm-drain-failed", "slurm-node-drained",
]  # fmt: skip
FINDING_KINDS: tuple[FindingKind, ...] = get_args(FindingKind)


@dataclass(frozen=True)
class Proc:
    """One process as read from procfs.

    Attributes:
        pid: PID in the PID namespace of the ``proc_root`` that was read.
        ppid: Parent PID (0 for PID 1 and kernel threads' parent kthreadd).
        start_ticks: Start time in clock ticks after boot (field 22 of
            ``/proc/PID/stat``, proc(5)); with ``pid`` it is the process identity.
        state: One-letter state from ``/proc/PID/stat`` (``R``, ``S``, ``Z``...).
        comm: The 15-character ``comm`` name. Never used for matching: training
            frameworks rename processes with setproctitle.
        pgid: Process group ID.
        sid: Session ID.
        uid: Real UID, or None when ``/proc/PID/status`` was unreadable.
        user: User name for ``uid`` (the number as text when it has no passwd entry).
        exe: Target of ``/proc/PID/exe``; None when unreadable (permission, kernel thread).
        cmdline: ``/proc/PID/cmdline`` split on NUL; empty for kernel threads and zombies.
        cgroup: Lines of ``/proc/PID/cgroup`` as read, e.g. ``0::/system.slice/x.service``.
        nspid: The ``NSpid`` row of ``/proc/PID/status``: this PID in each nested PID
            namespace, outermost first.
        kernel_thread: True for kernel threads (PF_KTHREAD in the stat flags).
    """

    pid: int
    ppid: int
    start_ticks: int
    state: str
    comm: str
    pgid: int = 0
    sid: int = 0
    uid: int | None = None
    user: str | None = None
    exe: str | None = None
    cmdline: tuple[str, ...] = ()
    cgroup: tuple[str, ...] = ()
    nspid: tuple[int, ...] = ()
    kernel_thread: bool = False

    @property
    def is_zombie(self) -> bool:
        """True when the process has exited and waits for its parent to reap it."""
        return self.state == "Z"

    @property
    def args_text(self) -> str:
        """The command line joined with spaces, or ``[comm]`` when it is empty."""
        return " ".join(self.cmdline) if self.cmdline else f"[{self.comm}]"


@dataclass(frozen=True)
class GpuInfo:
    """One GPU (or MIG instance) as reported by NVML.

    Attributes:
        index: NVML device index; for a MIG instance, the parent's index.
        uuid: ``GPU-...`` or ``MIG-...`` UUID.
        name: Product name, e.g. ``NVIDIA H200``.
        memory_total_bytes: Framebuffer size in bytes, or None when NVML could not say.
        memory_used_bytes: Framebuffer in use in bytes, or None when NVML could not say.
        mig_index: MIG device index under ``index``, None for a whole GPU.
    """

    index: int
    uuid: str
    name: str
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    mig_index: int | None = None


@dataclass(frozen=True)
class GpuProcess:
    """One entry of an NVML running-process list.

    Attributes:
        pid: PID as NVML reports it (host PID namespace of the driver).
        gpu_uuid: UUID of the GPU or MIG instance the entry was listed on.
        gpu_index: NVML index of that device.
        used_memory_bytes: GPU memory in bytes, or None when NVML reports it as
            not available (``NVML_VALUE_NOT_AVAILABLE``).
        list_kind: Which NVML list held it: ``compute``, ``graphics`` or ``mps``.
    """

    pid: int
    gpu_uuid: str
    gpu_index: int
    used_memory_bytes: int | None
    list_kind: Literal["compute", "graphics", "mps"]


@dataclass(frozen=True)
class GpuHeld:
    """What one job holds on one GPU (or MIG instance), summed over its members.

    Attributes:
        uuid: ``GPU-...`` or ``MIG-...`` UUID.
        index: NVML index of the GPU (a MIG instance's parent index).
        memory_bytes: NVML-reported memory in bytes; None when NVML did not say for any
            member on this device (``NVML_VALUE_NOT_AVAILABLE``).
    """

    uuid: str
    index: int
    memory_bytes: int | None

    def to_json(self) -> dict[str, Any]:
        """``{"index", "uuid", "memory_bytes"}`` as in ``jobs[].gpus`` of the scan JSON."""
        return {"index": self.index, "uuid": self.uuid, "memory_bytes": self.memory_bytes}


@dataclass(frozen=True)
class Finding:
    """Something a person should know about.

    Attributes:
        kind: Stable identifier, one of :data:`FindingKind`, e.g. ``rogue-job``.
        severity: ``info``, ``warning``, ``high`` or ``critical``.
        message: One sentence for people.
        root_pid: The job's root PID, when the finding is about a job.
        details: Extra machine-readable facts (stable keys per kind).
    """

    kind: FindingKind
    severity: Severity
    message: str
    root_pid: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


# Field metadata of origin records (see Origin.fields): a field marked _OPTIONAL is left
# out of the JSON while it is None; one marked _shown_with(name) is left out while the
# field ``name`` is None, one marked _shown_if(flag) while the bool ``flag`` is False
# (keys that appear together, or only for some origins); one marked _HIDDEN never
# appears under its own key.
_OPTIONAL = {"show": "unless-none"}
_HIDDEN = {"show": "never"}


def _shown_with(name: str) -> dict[str, str]:
    return {"show": "with", "with": name}


def _shown_if(flag: str) -> dict[str, str]:
    return {"show": "if", "if": flag}


@dataclass(frozen=True)
class Origin:
    """Where a process came from: the thing that will start it again.

    The base class is the ``unknown`` origin; each other kind is a subclass holding that
    kind's fields (:class:`CronOrigin`, :class:`SystemdOrigin`...), so readers narrow
    with ``isinstance`` and read attributes. :data:`ORIGIN_CLASSES` maps kinds to classes.

    Attributes:
        kind: One of :data:`OriginKind` (a class attribute: the class decides it).
        evidence: Human-readable facts the verdict rests on, most decisive first.
        remediation: The command a person would run to stop the source, or None.
    """

    kind: ClassVar[OriginKind] = "unknown"
    evidence: tuple[str, ...] = ()
    remediation: str | None = None

    @property
    def fields(self) -> dict[str, Any]:
        """The kind-specific keys of the scan JSON ``origin`` object, in schema order
        (docs/scan-json-schema.md): sequences as lists, absent keys left out."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in ("evidence", "remediation"):
                continue
            show = f.metadata.get("show")
            value = getattr(self, f.name)
            if show == "never" or (show == "unless-none" and value is None):
                continue
            if show == "with" and getattr(self, f.metadata["with"]) is None:
                continue
            if show == "if" and not getattr(self, f.metadata["if"]):
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def to_json(self) -> dict[str, Any]:
        """Flatten to the ``origin`` object of the scan JSON schema."""
        out: dict[str, Any] = {"kind": self.kind}
        out.update(self.fields)
        out["evidence"] = list(self.evidence)
        out["remediation"] = self.remediation
        return out

    @staticmethod
    def from_json(doc: object) -> Origin:
        """The origin a scan JSON ``origin`` object describes (state DB rows, IPC).

        The inverse of :meth:`to_json`: unknown keys are ignored, missing ones take the
        record's defaults, lists become tuples; an unknown ``kind`` gives the base
        (``unknown``) origin. A ``systemd`` object is a user unit
        (:attr:`SystemdOrigin.user_unit`) when it says so (``user_unit`` true or a unit
        name) or carries the ``user``/``uid`` keys :meth:`to_json` writes for one.

        A recorded origin is read back, not trusted: one that is not an object, or has a
        field of the wrong type (a list for ``unit``, a number for ``script``), gives the
        ``unknown`` origin with evidence saying so, which names nothing to act on.
        """
        if isinstance(doc, UnreadableRecord):
            return UnreadableOrigin(evidence=(f"the recorded origin is unreadable: {doc.reason}",))
        if not isinstance(doc, Mapping):
            return UnreadableOrigin(
                evidence=(f"the recorded origin is not an object ({_json_type(doc)})",)
            )
        cls = ORIGIN_CLASSES.get(str(doc.get("kind")), Origin)
        hints = _field_types(cls)
        kw: dict[str, Any] = {}
        for key, value in doc.items():
            if key not in hints or (key == "user_unit" and cls is SystemdOrigin):
                continue
            if (
                isinstance(value, str)
                and value.isascii()
                and value.isdigit()
                and len(value) <= 18  # an id, not a number int() refuses to build
                and _fits(0, hints[key])
                and not _fits(value, hints[key])
            ):
                value = int(value)  # an id written as a JSON string ("4242")
            if not _fits(value, hints[key]):
                return UnreadableOrigin(
                    evidence=(
                        f"the recorded {cls.kind} origin is unreadable: {key} is "
                        f"{_json_type(value)}",
                    )
                )
            kw[key] = tuple(value) if isinstance(value, list) else value
        if cls is SystemdOrigin:
            # Said outright (true, or the unit's name as early records spelled it), or
            # implied by the keys to_json writes for a user unit: any doubt is a user unit,
            # which disable-source refuses rather than disabling a system unit's name.
            said = doc.get("user_unit")
            kw["user_unit"] = bool(said) or "uid" in doc or "user" in doc
        return cls(**kw)


@dataclass(frozen=True)
class UnreadableRecord:
    """A JSON column of the state database that could not be parsed (a damaged or
    hand-edited database): what stands in its place, so readers say so instead of failing.

    Attributes:
        reason: Why it could not be read, e.g. ``Expecting value: line 1 column 2``.
    """

    reason: str


@dataclass(frozen=True)
class UnreadableOrigin(Origin):
    """A recorded origin that could not be read back (:meth:`Origin.from_json`): its kind
    is ``unknown`` and its evidence says what was wrong. Nothing acts on it: it is not an
    origin that names nothing, it is one that could not be seen."""


def _json_type(value: object) -> str:
    """How a JSON value is named in a message: ``a list``, ``a number``, ``null``..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list | tuple) else "an object"


def _field_types(cls: type[Origin]) -> dict[str, object]:
    """Field name → declared type of an origin record (``str | None``, ``tuple[str, ...]``)."""
    known = _FIELD_TYPES.get(cls)
    if known is None:
        hints = typing.get_type_hints(cls)
        known = _FIELD_TYPES[cls] = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    return known


# Filled on first use: get_type_hints evaluates every annotation, once per class is enough.
_FIELD_TYPES: dict[type[Origin], dict[str, object]] = {}


def _fits(value: object, hint: object) -> bool:
    """True when a JSON value can be the field of declared type ``hint`` (the types origin
    records use: str, int, bool, their ``| None``, and ``tuple[X, ...]``)."""
    if hint is Any:
        return True
    if isinstance(hint, types.UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        return isinstance(value, list | tuple) and all(_fits(v, item) for v in value)
    return False


@dataclass(frozen=True)
class CronOrigin(Origin):
    """Started by a crontab line (or a script that line runs).

    Attributes:
        file: The crontab holding the line; None when no line can be named.
        line: 1-based line number in ``file``.
        entry: The line as written.
        user: The user the line runs as (or the job's owner when no line is named).
        schedule: The schedule field, e.g. ``0 2 * * 0`` or ``@reboot``.
        next_run: ISO 8601 time of the next run (``when cron starts`` for ``@reboot``);
            None when the line no longer runs.
        script: The run-parts script the line ran, when it ran a directory.
        launch_script: The script the line runs that daemonised the job.
        confidence: ``high`` or ``medium``: how sure the ``launch_script`` attribution is.
        entry_state: ``disabled``/``removed`` when the line no longer runs,
            ``unattributed`` when a real cron ran it but no entry can have; None: live.
    """

    kind: ClassVar[OriginKind] = "cron"
    file: str | None = None
    line: int | None = None
    entry: str | None = None
    user: str | None = None
    schedule: str | None = None
    next_run: str | None = None
    script: str | None = field(default=None, metadata=_OPTIONAL)
    launch_script: str | None = field(default=None, metadata=_OPTIONAL)
    confidence: str | None = field(default=None, metadata=_OPTIONAL)
    entry_state: str | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True)
class SystemdOrigin(Origin):
    """A systemd unit of the system manager or of a user's manager (``user@UID``).

    Attributes:
        unit: The unit name, e.g. ``train.service``.
        unit_file: Path of its unit file, when found.
        timer: The timer that starts it, when one does.
        timer_schedule: The timer's ``OnCalendar=``/``OnUnitActiveSec=``... joined by ``; ``.
        next_run: ISO 8601 time of the timer's next elapse.
        restart: The unit's ``Restart=`` value.
        user_unit: True for a unit of a user's manager: it is stopped through that
            manager (``systemctl --user -M USER@``), never disabled automatically. Not a
            JSON key of its own: ``user`` and ``uid`` appear exactly for user units.
        user: The user owning the manager (None when the uid has no name).
        uid: That user's uid (None when the cgroup did not say).
        tmux_socket: With the tmux fields: the server socket, when the job runs in a
            tmux session the unit started.
        tmux_session: The tmux session name.
        tmux_session_id: The tmux session id (``$0``).
        in_tmux: True when the tmux fields apply (not a JSON key of its own).
    """

    kind: ClassVar[OriginKind] = "systemd"
    unit: str | None = None
    unit_file: str | None = None
    timer: str | None = None
    timer_schedule: str | None = None
    next_run: str | None = None
    restart: str | None = None
    user_unit: bool = field(default=False, metadata=_HIDDEN)
    user: str | None = field(default=None, metadata=_shown_if("user_unit"))
    uid: int | None = field(default=None, metadata=_shown_if("user_unit"))
    in_tmux: bool = field(default=False, metadata=_HIDDEN)
    tmux_socket: str | None = field(default=None, metadata=_shown_if("in_tmux"))
    tmux_session: str | None = field(default=None, metadata=_shown_if("in_tmux"))
    tmux_session_id: str | None = field(default=None, metadata=_shown_if("in_tmux"))


@dataclass(frozen=True)
class SlurmOrigin(Origin):
    """A Slurm job step.

    Attributes:
        job_id: The numeric job id.
        job_name: The job's name (from Slurm, else from its environment).
        account: The job's account; None unless Slurm itself said.
        user: The job's user.
        partition: The job's partition.
        step: The step (``batch``, ``0``...) when known.
        state: Slurm's job state (``RUNNING``...) when Slurm was asked.
    """

    kind: ClassVar[OriginKind] = "slurm"
    job_id: int | None = None
    job_name: str | None = None
    account: str | None = None
    user: str | None = None
    partition: str | None = None
    step: str | None = None
    state: str | None = None


@dataclass(frozen=True)
class ContainerOrigin(Origin):
    """A container of a container engine (Docker, Podman, containerd, CRI-O).

    Attributes:
        container_id: 64 hex digits, or what the shim said; None when unknown.
        pod_uid: The Kubernetes pod UID when the container is a pod's.
        runtime: ``docker``, ``podman``, ``containerd``, ``cri-o``...
        namespace: The containerd namespace (``k8s.io``, ``moby``...).
        image: Image name, when the engine said.
        image_id: Image id, when the engine said.
        name: Container name, when the engine said.
        restart_policy: The engine's restart policy (``no``, ``always``...).
    """

    kind: ClassVar[OriginKind] = "container"
    container_id: str | None = None
    pod_uid: str | None = None
    runtime: str | None = None
    namespace: str | None = None
    image: str | None = None
    image_id: str | None = None
    name: str | None = None
    restart_policy: str | None = None


@dataclass(frozen=True)
class KubernetesOrigin(Origin):
    """A container of a Kubernetes pod (docs/kubernetes.md).

    Attributes:
        pod_uid: The pod UID from the cgroup.
        container_id: The container id.
        runtime: The container runtime.
        qos_class: ``guaranteed``, ``burstable`` or ``besteffort`` (from the cgroup).
        namespace: The pod's namespace (None: the API did not say, as below).
        pod: The pod name.
        container: The container name in the pod.
        service_account: The pod's service account.
        node: The node the pod runs on.
        owner_kind: The topmost owner's kind (``Pod`` when it has none).
        owner_name: The topmost owner's name.
        owner_chain: Owners as ``Kind/name``, nearest first.
        image: Image name.
        image_id: Image id.
        api: ``ok`` or why the API was not asked or did not answer.
        schedule: With the CronJob fields (present only for CronJob origins): its schedule.
        time_zone: The CronJob's ``timeZone``.
        next_run: ISO 8601 time of its next run (None when suspended).
        suspended: Whether the CronJob is suspended; None: not a CronJob.
    """

    kind: ClassVar[OriginKind] = "kubernetes"
    pod_uid: str | None = None
    container_id: str | None = None
    runtime: str | None = None
    qos_class: str | None = None
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    service_account: str | None = None
    node: str | None = None
    owner_kind: str | None = None
    owner_name: str | None = None
    owner_chain: tuple[str, ...] = ()
    image: str | None = None
    image_id: str | None = None
    api: str | None = None
    schedule: str | None = field(default=None, metadata=_shown_with("suspended"))
    time_zone: str | None = field(default=None, metadata=_shown_with("suspended"))
    next_run: str | None = field(default=None, metadata=_shown_with("suspended"))
    suspended: bool | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True)
class ShellOrigin(Origin):
    """Started by hand from a login session.

    Attributes:
        session: Summary such as ``ssh from 10.0.0.5 port 51234, tmux session 'train'``.
        user: The process owner.
        client: The SSH client address, when known.
        tty: The controlling terminal.
        login_session: The logind session scope.
        tmux_socket: The tmux server socket, when in tmux.
        tmux_session: The tmux session name.
        tmux_session_id: The tmux session id (``$0``).
    """

    kind: ClassVar[OriginKind] = "shell"
    session: str | None = None
    user: str | None = None
    client: str | None = None
    tty: str | None = None
    login_session: str | None = None
    tmux_socket: str | None = None
    tmux_session: str | None = None
    tmux_session_id: str | None = None


@dataclass(frozen=True)
class AtOrigin(Origin):
    """An ``at``/``batch`` job run by atd.

    Attributes:
        job: The at job number (None when the spool was unreadable).
        queue: The queue letter.
        user: The job shell's owner.
        scheduled: ISO 8601 time the job was scheduled for.
        command: The job's commands.
        file: The spool file being run.
        pending_same_command: Queued job numbers running the same commands.
    """

    kind: ClassVar[OriginKind] = "at"
    job: int | None = None
    queue: str | None = None
    user: str | None = None
    scheduled: str | None = None
    command: str | None = None
    file: str | None = None
    pending_same_command: tuple[int, ...] = ()


@dataclass(frozen=True)
class SupervisorOrigin(Origin):
    """A program of a process supervisor (supervisord, runit, s6, PM2...).

    Attributes:
        program: The supervisor's name for it (supervisorctl name, service dir, PM2 app).
        supervisor: Which supervisor.
        supervisor_pid: The supervisor's PID.
        config: The configuration file naming it, when found.
    """

    kind: ClassVar[OriginKind] = "supervisor"
    program: str | None = None
    supervisor: str | None = None
    supervisor_pid: int | None = None
    config: str | None = None


@dataclass(frozen=True)
class OrphanOrigin(Origin):
    """A process whose starter exited (adopted by PID 1 or a subreaper).

    Attributes:
        message: One line, e.g. ``orphan of Slurm job 1 (CANCELLED)``.
        parent_pid: The adopting parent's PID.
        cgroup: The process's systemd cgroup path.
        slurm_job_id: The Slurm job its cgroup names.
        slurm_job_state: That job's state, when Slurm said.
        supervisor_program: ``SUPERVISOR_PROCESS_NAME`` from its environment.
        unit: The systemd unit its cgroup names.
        session: The logind session its cgroup names.
    """

    kind: ClassVar[OriginKind] = "orphan"
    message: str | None = None
    parent_pid: int | None = None
    cgroup: str | None = None
    slurm_job_id: int | None = None
    slurm_job_state: str | None = None
    supervisor_program: str | None = None
    unit: str | None = None
    session: str | None = None


# The record class of each kind; ``unknown`` is the base class itself.
ORIGIN_CLASSES: dict[str, type[Origin]] = {
    c.kind: c
    for c in (
        CronOrigin,
        SystemdOrigin,
        SlurmOrigin,
        ContainerOrigin,
        KubernetesOrigin,
        ShellOrigin,
        AtOrigin,
        SupervisorOrigin,
        OrphanOrigin,
        Origin,
    )
}


def finding_ref(finding_id: int | None) -> str:
    """How every output spells a finding id: ``F12`` (``-`` when it has none yet).

    ``terminate`` and ``disable-source`` accept this spelling, and ``#12`` too.
    """
    return "-" if finding_id is None else f"F{finding_id}"


UNKNOWN_ORIGIN = Origin(evidence=("no resolver recognised the lineage",))


@dataclass
class Job:
    """A training job: a process tree judged as one.

    Attributes:
        root_pid: Topmost training process of the tree.
        pids: Every member PID, root first, then ascending.
        user: Owner of the root process.
        cmdline: Root process command line.
        start_ticks: Root start time in clock ticks after boot.
        gpu_memory_bytes: Sum over members of NVML-reported memory in bytes; None when
            no member had a known figure.
        gpu_uuids: GPUs the members hold (NVML lists or device fds), sorted.
        lineage: Root's ancestors, root first, up to PID 1.
        origin: Resolved origin of the root.
        verdict: Policy verdict.
        rule: Name of the allowlist rule that matched (for ``sanctioned``/``excess``),
            or of the ignore entry (for ``ignored``).
        reason: Why the verdict was reached, in words.
        evidence: Why the job counts as training (``nvml``, ``device-fd``, ``launcher``).
        devices: Device nodes the members hold open (``/dev/nvidia0``...).
        listening: Sockets the job (and processes sharing its origin) listen on, as
            ``{proto, address, port, pid}``; filled for rogue and excess jobs.
        gpus: Per GPU the members are listed on by NVML: index and memory held,
            sorted by index then UUID.
    """

    root_pid: int
    pids: list[int]
    user: str | None
    cmdline: tuple[str, ...]
    start_ticks: int
    gpu_memory_bytes: int | None
    gpu_uuids: list[str]
    lineage: list[Proc]
    origin: Origin = UNKNOWN_ORIGIN
    verdict: Verdict = "rogue"
    rule: str | None = None
    reason: str = ""
    evidence: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    listening: list[dict[str, Any]] = field(default_factory=list)
    gpus: list[GpuHeld] = field(default_factory=list)

    @property
    def unsanctioned(self) -> bool:
        """True for ``rogue`` and ``excess`` jobs (:data:`UNSANCTIONED_VERDICTS`): the ones
        findings, socket listings, remediation and node drains are about."""
        return self.verdict in UNSANCTIONED_VERDICTS

    @property
    def gpu_indexes(self) -> list[int]:
        """NVML indexes of the GPUs the job is on, ascending, each once."""
        return sorted({g.index for g in self.gpus})


@dataclass
class NvmlStatus:
    """NVML health as shown in ``scan --json`` under ``nvml``."""

    available: bool
    driver_version: str | None = None
    error: str | None = None


@dataclass
class ScanResult:
    """Everything one scan saw.

    Attributes:
        host: Host name.
        time: When the scan started (timezone-aware).
        duration_s: Wall-clock seconds the scan took.
        nvml: NVML health.
        gpus: Devices NVML listed.
        jobs: Training jobs, oldest first, with verdicts.
        findings: Job findings first, then health findings.
        gpu_processes: NVML's process lists as read (per-GPU memory by holder).
        gpu_blind: True when some GPU's processes could not be seen this time (NVML
            failing after it loaded, a list refused or hung, or NVML PIDs unmatchable):
            a job missing from ``jobs`` may then still be running.
        exited: PIDs of processes an exec event caught that exited before this scan
            (kept for this one scan, state ``X``; never signalled).
        full_sweep: Every process was read again in full (kernel events were lost).
    """

    host: str
    time: datetime
    duration_s: float
    nvml: NvmlStatus
    gpus: list[GpuInfo] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    gpu_processes: list[GpuProcess] = field(default_factory=list)
    gpu_blind: bool = False
    exited: set[int] = field(default_factory=set)
    full_sweep: bool = False


# -- constants shared with the configuration (the bottom layer imports only this) ------

#: Where ``daemon.socket`` defaults to. Kept free of imports, so ``rogue-watchdog status``
#: without a configuration file finds it without loading the config parser.
DEFAULT_SOCKET = "/run/rogue-watchdog/status.sock"

# Weights files by suffix: verified formats, and formats ``verify`` reports "not
# verified" (so a ship gate fails closed on them); ``*.index.json`` names shards.
WEIGHT_SUFFIXES = frozenset(
    {".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".tar", ".npy", ".npz", ".gguf"}
)
UNVERIFIABLE_SUFFIXES = frozenset(
    {
        ".onnx",
        ".h5",
        ".hdf5",
        ".keras",
        ".msgpack",
        ".tflite",
        ".pb",
        ".pkl",
        ".pickle",
        ".joblib",
        ".ggml",
        ".mlmodel",
        ".engine",
        ".plan",
        ".params",
        ".pdparams",
        ".ot",
        ".nemo",
        ".mar",
        ".llamafile",
        ".tensors",
        ".pte",
    }
)
INDEX_SUFFIX = ".index.json"

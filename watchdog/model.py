"""Plain data shared by every layer: processes, GPUs, origins, jobs and findings.

Nothing in this module performs I/O. Sources fill these records, lineage resolvers read
them, policy judges them, and the CLI renders them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Verdict = Literal["sanctioned", "rogue", "excess", "ignored"]
Severity = Literal["info", "warning", "high", "critical"]
# Findings at these severities make `scan` and `status` exit 1; `info` ones do not.
REPORTED_SEVERITIES: tuple[Severity, ...] = ("warning", "high", "critical")
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
        kind: Stable identifier, e.g. ``rogue-job``, ``nvml-unavailable``.
        severity: ``info``, ``warning``, ``high`` or ``critical``.
        message: One sentence for people.
        root_pid: The job's root PID, when the finding is about a job.
        details: Extra machine-readable facts (stable keys per kind).
    """

    kind: str
    severity: Severity
    message: str
    root_pid: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Origin:
    """Where a process came from: the thing that will start it again.

    Attributes:
        kind: One of :data:`OriginKind`.
        evidence: Human-readable facts the verdict rests on, most decisive first.
        remediation: The command a person would run to stop the source, or None.
        fields: Kind-specific keys (``file``, ``line``, ``unit``, ``job_id``...) as
            documented in docs/scan-json-schema.md.
    """

    kind: OriginKind
    evidence: tuple[str, ...] = ()
    remediation: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Flatten to the ``origin`` object of the scan JSON schema."""
        out: dict[str, Any] = {"kind": self.kind}
        out.update(self.fields)
        out["evidence"] = list(self.evidence)
        out["remediation"] = self.remediation
        return out


def finding_ref(finding_id: int | None) -> str:
    """How every output spells a finding id: ``F12`` (``-`` when it has none yet).

    ``terminate`` and ``disable-source`` accept this spelling, and ``#12`` too.
    """
    return "-" if finding_id is None else f"F{finding_id}"


UNKNOWN_ORIGIN = Origin(kind="unknown", evidence=("no resolver recognised the lineage",))


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
    def gpu_indexes(self) -> list[int]:
        """NVML indexes of the GPUs the job is on, ascending, each once."""
        return sorted({g.index for g in self.gpus})


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

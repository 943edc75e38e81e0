"""Plain data shared by every layer: processes, GPUs, origins, jobs and findings.

Nothing in this module performs I/O. Sources fill these records, lineage resolvers read
them, policy judges them, and the CLI renders them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import types
import typing
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, ClassVar, Literal, Protocol, get_args

# Re-exported: how outputs spell severities, sizes and finding ids lives in a module the
# status client can import without this one's dataclasses.
from .spelling import REPORTED_SEVERITIES as REPORTED_SEVERITIES
from .spelling import SEVERITIES as SEVERITIES
from .spelling import Severity as Severity
from .spelling import finding_ref as finding_ref
from .spelling import fmt_bytes as fmt_bytes

Verdict = Literal["sanctioned", "rogue", "excess", "ignored"]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
# Verdicts of jobs no rule allows to run as they are: they get findings, listening
# sockets and remediation; sanctioned and ignored jobs get none of these.
UnsanctionedVerdict = Literal["rogue", "excess"]
UNSANCTIONED_VERDICTS: tuple[UnsanctionedVerdict, ...] = get_args(UnsanctionedVerdict)
# The log level a finding's events are written at: the level follows the severity.
LOG_LEVELS: dict[str, str] = {
    "info": "info",
    "warning": "warning",
    "high": "error",
    "critical": "critical",
}
# The built-in origin kinds (:data:`ORIGIN_KINDS`); a kind added later brings its own name.
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
# Every kind of Finding the code emits; mypy checks each ``Finding(kind=...)`` against it,
# so an alert rule's ``kinds:`` can be validated against FINDING_KINDS with no hand-kept
# list. docs/scan-json-schema.md describes each kind (a unit test holds the two equal).
# The order is the one config errors list them in (unchanged from the old hand-kept copy).
FindingKind = Literal[
    "binding-mismatch", "component-degraded", "deploy-stale", "excess-instances",
    "gpu-memory-unexplained", "gpu-pid-invisible", "gpu-processes-hidden", "gpu-query-failed",
    "gpu-query-hung", "limited-visibility", "needs-restart",
    "nvml-unavailable", "pid-namespace", "poisoned-weights", "proc-unavailable",
    "queue-output-malformed", "queue-unavailable", "queue-unsanctioned",
    "remediation-failed", "respawned", "rogue-job", "rogue-service", "sanctioned-changed",
    "ship-gate-degraded", "unsanctioned-gpu-use",
    "state-recovered", "weights-unverified", "zombie-gpu-memory",
    "slurm-drain-failed", "slurm-node-drained", "weights-open-refused", "action-interrupted",
]  # fmt: skip
FINDING_KINDS: tuple[FindingKind, ...] = get_args(FindingKind)


# What a GPU job is, decided by watchdog.policy.workload.classify (docs/config.md,
# "Workload classes"): only ``training`` (and ``unknown``, treated as training: it may
# be one) is a rogue *training* job; the others outside the allowlist are
# ``unsanctioned-gpu-use`` at their class's severity.
WorkloadClass = Literal["training", "serving", "interactive", "system", "probe", "unknown"]
WORKLOAD_CLASSES: tuple[WorkloadClass, ...] = get_args(WorkloadClass)
# Classes that are not training: their findings, severities and exemptions are their own.
NON_TRAINING_CLASSES: tuple[WorkloadClass, ...] = ("serving", "interactive", "system", "probe")


@dataclass(frozen=True, slots=True)  # slots: a table of 4,096 workers, no dict each
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


@dataclass(frozen=True, slots=True)  # slots: one per listed process per tick, no dict each
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
_UNLESS_EMPTY = {"show": "unless-empty"}
_HIDDEN = {"show": "never"}


def _shown_with(name: str) -> dict[str, str]:
    return {"show": "with", "with": name}


def _shown_if(flag: str) -> dict[str, str]:
    return {"show": "if", "if": flag}


PinType = Literal["glob", "unit", "timer", "line"]


@dataclass(frozen=True)
class PinKey:
    """How the allowlist reads and names one origin key (docs/config.md).

    Attributes:
        noun: How a message names the field, e.g. ``cron file``.
        type: ``glob`` (fnmatch), ``unit`` (a glob that can match a unit type suffix),
            ``timer`` (a glob over ``NAME.timer``) or ``line`` (a line number, compared
            beside the key it ``needs``); read by watchdog/config/origins.py.
        needs: The key that must be set beside this one, or None.
        field: The record's attribute holding the value (None: the record's
            :meth:`Origin.pin_values` computes it).
    """

    noun: str
    type: PinType = "glob"
    needs: str | None = None
    field: str | None = None


@dataclass(frozen=True)
class Restarts:
    """What starts a job again once it ends (issue 31): each origin kind answers for
    itself (:meth:`Origin.restarts`), and the guard adds what only the lineage shows (a
    shell loop above the job, a service's own launcher).

    Attributes:
        when: ``at once``, ``on schedule``, ``on boot``, ``on failure``, ``on demand``,
            ``when its launcher runs it again`` or ``unknown`` (it could not be read).
        how: The mechanism in words: ``systemd Restart=always``, ``shell loop `while
            true` (PID 812)``, ``Docker restart policy always``.
        stops: What stops it, as the next step: ``disable-source first``, ``stop the
            loop first: kill -TERM 812``.
        after_terminate: ``terminate`` leaves the mechanism in place (the job comes back);
            False when terminating the job stops it too (a loop that runs only the job).
    """

    when: str
    how: str
    stops: str | None = None
    after_terminate: bool = True

    def line(self) -> str:
        """``restarts it: at once, shell loop `while true```: one line everywhere."""
        return f"restarts it: {self.when}, {self.how}"

    def to_json(self) -> dict[str, Any]:
        """``jobs[].advice.restarts`` of the scan JSON."""
        return {"when": self.when, "how": self.how, "stops": self.stops,
                "after_terminate": self.after_terminate}  # fmt: skip


@dataclass(frozen=True)
class Origin:
    """Where a process came from: the thing that will start it again.

    The base class is the ``unknown`` origin; each other kind is a subclass holding that
    kind's fields (:class:`CronOrigin`, :class:`SystemdOrigin`...), so readers narrow
    with ``isinstance`` and read attributes. :data:`ORIGIN_KINDS` lists the kinds.

    Attributes:
        kind: The kind's name, one of :data:`ORIGIN_KINDS` (a class attribute: the
            class decides it).
        evidence: Human-readable facts the verdict rests on, most decisive first.
        remediation: The command a person would run to stop the source, or None.
    """

    kind: ClassVar[str] = "unknown"
    #: Scan-JSON keys that name the source: what would start the job again, the same
    #: across its runs (never a PID, a Slurm job id or a container id). Job signatures
    #: hash them (stored: never reorder), and the guard compares them with the sources
    #: of sanctioned jobs. Empty: the kind names no source (shell, orphan, unknown).
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ()
    #: What ``disable-source`` changes for a source of this kind, in words (``the
    #: crontab``); None when it does not handle the kind.
    DISABLES: ClassVar[str | None] = None
    #: The allowlist origin keys of the kind (the keys of :meth:`pin_values`, in the
    #: order messages list them) and how each is read and named.
    PINS: ClassVar[Mapping[str, PinKey]] = {}
    #: False for a recorded origin that could not be read back: nothing acts on it.
    READABLE: ClassVar[bool] = True
    #: False when the by-hand ``remediation`` leaves the running job alone (``atrm``
    #: removes queued at jobs only): the advice adds ``terminate`` after it.
    REMEDIATION_STOPS_JOB: ClassVar[bool] = True
    evidence: tuple[str, ...] = ()
    remediation: str | None = None

    def describe(self) -> str:
        """The origin in one line for tables, findings and ``explain``, e.g.
        ``cron /etc/cron.d/retrain:7 (0 2 * * 0)``; never empty."""
        return "unknown origin"

    def label(self) -> str:
        """A short, bounded name of the source, fit for a metric or alert label.

        Only what names the source and stays the same when it starts the job again (a
        cron file and line, a unit, a Slurm account, an image, a supervisor program);
        never a PID, a job or container id, a session or a command line. At most
        :data:`MAX_ORIGIN_LABEL_CHARS` characters; empty for kinds with no bounded name.
        """
        return ""

    def next_start(self) -> str | None:
        """When the source starts the job next (ISO 8601, or words such as ``when cron
        starts``); None for kinds with no schedule or when it will not run again."""
        return None

    def restarts(self) -> Restarts | None:
        """Whether this source starts the job again, when, and what stops that, from what
        its resolver read (each kind answers for itself); None when it would not (a
        shell, an orphan, a transient unit)."""
        return None

    def source_key(self) -> tuple[object, ...] | None:
        """``(kind, value of each SOURCE_FIELDS key)``: two origins with equal keys name
        the same source. None when the kind names none. A None value is not known."""
        if not self.SOURCE_FIELDS:
            return None
        shown = self.fields
        return (self.kind, *(shown.get(k) for k in self.SOURCE_FIELDS))

    @property
    def definite(self) -> bool:
        """True when the origin names what started the process (not ``unknown``,
        ``orphan``, an unreadable record, or a cron job whose line was not found)."""
        return False

    def compatible(self, other: Origin) -> bool:
        """True when ``other`` can be a later look at the same start: the same kind, and
        no source field that both know differs (a Slurm account the first look could not
        ask for is not a different job)."""
        if self.kind != other.kind:
            return False
        mine, theirs = self.source_key() or (), other.source_key() or ()
        return all(a is None or b is None or a == b for a, b in zip(mine, theirs, strict=True))

    def pin_values(self) -> dict[str, object]:
        """This origin's value for each allowlist origin key its kind answers
        (``cron_file``, ``systemd_unit``...; docs/config.md): the attribute each
        :attr:`PINS` entry names. An empty mapping: no allowlist key can name this kind."""
        return {k: getattr(self, spec.field) for k, spec in self.PINS.items() if spec.field}

    def pin_unknown(self) -> str | None:
        """Why the values :meth:`pin_values` gives as None could not be read (a
        Kubernetes API that did not answer), or None when None means "not set"."""
        return None

    def source_gone(self) -> str | None:
        """Why the source no longer starts the job (its crontab line was disabled or
        removed), or None while it does or cannot say."""
        return None

    def alternatives(self) -> tuple[Origin, ...]:
        """Other sources that can as well have started it (the resolver could not tell
        them apart); the guard protects the job when one of them is protected."""
        return ()

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """What stopping this source by hand acts on, one tuple each: the crontab line,
        the unit and timer, the Slurm job, the container, the pod's owner. The guard
        refuses any of them that a sanctioned job's origin also names. Empty for kinds
        stopped only by signals (shell, orphan, unknown): those are the signal guard's."""
        return ()

    def pin(self) -> dict[str, object] | None:
        """The origin keys of an allowlist rule that name this origin most narrowly
        (``allowlist suggest`` writes them; docs/config.md), as raw host values; None
        when the kind offers no pin or this origin lacks what it needs."""
        return None

    @property
    def by_hand(self) -> bool:
        """True when a person started it in a shell or tmux: ``allowlist suggest`` lists
        such runs, never proposes them, and never counts them as a rival source."""
        return False

    def unproposable(self) -> str | None:
        """Why ``allowlist suggest`` never proposes a rule for this origin on its own
        account (started by hand, unconfirmed, nothing started it), or None."""
        return "origin unknown" if self.kind == "unknown" else None

    def rule_stem(self) -> str:
        """What a proposed rule's name is made from, e.g. ``cron-pipeline-2``."""
        return self.label() or self.kind

    def names(self) -> frozenset[str]:
        """The words a person may use for this source (``allowlist suggest --prefer``):
        its label and description, and its file or unit where the kind has one."""
        return frozenset({self.label(), self.describe()})

    def source_file(self) -> str | None:
        """The file whose last edit tells when the source was set up (a crontab), or
        None when the kind has none."""
        return None

    def source_detail(self) -> str | None:
        """Where in :meth:`source_file` the source is, in words (``file F, line N,
        schedule S``), or None."""
        return None

    def watched_path(self) -> str | None:
        """The file or directory whose change means the source must be read again (a
        crontab, a unit file, the at spool, a supervisord config), or None."""
        return None

    def keeps_first(self, fresh: Origin) -> Origin:
        """``fresh``, a later look at the same start compatible with this first one, with
        what only the first look can know kept (a cron line's identical ``also`` lines:
        which lines were identical when it started is a fact of its start)."""
        return fresh

    def disable_handled(self) -> bool:
        """True when ``disable-source`` acts on this origin (a live crontab line, a system
        unit); the plan checks the rest against the files and systemd."""
        return any(t[0] == "systemd-unit" and len(t) == 2 for t in self.stop_targets())

    def owner_pin(self, keys: Collection[str]) -> tuple[str | None, str] | None:
        """``(owner, why)`` when a rule pinning ``keys`` sanctions this origin only with
        ``user:`` naming its owner (a user's own unit: anyone can write one), else None."""
        return None

    def service_name(self) -> str | None:
        """The service's own name where the kind has one (a unit), for messages."""
        return None

    #: Scan-JSON keys :meth:`from_json` leaves to :meth:`_read_back`.
    READ_BACK_KEYS: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def _read_back(cls, doc: Mapping[str, object], kw: dict[str, Any]) -> None:
        """Fill ``kw`` from what :attr:`READ_BACK_KEYS` of ``doc`` say (a kind whose
        recorded keys changed spelling over versions)."""

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
            if show == "unless-empty" and not value:
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
    def from_json(doc: object, kinds: Sequence[type[Origin]] | None = None) -> Origin:
        """The origin a scan JSON ``origin`` object describes (state DB rows, IPC).

        The inverse of :meth:`to_json`: unknown keys are ignored, missing ones take the
        record's defaults, lists become tuples; an unknown ``kind`` gives the base
        (``unknown``) origin. A ``systemd`` object is a user unit
        (:attr:`SystemdOrigin.user_unit`) when it says so (``user_unit`` true or a unit
        name) or carries the ``user``/``uid`` keys :meth:`to_json` writes for one.

        A recorded origin is read back, not trusted: one that is not an object, or has a
        field of the wrong type (a list for ``unit``, a number for ``script``), gives the
        ``unknown`` origin with evidence saying so, which names nothing to act on.

        Args:
            doc: The decoded ``origin`` object.
            kinds: The kinds it may be (default :func:`origin_kinds`).
        """
        if isinstance(doc, UnreadableRecord):
            return UnreadableOrigin(evidence=(f"the recorded origin is unreadable: {doc.reason}",))
        if not isinstance(doc, Mapping):
            return UnreadableOrigin(
                evidence=(f"the recorded origin is not an object ({_json_type(doc)})",)
            )
        cls = origin_kind(str(doc.get("kind")), kinds) or Origin
        hints = _field_types(cls)
        kw: dict[str, Any] = {}
        for key, value in doc.items():
            if key not in hints or key in cls.READ_BACK_KEYS:
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
        cls._read_back(doc, kw)
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

    READABLE: ClassVar[bool] = False


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


#: The step that stops a source ``disable-source`` acts on.
DISABLE_FIRST = "disable-source first"
# When each systemd Restart= value starts the service again (systemd.service(5)), and
# whether the SIGTERM a terminate sends first is among them (on-success: a clean signal).
_SYSTEMD_WHEN = {
    "always": ("at once", True),
    "on-success": ("at once after a clean exit or SIGTERM", True),
    "on-failure": ("on failure (not after a clean exit or SIGTERM)", False),
    "on-abnormal": ("on a signal other than SIGTERM, or a timeout", False),
    "on-abort": ("on an uncaught signal other than SIGTERM", False),
    "on-watchdog": ("on a watchdog timeout", False),
}
_ENGINES = {"docker": "Docker", "podman": "Podman"}


# supervisord's boolean spellings (supervisor/datatypes.py: boolean() and auto_restart());
# lineage/supervisorconf.py reads the configuration with them.
TRUTHY = ("yes", "true", "on", "1")
FALSY = ("no", "false", "off", "0")


# Entry states of a cron origin whose line no longer starts anything.
NOT_LIVE = ("disabled", "removed", "ignored")


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
        also: ``FILE:LINE`` of the other lines that can have started it (identical
            commands): the attribution is not sure.
        confidence: ``high`` or ``medium``: how sure the ``launch_script`` attribution is.
        entry_state: ``disabled``/``removed`` when the line no longer runs, ``ignored``
            when cron no longer reads its file (a mode or owner cron refuses),
            ``unattributed`` when a real cron ran it but no entry can have; None: live.
    """

    kind: ClassVar[OriginKind] = "cron"
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("file", "line", "script")
    DISABLES: ClassVar[str | None] = "the crontab"
    PINS: ClassVar[Mapping[str, PinKey]] = {
        "cron_file": PinKey("cron file", field="file"),
        "cron_line": PinKey("line", "line", needs="cron_file", field="line"),
    }
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
    also: tuple[str, ...] = field(default=(), metadata=_UNLESS_EMPTY)

    def alternatives(self) -> tuple[Origin, ...]:
        """The other crontab lines that can have started it (``also``): an identical
        line in another file or at another minute."""
        out: list[Origin] = []
        for where in self.also:
            path, _, line = where.rpartition(":")
            if path and line.isdigit():
                out.append(replace(self, file=path, line=int(line), also=(), entry=None))
        return tuple(out)

    def describe(self) -> str:
        """See :meth:`Origin.describe`; never ``cron None:None``: a missing line says why."""
        if not self.file:
            if self.entry_state == "removed":
                return "cron, entry gone (no crontab line runs this command now)"
            if self.entry_state == "unattributed":
                return "cron, no entry can have started it (wrong user or time)"
            return "cron, entry not found (some crontabs could not be read)"
        text = f"cron {self.file}:{self.line}"
        if self.schedule:
            text += f" ({self.schedule})"
        if self.script:
            text += f" via {self.script}"
        if self.launch_script:
            text += f" via {self.launch_script} ({self.confidence} confidence)"
        if self.entry_state in NOT_LIVE:
            text += f", entry since {self.entry_state}"
        return text

    def label(self) -> str:
        """``FILE:LINE`` (see :meth:`Origin.label`)."""
        return bounded_label(f"{self.file}:{self.line}" if self.file else "")

    def next_start(self) -> str | None:
        """See :meth:`Origin.next_start`."""
        return self.next_run

    @property
    def definite(self) -> bool:
        """True when a crontab line is named."""
        return self.file is not None

    def source_gone(self) -> str | None:
        """``its crontab entry was disabled`` (or ``removed``)."""
        if self.entry_state == "ignored":
            return "cron no longer reads its crontab (writable by group or others, or not root's)"
        if self.entry_state in NOT_LIVE:
            return f"its crontab entry was {self.entry_state}"
        return None

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The crontab line (and the run-parts script it runs, when it runs a folder)."""
        if not self.file:
            return ()
        line = (("cron-line", self.file, self.line),)
        return (*line, ("run-parts", self.script)) if self.script else line

    def pin(self) -> dict[str, object] | None:
        """``cron_file`` and ``cron_line``, when a line is named."""
        if self.file is None or self.line is None or self.line < 1:
            return None
        return {"cron_file": self.file, "cron_line": self.line}

    def rule_stem(self) -> str:
        """``cron-FILE-LINE`` (the file's base name)."""
        if not self.file:
            return super().rule_stem()
        return f"cron-{self.file.rsplit('/', 1)[-1]}-{self.line}"

    def names(self) -> frozenset[str]:
        """Also ``FILE`` and ``FILE:LINE``."""
        extra = {self.file, f"{self.file}:{self.line}"} if self.file else set()
        return super().names() | extra

    def source_file(self) -> str | None:
        """The crontab."""
        return self.file or None

    def source_detail(self) -> str | None:
        """``file F, line N, schedule S``."""
        return (
            f"file {self.file}, line {self.line}, schedule {self.schedule}" if self.file else None
        )

    def restarts(self) -> Restarts | None:
        """A live crontab line starts it on its schedule (``@reboot``: on boot)."""
        if self.entry_state in NOT_LIVE:
            return None
        if not self.file:
            return Restarts("unknown", "cron (the line that started it was not found)")
        where = f"its cron line ({self.schedule})"
        if self.schedule == "@reboot":
            return Restarts("on boot", where, DISABLE_FIRST)
        # No next run time: a finding's message outlives it (explain gives it, as of its look).
        return Restarts("on schedule", where, DISABLE_FIRST)

    def watched_path(self) -> str | None:
        """The crontab."""
        return self.file or None

    def keeps_first(self, fresh: Origin) -> Origin:
        """``fresh`` with the ``also`` lines this first look found; a line no longer
        identical says why it is still named (an identical line edited after the start,
        to run under ``flock``, a mode cron skips, did not stop being one that can have
        started it, and one that becomes identical later cannot have)."""
        if not isinstance(fresh, CronOrigin) or fresh.also == self.also:
            return fresh
        notes = tuple(
            f"ambiguous: {where} had the same command when this process was first seen "
            "(kept for its lifetime: a later edit of that line does not change what can "
            "have started it)"
            for where in self.also
            if where not in fresh.also
        )
        return replace(fresh, also=self.also, evidence=(*fresh.evidence, *notes))

    def disable_handled(self) -> bool:
        """A crontab line that was found."""
        return any(t[0] == "cron-line" and t[2] is not None for t in self.stop_targets())


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
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("unit", "user")
    DISABLES: ClassVar[str | None] = "the unit states"
    PINS: ClassVar[Mapping[str, PinKey]] = {
        "systemd_unit": PinKey("systemd unit", "unit", field="unit"),
        "systemd_timer": PinKey("triggered by systemd timer", "timer", field="timer"),
    }
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

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        text = f"systemd {'user unit' if self.user_unit else 'unit'} {self.unit}"
        if self.timer:
            text += f" via {self.timer}"
            if self.timer_schedule:
                text += f" ({self.timer_schedule})"
        return text

    def label(self) -> str:
        """The unit, a template's instance as its template (:func:`unit_label`)."""
        return bounded_label(unit_label(self.unit) if self.unit else "")

    def next_start(self) -> str | None:
        """See :meth:`Origin.next_start`."""
        return self.next_run

    @property
    def definite(self) -> bool:
        """True: a unit is named (or its manager is)."""
        return True

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The unit and the timer that starts it, in their manager (system or user)."""
        scope = ("user", self.uid, self.user) if self.user_unit or self.uid is not None else ()
        out: tuple[tuple[object, ...], ...] = ()
        if self.unit:
            out += (("systemd-unit", self.unit, *scope),)
        if self.timer:
            out += (("systemd-unit", self.timer, *scope),)
        return out

    def pin(self) -> dict[str, object] | None:
        """``systemd_unit``, and ``systemd_timer`` when exactly one timer triggers it."""
        if not self.unit:
            return None
        unit: dict[str, object] = {"systemd_unit": self.unit}
        # A unit several timers trigger records the first: pinning it would make the
        # rule hang on which timer systemd lists first, so such a unit is pinned alone.
        several = any(e.startswith("also triggered by") for e in self.evidence)
        return unit | ({"systemd_timer": self.timer} if self.timer and not several else {})

    @property
    def by_hand(self) -> bool:
        """True in a tmux session (a person's, which systemd only hosts)."""
        return self.in_tmux

    def unproposable(self) -> str | None:
        """``started by hand in tmux`` for a tmux session."""
        return "started by hand in tmux" if self.in_tmux else None

    def rule_stem(self) -> str:
        """The unit's name without its type suffix."""
        return self.unit.rsplit(".", 1)[0] if self.unit else super().rule_stem()

    def names(self) -> frozenset[str]:
        """Also the unit's name."""
        return super().names() | ({self.unit} if self.unit else set())

    def restarts(self) -> Restarts | None:
        """``Restart=`` starts the unit's main process again; a timer starts the unit on
        its schedule; a socket or path unit on demand (systemd.service(5), .timer(5))."""
        if not self.unit:
            return None
        stops = DISABLE_FIRST if not self.user_unit else f"stop it first: {self.remediation}"
        parts: list[str] = []
        when: str | None = None
        again = False
        if self.restart in _SYSTEMD_WHEN:
            when, again = _SYSTEMD_WHEN[self.restart]
            parts.append(f"systemd Restart={self.restart}")
        if self.timer:
            sched = f" ({self.timer_schedule})" if self.timer_schedule else ""
            parts.append(f"timer {self.timer}{sched}")
            when = when or "on schedule"
            again = True
        triggers = [
            e.removeprefix("also triggered by ").removesuffix(" (TriggeredBy)")
            for e in self.evidence
            if e.startswith("also triggered by ") and e.endswith("(TriggeredBy)")
        ]
        if triggers:
            parts.append(f"{', '.join(triggers)} (on demand)")
            when = when or "on demand"
            again = True
        if when is None:
            return None
        return Restarts(when, "; ".join(parts), stops, again)

    READ_BACK_KEYS: ClassVar[frozenset[str]] = frozenset({"user_unit"})

    @classmethod
    def _read_back(cls, doc: Mapping[str, object], kw: dict[str, Any]) -> None:
        """``user_unit``: said outright (true, or the unit's name as early records spelled
        it), or implied by the keys to_json writes for a user unit: any doubt is a user
        unit, which disable-source refuses rather than disabling a system unit's name."""
        said = doc.get("user_unit")
        kw["user_unit"] = bool(said) or "uid" in doc or "user" in doc

    def watched_path(self) -> str | None:
        """The unit file."""
        return self.unit_file

    def owner_pin(self, keys: Collection[str]) -> tuple[str | None, str] | None:
        """A user unit is its owner's to name: anyone can write
        ``~/.config/systemd/user/train.service``. Only a rule that also pins that user may
        sanction it by ``systemd_unit``."""
        if "systemd_unit" not in keys or not self.user_unit:
            return None
        return self.user, (
            f"origin is user {self.user!r}'s own unit {self.unit!r}; "
            "a unit pin matches a user unit only with 'user:' naming its owner"
        )

    def service_name(self) -> str | None:
        """The unit."""
        return self.unit


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
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("account", "job_name")
    PINS: ClassVar[Mapping[str, PinKey]] = {
        "slurm_account": PinKey("Slurm account", field="account"),
        "slurm_job_name": PinKey("Slurm job name", field="job_name"),
    }
    job_id: int | None = None
    job_name: str | None = None
    account: str | None = None
    user: str | None = None
    partition: str | None = None
    step: str | None = None
    state: str | None = None

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        text = f"Slurm job {self.job_id}"
        if self.job_name:
            text += f" {self.job_name!r}"
        if self.account:
            text += f" account {self.account}"
        return text

    def label(self) -> str:
        """The account."""
        return bounded_label(self.account or "")

    @property
    def definite(self) -> bool:
        """True: Slurm ran it."""
        return True

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The Slurm job (``scancel`` acts on the whole job, every step of it)."""
        return (("slurm-job", self.job_id),) if self.job_id is not None else ()

    def pin(self) -> dict[str, object] | None:
        """``slurm_account`` and ``slurm_job_name``, when Slurm said both."""
        if self.account is None or self.job_name is None:
            return None
        return {"slurm_account": self.account, "slurm_job_name": self.job_name}

    def unproposable(self) -> str | None:
        """Unconfirmed when Slurm did not give the account (only the environment said)."""
        if self.account is None:
            return "only its environment claims a Slurm job (Slurm did not confirm it)"
        return None


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
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("image", "pod_uid")
    DISABLES: ClassVar[str | None] = "the restart policy and running state"
    PINS: ClassVar[Mapping[str, PinKey]] = {
        "container_image": PinKey("container image", field="image"),
        "container_image_digest": PinKey("container image digest", field="image_id"),
    }
    container_id: str | None = None
    pod_uid: str | None = None
    runtime: str | None = None
    namespace: str | None = None
    image: str | None = None
    image_id: str | None = None
    name: str | None = None
    restart_policy: str | None = None

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        cid = str(self.container_id or "?")[:12]
        return f"container {cid}" + (f" pod {self.pod_uid}" if self.pod_uid else "")

    def label(self) -> str:
        """The image."""
        return bounded_label(self.image or "")

    @property
    def definite(self) -> bool:
        """True when the container is named."""
        return self.container_id is not None

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The container (stopping it stops everything in it)."""
        return (("container", self.container_id),) if self.container_id else ()

    def pin(self) -> dict[str, object] | None:
        """``container_image_digest``, else ``container_image``."""
        if self.image_id:
            return {"container_image_digest": self.image_id}
        return {"container_image": self.image} if self.image else None

    def restarts(self) -> Restarts | None:
        """The engine's restart policy (Docker, Podman: ``docker inspect``); ``unknown``
        when the engine could not be asked."""
        if self.pod_uid is not None or not self.container_id:
            return None  # a pod's container: the Kubernetes origin answers for its owner
        engine = _ENGINES.get(self.runtime or "", self.runtime or "the engine")
        policy = self.restart_policy
        cid = self.container_id[:12]
        if policy is None:
            return Restarts(
                "unknown",
                f"{engine} restart policy unknown (the engine did not answer for {cid})",
                f"stop it and remove the policy first: {self.remediation}",
            )
        if policy == "no":
            return None
        stops = (
            DISABLE_FIRST
            if self.runtime in ("docker", "podman")
            else f"stop it and remove the policy first: {self.remediation}"
        )
        # A main process ended by a signal exits 128+N, non-zero: on-failure starts it again
        # after terminate's SIGTERM as always does (only the engine's own `stop` is exempt).
        when = {"always": "at once", "unless-stopped": "at once (until stopped by hand)"}.get(
            policy,
            "on failure (a non-zero exit; a kill by a signal is one)"
            if policy.startswith("on-failure")
            else "unknown",
        )
        return Restarts(when, f"{engine} restart policy {policy} of container {cid}", stops)

    def disable_handled(self) -> bool:
        """A Docker or Podman container of no pod (a pod's owner recreates it)."""
        return self.pod_uid is None and self.runtime in ("docker", "podman")


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
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("namespace", "owner_kind", "owner_name")
    PINS: ClassVar[Mapping[str, PinKey]] = {
        "k8s_namespace": PinKey("Kubernetes namespace", field="namespace"),
        "k8s_owner": PinKey("Kubernetes owner"),
        "k8s_service_account": PinKey("Kubernetes service account", field="service_account"),
    }
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

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        if self.pod is None:
            return f"Kubernetes pod {self.pod_uid} (API: {self.api})"
        text = f"Kubernetes pod {self.namespace}/{self.pod}"
        if self.owner_kind not in (None, "Pod"):
            text += f" of {self.owner_kind} {self.owner_name}"
        if self.schedule:
            text += f" ({self.schedule})"
        return text

    def next_start(self) -> str | None:
        """See :meth:`Origin.next_start` (a CronJob's next run)."""
        return self.next_run

    @property
    def definite(self) -> bool:
        """True: a pod is named (its owner may be unknown)."""
        return True

    def pin_values(self) -> dict[str, object]:
        """Also ``k8s_owner`` as ``Kind/name``."""
        values = super().pin_values()
        values["k8s_owner"] = f"{self.owner_kind}/{self.owner_name}" if self.owner_kind else None
        return {k: values[k] for k in self.PINS}

    def pin_unknown(self) -> str | None:
        """``Kubernetes API <why>`` when the API did not say."""
        return None if self.api == "ok" else f"Kubernetes API {self.api}"

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The pod and its topmost owner (deleting the owner stops every pod of it)."""
        out: tuple[tuple[object, ...], ...] = ()
        if self.pod_uid:
            out += (("pod", self.pod_uid),)
        if self.owner_kind not in (None, "Pod"):
            out += (("k8s-owner", self.namespace, self.owner_kind, self.owner_name),)
        return out

    def pin(self) -> dict[str, object] | None:
        """``k8s_namespace``, ``k8s_owner`` and ``k8s_service_account`` when known."""
        if not (self.namespace and self.owner_kind and self.owner_name):
            return None
        pin: dict[str, object] = {
            "k8s_namespace": self.namespace,
            "k8s_owner": f"{self.owner_kind}/{self.owner_name}",
        }
        if self.service_account:
            pin["k8s_service_account"] = self.service_account
        return pin

    def restarts(self) -> Restarts | None:
        """A pod's owner recreates it: a Deployment/ReplicaSet/StatefulSet/DaemonSet at once,
        a Job on failure, a CronJob on its schedule."""
        kind, name = self.owner_kind, self.owner_name
        if kind in (None, "Pod"):
            return None
        stops = "scale down or delete its owner first: " + (self.remediation or "kubectl")
        if kind == "CronJob":
            if self.suspended:
                return None
            return Restarts("on schedule", f"Kubernetes CronJob {name} ({self.schedule})", stops)
        if kind == "Job":
            return Restarts(
                "on failure", f"Kubernetes Job {name} retries a failed pod", stops, False
            )
        return Restarts("at once", f"Kubernetes {kind} {name} recreates the pod", stops)


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

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        return f"shell {self.session or ''}".strip()

    @property
    def definite(self) -> bool:
        """True: a person started it from a login."""
        return True

    @property
    def by_hand(self) -> bool:
        """True: a person started it."""
        return True

    def unproposable(self) -> str | None:
        """``started by hand in a shell or tmux``."""
        return "started by hand in a shell or tmux"


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
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("command",)
    DISABLES: ClassVar[str | None] = "the queued jobs' scripts"
    REMEDIATION_STOPS_JOB: ClassVar[bool] = False
    job: int | None = None
    queue: str | None = None
    user: str | None = None
    scheduled: str | None = None
    command: str | None = None
    file: str | None = None
    pending_same_command: tuple[int, ...] = ()

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        return f"at job {self.job or '?'}"

    @property
    def definite(self) -> bool:
        """True: atd ran it."""
        return True

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The at job and the queued jobs running the same commands."""
        return tuple(("at-job", j) for j in (self.job, *self.pending_same_command) if j)

    def restarts(self) -> Restarts | None:
        """An at job that queued another run of the same commands (it re-queues itself)."""
        if not self.pending_same_command:
            return None
        jobs = ", ".join(str(j) for j in self.pending_same_command)
        return Restarts(
            "on schedule",
            f"at job(s) {jobs} queued with the same commands (it re-queues itself)",
            DISABLE_FIRST,
        )

    def watched_path(self) -> str | None:
        """The spool directory (issue 31, case 3): it changes when a job is queued, starts
        or is removed, and the queued copies are read again."""
        return os.path.dirname(self.file) if self.file else None

    def disable_handled(self) -> bool:
        """Queued runs of the same commands to remove."""
        return bool(self.pending_same_command)


@dataclass(frozen=True)
class SupervisorOrigin(Origin):
    """A program of a process supervisor (supervisord, runit, s6, PM2...).

    Attributes:
        program: The supervisor's name for it (supervisorctl name, service dir, PM2 app).
        supervisor: Which supervisor.
        supervisor_pid: The supervisor's PID.
        config: The configuration file naming it, when found.
        section: supervisord: the program's section (``program:train``), when read.
        section_file: supervisord: the file holding that section.
        autostart: supervisord: ``autostart`` as configured (``true`` by default).
        autostart_at: Where it was set: ``FILE:LINE``, or ``default``.
        autorestart: supervisord: ``autorestart`` (``unexpected`` by default).
        autorestart_at: Where it was set: ``FILE:LINE``, or ``default``.
        startretries: supervisord: ``startretries`` (``3`` by default).
        exitcodes: supervisord: ``exitcodes`` (``0`` by default).
        settings_unread: supervisord: why its configuration could not be read (then
            the settings above are None).
    """

    kind: ClassVar[OriginKind] = "supervisor"
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("program",)
    DISABLES: ClassVar[str | None] = "the supervisord config"
    program: str | None = None
    supervisor: str | None = None
    supervisor_pid: int | None = None
    config: str | None = None
    section: str | None = field(default=None, metadata=_OPTIONAL)
    section_file: str | None = field(default=None, metadata=_OPTIONAL)
    autostart: str | None = field(default=None, metadata=_OPTIONAL)
    autostart_at: str | None = field(default=None, metadata=_OPTIONAL)
    autorestart: str | None = field(default=None, metadata=_OPTIONAL)
    autorestart_at: str | None = field(default=None, metadata=_OPTIONAL)
    startretries: str | None = field(default=None, metadata=_OPTIONAL)
    exitcodes: str | None = field(default=None, metadata=_OPTIONAL)
    settings_unread: str | None = field(default=None, metadata=_OPTIONAL)

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        return f"supervisor program {self.program or '?'}"

    def label(self) -> str:
        """The program."""
        return bounded_label(self.program or "")

    @property
    def definite(self) -> bool:
        """True: a supervisor runs it."""
        return True

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The supervisor's program."""
        return (("supervisor-program", self.supervisor, self.program),)

    def restarts(self) -> Restarts | None:
        """supervisord: the program's ``autorestart`` (and ``autostart``, ``exitcodes``) as
        its configuration says (supervisord docs, "[program:x] Section Settings"):

        * ``true``: started again at once whenever it exits;
        * ``unexpected`` (the default): at once after an exit code not in ``exitcodes``, or
          a signal (supervisord counts a death by signal as unexpected, so the SIGTERM of a
          ``terminate`` brings it back);
        * ``false``: not after it ends; ``autostart=true`` starts it when supervisord starts.

        Other supervisors (runit, s6, PM2...) and an unreadable configuration: ``unknown``.
        """
        who = self.supervisor or "supervisor"
        stops = f"stop it in the supervisor first: {self.remediation}"
        if who == "supervisord" and self.autorestart is not None:
            stops = DISABLE_FIRST
            src = f"supervisord {self.section or 'program:' + str(self.program)}"
            setting = f"autorestart={self.autorestart}"
            at = f"{src}, {self.autorestart_at}"
            value = self.autorestart
            if value in TRUTHY:
                return Restarts("at once", f"will return: {setting} ({at})", stops)
            if value in FALSY:
                if self.autostart in TRUTHY:
                    return Restarts(
                        "when supervisord starts (not after it ends)",
                        f"won't return: {setting} ({at}); autostart={self.autostart} "
                        f"({self.autostart_at}) starts it when supervisord starts",
                        stops,
                        False,
                    )
                return None
            if value == "unexpected":
                codes = self.exitcodes or "0"
                return Restarts(
                    f"at once after a signal or an exit code not in exitcodes={codes}",
                    f"will return: {setting} ({at})",
                    stops,
                )
            return Restarts(
                "unknown", f"{src}: autorestart={value!r} is not a value it takes", stops
            )
        if who == "supervisord":
            why = self.settings_unread or "its configuration was not read"
            return Restarts(
                "unknown",
                f"supervisord program {self.program} (autorestart unknown: {why}; "
                "autorestart=unexpected, the default, restarts it after a signal)",
                stops,
            )
        return Restarts(
            "unknown",
            f"{who} program {self.program} (its autorestart is not read; supervisors "
            "restart their programs by default)",
            stops,
        )

    def watched_path(self) -> str | None:
        """The supervisord configuration file."""
        return self.config or None

    def disable_handled(self) -> bool:
        """A supervisord program of its own section; one in a group with others is
        refused (``update GROUP`` restarts them)."""
        grouped = ":" in (self.program or "")
        return self.supervisor == "supervisord" and self.section is not None and not grouped


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

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        return self.message or "orphan (parent exited)"

    def unproposable(self) -> str | None:
        """``an orphan: what started it is gone``."""
        return "an orphan: what started it is gone"


#: Every origin kind's record, once, in resolver priority order (the typed list;
#: docs/architecture.md, "Origin kinds"): more specific spawners first (a Slurm job inside
#: a unit is a Slurm job; a cron job living on in cron.service's cgroup is a cron job);
#: systemd last but for orphan, since every process sits in some unit. ``Origin`` itself
#: is the ``unknown`` kind. lineage.RESOLVERS and actions.planners.PLANNERS list the
#: kinds' resolvers and disable-source planners in their layers.
ORIGIN_KINDS: tuple[type[Origin], ...] = (
    SlurmOrigin,
    KubernetesOrigin,
    ContainerOrigin,
    CronOrigin,
    AtOrigin,
    SupervisorOrigin,
    ShellOrigin,
    SystemdOrigin,
    OrphanOrigin,
    Origin,
)


def origin_kinds() -> tuple[type[Origin], ...]:
    """The kinds in force: :data:`ORIGIN_KINDS` (a test adds a throwaway kind by handing
    in a longer tuple in its place)."""
    return ORIGIN_KINDS


def origin_kind(name: str, kinds: Sequence[type[Origin]] | None = None) -> type[Origin] | None:
    """The record class of the kind called ``name`` among ``kinds`` (default
    :data:`ORIGIN_KINDS`), or None."""
    for cls in origin_kinds() if kinds is None else kinds:
        if cls.kind == name:
            return cls
    return None


# Longest origin label kept (a unit or file name is host text of any length; a label
# value that long would only be a way to grow a time-series database).
MAX_ORIGIN_LABEL_CHARS = 120
# Transient units systemd-run names for one run (``run-u812.service``, ``run-r0a1b...``,
# ``run-p4242-i4243.service``): each run a new name, and nothing starts them again.
_TRANSIENT_UNIT = re.compile(r"run-[a-z0-9-]+(\.[a-z]+)")


def bounded_label(text: str) -> str:
    """``text`` cut to :data:`MAX_ORIGIN_LABEL_CHARS` (the last kept character ``…``)."""
    if len(text) > MAX_ORIGIN_LABEL_CHARS:
        return text[: MAX_ORIGIN_LABEL_CHARS - 1] + "…"
    return text


def unit_label(unit: str) -> str:
    """The name of what starts ``unit`` again, bounded however many instances run.

    An instance of a template (``train@4242.service``) is labelled with its template
    (``train@.service``: the one unit file every instance is started from, systemd.unit(5),
    DESCRIPTION); a transient ``systemd-run`` unit with ``run-*.service`` (systemd-run(1):
    a generated name per run). Any other unit is its own name.
    """
    name, at, rest = unit.partition("@")
    if at:
        return f"{name}@{rest[rest.rfind('.') :]}" if "." in rest else f"{name}@"
    m = _TRANSIENT_UNIT.fullmatch(unit)
    return f"run-*{m.group(1)}" if m else unit


UNKNOWN_ORIGIN = Origin(evidence=("no resolver recognised the lineage",))


@dataclass(frozen=True)
class Collateral:
    """A service that stopping a job's source would stop with it: the source (a unit, a
    container, a supervisor program) also runs work that is not the job's, such as a
    hub whose own process launches the trainer. It is never stopped automatically, never
    in a ``stop:`` line without being named, and by hand only with ``--stop-service
    NAME`` (:func:`watchdog.policy.guard.service_collateral` decides it).

    Attributes:
        name: What ``--stop-service`` must name: the unit, container or program.
        arg: ``name`` quoted for a shell.
        what: The source in words (``systemd unit td-hub.service``).
        others: Its processes that are not the job's, ``PID 408 `python3 hub.py```.
        by_hand: The by-hand command that stops the source, service and all.
    """

    name: str
    arg: str
    what: str
    others: tuple[str, ...]
    by_hand: str | None = None

    def text(self) -> str:
        """``systemd unit td-hub.service also runs PID 408 `…`, not part of the job``."""
        return f"{self.what} also runs {', '.join(self.others)}, not part of the job"

    def command(self, target: int | str, cli_args: str = "") -> str:
        """The explicit ``disable-source`` that stops the service too (``cli_args``: as
        :attr:`Advice.cli_args`)."""
        return f"rogue-watchdog disable-source{cli_args} {target} --stop-service {self.arg}"

    def to_json(self) -> dict[str, Any]:
        """``jobs[].advice.collateral`` of the scan JSON."""
        return {"name": self.name, "what": self.what, "others": list(self.others),
                "by_hand": self.by_hand}  # fmt: skip


@dataclass(frozen=True)
class Advice:
    """What a person (or the daemon) may do about one job, decided by the one guard
    (:func:`watchdog.policy.guard.advise`); every text naming a target is made here.

    Attributes:
        refused: Why the job must not be a target at all (sanctioned, protected); then
            nothing else is set.
        stop_pids: What stopping it by hand signals: the job's processes and its
            exclusive wrappers (empty when refused).
        disable: ``disable-source`` may act on its source (a cron line, a system unit
            that no protected source is).
        by_hand: The by-hand command that stops the source (or, for kinds with no
            source, the job), when it targets nothing protected; the JSON
            ``origin.remediation``.
        source_refused: Why its source is never disabled, with what to change instead.
        disables: What ``disable-source`` changes, in words (``the crontab``).
        source_gone: Why the source needs nothing done (its crontab line was
            disabled or removed since the job started).
        stops_job: :attr:`by_hand` stops the job itself (a ``kill`` of its processes:
            shell and orphan origins name no source that would start it again).
        cli_args: What every ``rogue-watchdog`` command the advice prints carries after
            its verb (`` --config /srv/rw.yaml``: the configuration that judged the job,
            when it is not the default file), so the command works as printed.
        collateral: The job's source is a service that also runs other work: stopping
            the source stops it (never unasked; see :class:`Collateral`).
        restarts: What starts the job again once it ends (:class:`Restarts`), or None.
        then_terminate: :attr:`by_hand` leaves the running job (``atrm``): the ``stop:``
            line adds ``terminate`` after it.
    """

    refused: str | None = None
    stop_pids: tuple[int, ...] = ()
    disable: bool = False
    by_hand: str | None = None
    source_refused: str | None = None
    disables: str | None = None
    source_gone: str | None = None
    stops_job: bool = False
    collateral: Collateral | None = None
    restarts: Restarts | None = None
    then_terminate: bool = False
    cli_args: str = ""

    def _cli(self, verb: str) -> str:
        """``rogue-watchdog VERB`` with :attr:`cli_args`."""
        return f"rogue-watchdog {verb}{self.cli_args}"

    def to_json(self, pid: int) -> dict[str, Any]:
        """``jobs[].advice`` of the scan JSON (docs/scan-json-schema.md): what may be done
        about the job rooted at ``pid``, each field decided by the guard."""
        return {
            "refused": self.refused,
            "stop": self.stop_line(pid),
            "stop_pids": list(self.stop_pids),
            "disable": self.disable,
            "source_refused": self.source_refused,
            "source_gone": self.source_gone,
            "collateral": self.collateral.to_json() if self.collateral else None,
            "restarts": self.restarts.to_json() if self.restarts else None,
        }

    def stop_source(self, target: int | str) -> str | None:
        """What to run to stop the source, best way first, or None (see :attr:`disable`,
        :attr:`by_hand`). ``target`` names the job to the CLI: PID or ``F12``."""
        if self.refused is not None or self.source_refused is not None or self.stops_job:
            return None
        if self.collateral is not None:
            c = self.collateral
            return (
                f"{c.command(target, self.cli_args)} (stops the service {c.name} too: {c.text()})"
            )
        if self.disable:
            text = (
                # The action's id does not exist yet: say where it will be printed.
                f"{self._cli('disable-source')} {target} (backs up {self.disables}; "
                "the `rogue-watchdog undo` it prints, with the action id, restores it)"
            )
            return f"{text}, or by hand: {self.by_hand}" if self.by_hand else text
        return self.by_hand

    def finding_text(self, target: int | str) -> str:
        """The tail of a job finding's message: how to stop the source, or why it is
        not disabled and how to stop this run; empty when nothing may be done."""
        if self.refused is not None:
            return ""
        if self.restarts is not None:
            return f"; {self.restarts.line()}" + self._finding_stop(target)
        return self._finding_stop(target)

    def _finding_stop(self, target: int | str) -> str:
        """:meth:`finding_text` without the ``restarts it`` part."""
        if self.stops_job:
            return f"; to stop it: {self._stop_first(target)}"
        if self.collateral is not None:
            c = self.collateral
            return (
                f"; its source is a service: {c.text()}; it is never stopped unasked; to "
                f"stop this run: {self._cli('terminate')} {target}; to stop the service "
                f"{c.name} as well: {c.command(target, self.cli_args)}"
            )
        stop = self.stop_source(target)
        if stop:
            return f"; to stop the source: {stop}"
        if self.source_refused is not None:
            return (
                f"; its source is not disabled: {self.source_refused}; to stop this run: "
                f"{self._cli('terminate')} {target}"
            )
        return ""

    def stop_line(self, pid: int) -> str | None:
        """The ``stop:`` line of a scan table row, or None for a job with none: a command
        that pastes as printed, what to know about it after ``  # `` (a shell comment)."""
        if self.refused is not None:
            return None
        if self.source_refused is not None:
            return (
                f"{self._cli('terminate')} {pid}  # --dry-run first to preview; its source "
                f"is not disabled: {self.source_refused}"
            )
        if self.source_gone is not None:
            return f"{self._cli('terminate')} {pid}  # {self.source_gone}: only the run is left"
        if self.collateral is not None:
            c = self.collateral
            return (
                f"{self._cli('terminate')} {pid}  # --dry-run first to preview; stops the run "
                f"only: its source is a service, {c.text()}, never stopped unasked; to stop "
                f"the service {c.name} too: {c.command(pid, self.cli_args)}"
            )
        if self.disable:
            return (
                f"{self._cli('disable-source')} {pid} && {self._cli('terminate')} {pid}"
                "  # --dry-run first to preview"
            )
        if self.stops_job:
            return self._stop_first(pid)
        if self.by_hand and self.then_terminate:
            return (
                f"{self.by_hand} && {self._cli('terminate')} {pid}  # the first stops what is "
                "queued, not the running job"
            )
        if self.by_hand:
            return self.by_hand
        return f"{self._cli('terminate')} {pid}  # its origin is unknown: see explain {pid}"

    def _terminate(self, target: int | str) -> str:
        """``rogue-watchdog terminate T``, and the by-hand ``kill`` beside it."""
        text = f"{self._cli('terminate')} {target}"
        return f"{text}, or by hand: {self.by_hand}" if self.by_hand else text

    def _stop_first(self, target: int | str) -> str:
        """:meth:`_terminate`, after what keeps starting the job when ``terminate`` leaves
        it (a shell loop whose shell also runs something else)."""
        r = self.restarts
        if r is not None and r.after_terminate and r.stops:
            return f"{r.stops}, then {self._terminate(target)}"
        return self._terminate(target)

    def explain_line(self, target: int | str | None) -> str:
        """The ``Remediation:`` line of ``explain``: the command, or why there is none."""
        if self.refused is not None:
            return f"none: {self.refused}"
        if self.source_gone is not None:
            text = (
                f"none needed for the source ({self.source_gone}); "
                "the running job must still be stopped"
            )
            return f"{text}: {self._cli('terminate')} {target}" if target is not None else text
        if self.source_refused is not None:
            return f"its source is not disabled: {self.source_refused}" + (
                f"; to stop this run: {self._cli('terminate')} {target}" if target else ""
            )
        if self.collateral is not None:
            c = self.collateral
            text = f"its source is a service: {c.text()}; it is never stopped unasked"
            if target is not None:
                text += (
                    f"; to stop this run: {self._cli('terminate')} {target}; to stop the "
                    f"service {c.name} as well: {c.command(target, self.cli_args)}"
                )
            return text + (f", or by hand: {c.by_hand}" if c.by_hand else "")
        if self.stops_job and self.restarts is not None and self.restarts.after_terminate:
            return f"{self.restarts.line()}; to stop it: " + (
                self._stop_first(target) if target is not None else str(self.restarts.stops)
            )
        if self.stops_job:
            nothing = (
                "nothing would start it again"
                if self.restarts is None
                else f"{self.restarts.line()}; {self.restarts.stops}"
            )
            return (
                f"none needed for the source ({nothing}); "
                + (f"to stop it: {self._terminate(target)}" if target is not None else "")
            ).rstrip("; ")
        stop = self.stop_source(target) if target is not None else self.by_hand
        if stop:
            return stop
        return "none known: the origin could not be named"


#: The advice of a job the guard has not judged: nothing may be done about it.
UNDECIDED = Advice(refused="the guard has not judged this job")


@dataclass(frozen=True)
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
        advice: What may be done about it, decided by the guard
            (:func:`watchdog.policy.guard.advise`); :data:`UNDECIDED` until then.
        workload: What kind of GPU work it is (:data:`WorkloadClass`), decided by
            :func:`watchdog.policy.workload.classify`; until then (a job rebuilt from
            a record, a test's) ``training``, what every job was before classes.
        workload_evidence: Why, in short phrases (``module vllm.entrypoints.openai.api_server``).
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
    advice: Advice = UNDECIDED
    workload: WorkloadClass = "training"
    workload_evidence: list[str] = field(default_factory=list)

    @property
    def unsanctioned(self) -> bool:
        """True for ``rogue`` and ``excess`` jobs (:data:`UNSANCTIONED_VERDICTS`): the ones
        findings, socket listings, remediation and node drains are about."""
        return self.verdict in UNSANCTIONED_VERDICTS

    @property
    def gpu_indexes(self) -> list[int]:
        """NVML indexes of the GPUs the job is on, ascending, each once."""
        return sorted({g.index for g in self.gpus})

    def exemption(self) -> str:
        """The ignore entry that would exempt this job's user and class, as YAML flow
        text: ``ignore: [{name: alice-interactive, user: alice, class: interactive}]``."""
        user = self.user or "-"
        name = f"{user}-{self.workload}"
        # A user name is host text: quoted (JSON is YAML) unless it is a plain word.
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*", user):
            user, name = json.dumps(user), json.dumps(name)
        return f"ignore: [{{name: {name}, user: {user}, class: {self.workload}}}]"

    @property
    def may_train(self) -> bool:
        """True unless the job's class says it is not training (``serving``,
        ``interactive``, ``system``, ``probe``): what the enforcer, node drains and
        ``rogue-service`` act on."""
        return self.workload not in NON_TRAINING_CLASSES


class TargetGuard(Protocol):
    """What one scan must never target, as the actions ask it (the one guard,
    :class:`watchdog.policy.guard.Protection`, implements it).

    Attributes:
        identities: ``(PID, start ticks)`` of every process of a sanctioned or ignored job.
        pids: Their PIDs.
    """

    @property
    def identities(self) -> frozenset[tuple[int, int]]:
        """See the class attributes."""
        ...

    @property
    def pids(self) -> frozenset[int]:
        """See the class attributes."""
        ...

    def source_refusal(self, origin: Origin) -> str | None:
        """Why ``origin``'s source must never be disabled, or None when it may be."""
        ...

    @property
    def training(self) -> frozenset[int]:
        """PIDs of the scan's rogue and excess jobs: stopping them is no collateral."""
        ...

    def process_refusal(self, proc: Proc) -> str | None:
        """Why ``proc`` must never be signalled, or None."""
        ...


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
        protection: What this scan must never target (the one guard's view,
            :func:`watchdog.policy.guard.protection`); None for a result not made by a
            scan.
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
    protection: TargetGuard | None = None


# -- constants shared with the configuration (the bottom layer imports only this) ------

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

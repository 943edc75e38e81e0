"""The origin base record: what every origin kind answers (:class:`Origin`, the
``unknown`` kind), how an origin is read back from its JSON, and its bounded labels."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

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
# Field metadata of origin records: when :attr:`Origin.fields` shows a field in the scan
# JSON (a record's field without any is always shown).
UNLESS_NONE = {"show": "unless-none"}
UNLESS_EMPTY = {"show": "unless-empty"}
HIDDEN = {"show": "never"}


def shown_with(name: str) -> dict[str, str]:
    """Field metadata: shown only while the field ``name`` is not None."""
    return {"show": "with", "with": name}


def shown_if(flag: str) -> dict[str, str]:
    """Field metadata: shown only while the field ``flag`` is true."""
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
        launcher: The launcher process that may start it again (PID, start ticks),
            for origins that name no spawner: the jobs one launcher started are one
            incident (one page: ``details.incident``, issue 33).
        each_run: Each run the source starts is one of a number it has left (a Slurm
            job array's waiting tasks): terminating the next run is not futile, so the
            daemon goes on terminating each (``terminate-futile`` is for sources that
            start as many runs as they like).
        shell: The loop's shell that ``terminate`` is to stop with the job (PID, start
            ticks), when :attr:`after_terminate` is False for a shell loop: the terminate
            claims the loop stopped only when this very shell was (it re-decides its
            wrappers from the live processes, which may differ by then). Not compared:
            the same advice whoever's shell it names.
        outlives_source: It is in the job's lineage, not its source (a shell loop the
            terminate leaves, a script that may loop): disabling the source (``terminate
            --and-source``) leaves it, and the job comes back all the same. Not compared.
    """

    when: str
    how: str
    stops: str | None = None
    after_terminate: bool = True
    launcher: tuple[int, int] | None = None
    each_run: bool = False
    shell: tuple[int, int] | None = field(default=None, compare=False)
    outlives_source: bool = field(default=False, compare=False)

    def line(self) -> str:
        """``restarts it: at once, shell loop `while true```: one line everywhere."""
        return f"restarts it: {self.said()}"

    def said(self) -> str:
        """:meth:`line` without its ``restarts it:`` (after a head that says as much:
        ``its source starts it again: at once, ...``)."""
        return f"{self.when}, {self.how}"

    @property
    def known(self) -> bool:
        """False when whether (and when) it comes back could not be told (``unknown``):
        then it *may* come back, and nothing may claim it will."""
        return self.when != "unknown"

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

    def stable_name(self) -> str:
        """The origin as a row or a group of its runs is named (``report``'s per-origin
        table and bursts): :meth:`describe` without what differs from one run of the same
        source to the next, a PID, a Slurm job, container or pod id, an at job number,
        an ssh client port (the same rule as :meth:`label`, which feeds metric labels).
        The kinds whose description names none of them return it as it is."""
        return self.describe()

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

    def disables_text(
        self, spool_dirs: Sequence[str] = (), cron_d: str | None = None
    ) -> str | None:
        """What ``disable-source`` keeps to put this source back, as a hint says it
        (``backs up the unit states``); None when it does not handle the kind.

        Args:
            spool_dirs: User crontab directories (``paths.cron_spool``): a crontab there
                is a user's (``crontab -l``), not a system file.
            cron_d: The ``cron.d`` directory (``paths.cron_d``; a sandbox's may have
                another name).
        """
        return f"backs up {self.DISABLES}" if self.DISABLES else None

    def disable_handled(self) -> bool:
        """True when ``disable-source`` acts on this origin (a live crontab line, a system
        unit); the plan checks the rest against the files and systemd."""
        return any(t[0] == "systemd-unit" and len(t) == 2 for t in self.stop_targets())

    def owner_pin(self, keys: Collection[str]) -> tuple[str | None, str] | None:
        """``(owner, why)`` when a rule pinning ``keys`` sanctions this origin only with
        ``user:`` naming its owner (a user's own unit: anyone can write one), else None."""
        return None

    def one_at_a_time(self) -> str:
        """How to make this source start one run at a time (a rule's ``max_instances``
        exceeded by a run it started), as a step for a person."""
        return "make the source start one run at a time"

    def service_name(self) -> str | None:
        """The service's own name where the kind has one (a unit), for messages."""
        return None

    #: Scan-JSON keys :func:`~watchdog.model.origin_from_json` leaves to :meth:`_read_back`.
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
    """A recorded origin that could not be read back
    (:func:`~watchdog.model.origin_from_json`): its kind is ``unknown`` and its evidence
    says what was wrong. Nothing acts on it: it is not an
    origin that names nothing, it is one that could not be seen."""

    READABLE: ClassVar[bool] = False


#: The step that stops a source ``disable-source`` acts on.
DISABLE_FIRST = "disable-source first"
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

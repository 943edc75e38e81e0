"""The alert record: what every sink is given, typed and frozen.

The tracker builds one :class:`Alert` per alert event from the finding record
(:meth:`Alert.from_record`) and spools its JSON (:meth:`Alert.to_json`, the document
docs/alerts.md shows under "Payloads"), once per accepting sink. The delivery worker reads
each spooled row back once (:meth:`Outgoing.from_delivery`) and hands sinks the record;
no sink reads the JSON document itself.

``to_json(from_json(doc)) == doc`` for every spooled document, one spooled by an earlier
version (without ``finding.instances``, say) or damaged by hand included, so every row
goes out with the body it went out with before.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, get_args

from ...model import origin_from_json

if TYPE_CHECKING:
    from ...state import Delivery, FindingRecord

AlertEvent = Literal["open", "remind", "resolve"]
ALERT_EVENTS: tuple[AlertEvent, ...] = get_args(AlertEvent)
SCHEMA_VERSION = 1


class UnreadableAlert(ValueError):
    """A spooled document is not even a JSON object (the state database reads every
    ``payload_json`` column as one, so only a document from elsewhere can be)."""


def local_iso(ts: float) -> str:
    """ISO 8601 in the host's time zone, to the second (how payload times are written)."""
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Change:
    """What changed since the last alert about a finding (a reminder's cause).

    Attributes:
        instances: Copies of the job folded into the finding now; None when the count did
            not change (only the labels did).
        was: The count at the last alert.
        gone_pids: PIDs the last alert named that are gone.
        labels_were: The labels the last alert was identified by, when those changed
            (the job came to hold a GPU); None when they did not.
    """

    instances: int | None = None
    was: int | None = None
    gone_pids: tuple[int, ...] = ()
    labels_were: Mapping[str, str] | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Change:
        """Read ``finding.change``; values of the wrong type count as absent."""
        gone = doc.get("gone_pids")
        was = doc.get("labels_were")
        return cls(
            instances=_int(doc.get("instances")),
            was=_int(doc.get("was")),
            gone_pids=tuple(p for p in gone if _int(p) is not None)
            if isinstance(gone, list)
            else (),
            labels_were={str(k): str(v) for k, v in was.items()} if isinstance(was, dict) else None,
        )

    def to_json(self) -> dict[str, Any]:
        """``{"instances", "was", "gone_pids"}`` when the count changed, plus
        ``labels_were`` when the labels did."""
        doc: dict[str, Any] = {}
        if self.instances is not None:
            doc.update(instances=self.instances, was=self.was, gone_pids=list(self.gone_pids))
        if self.labels_were is not None:
            doc["labels_were"] = dict(self.labels_were)
        return doc


@dataclass(frozen=True)
class Routing:
    """What tells alerts apart beyond the finding's kind (Alertmanager's labels) and how
    to fix it, read from a finding's kind-dependent details in one place.

    Attributes:
        gpu: NVML indices of the GPUs it holds, comma-separated (``?`` for one without).
        gpu_uuid: Their UUIDs, comma-separated.
        origin_kind: The origin's kind (``cron``…).
        origin: The origin's bounded label (:meth:`watchdog.model.Origin.label`).
        user: The job's user.
        remediation: What to do about it.

    Each is None when the details do not name it.
    """

    gpu: str | None = None
    gpu_uuid: str | None = None
    origin_kind: str | None = None
    origin: str | None = None
    user: str | None = None
    remediation: str | None = None

    @classmethod
    def from_details(cls, details: Mapping[str, Any]) -> Routing:
        """Read ``details``: ``gpus`` (a list of ``{"index", "uuid"}``), ``origin`` (a
        respawned finding's whole recorded origin), ``origin_kind``, ``origin_label``,
        ``user`` and ``remediation`` (else the origin's)."""
        gpu = gpu_uuid = origin_kind = label = None
        gpus = details.get("gpus")
        if isinstance(gpus, list) and gpus:
            held = [g for g in gpus if isinstance(g, dict)]
            gpu = ",".join("?" if g.get("index") is None else str(g["index"]) for g in held)
            gpu_uuid = ",".join(str(g.get("uuid", "")) for g in held)
        origin = details.get("origin")
        remediation = details.get("remediation")
        if isinstance(origin, dict):  # respawned: the whole origin object
            origin_kind = str(origin.get("kind", ""))
            label = origin_from_json(origin).label()
            if remediation is None:
                remediation = origin.get("remediation")
        if details.get("origin_kind"):
            origin_kind = str(details["origin_kind"])
        if details.get("origin_label"):
            label = str(details["origin_label"])
        user = str(details["user"]) if details.get("user") else None
        return cls(
            gpu=gpu,
            gpu_uuid=gpu_uuid,
            origin_kind=origin_kind,
            origin=label,
            user=user,
            remediation=str(remediation) if remediation else None,
        )


@dataclass(frozen=True)
class AlertFinding:
    """The finding an alert is about, as of the alert.

    Every field but :attr:`id` … :attr:`severity` may be None in a row spooled by an
    earlier version or damaged by hand; each sink shows such a gap its own way (``?``
    in chat text, a label left out).

    Attributes:
        id: The finding's id in the state database (stable across open/remind/resolve).
        kind: Finding kind (``rogue-job``…).
        severity: ``info`` … ``critical``.
        message: The finding's one-line message (host text, made safe when spooled).
        root_pid: The job's root PID; None for queue entries, services, health.
        details: The finding's kind-dependent details (a JSON object; empty when none).
        opened_at: When it opened (ISO 8601, host time zone).
        last_seen: When a tick last saw it.
        seen_count: How many ticks saw it.
        resolved_at: When it resolved; None until then.
        instances: Copies of one job folded into it.
        change: What changed since the last alert (a reminder's cause), if anything.
    """

    id: int | None = None
    kind: str | None = None
    severity: str | None = None
    message: str = ""
    root_pid: int | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    opened_at: str | None = None
    last_seen: str | None = None
    seen_count: int | None = None
    resolved_at: str | None = None
    instances: int | None = None
    change: Change | None = None

    @property
    def routing(self) -> Routing:
        """Its labels and remediation, from :attr:`details`."""
        return Routing.from_details(self.details)


@dataclass(frozen=True)
class Alert:
    """One alert event about one finding, the same for every sink.

    Attributes:
        event: ``open``, ``remind`` or ``resolve``.
        host: The watchdog's host name (None in a damaged row).
        time: When the alert was raised (spooled), ISO 8601 in the host's time zone.
        finding: The finding it is about.
        schema_version: Version of the JSON document (docs/alerts.md).
        config: The configuration file of the daemon that spooled it (None: none, the
            built-in defaults, or a row spooled before this was recorded): a state
            directory shared by two installs replays the other's rows, whose printed
            commands name that configuration (:mod:`.adopt`).
    """

    event: AlertEvent
    host: str | None
    time: str | None
    finding: AlertFinding
    schema_version: int = SCHEMA_VERSION
    config: str | None = None
    # The spooled document this record was read from, kept only to be written back
    # unchanged by :meth:`to_json` (the webhook body is "the document as is", a row
    # spooled by an earlier version included); no sink reads it.
    _document: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_record(
        cls,
        event: AlertEvent,
        finding: FindingRecord,
        host: str,
        now: float,
        change: Mapping[str, Any] | None = None,
        config: str | None = None,
    ) -> Alert:
        """The alert the tracker spools for ``finding``.

        Args:
            event: What happened to the finding.
            finding: The finding as stored after this tick.
            host: The watchdog's host name.
            now: POSIX time the alert is raised.
            change: For a reminder caused by a change: ``{"instances": now, "was": at
                the last alert, "gone_pids": [...]}`` and/or ``{"labels_were": {...}}``.
            config: The spooling daemon's configuration file (:attr:`config`).
        """
        return cls(
            event=event,
            host=host,
            time=local_iso(now),
            config=config,
            finding=AlertFinding(
                id=finding.id,
                kind=finding.kind,
                severity=finding.severity,
                message=finding.message,
                root_pid=finding.root_pid,
                details=finding.details,
                opened_at=local_iso(finding.opened_at),
                last_seen=local_iso(finding.last_seen),
                seen_count=finding.seen_count,
                resolved_at=local_iso(finding.resolved_at) if finding.resolved_at else None,
                instances=finding.instances,
                change=Change.from_json(change) if change is not None else None,
            ),
        )

    @classmethod
    def from_json(cls, doc: object) -> Alert:
        """Read a spooled document (``deliveries.payload_json``, parsed). A key that is
        missing or of the wrong type reads as None (``open`` for the event).

        Raises:
            UnreadableAlert: It is not a JSON object.
        """
        if not isinstance(doc, dict):
            raise UnreadableAlert("the spooled alert is not a JSON object")
        f = doc.get("finding")
        f = f if isinstance(f, dict) else {}
        event = doc.get("event")
        details, change = f.get("details"), f.get("change")
        return cls(
            event=event if event in ALERT_EVENTS else "open",
            host=_text(doc.get("host")),
            time=_text(doc.get("time")),
            schema_version=_int(doc.get("schema_version")) or SCHEMA_VERSION,
            config=_text(doc.get("config")),
            finding=AlertFinding(
                id=_int(f.get("id")),
                kind=_text(f.get("kind")),
                severity=_text(f.get("severity")),
                message=str(f.get("message", "")),
                root_pid=_int(f.get("root_pid")),
                details=details if isinstance(details, dict) else {},
                opened_at=_text(f.get("opened_at")),
                last_seen=_text(f.get("last_seen")),
                seen_count=_int(f.get("seen_count")),
                resolved_at=_text(f.get("resolved_at")),
                instances=_int(f.get("instances")),
                change=Change.from_json(change) if isinstance(change, dict) else None,
            ),
            _document=doc,
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON document (docs/alerts.md, "Payloads"), keys in their documented order
        (``finding.change`` only when there is one); for a record read from a document,
        that document unchanged."""
        if self._document is not None:
            return copy.deepcopy(dict(self._document))
        f = self.finding
        finding: dict[str, Any] = {
            "id": f.id,
            "kind": f.kind,
            "severity": f.severity,
            "message": f.message,
            "root_pid": f.root_pid,
            "details": dict(f.details),
            "opened_at": f.opened_at,
            "last_seen": f.last_seen,
            "seen_count": f.seen_count,
            "resolved_at": f.resolved_at,
            "instances": f.instances,
        }
        if f.change is not None:
            finding["change"] = f.change.to_json()
        doc: dict[str, Any] = {
            "schema_version": self.schema_version,
            "event": self.event,
            "host": self.host,
            "time": self.time,
        }
        if self.config is not None:
            doc["config"] = self.config
        doc["finding"] = finding
        return doc


@dataclass(frozen=True)
class Outgoing:
    """One spooled alert on its way to one sink (what :meth:`Sink.send` is given).

    Attributes:
        alert: The alert.
        sink: The sink's name.
        row: The spool row's id (``deliveries.id``).
        created_at: When the row was spooled (POSIX time).
    """

    alert: Alert
    sink: str
    row: int
    created_at: float

    @classmethod
    def from_delivery(cls, delivery: Delivery) -> Outgoing:
        """The typed form of a spool row (its payload is a JSON object, as
        :class:`~watchdog.state.Delivery` reads every one)."""
        return cls(
            Alert.from_json(delivery.payload), delivery.sink, delivery.id, delivery.created_at
        )

    @property
    def delivery_id(self) -> str:
        """A stable identifier of this delivery, the same on every retry and after a
        restart, so a receiver can drop a duplicate (the at-least-once window,
        docs/alerts.md): 32 hex digits derived from the host, the sink, the spool row id
        and its creation time (a state database recreated after corruption restarts row
        ids, never creation times)."""
        key = f"{self.alert.host or ''}\0{self.sink}\0{self.row}\0{self.created_at!r}"
        return hashlib.sha256(key.encode()).hexdigest()[:32]


def batch_id(outgoing: Sequence[Outgoing]) -> str:
    """The ``delivery_id`` of a coalesced message: derived from its members' ids, so a
    retry of the same batch carries the same id."""
    key = "\0".join(o.delivery_id for o in outgoing)
    return hashlib.sha256(key.encode()).hexdigest()[:32]

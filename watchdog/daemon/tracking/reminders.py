"""Which alert a finding is due this tick: the open (after the debounce), a reminder, or
none.

One alert when a finding opens, once it has lasted ``alerts.min_lifetime_s`` (the
debounce: a finding shorter than that is never alerted); a reminder after
``reminder_after_s`` while it stays open ("still open, seen N times"), sooner when its
instance count changed or a PID it named is gone (at most every :data:`CHANGE_MIN_S`),
and at once when what the alert is identified by changed. ``info`` findings get no
reminders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from watchdog.config.alerts import AlertSettings
from watchdog.daemon.alerts.alert import AlertEvent
from watchdog.daemon.alerts.alertmanager import routing_labels
from watchdog.model import Finding
from watchdog.state import FindingRecord

# A changed instance count (or the named PID gone) is alerted at most this often per
# finding, so a job whose copies churn every tick cannot turn into an alert per tick.
CHANGE_MIN_S = 60.0


@dataclass(frozen=True)
class Due:
    """An alert a finding is due.

    Attributes:
        event: ``open`` or ``remind``.
        change: For a reminder, what changed since the last alert (``instances``,
            ``was``, ``gone_pids``, ``labels_were``); None when nothing did.
    """

    event: AlertEvent
    change: dict[str, Any] | None = None


def alert_labels(host: str, finding_id: int, f: Finding) -> dict[str, str]:
    """The labels an alert about ``f`` is identified by (Alertmanager's, the finest
    any sink uses): kept with each alert so a change is seen."""
    return routing_labels(host, finding_id, f.kind, f.severity, f.details)


def change_since_alert(
    rec: FindingRecord, instances: int, pids: list[int]
) -> dict[str, Any] | None:
    """What changed since the last alert about ``rec``: the instance count, or a PID
    it named that is gone. None when nothing did."""
    was = rec.alerted_instances if rec.alerted_instances is not None else rec.instances
    named = rec.alerted_pids
    if named is None:  # alerted before PIDs were recorded
        named = [rec.root_pid] if rec.root_pid is not None else []
    gone = sorted(p for p in named if p not in pids)
    if instances == was and not gone:
        return None
    return {"instances": instances, "was": was, "gone_pids": gone}


def alert_due(
    rec: FindingRecord | None,
    f: Finding,
    instances: int,
    pids: list[int],
    labels: dict[str, str],
    now: float,
    settings: AlertSettings,
) -> Due | None:
    """The alert a finding is due this tick, or None.

    Args:
        rec: The finding as it was before this tick; None when it opens now.
        f: This tick's (folded) finding.
        instances: How many findings were folded into ``f``.
        pids: The root PIDs of its instances.
        labels: What an alert about it is identified by (:func:`alert_labels`).
        now: POSIX time of the tick.
        settings: ``alerts``: the debounce and the reminder interval.
    """
    if rec is None:
        return Due("open") if settings.min_lifetime_s <= 0 else None
    if rec.last_alert_at is None:  # not alerted yet: debounced
        return Due("open") if now - rec.opened_at >= settings.min_lifetime_s else None
    due = rec.last_alert_at + settings.reminder_after_s
    change = change_since_alert(rec, instances, pids)
    relabel = rec.alerted_routing is not None and rec.alerted_routing != labels
    if relabel:
        # What an alert is identified by changed (the job now holds a GPU): the alert
        # under the old labels is resolved and this one sent, at once.
        change = {**(change or {}), "labels_were": rec.alerted_routing}
    if relabel or (
        f.severity != "info"
        and (now >= due or (change is not None and now - rec.last_alert_at >= CHANGE_MIN_S))
    ):
        return Due("remind", change)
    return None

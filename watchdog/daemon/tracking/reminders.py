"""Which alert a finding is due this tick: the open (after the debounce and the settle),
a reminder, or none.

One alert when a finding opens, once it has lasted ``alerts.min_lifetime_s`` (the
debounce: a finding shorter than that is never alerted) and, for a finding about where a
job runs (``details.gpus``; a rogue service's, a return's ``respawned``), once its
picture is complete: the job on a GPU and the same
at two looks in a row, or ``alerts.settle_s`` after it opened, whichever comes first
(issue 35, case 4: NVML memory appearing a tick after the open was a second page, a
``remind``; now it is part of the open). A reminder after
``reminder_after_s`` while it stays open ("still open, seen N times"), sooner when its
instance count changed or a PID it named is gone (at most every :data:`CHANGE_MIN_S`),
and at once when what the alert is identified by changed. ``info`` findings get no
reminders.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...config.alerts import AlertSettings
from ...model import SEVERITIES, Finding
from ...state import FindingRecord
from ..alerts.alert import AlertEvent
from ..alerts.alertmanager import routing_labels

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


def record_labels(host: str, rec: FindingRecord) -> dict[str, str]:
    """The labels an alert about ``rec`` as last seen would carry."""
    return routing_labels(host, rec.id, rec.kind, rec.severity, rec.details)


def settling(
    f: Finding,
    labels: dict[str, str],
    previous: dict[str, str] | None,
    age_s: float,
    settings: AlertSettings,
) -> bool:
    """True while the first alert of ``f`` still waits for its first complete picture.

    Only a finding about where a job runs (``details.gpus``) waits, a rogue
    service's (about the run it started) and a return's (``respawned``): NVML lists a new
    process a tick or two after it starts, and each GPU of a launch as its worker comes
    up. The picture is complete when the job is on a GPU and its labels were the same
    at the previous look; the wait never exceeds ``settings.settle_s``.

    Args:
        f: This tick's (folded) finding.
        labels: Its alert labels now (:func:`alert_labels`).
        previous: Its alert labels at the previous look; None when it opens now.
        age_s: Seconds since it opened.
        settings: ``alerts``: ``settle_s``.
    """
    # A rogue service is about a run too (the one it started): paged with it, after
    # the same settle (issue 33, fresh user I: 2-5 s test services were paged at once).
    # So is a return (``respawned``): its page is the first about the run that came
    # back (issue 33, fresh user J: 4 high pages for test-harness returns gone 0.1 s
    # later). It names no GPU: it waits its whole settle, or the complete picture of
    # the run's own finding folded into it (Tracker._held_returns).
    about_a_run = "gpus" in f.details or f.kind in ("rogue-service", "respawned")
    if settings.settle_s <= 0 or not about_a_run or age_s >= settings.settle_s:
        return False
    return not ("gpu" in labels and labels == previous)


def alert_due(
    rec: FindingRecord | None,
    f: Finding,
    instances: int,
    pids: list[int],
    labels: dict[str, str],
    now: float,
    settings: AlertSettings,
    previous: dict[str, str] | None = None,
) -> Due | None:
    """The alert a finding is due this tick, or None.

    Args:
        rec: The finding as it was before this tick; None when it opens now.
        f: This tick's (folded) finding.
        instances: How many findings were folded into ``f``.
        pids: The root PIDs of its instances.
        labels: What an alert about it is identified by (:func:`alert_labels`).
        now: POSIX time of the tick.
        settings: ``alerts``: the debounce, the settle and the reminder interval.
        previous: The labels of ``rec`` as last seen (:func:`record_labels`), for the
            settle; None when unknown.
    """
    if f.details.get("exited") and (rec is None or rec.last_alert_at is None):
        # Seen only at its exec, already gone: nothing to act on, never an open (its
        # resolve decides whether it still owes one: it does only when a signal ended it).
        return None
    if rec is None:
        if settings.min_lifetime_s > 0 or settling(f, labels, None, 0.0, settings):
            return None
        return Due("open")
    if rec.last_alert_at is None:  # not alerted yet: debounced, or settling
        age = now - rec.opened_at
        if age < settings.min_lifetime_s or settling(f, labels, previous, age, settings):
            return None
        return Due("open")
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


def paged_severity(rec: FindingRecord, f: Finding) -> Finding:
    """``f`` at the severity its page went out with, when this tick's is lower.

    Fresh-user hour (issue 33, F item 4): ``kill -HUP`` adding ``daemon.learn_until``
    lowered 13 paged ``high`` findings to ``info``; their alert labels changed, and each
    was sent again 3 s after its open, as a ``remind`` whose text was the open's. A
    lower severity asks nothing of anyone: the page stands as sent (the learning period
    applies to findings that open from then on). A higher one is a real change: it
    re-labels, and its ``remind`` says so (``change.labels_were``).

    Args:
        rec: The finding as it was before this tick (paged: ``alerted_routing`` set).
        f: This tick's finding.

    Returns:
        ``f``, with the paged severity when that is higher.
    """
    was = (rec.alerted_routing or {}).get("severity")
    if was in SEVERITIES and SEVERITIES.index(was) > SEVERITIES.index(f.severity):
        return dataclasses.replace(f, severity=was)
    return f


# Alert labels of a job finding → the detail each is read from (Routing.from_details).
_SETTLED_LABELS = (("user", "user"), ("origin_kind", "origin_kind"), ("origin", "origin_label"))


def paged_routing(rec: FindingRecord, f: Finding) -> Finding:
    """``f`` with the user and origin labels its page went out with, where this tick's
    differ.

    A loop's runs may come from another origin than its first (the same script run by a
    person's shell, then by an orphaned launcher: one job signature, one periodic
    finding); its page is identified by the labels it went out with, as its GPUs are
    (:func:`~watchdog.daemon.tracking.blind.alerted_gpus`): a new origin is in the
    message and ``status``, not a relabelled ``remind`` (issue 33: the lifecycle
    simulator's sweep, seed 67401, ``I8: periodic F2 paged`` twice 14 s apart).

    Args:
        rec: The finding as it was before this tick (paged: ``alerted_routing`` set).
        f: This tick's finding.

    Returns:
        ``f``, its ``user``, ``origin_kind`` and ``origin_label`` details those its page
        was labelled with where both name one and they differ.
    """
    was = rec.alerted_routing or {}
    details = dict(f.details)
    for label, key in _SETTLED_LABELS:
        before, now = was.get(label), details.get(key)
        if isinstance(before, str) and before and now and str(now)[: len(before)] != before:
            details[key] = before
    return f if details == f.details else dataclasses.replace(f, details=details)

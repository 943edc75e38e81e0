"""One incident, one page: a job's return is paged once, as its ``respawned`` finding.

A killed job that comes back opens ``respawned`` and, for the run that came back, its
own ``rogue-job``, each paged after the settle; after a terminate, the
enforcer's ``remediation-failed`` too. Each was a page of its own: two high pages for a
cron ghost back after a kill, three (``respawned``, ``remediation-failed``, the loop's
``rogue-job``) for a loop's run back after a terminate (issue 35, "one incident, one
page").

The rule: while a ``respawned`` finding is open for a job signature, a finding of a
kind in :data:`FOLDED_KINDS` about that signature that was never paged on its own is
*folded* into it: recorded, shown and tracked as before, but it sends no alert of its
own (no open, no reminder, no resolve); the ``respawned`` finding names it (its
``details.folded`` and message) and stays open while any finding folded into it does, so
they resolve together. The ``respawned`` finding that opens with the return takes the
highest severity of the findings folded into it at that tick (a ``remediation-failed``
is critical: the one page is never quieter than its loudest part). A finding louder than
an open ``respawned`` it would fold into, one already paged, or one about another
signature pages as before; a run back after the ``respawned`` finding resolved is a new
incident (a new page). So does a kind that a sink's ``kinds`` filter lets through while it
keeps ``respawned`` out (:func:`foldable_kinds`): that sink would get no page at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...config.alerts import SinkSettings
from ...hosttext import split_outside_code
from ...model import Finding
from ...state import FindingRecord
from .periodic import PREFIX

# The findings about a job's return that its ``respawned`` page stands for: the run's own
# ``rogue-job`` (a loop's too) and the ``remediation-failed`` of the terminate that did
# not hold (only the one about the job, ``details.signature``; the recheck's
# ``terminate-<id>`` names an action, not a job).
FOLDED_KINDS = frozenset({"rogue-job", "remediation-failed"})
RANK = {"info": 0, "warning": 1, "high": 2, "critical": 3}
# Starts the part of a ``respawned`` message that names the findings folded into it.
FOLDED_NOTE = "; paged as part of this return: "
# The kinds about one incident's jobs: the first paged of them stands for the others
# (a service's rogue-service and the rogue-job of the run it started are one incident).
FANOUT_KINDS = frozenset({"rogue-job", "rogue-service"})
# Starts the part of such a finding's message that names them.
FANOUT_NOTE = "; this page stands for the incident's other jobs too: "
# At most this many folded findings are named in a message (``details.folded`` has all).
NAMED = 10


@dataclass(frozen=True)
class Anchor:
    """The paged finding others fold into this tick: the open ``respawned`` finding of
    one job signature, or an incident's first page.

    Attributes:
        finding_id: Its id.
        severity: Its severity (a folded finding is never louder).
        kind: Its kind (a fold into a ``respawned`` keeps the sinks' ``kinds`` rule:
            :func:`foldable_kinds`).
    """

    finding_id: int
    severity: str
    kind: str = "respawned"


def return_signature(kind: str, fingerprint: str) -> str | None:
    """The job signature a finding of a kind a return folds (or ``respawned``) is
    about, read from its fingerprint (``<kind>:<signature>`` or
    ``<kind>:periodic:<signature>``, as stored); None for any other finding."""
    if kind not in FOLDED_KINDS and kind != "respawned":
        return None
    rest = fingerprint.partition(":")[2]
    if rest.startswith(PREFIX):
        rest = rest[len(PREFIX) :]
    if not rest or rest.startswith("terminate-"):
        return None
    return rest


def anchors(open_records: Iterable[FindingRecord]) -> dict[str, Anchor]:
    """Signature → its open ``respawned`` finding, of the findings open before this tick."""
    out: dict[str, Anchor] = {}
    for rec in open_records:
        if rec.kind != "respawned":
            continue
        sig = return_signature(rec.kind, rec.fingerprint)
        if sig is not None:
            out[sig] = Anchor(rec.id, rec.severity)
    return out


def foldable_kinds(sinks: Iterable[SinkSettings]) -> frozenset[str]:
    """The kinds of :data:`FOLDED_KINDS` folded under this sink configuration: not one
    that a sink's ``kinds`` filter lets through while it keeps ``respawned`` out (that
    sink would get no page for the return: it pages on its own, as before)."""
    out = set(FOLDED_KINDS)
    for sink in sinks:
        if sink.kinds and "respawned" not in sink.kinds:
            out -= set(sink.kinds)
    return frozenset(out)


def louder(a: str, b: str) -> str:
    """The louder of two severities."""
    return a if RANK.get(a, 3) >= RANK.get(b, 3) else b


def folded_into(
    kind: str,
    fingerprint: str,
    severity: str,
    alerted: bool,
    open_anchors: Mapping[str, Anchor],
    kinds: Collection[str] = FOLDED_KINDS,
) -> Anchor | None:
    """The open ``respawned`` finding a finding is folded into, or None when it pages
    on its own.

    Args:
        kind: The finding's kind.
        fingerprint: Its fingerprint (as stored).
        severity: Its severity.
        alerted: Whether it was ever paged on its own (then it stays its own page).
        open_anchors: This tick's open ``respawned`` findings (:func:`anchors`, and
            those opened this tick).
        kinds: The kinds folded under the sink configuration (:func:`foldable_kinds`).
    """
    if kind not in kinds or alerted:
        return None
    sig = return_signature(kind, fingerprint)
    anchor = open_anchors.get(sig) if sig is not None else None
    if anchor is None or RANK.get(severity, 3) > RANK.get(anchor.severity, 3):
        return None
    return anchor


def without_notes(message: str) -> str:
    """A message without the note naming the findings folded into it."""
    head = split_outside_code(message, FOLDED_NOTE, 1)[0]
    return split_outside_code(head, FANOUT_NOTE, 1)[0]


def incident_of(details: Mapping[str, Any]) -> str | None:
    """The incident a job finding belongs to (``details.incident``: its launcher, or
    its origin's source; :func:`watchdog.policy.findings.incident_key`), or None."""
    key = details.get("incident")
    return key if isinstance(key, str) and key else None


def kept_incident(rec: FindingRecord, f: Finding) -> Finding:
    """``f`` with the incident ``rec`` first recorded, where it recorded one.

    A job's launcher that exits leaves its jobs the incident they were started in
    (issue 33; the lifecycle simulator's sweep: a launcher that exited once its
    trainers ran made each of them an incident of none, and each one folded into the
    first page was paged again on its own); a job first seen after the launcher
    exited is in none from the start, as before.
    """
    key = incident_of(rec.details)
    if key is None or incident_of(f.details) == key:
        return f
    return dataclasses.replace(f, details={**f.details, "incident": key})


def fanout_anchors(open_records: Iterable[FindingRecord]) -> dict[str, Anchor]:
    """Incident → the first paged ``rogue-job`` or ``rogue-service`` finding of it, of
    the findings open before this tick: the page the incident's others fold into. An
    incident with
    none whose job came back (killed, started again by its launcher: its first page
    resolved as the run it named ended) folds into that return's ``respawned``
    (issue 33; the lifecycle simulator's sweep: else its other jobs, silent under a
    page that resolved, paged one tick later on their own), paged or still held back
    by the settle (its page, when it goes, names them; one resolving unpaged, its
    return gone, holds nothing: they page on their own from the next tick)."""
    records = sorted(open_records, key=lambda r: r.id)
    out: dict[str, Anchor] = {}
    for rec in records:
        if rec.kind not in FANOUT_KINDS or rec.last_alert_at is None:
            continue
        key = incident_of(rec.details)
        if key is not None and key not in out:
            out[key] = Anchor(rec.id, rec.severity, rec.kind)
    returns: dict[str, Anchor] = {}
    for rec in records:
        # Paged, or held back by the settle (its page, when sent, names them; should
        # it resolve unpaged, they page on their own from the next tick).
        sig = return_signature(rec.kind, rec.fingerprint) if rec.kind == "respawned" else None
        if sig is not None:
            returns.setdefault(sig, Anchor(rec.id, rec.severity))
    for rec in records:
        key = incident_of(rec.details) if rec.kind in FANOUT_KINDS else None
        sig = return_signature(rec.kind, rec.fingerprint) if key is not None else None
        if key is not None and key not in out and sig in returns:
            out[key] = returns[sig]
    return out


def fanned_into(
    kind: str,
    finding_id: int | None,
    details: Mapping[str, Any],
    severity: str,
    alerted: bool,
    open_anchors: Mapping[str, Anchor],
    foldable: Collection[str] = FOLDED_KINDS,
) -> Anchor | None:
    """The paged finding of the same incident (one launcher's jobs, one source's, one
    job's ``rogue-job`` and ``rogue-service``) a finding is folded into, or None when it
    pages on its own.

    Only into one already paged: a page that went out named the launcher or the source
    and what stops it (a person was told); a job louder than that page, or one already
    paged itself, pages as before.

    Args:
        kind: The finding's kind (only those of :data:`FANOUT_KINDS` fold).
        finding_id: Its id (None before it is filed).
        details: Its details (``incident``).
        severity: Its severity.
        alerted: Whether it was ever paged on its own.
        open_anchors: This tick's anchors (:func:`fanout_anchors`, and those paged
            this tick).
        foldable: The kinds folded into a ``respawned`` under the sink configuration
            (:func:`foldable_kinds`): a sink that takes the kind but not ``respawned``
            would get no page for it.
    """
    if kind not in FANOUT_KINDS or alerted:
        return None
    key = incident_of(details)
    anchor = open_anchors.get(key) if key is not None else None
    if anchor is None or anchor.finding_id == finding_id:
        return None
    if RANK.get(severity, 3) > RANK.get(anchor.severity, 3):
        return None
    if anchor.kind == "respawned" and kind not in foldable:
        return None
    return anchor


def folded_ids(details: Mapping[str, Any]) -> list[int]:
    """The ids of the findings an anchor names as folded into it (``details.folded``:
    written by :func:`folded_details`); a malformed entry names none."""
    folded = details.get("folded")
    return [
        item["id"]
        for item in (folded if isinstance(folded, list) else ())
        if isinstance(item, dict) and isinstance(item.get("id"), int)
    ]


def folded_details(
    details: Mapping[str, Any], message: str, folded: list[FindingRecord], kind: str = "respawned"
) -> tuple[dict[str, Any], str]:
    """An anchor's details and message naming the findings folded into it
    (``details.folded``: id, kind, severity of each); ``kind`` is the anchor's. A
    ``respawned`` finding's message
    ends "paged as part of this return: rogue-job F12, remediation-failed F13
    (critical)"; a ``rogue-job``'s (one incident's other jobs) "this page stands for the
    incident's other jobs too: rogue-job F13, F14" (at most :data:`NAMED` named)."""
    head = without_notes(message)
    out = {k: v for k, v in details.items() if k != "folded"}
    if not folded:
        return out, head
    out["folded"] = [{"id": r.id, "kind": r.kind, "severity": r.severity} for r in folded]
    named = ", ".join(
        f"{r.kind} F{r.id}" + ("" if r.severity == "high" else f" ({r.severity})")
        for r in folded[:NAMED]
    )
    if len(folded) > NAMED:
        named += f" and {len(folded) - NAMED} more"
    note = FANOUT_NOTE if kind in FANOUT_KINDS else FOLDED_NOTE
    return out, f"{head}{note}{named}"

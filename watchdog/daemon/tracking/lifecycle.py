"""Decide each finding's step this tick: open, seen again, or resolved.

A finding names one job for its whole life: when the job an open finding is about ended
while another run of the same source goes on, the finding resolves and the other run
gets a finding (and an id) of its own. A finding no longer reported resolves, except a
``respawned`` one while the ghost that came back still runs, a periodic one between two
runs of its loop (:mod:`.periodic`), one about a run that ended by itself while it
waits for the job to come back (:func:`~.periodic.awaiting_return`), and one whose job
was not seen but not seen gone either (a blind source holds it). A loop's finding that
no open one has the fingerprint of continues the finding of its first run when that is
still open: one finding (and one page) for the loop from its first run.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from ...model import Finding
from ...state import FindingRecord
from .fold import fold, same_job
from .periodic import first_run_fingerprint, periodic_signature


@dataclass(frozen=True)
class Sighting:
    """This tick's folded finding of one fingerprint.

    Attributes:
        fingerprint: The fold key (as stored).
        finding: The folded finding (:func:`~watchdog.daemon.tracking.fold.fold`).
        pids: The root PIDs of its instances, sorted.
        instances: How many findings were folded into it.
    """

    fingerprint: str
    finding: Finding
    pids: list[int]
    instances: int


@dataclass(frozen=True)
class Open:
    """A finding no open one has the fingerprint of: file it."""

    sighting: Sighting


@dataclass(frozen=True)
class Seen:
    """An open finding reported again (under another fingerprint when it is the
    finding of a loop's first run that the loop's finding continues: it is refiled)."""

    record: FindingRecord
    sighting: Sighting


@dataclass(frozen=True)
class Resolve:
    """An open finding that ends this tick."""

    record: FindingRecord


Step = Open | Seen | Resolve


def decide(
    groups: dict[str, list[Finding]],
    open_records: Iterable[FindingRecord],
    present: set[str],
    held: set[str],
    expected: Collection[str] = (),
    awaiting: Collection[str] = (),
    unread: Collection[str] = (),
) -> list[Step]:
    """Every finding's step this tick, in the order they are to be applied.

    Args:
        groups: This tick's findings by fingerprint (:func:`~.fold.group`).
        open_records: The findings open before this tick.
        present: Signatures of the jobs seen this tick.
        held: Signatures of jobs not seen but not seen gone (a source was blind).
        expected: Signatures of periodic loops between two runs
            (:func:`~.periodic.expected`).
        awaiting: Fingerprints of findings about a run that ended by itself, within
            their window for the job to come back (:func:`~.periodic.awaiting_return`):
            each stays open, and its loop's finding continues it.
        unread: Fingerprints of open findings whose source could not be read this
            tick: each stays open (not seen gone) unless this tick reports it.

    Returns:
        Per fingerprint in ``groups``' order, the resolve of an open finding whose job
        ended (when another run goes on) and then its open or sighting; then the
        resolve of each open finding not reported this tick.
    """
    open_by_fp = {rec.fingerprint: rec for rec in open_records}
    steps: list[Step] = []
    for fp, found in groups.items():
        rec = open_by_fp.pop(fp, None)
        first = first_run_fingerprint(fp)
        if rec is None and first in awaiting and first not in groups and first in open_by_fp:
            # The loop's finding is its first run's, continued: the same id, no new open.
            rec = open_by_fp.pop(first)
            finding, pids = fold(found, None)
            steps.append(Seen(rec, Sighting(fp, finding, pids, len(found))))
            continue
        if rec is not None and not same_job(rec, found):
            steps.append(Resolve(rec))  # its job ended; another run gets its own finding
            rec = None
        finding, pids = fold(found, rec)
        sighting = Sighting(fp, finding, pids, len(found))
        steps.append(Open(sighting) if rec is None else Seen(rec, sighting))
    steps.extend(
        Resolve(rec)
        for fp, rec in open_by_fp.items()
        if fp not in unread and not _stays_open(fp, rec, present, held, expected, awaiting)
    )
    return steps


def _stays_open(
    fp: str,
    rec: FindingRecord,
    present: set[str],
    held: set[str],
    expected: Collection[str],
    awaiting: Collection[str],
) -> bool:
    """True when an open finding not reported this tick stays open."""
    if fp in awaiting:
        return True  # its run ended by itself: the job may come back as a loop
    signature = rec.details.get("signature")
    if rec.kind == "respawned" and signature in present:
        return True  # stays open while the ghost that came back is still running
    if periodic_signature(rec) in expected:
        return True  # between two runs of its loop
    return fp.partition(":")[2] in held or signature in held  # not seen gone

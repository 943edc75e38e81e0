"""Decide each finding's step this tick: open, seen again, or resolved.

A finding names one job for its whole life: when the job an open finding is about ended
while another run of the same source goes on, the finding resolves and the other run
gets a finding (and an id) of its own. A finding no longer reported resolves, except a
``respawned`` one while the ghost that came back still runs, a periodic one between two
runs of its loop (:mod:`.periodic`), and one whose job was not seen but not seen gone
either (a blind source holds it).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from watchdog.daemon.tracking.fold import fold, same_job
from watchdog.daemon.tracking.periodic import periodic_signature
from watchdog.model import Finding
from watchdog.state import FindingRecord


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
    """An open finding reported again."""

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
) -> list[Step]:
    """Every finding's step this tick, in the order they are to be applied.

    Args:
        groups: This tick's findings by fingerprint (:func:`~.fold.group`).
        open_records: The findings open before this tick.
        present: Signatures of the jobs seen this tick.
        held: Signatures of jobs not seen but not seen gone (a source was blind).
        expected: Signatures of periodic loops between two runs
            (:func:`~.periodic.expected`).

    Returns:
        Per fingerprint in ``groups``' order, the resolve of an open finding whose job
        ended (when another run goes on) and then its open or sighting; then the
        resolve of each open finding not reported this tick.
    """
    open_by_fp = {rec.fingerprint: rec for rec in open_records}
    steps: list[Step] = []
    for fp, found in groups.items():
        rec = open_by_fp.pop(fp, None)
        if rec is not None and not same_job(rec, found):
            steps.append(Resolve(rec))  # its job ended; another run gets its own finding
            rec = None
        finding, pids = fold(found, rec)
        sighting = Sighting(fp, finding, pids, len(found))
        steps.append(Open(sighting) if rec is None else Seen(rec, sighting))
    steps.extend(
        Resolve(rec)
        for fp, rec in open_by_fp.items()
        if not _stays_open(fp, rec, present, held, expected)
    )
    return steps


def _stays_open(
    fp: str, rec: FindingRecord, present: set[str], held: set[str], expected: Collection[str]
) -> bool:
    """True when an open finding not reported this tick stays open."""
    signature = rec.details.get("signature")
    if rec.kind == "respawned" and signature in present:
        return True  # stays open while the ghost that came back is still running
    if periodic_signature(rec) in expected:
        return True  # between two runs of its loop
    return fp.partition(":")[2] in held or signature in held  # not seen gone

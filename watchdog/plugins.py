"""The plug-in points of the daemon loop, below everything that implements or drives them.

A finding source, an enforcer and a background worker are small Protocols (as
prometheus client_python's ``Collector``): the daemon loop calls them, and the queue,
ship-gate, Slurm-node and enforcement packages implement them without importing the
daemon. :class:`TrackResult` is what the tracker hands to enforcers each tick.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .model import Finding, ScanResult
from .records import FindingRecord


class FindingSource(Protocol):
    """Something besides the process scan that produces findings each tick
    (the GPU queue, ship gates, remediations that did not hold).

    A source may also have ``covers(fingerprint: str) -> bool``: True for the stored
    fingerprint of a finding it makes. While :meth:`findings` raises, the open findings
    it covers stay open instead of resolving (:class:`watchdog.queue.source.QueueSource`).
    """

    name: str

    def findings(self, now: float, result: ScanResult) -> list[Finding]:
        """Findings open right now. May raise: the loop degrades and retries next tick."""
        ...


class Enforcer(Protocol):
    """Acts on what a tick found (terminate, disable a source). Runs after tracking."""

    name: str

    def act(self, now: float, result: ScanResult, track: TrackResult) -> list[Finding]:
        """Take actions; return findings about them (e.g. ``remediation-failed``)."""
        ...


class Worker(Protocol):
    """A background thread owned by the daemon (alert delivery, status socket, metrics)."""

    name: str

    def start(self) -> None:
        """Start the thread; must return promptly."""
        ...

    def stop(self) -> None:
        """Stop the thread and wait for it briefly."""
        ...


@dataclass
class TrackResult:
    """What one tracker update changed (``watchdog.daemon.tracker.Tracker.update``).

    Attributes:
        opened: Findings opened this tick.
        reminded: Open findings due a reminder this tick.
        resolved: Findings resolved this tick.
        signatures: Root PID → job signature (``watchdog.policy.signature``) of every
            job seen this tick.
        respawned: ``respawned`` findings opened this tick.
        held: Signatures of jobs not seen this tick but not seen gone either (a source
            was blind): their findings stay open.
    """

    opened: list[FindingRecord] = field(default_factory=list)
    reminded: list[FindingRecord] = field(default_factory=list)
    resolved: list[FindingRecord] = field(default_factory=list)
    signatures: dict[int, str] = field(default_factory=dict)
    respawned: list[Finding] = field(default_factory=list)
    held: set[str] = field(default_factory=set)

"""``queue-unsanctioned`` findings: entries of the GPU queue nobody sanctioned.

One :class:`QueueSource` per queue backend (Slurm, a home-grown command), so the daemon
degrades each on its own. Pending ("waiting") and running entries that match no
``queue.sanctioned`` rule each give one high-severity finding, folded on
``QUEUE:JOBID`` so a job that goes from pending to running stays one finding.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from ..command import CommandRunner, run
from ..config import Config
from ..config.queue import QueueSettings
from ..hosttext import clip, code_span
from ..lineage.base import command
from ..model import Finding, ScanResult
from .generic import CommandQueue
from .model import QueueEntry
from .slurm import SlurmQueue


class QueueBackend(Protocol):
    """Lists a queue's entries; raises :class:`~watchdog.queue.slurm.QueueError`."""

    name: str

    def entries(self) -> list[QueueEntry]:
        """Every entry the queue lists now."""
        ...


def _when(ts: float | None) -> str:
    if ts is None:
        return "an unknown time"
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def entry_finding(entry: QueueEntry) -> Finding:
    """The ``queue-unsanctioned`` finding for one unsanctioned entry.

    Args:
        entry: A pending or running entry that no rule sanctions.

    Returns:
        E.g. ``job 3 `legacy-retrain` by user svc-old waiting for a GPU since
        2025-03-01T02:00:00+00:00 (account ml, partition gpu, reason Priority); to remove
        it: scancel 3``; a pending job that asked for no GPU, or whose queue did not say,
        is ``waiting to run`` (the first with ``no GPU requested``). Details carry
        ``fingerprint`` ``slurm:3``, ``state`` (``pending``/``running``) and the entry's
        fields.
    """
    # Chosen by whoever submitted it (`sbatch -J`): quoted, so it cannot read as the
    # product's words (a bare quote in it closed the old '…').
    name = code_span(clip(entry.name, 80)) if entry.name else "(no name)"
    who = entry.user or "unknown"
    if entry.phase == "pending" and entry.requests_gpu:
        doing = f"waiting for a GPU since {_when(entry.submit_time)}"
    elif entry.phase == "pending":
        # A job that asked for no GPU (or did not say) is not waiting for one.
        doing = f"waiting to run since {_when(entry.submit_time)}"
    else:
        doing = f"running since {_when(entry.start_time)}"
    facts = [
        f"{label} {value}"
        for label, value in (
            ("account", entry.account),
            ("partition", entry.partition),
            ("state", entry.state if entry.state not in ("PENDING", "RUNNING") else None),
            ("reason", entry.reason if entry.reason not in (None, "None") else None),
        )
        if value
    ]
    if entry.requests_gpu is False:
        facts.append("no GPU requested")
    prefix = "Slurm job" if entry.queue == "slurm" else f"{entry.queue} queue job"
    message = f"{prefix} {entry.job_id} {name} by user {who} {doing}"
    if facts:
        message += f" ({', '.join(facts)})"
    if entry.held:
        message += "; held"
    if entry.queue == "slurm":
        message += f"; to remove it: {command('scancel', entry.job_id)}"
    details: dict[str, Any] = {
        "fingerprint": f"{entry.queue}:{entry.job_id}",
        "state": entry.phase,
        **{k: v for k, v in entry.to_json().items() if k not in ("phase", "state")},
        "queue_state": entry.state,
        "job_name": entry.name,
    }
    details.pop("name", None)
    return Finding("queue-unsanctioned", "high", message, details=details)


def unsanctioned(entries: Iterable[QueueEntry], settings: QueueSettings) -> list[QueueEntry]:
    """Pending and running entries that match no ``queue.sanctioned`` rule, in order."""
    return [
        e for e in entries if e.phase in ("pending", "running") and settings.rule_for(e) is None
    ]


def queue_findings(entries: Iterable[QueueEntry], settings: QueueSettings) -> list[Finding]:
    """One finding per unsanctioned pending/running entry (for ``scan`` and the daemon)."""
    return [entry_finding(e) for e in unsanctioned(entries, settings)]


class QueueSource:
    """FindingSource for one queue backend.

    Attributes:
        last: Unsanctioned entries of the latest successful read (the enforcer acts on
            these).
    """

    def __init__(self, backend: QueueBackend, settings: QueueSettings) -> None:
        self.backend = backend
        self.settings = settings
        self.name = f"queue:{backend.name}"
        self.last: list[QueueEntry] = []

    def findings(self, now: float, result: ScanResult) -> list[Finding]:
        """See :class:`watchdog.plugins.FindingSource`; the queue does not need the scan.

        Raises:
            QueueError: The queue could not be read (the loop degrades, says so once).
        """
        return self.read()

    def covers(self, fingerprint: str) -> bool:
        """True for the stored fingerprint of a finding this source makes
        (``queue-unsanctioned:QUEUE:JOBID``, ``queue-output-malformed:queue:QUEUE``):
        while the queue gives no answer they stay open (the daemon's loop)."""
        return fingerprint.startswith(f"queue-unsanctioned:{self.backend.name}:") or (
            fingerprint == f"queue-output-malformed:{self.name}"
        )

    def read(self) -> list[Finding]:
        """Read the queue now: one finding per unsanctioned entry, plus
        ``queue-output-malformed`` when lines of the output were ignored.

        Raises:
            QueueError: The queue could not be read.
        """
        self.last = []
        entries = self.backend.entries()
        self.last = unsanctioned(entries, self.settings)
        out = [entry_finding(e) for e in self.last]
        problems = getattr(self.backend, "problems", None)
        if problems:
            out.append(
                Finding(
                    "queue-output-malformed",
                    "warning",
                    f"{self.name}: {len(problems)} line(s) of the queue command's output "
                    f"were ignored ({'; '.join(problems[:3])})",
                    details={"fingerprint": self.name, "problems": list(problems[:20])},
                )
            )
        return out


def build_queue_backends(
    settings: QueueSettings, run_cmd: CommandRunner = run
) -> list[QueueBackend]:
    """The queues ``settings`` asks to watch: Slurm (``true``, or ``auto`` with squeue on
    PATH and a slurm.conf, see :meth:`SlurmQueue.available`) and the home-grown
    ``command``."""
    out: list[QueueBackend] = []
    if settings.slurm or (settings.slurm is None and SlurmQueue.available()):
        out.append(SlurmQueue(run_cmd, settings.command_timeout_s))
    if settings.command:
        out.append(CommandQueue(settings.command, run_cmd, settings.command_timeout_s))
    return out


def build_queue_sources(config: Config, run_cmd: CommandRunner = run) -> list[QueueSource]:
    """The daemon's queue sources for a :class:`watchdog.config.Config`.

    Args:
        config: Validated configuration (its ``queue`` section is used).
        run_cmd: Runs ``squeue``/``scontrol``/the queue command.

    Returns:
        One source per watched queue; empty when none is configured or available.
    """
    settings = config.queue
    return [QueueSource(b, settings) for b in build_queue_backends(settings, run_cmd)]


def one_shot_queue_findings(config: Config, run_cmd: CommandRunner = run) -> list[Finding]:
    """Queue findings for ``rogue-watchdog scan``: a queue that cannot be read gives a
    ``queue-unavailable`` warning instead of failing the scan."""
    out: list[Finding] = []
    for source in build_queue_sources(config, run_cmd):
        try:
            out.extend(source.read())
        except Exception as exc:
            out.append(
                Finding(
                    "queue-unavailable",
                    "warning",
                    f"{source.name} could not be read: {exc}",
                    details={"fingerprint": source.name, "error": str(exc)},
                )
            )
    return out

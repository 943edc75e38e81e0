"""Opt-in queue enforcement: ``scontrol hold`` or ``scancel`` an unsanctioned Slurm entry.

Runs only when ``enforcement.mode`` is ``terminate`` and ``queue.action`` is ``hold`` or
``cancel``. Guards, in order: a Slurm entry with a plain numeric id (``42`` or ``42_3``);
not acted on before by this daemon; for ``hold`` a pending entry not already held; then
a fresh ``scontrol show job -o ID`` must still show the job in that phase and matching
no ``queue.sanctioned`` rule (sanctioned entries are never touched); and the scan's one
guard (:mod:`watchdog.policy.guard`) must not protect it: the Slurm job of a sanctioned
training job, or an account or job name the allowlist pins, is never held or cancelled,
whatever the queue rules say. Every action (also a
dry run, also a failure) is written to the audit trail with ``StateDB.record_action``;
a hold records the undo op ``{"op": "scontrol", "argv": ["release", ID]}``; a cancel
cannot be undone. Commands run through one replaceable runner so tests can record them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..command import CommandRunner, run
from ..config import Config
from ..config.queue import QueueSettings
from ..hosttext import clip, code_span, plain_or_code
from ..model import Finding, ScanResult, SlurmOrigin
from ..plugins import TrackResult
from ..state import StateDB
from .model import QueueEntry
from .slurm import QueueError, SlurmQueue
from .source import QueueSource

# Seconds ``scontrol hold``/``scancel`` may take: the limit the daemon has always given
# them (``Effects``' default, through which it ran them).
ACTION_TIMEOUT_S = 60.0
_JOB_ID = re.compile(r"\d+(?:_\d+)?")
ACTOR = "queue"


class QueueEnforcer:
    """Enforcer (see :class:`watchdog.plugins.Enforcer`) for the Slurm queue.

    Args:
        source: The Slurm :class:`~watchdog.queue.source.QueueSource` whose latest
            unsanctioned entries are acted on.
        settings: The ``queue:`` section (``action`` and rules).
        db: The daemon's ``StateDB`` (``record_action``, ``open_finding_ids``).
        mode: ``enforcement.mode``; anything but ``terminate`` disables actions.
        dry_run: Record what would be done without running it.
        runner: Runs the hold/cancel command (:func:`watchdog.command.run`; tests pass a
            :class:`~watchdog.command.RecordingRunner`), with a limit of
            :data:`ACTION_TIMEOUT_S`.
        retry_s: Seconds before a failed action on the same entry is tried again.
    """

    name = "queue-actions"

    def __init__(
        self,
        source: QueueSource,
        settings: QueueSettings,
        db: StateDB,
        *,
        mode: str,
        dry_run: bool = False,
        runner: CommandRunner = run,
        retry_s: float = 300.0,
    ) -> None:
        self.source = source
        self.settings = settings
        self.db = db
        self.mode = mode
        self.dry_run = dry_run
        self.runner = runner
        self.retry_s = retry_s
        self.done: set[tuple[str, str]] = set()
        self._failed_at: dict[tuple[str, str], float] = {}
        backend = source.backend
        self.slurm = backend if isinstance(backend, SlurmQueue) else SlurmQueue()

    @property
    def enabled(self) -> bool:
        """True when this enforcer may act at all."""
        return self.mode == "terminate" and self.settings.action in ("hold", "cancel")

    def act(self, now: float, result: ScanResult, track: TrackResult) -> list[Finding]:
        """Hold or cancel each unsanctioned entry once; findings for failures."""
        if not self.enabled:
            return []
        out: list[Finding] = []
        finding_ids: dict[str, int] | None = None
        for entry in self.source.last:
            action = self.settings.action
            key = (entry.job_id, action)
            if not self._candidate(entry, key, now) or self._protected(entry, result):
                continue
            current = self._recheck(entry)
            if current is None:
                continue
            if finding_ids is None:
                finding_ids = self.db.open_finding_ids()
            fid = finding_ids.get(f"queue-unsanctioned:slurm:{entry.job_id}")
            failure = self._do(current, now, fid)
            if failure is None:
                self.done.add(key)
                self._failed_at.pop(key, None)
            else:
                self._failed_at[key] = now
                out.append(failure)
        return out

    @staticmethod
    def _protected(entry: QueueEntry, result: ScanResult) -> bool:
        """True when the scan's guard protects the entry's Slurm job (or no scan said
        what is protected: then nothing is acted on)."""
        if result.protection is None:
            return True
        job = int(entry.job_id.split("_", 1)[0])
        origin = SlurmOrigin(
            job_id=job, job_name=entry.name, account=entry.account, user=entry.user
        )
        return result.protection.source_refusal(origin) is not None

    def _candidate(self, entry: QueueEntry, key: tuple[str, str], now: float) -> bool:
        if entry.queue != "slurm" or not _JOB_ID.fullmatch(entry.job_id) or key in self.done:
            return False
        failed = self._failed_at.get(key)
        if failed is not None and now - failed < self.retry_s:
            return False
        if self.settings.action == "hold":
            return entry.phase == "pending" and not entry.held
        return entry.phase in ("pending", "running")

    def _recheck(self, entry: QueueEntry) -> QueueEntry | None:
        """The job as Slurm shows it now, when it still qualifies; else None."""
        try:
            current = self.slurm.show(entry.job_id)
        except QueueError:
            return None
        if current is None or current.job_id != entry.job_id:
            return None
        if self.settings.rule_for(current) is not None:
            return None  # never touch a sanctioned entry, whatever the listing said
        if self.settings.action == "hold":
            return current if current.phase == "pending" and not current.held else None
        return current if current.phase in ("pending", "running") else None

    def _do(self, entry: QueueEntry, now: float, finding_id: int | None) -> Finding | None:
        job = entry.job_id
        if self.settings.action == "hold":
            argv, kind = ["scontrol", "hold", job], "scontrol-hold"
            undo: Any = [{"op": "scontrol", "argv": ["release", job]}]
        else:
            argv, kind, undo = ["scancel", job], "scancel", None
        details: dict[str, Any] = {"argv": argv, "entry": entry.to_json()}
        if self.dry_run:
            self.db.record_action(
                ACTOR, kind, f"slurm job {job}", "dry-run", details, now,
                finding_id=finding_id, dry_run=True, undo=undo,
            )  # fmt: skip
            return None
        res = self.runner(argv, ACTION_TIMEOUT_S)
        ok = res.ok
        # A command that could not run says why in stderr (127/124, watchdog.command).
        details.update(returncode=res.returncode, stderr=res.stderr.strip()[:500])
        why = (res.stderr or res.stdout).strip()
        # Why it did not run is ours; what scancel/scontrol wrote is Slurm's, quoted (its
        # errors echo job and user names).
        said = why if not res.ran else code_span(clip(" ".join(why.split()), 200))
        outcome = "ok" if ok else f"failed: {said}"
        self.db.record_action(
            ACTOR, kind, f"slurm job {job}", outcome, details, now,
            finding_id=finding_id, undo=undo if ok else None,
        )  # fmt: skip
        if ok:
            return None
        return Finding(
            "remediation-failed",
            "high",
            f"could not {' '.join(argv)} (Slurm job {job} {code_span(clip(str(entry.name), 80))} "
            f"by {plain_or_code(str(entry.user))}): {said}",
            details={"fingerprint": f"queue:{kind}:{job}", "argv": argv, "error": why},
        )


def build_queue_enforcers(
    config: Config,
    db: StateDB,
    sources: Sequence[QueueSource],
    runner: CommandRunner = run,
) -> list[QueueEnforcer]:
    """Enforcers for the Slurm sources among ``sources`` (none unless
    ``enforcement.mode: terminate`` and ``queue.action`` is hold or cancel).

    Args:
        config: Validated configuration (``enforcement.mode`` and ``.dry_run``).
        db: The daemon's StateDB.
        sources: From :func:`watchdog.queue.source.build_queue_sources`.
        runner: Runs ``scontrol hold``/``scancel``.
    """
    mode = config.enforcement.mode
    dry_run = config.enforcement.dry_run
    out = []
    for source in sources:
        if isinstance(source.backend, SlurmQueue):
            enf = QueueEnforcer(source, config.queue, db, mode=mode, dry_run=dry_run, runner=runner)
            if enf.enabled:
                out.append(enf)
    return out

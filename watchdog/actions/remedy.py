"""Terminate a job or disable its source, and record it: shared by the daemon and the CLI.

Every call appends one row to ``actions`` (who, what, when, outcome, details, undo ops;
dry runs too, flagged) and logs one ``action`` event with the same facts. An action
with side effects writes its row before the first of them and each of them as it goes
(:class:`~watchdog.state.ActionJournal`, issue 32 case 4); its row is finished with
the outcome. A terminate is a task stepped until done (:class:`TerminateTask`): the
daemon steps it off its tick, the CLI to its end.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import hostpaths
from ..config.enforcement import EnforcementSettings
from ..faults import fault_point
from ..hosttext import code_span, command_text
from ..logs import get_logger
from ..model import (
    DISABLE_FIRST,
    UNSANCTIONED_VERDICTS,
    Collateral,
    Copies,
    Job,
    Origin,
    Protection,
    Restarts,
    finding_ref,
)
from ..policy.copies import most_restarting
from ..policy.guard import STOPS_WITH_LOOP, service_collateral
from ..policy.signature import job_signature
from ..sources.procfs import ProcessTable
from ..state import ActionJournal, StateDB
from . import sources
from .disable import CronEdit, DisablePlan, DisableResult, Rename, SystemdChange
from .effects import Effects, JournaledEffects
from .guards import Expected, SignalGuard
from .loopcheck import loop_shell_intent, settle_loop
from .planners import plan_disable
from .terminate import WAVE_SIGNALS, TerminateOutcome, TerminateRun, run_to_end

log = get_logger()


@dataclass
class JobTarget:
    """A job to act on, with the identities the decision is made on.

    Attributes:
        signature: Tracker job signature, when known.
        finding_id: The open finding about it, when known.
        root_pid: Root PID.
        start_ticks: Root start time (identity).
        members: Every member with its identity (root first).
        user: Owner.
        cmdline: Root argv.
        exe: Root executable.
        origin: The job's origin (parsed from the record for a job not running now).
        verdict: ``rogue``, ``excess``...
        running: The job runs now (False: named by a finding, from its record).
        summary: What the record says of a job that is not running.
        reason: Why it has its verdict (recorded with every action on it).
        refused: Why the guard says it must not be a target at all (a protected
            process or origin); None when it may be stopped.
        stop_pids: What the guard lets a by-hand stop signal (the job and its exclusive
            wrappers): stopping them is no collateral.
        service: The rogue service that launched the run (a ``rogue-service`` finding's
            ``service_pids``), stopped with it by :meth:`Remedy.terminate`; empty
            for a job named by itself.
        service_note: Why a service the finding names is not in :attr:`service`.
        restarts: What starts the job again once it ends (the guard's advice), or None.
        copies: The other jobs of the scan its terminate stops as its copies (the
            guard's advice), or None.
    """

    signature: str | None
    finding_id: int | None
    root_pid: int
    start_ticks: int
    members: list[Expected]
    user: str | None
    cmdline: tuple[str, ...]
    exe: str | None
    origin: Origin
    verdict: str
    running: bool = True
    summary: str = field(default="")
    reason: str = ""
    refused: str | None = None
    stop_pids: tuple[int, ...] = ()
    service: list[Expected] = field(default_factory=list)
    service_note: str | None = None
    restarts: Restarts | None = None
    copies: Copies | None = None

    @property
    def unsanctioned(self) -> bool:
        """True for a ``rogue`` or ``excess`` job (:data:`UNSANCTIONED_VERDICTS`)."""
        return self.verdict in UNSANCTIONED_VERDICTS

    def describe(self) -> str:
        """``rogue job PID 42 `python3 train.py``` for messages."""
        text = command_text(self.cmdline, 120) or self.summary[:120]
        return f"{self.verdict} job PID {self.root_pid} {code_span(text)}"


def first_signature(db: StateDB, job: Job) -> str:
    """The signature ``job``'s run got first, else the one its origin gives now.

    The tracker keeps a running job's first signature for its life (its findings keep
    their fingerprint and id) and records its run under it; what acts on the run or
    reports about it names it the same way, though a later look describes the origin
    otherwise (a cron line found, not found, gone or disabled: trust simulator, seed
    91001, one remediation failure paged twice).

    Args:
        db: The state database (its ``job_runs``).
        job: The job as seen now.

    Returns:
        16 hex digits (:func:`~watchdog.policy.signature.job_signature`).
    """
    try:
        first = db.run_signature(job.root_pid, job.start_ticks)
    except sqlite3.Error:
        first = None  # an unreadable table: the origin as seen now names it
    return first or job_signature(job.user, job.cmdline, job.origin)


def target_from_job(
    job: Job, signature: str | None, finding_id: int | None, proc_root: str = "/proc"
) -> JobTarget:
    """A :class:`JobTarget` for a job of the current scan (members not in its lineage are
    read live from ``proc_root``, the procfs the scan read)."""
    by_pid = {p.pid: p for p in job.lineage}
    members: list[Expected] = []
    root = job.lineage[0] if job.lineage else None
    for pid in job.pids:
        proc = by_pid.get(pid)
        if proc is None:
            from .guards import read_live

            live = read_live(pid, proc_root)
            if live is None:
                continue
            members.append(Expected(pid, live.start_ticks, live.cmdline or None))
        else:
            members.append(Expected(pid, proc.start_ticks, proc.cmdline or None))
    return JobTarget(
        signature=signature,
        finding_id=finding_id,
        root_pid=job.root_pid,
        start_ticks=job.start_ticks,
        members=members,
        user=job.user,
        cmdline=tuple(job.cmdline),
        exe=root.exe if root is not None else None,
        origin=job.origin,
        verdict=job.verdict,
        reason=job.reason,
        refused=job.advice.refused if job.unsanctioned else None,
        stop_pids=job.advice.stop_pids,
        restarts=job.advice.restarts if job.unsanctioned else None,
        copies=job.advice.copies if job.unsanctioned else None,
    )


class Remedy:
    """Performs and records actions.

    Args:
        settings: The ``enforcement:`` section.
        db: State database (the audit trail).
        effects: Where side effects go.
        actor: Who acts, e.g. ``daemon`` or ``cli:alice``.
        backup_dir: Where backups go.
        proc_root: procfs mount.
        spool_dirs: User crontab directories.
        crontab: The system crontab; with ``cron_d`` and ``spool_dirs``, where a cron
            line may be disabled (``paths`` of the configuration).
        cron_d: The crontab directory.
        protection: The one guard's view of the scan the targets come from (never a
            sanctioned process, never a protected source).
        record_dry_runs: Write a dry run to the audit trail. The daemon does (observe mode
            shows what it would have done); a person's ``--dry-run`` only looks, and is
            logged without an action row (its action id is 0).
        cli_args: What every ``rogue-watchdog`` command a refusal prints carries after
            the verb (`` --config PATH`` for a daemon with its own configuration:
            :func:`watchdog.hostpaths.config_args`), so a pasted hint acts on the same
            daemon's state.
    """

    def __init__(
        self,
        settings: EnforcementSettings,
        db: StateDB,
        effects: Effects,
        *,
        actor: str,
        backup_dir: str,
        proc_root: str = "/proc",
        spool_dirs: Sequence[str] = hostpaths.CRON_SPOOL_DIRS,
        crontab: str = hostpaths.CRONTAB,
        cron_d: str = hostpaths.CRON_D,
        protection: Protection,
        record_dry_runs: bool = True,
        cli_args: str = "",
    ) -> None:
        self.settings = settings
        self.db = db
        self.effects = effects
        self.actor = actor
        self.backup_dir = backup_dir
        self.proc_root = proc_root
        self.spool_dirs = tuple(spool_dirs)
        self.crontab = crontab
        self.cron_d = cron_d
        self.protection = protection
        self.record_dry_runs = record_dry_runs
        self.cli_args = cli_args

    def guard(self) -> SignalGuard:
        """The never-signal rules for this moment."""
        return SignalGuard(
            self.proc_root,
            self.settings.protect,
            self.protection.pids,
            protection=self.protection,
        )

    def _record(
        self,
        kind: str,
        target: JobTarget,
        what: str,
        outcome: str,
        details: dict[str, Any],
        now: float,
        dry_run: bool,
        undo: list[dict[str, Any]] | None,
    ) -> int:
        """Record an action that had no side effect (a refusal, a dry run) in one row."""
        details = {**job_details(target), **details}
        if dry_run and not self.record_dry_runs:
            # 0 stays the callers' "not recorded"; the log names no id at all: an id
            # printed there would be one `undo` and `actions` do not know.
            log_action(None, self.actor, kind, what, outcome, dry_run, target)
            return 0
        action_id = self.db.record_action(
            self.actor, kind, what, outcome, details, now,
            finding_id=target.finding_id, signature=target.signature, dry_run=dry_run,
            undo=undo or None,
        )  # fmt: skip
        log_action(action_id, self.actor, kind, what, outcome, dry_run, target)
        return action_id

    def begin_terminate(
        self, target: JobTarget, now: float, *, source_disabled: bool = False
    ) -> TerminateTask:
        """Record the intent to terminate the job (before any signal) and return the
        task that does it (:meth:`TerminateTask.step` until done).

        Raises:
            JournalError: The record could not be written: nothing is signalled.
        """
        self.loaded_restarts(target)
        members = [[m.pid, m.start_ticks, list(m.cmdline or ())] for m in target.members]
        intent = {
            **job_details(target),
            "user": target.user,
            "cmdline": list(target.cmdline),
            "members": members,
            "launchers": [[e.pid, e.start_ticks, list(e.cmdline or ())] for e in target.service],
            "grace_s": self.settings.grace_s,
            **terminate_extras(target, source_disabled),
        }
        what = f"PID {target.root_pid} ({len(target.members)} process(es))"
        journal = ActionJournal.begin(
            self.db, self.actor, "terminate", what, intent,
            finding_id=target.finding_id, signature=target.signature,
        )  # fmt: skip
        fault_point("terminate:begun")
        run = TerminateRun(
            target.members, self.guard(), self.effects, self.settings.grace_s, journal=journal,
            launchers=target.service,
        )  # fmt: skip
        return TerminateTask(run, journal, intent, self.actor, target)

    def loaded_restarts(self, target: JobTarget) -> None:
        """Make ``target.restarts`` say what its source's daemon runs, not only what
        its file says: when the latest disable-source of that source (not undone)
        rewrote the file and its post steps (supervisord's ``reread``/``update``:
        :func:`~watchdog.actions.sources.unloaded`) did not all run, the daemon may
        still run the settings it had, which may start the job again: the answer is
        then ``unknown`` (the terminate ends ``may-return``, never ``ok``). Simulator
        I15, seed 69401: killed between the rewrite and ``reread``, the file said
        autorestart=false, the terminate said ``ok``, supervisord started it again.

        Args:
            target: The job; its ``restarts`` is replaced in place when so, unless it
                already says the job comes back (:func:`~watchdog.policy.copies.most_restarting`).
        """
        # Every record, not a window of the latest: dry runs, refusals and other
        # programs' actions would push the one that decides out of any fixed window.
        # (``acted``: dry runs and refusals, which changed nothing, are left out there.)
        for rec in self.db.every_action_of_kind("disable-source", acted=True):
            if not sources.matches(rec.details, target.origin):
                continue
            post = sources.recorded_post(rec.details)
            if post is None:
                continue  # a kind with no post step: an older one decides
            steps = self.db.action_steps(rec.id)
            if not sources.rewrote(steps):
                # Failed or killed before its rewrite: it changed nothing the daemon
                # loads, and an older rewrite it never reached may still be unloaded.
                continue
            if rec.undone_at is not None and self._undone(rec.id):
                return  # the files are back, and the undo told the daemon
            left = sources.unloaded(post, steps)
            if left:  # a stronger answer read elsewhere (it comes back) stays
                target.restarts = most_restarting([
                    target.restarts,
                    Restarts(
                        "unknown",
                        f"disable-source {rec.id} left {sources.unloaded_words(left)}",
                        DISABLE_FIRST,
                    ),
                ])  # fmt: skip
            return

    def _undone(self, action_id: int) -> bool:
        """Whether the latest ``undo`` of action ``action_id`` finished ``ok``: ``undo``
        marks the action undone before its first op (a daemon that sees the job start
        again reads it as the undo's), so a killed or failed one leaves the mark with
        the files (or the daemon's settings) not yet back."""
        for rec in self.db.every_action_of_kind("undo"):
            if rec.details.get("undid") == action_id:
                return rec.state == "done" and rec.outcome == "ok"
        return False

    def terminate(
        self,
        target: JobTarget,
        now: float,
        *,
        dry_run: bool = False,
        source_disabled: bool = False,
    ) -> tuple[int, TerminateOutcome]:
        """SIGTERM the job's tree, SIGKILL after ``grace_s``; record the action. Waits
        out the grace period in the caller (the CLI; the daemon steps
        :meth:`begin_terminate`'s task off its tick).

        A job whose source starts it again once it ends (``target.restarts``, and
        ``terminate`` leaves that source) is stopped all the same, but the outcome is
        ``will-return`` instead of ``ok``: it will come back until its source is stopped.

        Args:
            target: The job.
            now: POSIX time of the action.
            dry_run: Only say what would be signalled.
            source_disabled: Its source was disabled just before (``terminate
                --and-source``, the daemon's ``auto_disable_source``): nothing restarts it.

        Returns:
            ``(action id, outcome)``.

        Raises:
            JournalError: The record could not be written: nothing was signalled.
        """
        dry = dry_run or self.settings.dry_run
        if target.refused is not None:
            # The guard protects the job (enforcement.protect, an origin it names):
            # nothing is signalled, whoever asks.
            res = TerminateOutcome([], "refused")
            refusal: dict[str, Any] = {"refused": target.refused}
            aid = self._record(
                "terminate", target, f"PID {target.root_pid}", "refused", refusal, now, dry, None
            )
            return aid, res
        if dry:
            run = TerminateRun(
                target.members, self.guard(), self.effects, self.settings.grace_s, dry_run=True,
                launchers=target.service,
            )  # fmt: skip
            res = run_to_end(run)
            what = f"PID {target.root_pid} ({len(res.procs)} process(es))"
            self.loaded_restarts(target)
            extras = terminate_extras(target, source_disabled)
            details = {"grace_s": self.settings.grace_s, **res.to_json(), **extras}
            settle_loop(extras, res, details, self.proc_root)
            details.update(res.to_json())  # the loop's shell it would leave, said
            return self._record(
                "terminate", target, what, res.outcome, details, now, True, None
            ), res
        task = self.begin_terminate(target, now, source_disabled=source_disabled)
        try:
            res = run_to_end(task.run)
        finally:
            task.finish()
        return task.action_id, res

    def collateral(self, target: JobTarget) -> Collateral | None:
        """The service disabling the job's source would stop beside it, read live from
        ``/proc`` right before acting (:func:`watchdog.policy.guard.service_collateral`):
        the job's processes, its wrappers, the scan's other rogue runs and any process
        running the job's command line are training; anything else is the service's."""
        table = ProcessTable(self.proc_root)
        table.refresh()
        training = {m.pid for m in target.members} | set(target.stop_pids)
        training |= self.protection.training
        if target.cmdline:
            training |= {pid for pid, p in table.procs.items() if p.cmdline == target.cmdline}
        return service_collateral(target.origin, target.root_pid, table, training)

    def plan_disable(
        self, target: JobTarget, now: float, *, stop_service: str | None = None
    ) -> DisablePlan:
        """How the job's source would be disabled (reads only).

        The guard is asked first: a source that a sanctioned job runs from, that the
        allowlist pins, or that ``enforcement.protect`` names is never planned (the
        refusal says which, and names no file or unit as the plan's target). A source
        that is a service also running other work (:meth:`collateral`) is planned only
        when ``stop_service`` names it: never by the daemon, by hand only when asked.

        Args:
            target: The job.
            now: POSIX time for markers and backup names.
            stop_service: The service a person asked to stop with the source
                (``--stop-service NAME``), or None.
        """
        refused = self.protection.source_refusal(target.origin)
        if refused is not None:
            return DisablePlan("none", "-", refused=refused)
        service = self.collateral(target)
        if service is not None and stop_service != service.name:
            ref = finding_ref(target.finding_id) if target.finding_id else target.root_pid
            asked = (
                f"--stop-service {stop_service} names another service; "
                if stop_service is not None
                else ""
            )
            return DisablePlan(
                "none",
                "-",
                refused=(
                    f"{asked}disabling it would stop a service: {service.text()}; a service is "
                    f"never stopped unasked. To stop this run only: rogue-watchdog "
                    f"terminate{self.cli_args} {ref}; to stop the service {service.name} as "
                    f"well: {service.command(ref, self.cli_args)}"
                ),
            )
        reason = f"{target.verdict} job"
        if target.finding_id is not None:
            reason += f", finding {finding_ref(target.finding_id)}"
        if target.signature:
            reason += f", signature {target.signature}"
        plan = plan_disable(
            target.origin,
            reason=reason,
            now=now,
            backup_dir=self.backup_dir,
            effects=self.effects,
            spool_dirs=self.spool_dirs,
            crontab=self.crontab,
            cron_d=self.cron_d,
            quarantine_unknown_exe=self.settings.quarantine_unknown_exe,
            cmdline=target.cmdline,
            exe=target.exe,
        )
        if service is not None and plan.refused is None:
            plan.steps.insert(
                0,
                f"stops the service {service.name} with it, as asked (--stop-service): "
                f"{service.text()}",
            )
            plan.stops_service = service.name
        return plan

    def disable_source(
        self,
        target: JobTarget,
        now: float,
        *,
        dry_run: bool = False,
        stop_service: str | None = None,
    ) -> tuple[int, DisablePlan, DisableResult | None]:
        """Disable the job's source (see disable.py); record the action with its undo ops.

        Args:
            target: The job.
            now: POSIX time of the action.
            dry_run: Plan and record only.
            stop_service: The service a person asked to stop with the source
                (:meth:`plan_disable`); the daemon never passes one.

        Returns:
            ``(action id, plan, result)``; ``result`` is None for a dry run.
        """
        dry = dry_run or self.settings.dry_run
        plan = self.plan_disable(target, now, stop_service=stop_service)
        details: dict[str, Any] = {"source": plan.kind, "steps": plan.steps}
        if plan.stops_service:
            details["stops_service"] = plan.stops_service
        if plan.refused is not None:
            details["refused"] = plan.refused
            aid = self._record(
                "disable-source", target, plan.target, "refused", details, now, dry, None
            )
            return aid, plan, None
        if dry:
            aid = self._record(
                "disable-source", target, plan.target, "dry-run", details, now, True, None
            )
            return aid, plan, None
        post = sources.post_steps(plan)
        if post:
            details["post"] = post  # kept once finished: the restart answer reads it
        intent = {**job_details(target), **details, "restore": restore_plan(plan)}
        journal = ActionJournal.begin(
            self.db, self.actor, "disable-source", plan.target, intent,
            finding_id=target.finding_id, signature=target.signature,
        )  # fmt: skip
        fault_point("disable-source:begun")
        result = plan.execute(JournaledEffects(self.effects, journal))
        details = {**job_details(target), **details, "done": result.done, "error": result.error}
        journal.finish(result.outcome, details, undo=result.undo or None)
        log_action(
            journal.action_id, self.actor, "disable-source", plan.target, result.outcome, False,
            target,
        )  # fmt: skip
        return journal.action_id, plan, result


#: A terminate's outcomes that stopped the job but leave its source: it starts the job
#: again (``will-return``), or whether it does could not be told (``may-return``). Every
#: reader that treats ``ok`` as "stays stopped" treats these as "may come back".
RETURNING = ("will-return", "may-return")


def terminate_extras(target: JobTarget, source_disabled: bool) -> dict[str, Any]:
    """What a terminate records beside its signals: that the job's source starts it
    again (``will_return``: its outcome ``ok`` is then ``will-return``), or that whether
    it does could not be told (``may_return``: the outcome ``ok`` is then
    ``may-return``; nothing is claimed either way), the service that launched it and
    why, and the shell loop it stops with the job (``source_stopped``: what restarted
    it, in words; ``loop_shell``: that shell's identity, checked when the terminate
    ends: :func:`~watchdog.actions.loopcheck.settle_loop`)."""
    out: dict[str, Any] = {}
    again = target.restarts
    if (
        again is not None
        and again.after_terminate
        and (not source_disabled or again.outlives_source)
    ):
        key = "will_return" if again.known else "may_return"
        out[key] = {"restarts": again.line(), "stops": again.stops}
        if again.each_run:
            out[key]["each_run"] = True  # terminated again when it comes back: not futile
    if again is not None and not again.after_terminate and again.stops == STOPS_WITH_LOOP:
        # The loop's shell is one of the processes it stops: what restarted the job goes
        # with it (a loop's finding then resolves at once: tracking.current.ended_for_good).
        # Advice only: the finish keeps it when that very shell was stopped (loopcheck).
        out["source_stopped"] = again.how
        out["loop_shell"] = loop_shell_intent(again.shell, again.line())
    if target.copies is not None:
        # Root PIDs of the other jobs of the scan it stops as its copies (named in words
        # by the CLI's output and the advice): their processes are in ``procs``.
        out["copies"] = list(target.copies.pids)
    if target.service:
        out["service_pids"] = [e.pid for e in target.service]
    if target.service_note:
        out["service_note"] = target.service_note
    return out


def job_details(target: JobTarget) -> dict[str, Any]:
    """What every action on a job records about it: root identity, the job in words, its
    origin and why it has its verdict."""
    return {
        "root": [target.root_pid, target.start_ticks],
        "job": target.describe(),
        "origin": target.origin.to_json(),
        **({"reason": target.reason} if target.reason else {}),
    }


def log_action(
    action_id: int | None,
    actor: str,
    kind: str,
    what: str,
    outcome: str,
    dry_run: bool,
    target: JobTarget | None,
) -> None:
    """The one ``action`` log event of a finished action.

    Args:
        action_id: Its row in the audit trail; None for a dry run that wrote none (a
            person's): the event then says ``recorded: false`` and carries no ``id``.
        actor: Who acted.
        kind: ``terminate``, ``disable-source``...
        what: Its target, as recorded.
        outcome: ``ok``, ``refused``, ``dry-run``...
        dry_run: Whether it changed nothing by design.
        target: The job, when there is one.
    """
    # A dry run or a refusal changed nothing: info; a signal sent or a file changed is
    # worth a warning.
    level = "info" if dry_run or outcome in ("refused", "dry-run") else "warning"
    ref: dict[str, Any] = {"id": action_id} if action_id is not None else {"recorded": False}
    getattr(log, level)(
        "action", **ref, actor=actor, kind=kind, target=what, outcome=outcome,
        dry_run=dry_run, finding_id=target.finding_id if target else None,
        job=target.describe() if target else None,
    )  # fmt: skip


def restore_plan(plan: DisablePlan) -> dict[str, Any]:
    """What undoes ``plan`` once its steps are made, recorded before the first of them:
    an interrupted disable-source still gets its undo ops (watchdog/actions/recovery.py).
    Only JSON values: the plan's bytes stay out."""
    d = plan.data
    if isinstance(d, CronEdit):
        return {"restore_file": d.copy.to_json()}
    if isinstance(d, Rename):
        return {"rename": d.to_json()}
    if isinstance(d, SystemdChange):
        return {"systemd": d.to_json()}
    if plan.kind in ("container", "supervisord", "at"):
        return sources.restore_plan(plan)
    return {}


class TerminateTask:
    """A terminate in progress: its run and its record (see
    :meth:`Remedy.begin_terminate`); :meth:`step` until it returns None, which finishes
    the record.

    Args:
        run: The state machine.
        journal: The action's record.
        intent: The details recorded at its start.
        actor: Who acts.
        target: The job, when known (None for one found interrupted).
        interrupted: For a run taken over after an interruption, what it found
            (recorded as ``details["interrupted"]``; the row ends ``interrupted``).
    """

    def __init__(
        self,
        run: TerminateRun,
        journal: ActionJournal,
        intent: dict[str, Any],
        actor: str,
        target: JobTarget | None,
        interrupted: dict[str, Any] | None = None,
    ) -> None:
        self.run = run
        self.journal = journal
        self.intent = intent
        self.actor = actor
        self.target = target
        self.interrupted = interrupted
        self.finished = False

    @property
    def action_id(self) -> int:
        """The action's row."""
        return self.journal.action_id

    @property
    def root(self) -> tuple[int, int]:
        """The job's root identity."""
        root = self.intent.get("root") or [0, 0]
        return int(root[0]), int(root[1])

    def step(self) -> float | None:
        """Step the run; on its end, finish the record. Seconds to the next step, or None."""
        wait = self.run.step()
        if wait is None:
            self.finish()
        return wait

    def interrupt(self, reason: str) -> None:
        """Stop the run (nothing left frozen) and finish the record as ``interrupted``."""
        self.run.interrupt(reason)
        self.finish()

    def finish(self) -> None:
        """Finish the record with the run's outcome (once)."""
        if self.finished:
            return
        res = self.run.outcome
        if res is None:
            self.run.interrupt("stopped before it ended")
            res = self.run.outcome
        assert res is not None
        self.finished = True
        fault_point("terminate:finishing")
        if "will_return" in self.intent and res.outcome == "ok":
            res.outcome = "will-return"  # stopped, but its source starts it again
        elif "may_return" in self.intent and res.outcome == "ok":
            # Stopped, and whether its source starts it again could not be told: never
            # `ok`, which every reader takes for "stays stopped" (the enforcer would
            # terminate a restarting container again each tick: simulator I15, seed
            # 68601), and never a claim that it will.
            res.outcome = "may-return"
        keep = ("root", "job", "origin", "reason", "user")
        details = {k: self.intent[k] for k in keep if k in self.intent}
        details.update({"grace_s": self.run.grace_s, **res.to_json()})
        for extra in (
            "will_return",
            "may_return",
            "source_stopped",
            "service_pids",
            "service_note",
            "copies",
        ):
            if extra in self.intent:
                details[extra] = self.intent[extra]
        # Claim the loop stopped only when its very shell was (the live decision may
        # differ from the scan's advice): else the loop starts it again.
        settle_loop(self.intent, res, details, self.run.guard.proc_root)
        details.update(res.to_json())
        state = "done"
        if self.interrupted is not None:
            self.interrupted["recovery"] = _recovery_words(res, self.run.waves_sent)
            details["interrupted"] = self.interrupted
            state = "interrupted"
        what = f"PID {self.root[0]} ({len(res.procs)} process(es))"
        self.journal.finish(res.outcome, details, state=state, target=what)
        log_action(self.action_id, self.actor, "terminate", what, res.outcome, False, self.target)


def _recovery_words(res: TerminateOutcome, waves: list[tuple[str, int]]) -> str:
    """What the run that took an interrupted terminate over did, in words."""
    alive = [p.pid for p in res.procs if p.result == "survived"]
    left = f"; still running: PID {', '.join(map(str, alive[:5]))}" if alive else ""
    sent = ", ".join(f"{WAVE_SIGNALS[w].name} to {n} process(es) ({w})" for w, n in waves)
    if res.outcome == "interrupted":
        return f"not continued; sent since: {sent or 'nothing'}{left}"
    return f"continued to its end; sent since: {sent or 'nothing'}; outcome {res.outcome}{left}"


def default_actor() -> str:
    """``cli:USER`` (the sudo caller when run through sudo)."""
    import getpass

    user = os.environ.get("SUDO_USER") or getpass.getuser()
    return f"cli:{user}"

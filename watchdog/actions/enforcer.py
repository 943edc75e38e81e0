"""The daemon's enforcer: act on rogue and excess jobs, then watch that it held.

Per tick, after tracking:

1. **Watch.** A job whose signature was remediated before (a ``terminate`` or
   ``disable-source`` action that succeeded and was not undone) but which now runs as a
   different process (other root PID or start time) came back anyway: a
   ``remediation-failed`` finding (critical) names what was done, when, and what spawned
   it this time. This works in every mode, also for actions taken with the CLI.
   **Recheck.** From ``RECHECK_AFTER_S`` (30 s) after a ``terminate`` and for an hour, a
   process of the terminated tree still running, or the terminated command running again
   as a rogue or excess job from any origin (a worker re-parented to PID 1 has another
   signature), opens ``remediation-failed`` too, until nothing of it is left.
   A run back is judged once, against the newest action on an earlier run that stands:
   an operator's later undo, an action on that run itself, or its cron line re-enabled
   by hand since the action found or left it disabled supersede it (no failure); so
   does a run a person started again by hand from another login session than the one
   the action's recorded origin names (:func:`~watchdog.policy.anew.started_anew`).
2. **Act.** In ``terminate`` mode (globally or by a matching rule) each rogue/excess job
   is handled once per identity (also across restarts and reloads: an identity the
   audit trail shows terminated this boot is not acted on again): its source is
   disabled first when ``auto_disable_source`` says so (so cron or systemd cannot start
   it again while it is being stopped), then its process tree is terminated. The
   terminate's first step (freeze, SIGTERM, SIGCONT) runs in the tick; the grace period
   is waited out off it (:mod:`watchdog.actions.runner`), so the scan and ``status`` stay
   current meanwhile. ``observe`` does nothing.
   ``enforcement.gpu_open`` (audit or enforce) first puts each rogue training job
   under a device rule that denies it the GPU nodes, in every mode, and lifts the
   rules that no longer hold (:mod:`watchdog.actions.gpudeny`).
3. **Recover.** An action left half-way by a process that is gone (a daemon killed
   during a terminate's grace period, between a quarantine's rename and its record) is
   found from its write-ahead record, finished or reported without repeating any signal
   (:mod:`watchdog.actions.recovery`), and raises ``action-interrupted``.

Wiring: ``Daemon(config, path, sources=[enf], enforcers=[enf])`` with ``enf`` from
:func:`build_enforcers`. As a finding source it reports ``remediation-failed`` before
tracking, so those findings are tracked and alerted in the same tick; ``act`` returns
them too, per the Enforcer protocol.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from ..config import Config
from ..hostpaths import config_args
from ..hosttext import quoted_command
from ..logs import get_logger
from ..model import CronOrigin, Finding, Job, ScanResult
from ..model.origins import NOT_LIVE
from ..plugins import TrackResult
from ..policy.anew import started_anew
from ..policy.guard import STOPS_WITH_LOOP
from ..policy.services import service_source
from ..policy.signature import job_signature
from ..sources.procfs import alive_now, boot_id
from ..spelling import optional
from ..state import (
    ActionJournal,
    ActionRecord,
    ActionStep,
    JournalError,
    StateDB,
)
from .effects import Effects
from .gpudeny import GpuOpenGate, device_rules
from .recovery import (
    INTERRUPTED_OPEN_S,
    interrupted_finding,
    interrupted_note,
    owner_gone,
    quarantine_finding,
    recorded_members,
    resolve,
    terminate_resume,
)
from .remedy import RETURNING, Remedy, TerminateTask, first_signature, target_from_job
from .runner import Runner, ThreadRunner
from .terminate import TerminateRun

log = get_logger()

ACTED_KINDS = ("terminate", "disable-source")
RECHECK_AFTER_S = 30.0
RECHECK_WINDOW_S = 3600.0
_FINDING_KIND = {"rogue": "rogue-job", "excess": "excess-instances"}


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def _summary(rec: ActionRecord) -> str:
    if rec.kind == "terminate":
        sig = [p for p in rec.details.get("procs", []) if p.get("signals")]
        return f"terminated {len(sig)} process(es) of PID {rec.details.get('root', ['?'])[0]}"
    done = "; ".join(rec.details.get("done") or []) or rec.target
    return f"disabled the source ({rec.details.get('source')}: {done})"


class Enforcer:
    """Terminate-mode actions and the remediation watch.

    Args:
        config: Validated configuration (``enforcement:``, ``paths``, ``daemon.state_dir``).
        db: The daemon's state database.
        effects: Side effects; None uses real ones with ``enforcement.command_prefix``.
        actor: Recorded as who acted.
        clock: Wall clock for action times (the tick's ``now`` is used for findings).
        runner: Where terminates wait out their grace period after their first step
            (default: a :class:`~watchdog.actions.runner.ThreadRunner`, off the tick;
            the simulator passes an inline one).
        gpu_rules: Turns ``enforcement.gpu_devices`` into device rules
            (:func:`~watchdog.actions.gpudeny.device_rules`; the simulator's nodes are
            plain files).
    """

    name = "enforcement"

    def __init__(
        self,
        config: Config,
        db: StateDB,
        effects: Effects | None = None,
        *,
        actor: str = "daemon",
        clock: Callable[[], float] = time.time,
        runner: Runner | None = None,
        gpu_rules: Callable[[Sequence[str]], list[str]] = device_rules,
    ) -> None:
        self.config = config
        self.settings = config.enforcement
        self.db = db
        self.effects = effects or Effects(self.settings.command_prefix)
        self.actor = actor
        self.clock = clock
        self.backup_dir = self.settings.backup_dir or os.path.join(
            config.daemon.state_dir, "backups"
        )
        self.runner: Runner = runner or ThreadRunner()
        self.gpu = GpuOpenGate(
            self.settings, config.paths.cgroup_root, db, self.effects, actor=actor,
            clock=clock, rules=gpu_rules,
        )  # fmt: skip
        self._acted: set[tuple[int, int]] = self._acted_before()
        self._last: tuple[int, list[Finding]] | None = None
        # Interrupted terminates taken over, to be continued by the next act() (the
        # findings() call that took them over counts them); rows whose findings went out.
        self._resume: dict[int, tuple[ActionRecord, list[ActionStep], int]] = {}
        self._emitted: set[int] = set()
        self._calls = 0

    def _acted_before(self) -> set[tuple[int, int]]:
        """Root identities the audit trail shows terminated (or refused) during this
        boot: a restart or a reload never acts on them again."""
        try:
            recs = self.db.actions(limit=1000)
        except Exception:  # an unreadable trail: the tick's own degradation says so
            return set()
        boot = boot_id("/proc")
        out: set[tuple[int, int]] = set()
        for rec in recs:
            root = rec.details.get("root")
            if (
                rec.kind != "terminate"
                or rec.dry_run
                or not rec.owner
                or rec.owner.get("boot_id") != boot
                or not isinstance(root, list)
                or len(root) != 2
            ):
                continue
            try:
                out.add((int(root[0]), int(root[1])))
            except (TypeError, ValueError):
                continue
        return out

    def settle(self, timeout_s: float) -> bool:
        """Wait until no terminate is left waiting (tests); True when none is."""
        settle = getattr(self.runner, "settle", None)
        return bool(settle(timeout_s)) if settle is not None else not self.runner.in_flight()

    # -- the watch ---------------------------------------------------------------------

    def _remediated(self) -> dict[str, list[ActionRecord]]:
        out: dict[str, list[ActionRecord]] = {}
        for rec in self.db.actions(limit=1000):
            if (
                rec.kind in ACTED_KINDS
                and rec.signature
                and not rec.dry_run
                and rec.undone_at is None
                and rec.outcome in ("ok", "partial", *RETURNING)
            ):
                out.setdefault(rec.signature, []).append(rec)
        return out

    def _undone_at(self, sig: str, cache: dict[str, float | None]) -> float | None:
        """When an operator's undo last re-enabled a source of ``sig`` (whatever was done
        since), or None: what was done to that job before then no longer holds by their
        choice, also once the source is disabled again (a later action is judged on its
        own; fresh user F, issue 33: a disable after the undo revived the claim of a
        terminate made before it, a critical page 135 s later)."""
        if sig not in cache:
            undos = [
                r.created_at
                for r in self.db.actions_for(sig)
                if r.kind == "undo" and r.outcome in ("ok", "running") and not r.dry_run
            ]
            cache[sig] = max(undos, default=None)
        return cache[sig]

    def covers(self, fingerprint: str) -> bool:
        """True for the stored fingerprint of a finding this source makes
        (``remediation-failed:…``, ``action-interrupted:…``): while :meth:`findings`
        raises they stay open instead of resolving (the daemon's loop)."""
        return fingerprint.startswith(("remediation-failed:", "action-interrupted:"))

    def findings(self, now: float, result: ScanResult) -> list[Finding]:
        """``remediation-failed`` findings for jobs that came back (FindingSource).

        Each run back is judged once, against the newest action taken on an earlier run
        of it (its signature's, or a recent terminate of the same command), and only
        while that action stands: an operator's later undo, a person's action on the run
        itself (a disable-source from ``top``), or a source re-enabled by hand since the
        action found it disabled supersede it: no failure, its ``rogue-job`` says what
        runs (docs/operations.md, "Watching that it held")."""
        remediated = self._remediated()
        terms = self._recheckable()
        out: list[Finding] = []
        undone: dict[str, float | None] = {}
        back: dict[int, list[Job]] = {}
        # A run still here names the finding before one seen only at its exec and gone
        # already (kernel events): the gone one is not there at the next tick, and a
        # finding whose root changed is another page (trust simulator, I8/I13).
        # Nothing acted on that stands: no run is back from anything (and no run's first
        # signature is looked up).
        jobs = result.jobs if remediated or terms else []
        for job in sorted(jobs, key=lambda j: j.root_pid in result.exited):
            # What comes back must train to be a failed remediation: a notebook kernel
            # restarted after its training run was stopped is only a notebook again.
            if not job.unsanctioned or not job.may_train:
                continue
            # The run's first signature: a later look that describes its origin otherwise
            # keeps its finding (one fingerprint, one page; seed 91001).
            sig = first_signature(self.db, job)
            recs = remediated.get(sig, [])
            ident = (job.root_pid, job.start_ticks)
            if any(tuple(r.details.get("root") or ()) == ident for r in recs):
                # The very process acted on (refused, not dead yet, or its source
                # disabled while it runs): what was done is about it, no return.
                continue
            own = {r.id for r in recs}
            others = [
                t.rec
                for t in terms
                if t.rec.id not in own
                and t.root_cmd == tuple(job.cmdline)
                and job.start_ticks > t.newest
            ]
            if not recs and not others:
                continue
            judged = max([*recs, *others], key=lambda r: (r.created_at, r.id))
            if self._superseded(judged, sig, job, undone):
                continue
            if started_anew(job, [judged.details.get("origin")]):
                # A person ran it again by hand from another login session than the
                # stopped run's: nothing the action left brought it back; its own
                # rogue-job pages it (fresh user, first day: critical 22 s after).
                continue
            if judged.id in own:
                since = self._undone_at(sig, undone) or 0.0
                # One per run back: the tracker folds them (one fingerprint) into one
                # finding naming every copy, which goes on about a copy when the run it
                # names ends.
                live = [r for r in recs if r.created_at > since]
                out.append(self._failed(job, sig, live, result))
            else:
                back.setdefault(judged.id, []).append(job)
        out += self._recheck(terms, back)
        try:
            out += self._interrupted(now, result)
        except sqlite3.Error as exc:
            # The state database refuses writes: taken over once it takes them again
            # (the `state` component says so); the rest of the watch still reports.
            log.debug("action-recovery-deferred", error=str(exc))
        self._last = (id(result), out)
        return out

    def _superseded(
        self, rec: ActionRecord, sig: str, job: Job, undone: dict[str, float | None]
    ) -> bool:
        """Whether an operator acted on the source of ``job`` after ``rec``: an undo (of
        this signature or of the one ``rec`` acted on), or the source re-enabled by hand
        since ``rec`` found or left it disabled. Then a run back is theirs to judge, not
        a failure of ``rec``."""
        for s in {sig, rec.signature or sig}:
            undo_at = self._undone_at(s, undone)
            if undo_at is not None and undo_at > rec.created_at:
                return True
        return _reenabled_since(rec, job)

    def _recheckable(self) -> list[_Recheck]:
        """The terminates between ``RECHECK_AFTER_S`` and ``RECHECK_WINDOW_S`` old that
        stand, with their tree as recorded."""
        now = self.clock()
        out = []
        for rec in self.db.actions(limit=200):
            age = now - rec.created_at
            if (
                rec.kind != "terminate"
                or rec.dry_run
                or rec.undone_at is not None
                or rec.outcome not in ("ok", "partial", *RETURNING)
                or not RECHECK_AFTER_S <= age <= RECHECK_WINDOW_S
            ):
                continue
            procs = [p for p in rec.details.get("procs") or [] if isinstance(p, dict)]
            try:
                tree = [(int(p["pid"]), int(p["start_ticks"]), p) for p in procs if p["signals"]]
                root_pid = int((rec.details.get("root") or [0])[0])
            except (KeyError, TypeError, ValueError):
                continue  # a malformed record: nothing to compare with
            root_cmd = next(
                (tuple(p.get("cmdline") or ()) for pid, _s, p in tree if pid == root_pid), ()
            )
            newest = max((start for _pid, start, _p in tree), default=0)
            out.append(_Recheck(rec, tree, root_cmd, newest))
        return out

    def _recheck(self, terms: list[_Recheck], back: dict[int, list[Job]]) -> list[Finding]:
        """Terminations that did not hold: part of the tree still runs, or its command
        is back as a rogue job under any origin with this terminate as the newest action
        before it (see the module docstring and :meth:`findings`)."""
        out = []
        for t in terms:
            left = [
                p for pid, start, p in t.tree if _running(pid, start, self.config.paths.proc_root)
            ]
            came = back.get(t.rec.id, [])
            if left or came:
                out.append(self._not_held(t.rec, left, came))
        return out

    @staticmethod
    def _not_held(rec: ActionRecord, left: list[dict[str, Any]], back: list[Job]) -> Finding:
        what = f"{_summary(rec)} at {_when(rec.created_at)} by {rec.actor} (action {rec.id})"
        parts = []
        if left:
            names = ", ".join(
                f"PID {p['pid']} {quoted_command(p.get('cmdline') or [], 80)}" for p in left[:5]
            )
            parts.append(
                f"{len(left)} process(es) of its tree still run {RECHECK_AFTER_S:.0f} s or "
                f"more after it: {names}"
            )
        for job in back[:3]:
            parts.append(
                f"{quoted_command(job.cmdline, 120)} is back as PID {job.root_pid}, spawned by "
                f"{job.origin.describe()}"
            )
        return Finding(
            kind="remediation-failed",
            severity="critical",
            # What was done and what did not hold, not a time since it: the finding can
            # open long after the recheck began (fresh user F: "30 s after" at 135 s).
            message=f"remediation failed: rogue-watchdog {what}; " + "; ".join(parts),
            root_pid=back[0].root_pid if back else None,
            details={
                "fingerprint": f"terminate-{rec.id}",
                "actions": [rec.id],
                "left": [{"pid": p["pid"], "start_ticks": p["start_ticks"]} for p in left],
                "back": [j.root_pid for j in back],
            },
        )

    @staticmethod
    def _failed(
        job: Job, sig: str, recs: list[ActionRecord], result: ScanResult | None = None
    ) -> Finding:
        latest = recs[0]  # newest first
        done = "; ".join(f"{_summary(r)} at {_when(r.created_at)} by {r.actor}" for r in recs[:3])
        launcher = _service_launcher(job, result)
        spawner = f"{service_source(launcher)}" if launcher else job.origin.describe()
        message = (
            f"remediation failed: {quoted_command(job.cmdline, 120)} is back as PID "
            f"{job.root_pid} after rogue-watchdog {done}; spawned this time by {spawner}"
        )
        stop = job.advice.stop_source(job.root_pid)
        foretold = latest.outcome == "will-return"
        said = latest.details.get("will_return" if foretold else "may_return")
        if latest.outcome in RETURNING and isinstance(said, dict):
            # Foretold (or said possible): not repeated. What stops it is optional (an
            # origin whose line was not found names none).
            may = "" if foretold else "may start it again: "
            message += f"; as its terminate said, its source {may}{said.get('restarts')}"
            message += optional(said.get("stops"), " ({})")
            message += (
                "; the daemon terminates each run it starts"
                if said.get("each_run") is True
                else "; the daemon does not terminate it again"
            )
        if launcher is not None:
            svc = launcher.details["service_pids"][0]
            message += (
                f"; to stop the service and its run: rogue-watchdog "
                f"terminate{job.advice.cli_args} {svc} (or by "
                f"hand: kill -TERM {svc} {job.root_pid})"
            )
        elif stop:
            message += f"; to stop that source: {stop}"
        elif job.advice.source_refused is not None:
            message += f"; its source is not disabled: {job.advice.source_refused}"
        return Finding(
            kind="remediation-failed",
            severity="critical",
            message=message,
            root_pid=job.root_pid,
            details={
                "fingerprint": sig,
                "signature": sig,
                "root": [job.root_pid, job.start_ticks],
                "actions": [r.id for r in recs],
                "last_action_at": _when(latest.created_at),
                "done": [_summary(r) for r in recs],
                "origin": job.origin.to_json(),
                "pids": list(job.pids),
            },
        )

    # -- acting --------------------------------------------------------------------------

    def act(self, now: float, result: ScanResult, track: TrackResult) -> list[Finding]:
        """Terminate (and disable the source of) jobs in terminate mode.

        Returns:
            The ``remediation-failed`` findings of this tick, unless :meth:`findings`
            already reported them for this scan (the enforcer is also a source).
        """
        if self._last is not None and self._last[0] == id(result):
            failed: list[Finding] = []
        else:
            failed = self.findings(now, result)
        if result.protection is None:
            return failed  # not a scan's result: nothing says what is protected
        open_ids = self.db.open_finding_ids()
        remedy = self._remedy(result)
        for rec, steps, _call in self._resume.values():
            self._continue(remedy, rec, steps, proceed=True)
        self._resume.clear()
        # First the GPU: a denial is milliseconds and holds before CUDA initialises.
        self.gpu.tick(result, remedy.guard(), open_ids)
        # Newest first: of several runs of one source, the newest is the one too many.
        for job in sorted(result.jobs, key=lambda j: (-j.start_ticks, -j.root_pid)):
            if not job.unsanctioned:
                continue  # (a protected job goes on: its refusal is recorded once)
            if not job.may_train:
                continue  # a notebook, a server, a probe: reported, never acted on
            ident = (job.root_pid, job.start_ticks)
            if ident in self._acted:
                continue
            decision = self.settings.decide(job.cmdline, job.origin.kind, job.user)
            if decision.mode != "terminate":
                continue
            sig = track.signatures.get(job.root_pid) or job_signature(
                job.user, job.cmdline, job.origin
            )
            fid = open_ids.get(f"{_FINDING_KIND[job.verdict]}:{sig}")
            target = target_from_job(job, sig, fid, self.config.paths.proc_root)
            try:
                self._stop(remedy, job, target, decision.auto_disable_source, sig)
            except JournalError as exc:
                # No action without a record: nothing was done; tried again next tick.
                log.error("action-not-recorded", pid=job.root_pid, finding_id=fid, error=str(exc))
                continue
            self._acted.add(ident)
        return failed

    def relieve(self, result: ScanResult) -> None:
        """Only what gives back, for a tick whose findings could not be stored (the
        daemon acts on nothing then): lift the GPU denials whose job the guard now
        refuses (a rule sanctions it) or that ended. Never withheld for want of a
        record: a sanctioned job kept from its GPU is the dangerous direction (trust
        simulator, seed 64201: a pipeline denied while its line read otherwise stayed
        denied once sanctioned, through a storage outage)."""
        if result.protection is None or not self.gpu.in_use:
            return
        self.gpu.sweep(self._remedy(result).guard())

    def _remedy(self, result: ScanResult) -> Remedy:
        assert result.protection is not None
        return Remedy(
            self.settings, self.db, self.effects, actor=self.actor, backup_dir=self.backup_dir,
            proc_root=self.config.paths.proc_root, spool_dirs=self.config.paths.cron_spool,
            crontab=self.config.paths.crontab, cron_d=self.config.paths.cron_d,
            protection=result.protection, cli_args=config_args(self.config.source),
        )  # fmt: skip

    def _stop(self, remedy: Remedy, job: Job, target: Any, auto_disable: bool, sig: str) -> None:
        """Disable the job's source (when asked and allowed), then terminate it: a
        refusal or a dry run at once, a real one as a task whose first step runs now.

        Raises:
            JournalError: An action could not be recorded (then it was not made).
        """
        fid = target.finding_id
        disabled = False
        if auto_disable and job.advice.refused is None:
            service = job.advice.collateral
            if job.advice.source_refused is None and service is None:
                _aid, _plan, done = remedy.disable_source(target, self.clock())
                disabled = done is not None and done.outcome == "ok"
            else:
                # The guard keeps the source (a sanctioned rule's), or the source is a
                # service that also runs other work (never stopped unasked): the run is
                # stopped as a job, and the log says why the source was left.
                why = job.advice.source_refused or (
                    f"its source is a service: {service.text()}; never stopped automatically"
                    if service is not None
                    else ""
                )
                log.info(
                    "disable-source-skipped", pid=job.root_pid, finding_id=fid, reason=why,
                )  # fmt: skip
        again = job.advice.restarts
        if (
            again is not None
            and (again.after_terminate or again.stops == STOPS_WITH_LOOP)
            and not again.each_run
            and not disabled
            and self._futile(sig)
        ):
            # Stopped once already and its source started it again: terminating each new
            # run is futile; the remediation-failed finding says what stops it. Not so
            # for a source with only so many runs left (a Slurm array's waiting tasks):
            # each is terminated as it starts, as before the source was read. A loop the
            # scan sees stopped with the run is no exception once a terminate of this
            # signature left it (its shell ran other work then, as it may again by the
            # terminate's own look: seed 69401, I11, a futile terminate repeated).
            log.warning(
                "terminate-futile", pid=job.root_pid, finding_id=fid,
                restarts=again.line(), stops=again.stops,
            )  # fmt: skip
            return
        if target.refused is not None or self.settings.dry_run:
            remedy.terminate(target, self.clock(), source_disabled=disabled)
            return
        self._launch(remedy.begin_terminate(target, self.clock(), source_disabled=disabled))

    def _launch(self, task: TerminateTask) -> None:
        """The task's first step now (in the tick); the rest off it."""
        wait = task.step()
        if wait is not None:
            self.runner.submit(task, wait)

    def _futile(self, sig: str) -> bool:
        """True when a terminate of this signature already ended ``will-return`` (its
        source starts it again) and was not undone; also one that said so and ended
        ``partial``: a source that restarts at once (a container's restart policy) runs
        the job again while the terminate still looks at its tree, which it then leaves
        (trust simulator, issue 31: each tick terminated the container again)."""
        return any(
            r.kind == "terminate" and not r.dry_run and r.undone_at is None
            and (r.outcome in RETURNING
                 or (r.outcome == "partial"
                     and bool(r.details.get("will_return") or r.details.get("may_return"))))
            for r in self.db.actions_for(sig)
        )  # fmt: skip

    # -- actions left half-way -----------------------------------------------------------

    def _interrupted(self, now: float, result: ScanResult) -> list[Finding]:
        """Take over actions whose owner is gone; their findings (see the module
        docstring, step 3)."""
        self._calls += 1
        session = self.db.session
        # Taken over by an earlier call but act() never ran since (learning, a tick
        # that could not store): not continued; what they stopped is continued now.
        for aid, (rec, steps, call) in list(self._resume.items()):
            if call < self._calls and result.protection is not None:
                del self._resume[aid]
                self._continue(self._remedy(result), rec, steps, proceed=False)
        for rec in self.db.unfinished_actions():
            mine = bool(rec.owner) and rec.owner.get("session") == session  # type: ignore[union-attr]
            if mine:
                if (
                    rec.state == "recovering"
                    and rec.id in self._emitted
                    and rec.kind != "terminate"
                ):
                    # Its findings went out last tick: the row is finished now.
                    resolved = (rec.details.get("interrupted") or {}).get("resolved") or {}
                    self.db.finish_action(
                        rec.id, str(resolved.get("outcome") or "interrupted"), rec.details,
                        self.clock(), undo=rec.undo, state="interrupted",
                    )  # fmt: skip
                    self._emitted.discard(rec.id)
                continue
            if owner_gone(rec, session):
                self._take_over(rec, result)
        out: list[Finding] = []
        args = config_args(self.config.source)  # the undo each finding prints
        for rec in self.db.unfinished_actions():
            if rec.state == "recovering" and rec.owner and rec.owner.get("session") == session:
                out.append(interrupted_finding(rec, args))
                moved = quarantine_finding(rec, args)
                if moved is not None:
                    out.append(moved)
                self._emitted.add(rec.id)
        for rec in self.db.interrupted_since(self.clock() - INTERRUPTED_OPEN_S):
            if rec.undone_at is None:
                out.append(interrupted_finding(rec, args))
        return out

    def _take_over(self, rec: ActionRecord, result: ScanResult) -> None:
        steps = self.db.action_steps(rec.id)
        note = interrupted_note(rec, steps, self.clock(), self.actor)
        undo = rec.undo
        stops = rec.kind in ("terminate", "slurm-sweep")
        if stops:
            # A sweep's decision rests on what Slurm answered then: never gone on with
            # here (the next Epilog or health check decides again), only undone.
            proceed = (
                rec.kind == "terminate"
                and self._still_decided(rec)
                and result.protection is not None
            )
            note["recovery"] = (
                "being continued from its last recorded step (no signal sent again)"
                if proceed
                else "continuing (SIGCONT) what it stopped; not going on"
            )
        else:
            resolved = resolve(rec, steps)
            note["recovery"] = resolved.words
            note["resolved"] = {"outcome": resolved.outcome}
            if resolved.moved_to:
                note["moved_to"] = resolved.moved_to
            undo = resolved.undo
        if not self.db.adopt_action(rec, {**rec.details, "interrupted": note}, undo=undo):
            return  # another process took it over first
        log.warning(
            "action-interrupted", action_id=rec.id, kind=rec.kind, target=rec.target,
            actor=rec.actor, done=note["done"], unsure=note["unsure"],
            not_done=note["not_done"], recovery=note["recovery"],
        )  # fmt: skip
        if not stops:
            return
        root = rec.details.get("root")
        if isinstance(root, list) and len(root) == 2:
            self._acted.add((int(root[0]), int(root[1])))
        adopted = self.db.action(rec.id) or rec
        if proceed:
            self._resume[rec.id] = (adopted, steps, self._calls)
        elif result.protection is not None:
            self._continue(self._remedy(result), adopted, steps, proceed=False)

    def _still_decided(self, rec: ActionRecord) -> bool:
        """Whether an interrupted terminate may be continued: the daemon began it and
        its decision still stands (terminate mode for that job, not a dry run). A
        person's (a CLI interrupted, maybe on purpose) is never continued."""
        if rec.actor != self.actor or self.settings.dry_run:
            return False
        cmdline = rec.details.get("cmdline")
        origin = rec.details.get("origin")
        if not isinstance(cmdline, list) or not isinstance(origin, dict):
            return False
        kind = str(origin.get("kind") or "unknown")
        user = rec.details.get("user")
        decision = self.settings.decide(
            [str(a) for a in cmdline], kind, user if isinstance(user, str) else None
        )
        return decision.mode == "terminate"

    def _continue(
        self, remedy: Remedy, rec: ActionRecord, steps: list[ActionStep], *, proceed: bool
    ) -> None:
        """Take an interrupted terminate over: a run that never sends a wave's signal
        again, going on (``proceed``) or only continuing what it stopped."""
        journal = ActionJournal(self.db, rec.id, clock=self.clock)
        grace = rec.details.get("grace_s")
        run = TerminateRun(
            recorded_members(rec), remedy.guard(), self.effects,
            float(grace) if isinstance(grace, int | float) else self.settings.grace_s,
            journal=journal,
            resume=terminate_resume(steps, proceed, self.config.paths.proc_root),
            launchers=recorded_members(rec, "launchers"),
        )  # fmt: skip
        note = dict(rec.details.get("interrupted") or {})
        self._launch(TerminateTask(run, journal, rec.details, self.actor, None, interrupted=note))


def _service_launcher(job: Job, result: ScanResult | None) -> Finding | None:
    """The scan's ``rogue-service`` finding saying a service launched ``job`` (its origin
    names no spawner), or None."""
    if result is None or job.origin.kind not in ("unknown", "orphan"):
        return None
    return next(
        (
            f
            for f in result.findings
            if f.kind == "rogue-service" and f.root_pid == job.root_pid
            and f.details.get("service_pids")
        ),
        None,
    )  # fmt: skip


class _Recheck(NamedTuple):
    """A terminate being rechecked: its record, the tree it signalled (PID, start
    ticks, recorded member), its root's command line and the newest start in it."""

    rec: ActionRecord
    tree: list[tuple[int, int, dict[str, Any]]]
    root_cmd: tuple[str, ...]
    newest: int


def _reenabled_since(rec: ActionRecord, job: Job) -> bool:
    """True when ``job`` runs from the cron line ``rec`` found disabled (a terminate of
    a run whose line was already off) or disabled itself (a disable-source), and the line
    reads live now: someone put it back by hand after ``rec`` (an operator's edit, such
    as re-enabling what the printed ``sed`` hint commented out), not a failure of
    ``rec`` (fresh user F, issue 33: F438 opened critical beside the run's own finding)."""
    origin = job.origin
    was = rec.details.get("origin")
    if not isinstance(origin, CronOrigin) or not isinstance(was, dict):
        return False
    if was.get("kind") != "cron" or origin.file is None or origin.entry_state in NOT_LIVE:
        return False
    if (was.get("file"), was.get("line")) != (origin.file, origin.line):
        return False
    return rec.kind == "disable-source" or was.get("entry_state") in NOT_LIVE


def _running(pid: int, start_ticks: int, proc_root: str) -> bool:
    return alive_now((pid, start_ticks), proc_root)


def build_enforcers(config: Config, db: StateDB) -> list[Enforcer]:
    """The enforcers ``rogue-watchdog run`` should use: always one (the remediation
    watch runs in observe mode too). Pass it as both a source and an enforcer."""
    return [Enforcer(config, db)]


def describe_decision(config: Config, job: Job) -> dict[str, Any]:
    """The mode and source-disabling choice for ``job`` (for status and dry runs)."""
    d = config.enforcement.decide(job.cmdline, job.origin.kind, job.user)
    return {"mode": d.mode, "auto_disable_source": d.auto_disable_source, "rule": d.rule}

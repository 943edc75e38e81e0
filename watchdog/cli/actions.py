"""CLI for actions: ``terminate``, ``disable-source``, ``undo``, ``actions``.

A job is named by a PID of any of its processes (a fresh scan finds the job) or by a
finding id written ``F12`` (also ``#12``, ``f12`` or ``finding:12``, as pasted from
``status`` or an alert; a bare number is always a PID): the open finding's job signature is
looked up in the state database and matched against a fresh scan. ``--dry-run`` prints
exactly what would be signalled or changed and why, changes nothing, and is recorded as
a dry run. Exit codes: 0 done (or dry run), 1 refused or failed, 2 usage errors.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from typing import TYPE_CHECKING, Any

from ..hosttext import code_span, command_text, quoted_command, safe_text
from .common import (
    CliError,
    command_daemon,
    config_parent,
    emit,
    history_state_dir,
    resolve_config_path,
)
from .complete import completers
from .help import command_help

if TYPE_CHECKING:
    from ..actions.remedy import JobTarget, Remedy
    from ..actions.terminate import TerminateOutcome
    from ..config import Config
    from ..model import Restarts, ScanResult
    from ..state import StateDB

# The action modules (remedy, state, scanner) load when a command runs, not when the
# parser is built: `rogue-watchdog --help` and `status` must start fast (watchdog/cli/__init__.py).

#: Bounds of ``actions --limit``.
MAX_LIMIT = 10_000
#: ASCII digits only: ``str.isdigit`` also accepts "²" and other Unicode digits.
_DIGITS = re.compile(r"[0-9]+")


def parse_id(text: str) -> int:
    """A non-negative id written in ASCII digits (``"12"`` → 12), of any size.

    Raises:
        ValueError: Empty, or anything but ASCII digits.
    """
    if not _DIGITS.fullmatch(text):
        raise ValueError(f"{text!r} is not a number")
    return int(text)


def _action_id(text: str) -> int:
    try:
        return parse_id(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected an action id (ASCII digits)"
        ) from None


def _limit(text: str) -> int:
    try:
        n = parse_id(text.strip())
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number from 1 to {MAX_LIMIT}")
    return n


def _setup(args: argparse.Namespace, *, say: bool = False) -> tuple[Config, StateDB]:
    from ..config import load_config
    from ..state import StateDB, StateError

    daemon = None if args.config is not None else command_daemon(acts=True)
    config = load_config(daemon.config if daemon else resolve_config_path(args.config))
    state_dir = history_state_dir(
        args.state_dir, daemon, config.daemon.state_dir, config.source, say=say
    )
    try:
        db = StateDB(state_dir)
    except StateError as exc:
        raise CliError(str(exc)) from None
    return config, db


def _again(args: argparse.Namespace, config: Config, verb: str) -> str:
    """``rogue-watchdog VERB`` as this command found its configuration and state: the
    ``--config`` and ``--state-dir`` a printed follow-up needs to work as printed."""
    import shlex

    from ..hostpaths import config_args

    state = f" --state-dir {shlex.quote(os.path.abspath(args.state_dir))}" if args.state_dir else ""
    return f"rogue-watchdog {verb}{config_args(config.source)}{state}"


def parse_target(text: str) -> tuple[str, int]:
    """``("finding", 12)`` for ``F12`` (``f12``, ``#12``, ``finding:12``), ``("pid", 42)``
    for ``42``. A bare number is always a PID: guessing would act on the wrong job.

    Raises:
        CliError: Neither form.
    """
    t = text.strip()
    low = t.lower()
    for prefix in ("finding:", "f", "#"):
        if low.startswith(prefix) and _DIGITS.fullmatch(low[len(prefix) :]):
            return "finding", int(low[len(prefix) :])
    if _DIGITS.fullmatch(t):
        return "pid", int(t)
    raise CliError(f"{text!r}: expected a PID (42) or a finding id (F12, #12 or finding:12)")


def _scan(config: Config) -> ScanResult:
    from ..scan import Scanner

    return Scanner(config).scan()


def resolve_target(config: Config, db: StateDB, text: str) -> tuple[JobTarget, ScanResult]:
    """Find the job named on the command line (:func:`~watchdog.actions.target.find_target`
    in a fresh scan).

    Raises:
        CliError: Neither a PID nor a finding id; unknown finding, a finding not about a
            job, a resolved finding that recorded no origin, a PID in no training job.
    """
    from ..actions.target import MAX_ID, TargetError, find_target
    from ..model import finding_ref

    kind, number = parse_target(text)
    if kind == "finding" and number > MAX_ID:
        raise CliError(f"no finding {finding_ref(number)} in {db.path}")
    result = _scan(config)
    try:
        return find_target(config, db, kind, number, result), result
    except TargetError as exc:
        raise CliError(str(exc)) from None


def _remedy(config: Config, db: StateDB, result: ScanResult) -> Remedy:
    from ..actions.effects import Effects
    from ..actions.remedy import Remedy, default_actor
    from ..hostpaths import config_args

    s = config.enforcement
    assert result.protection is not None  # a scan's result always carries it
    return Remedy(
        s, db, Effects(s.command_prefix), actor=default_actor(),
        backup_dir=s.backup_dir or os.path.join(config.daemon.state_dir, "backups"),
        proc_root=config.paths.proc_root, spool_dirs=config.paths.cron_spool,
        crontab=config.paths.crontab, cron_d=config.paths.cron_d,
        protection=result.protection, record_dry_runs=False,
        cli_args=config_args(config.source),
    )  # fmt: skip


def _out(line: str) -> None:
    from ..render import printable

    emit(printable(line))


def _action_ref(action_id: int) -> str:
    # A person's dry run writes no audit row (Remedy.record_dry_runs).
    return f"action {action_id}" if action_id else "dry run, not recorded"


def cmd_terminate(args: argparse.Namespace) -> int:
    """``terminate TARGET [--dry-run]``."""
    config, db = _setup(args)
    target, result = resolve_target(config, db, args.target)
    if not target.running:
        _out(f"{target.describe()} is not running: nothing to terminate")
        return 1
    if not target.unsanctioned and not args.force:
        why = _terminate_force(args, config, db, result, target)
        _out(f"{target.describe()} is {target.verdict}: refusing ({why})")
        return 1
    if target.refused is not None:
        _out(f"{target.describe()} is protected: refusing ({target.refused})")
        return 1
    from ..state import JournalError

    remedy = _remedy(config, db, result)
    # What supervisord has loaded, not only its file (as the terminate reads it): said
    # before the signals and in the last line.
    remedy.loaded_restarts(target)
    dry = args.dry_run or config.enforcement.dry_run
    again = target.restarts if target.restarts and target.restarts.after_terminate else None
    disabled, not_disabled = False, None
    try:
        if args.and_source:
            # Its own plan, with its own head line, done (and said) first.
            disabled, not_disabled = _disable_first(remedy, target, dry, args.stop_service)
        action_id, res = remedy.terminate(
            target, time.time(), dry_run=dry, source_disabled=disabled
        )
    except JournalError as exc:
        raise CliError(f"{exc}; nothing was signalled (no action without a record)") from None
    head = "would terminate" if dry else "terminate"
    # The head line first, then what it is about: a line above it read as belonging to
    # nothing (or to the command before).
    _out(f"{head} {target.describe()} ({_action_ref(action_id)}); origin {target.origin.kind}")
    if not_disabled is not None:
        _out(f"  its source is not disabled: {not_disabled}")
    if target.copies is not None:
        _out(f"  {target.copies.text()}")
    if again is not None and disabled and not again.outlives_source:
        again = None  # --and-source stopped what starts it again
    if again is not None:
        # Stopping the run alone does not keep it stopped (nor does disabling its source
        # a loop in its lineage: a cron line's shell loop runs on).
        _out(f"  {_said_before(again)}")
    for svc in target.service:
        cmd = command_text(svc.cmdline or (), 100)
        _out(f"  with the service that launched it: PID {svc.pid} {code_span(cmd)} (rogue-service)")
    if target.service_note:
        _out(f"  {target.service_note}")
    for p in res.procs:
        sig = (
            "SIGSTOP (the whole tree frozen first), SIGTERM, then SIGKILL after "
            f"{config.enforcement.grace_s:g} s if still alive"
        )
        if p.result == "would-signal":
            _out(f"  PID {p.pid} {quoted_command(p.cmdline, 100)}: would send {sig}")
        else:
            sent = ", ".join(p.signals) or "no signal"
            why = f" ({p.reason})" if p.reason else ""
            _out(f"  PID {p.pid} {quoted_command(p.cmdline, 100)}: {sent}: {p.result}{why}")
    for item in res.left:
        cmd = command_text(item["cmdline"], 100)
        _out(f"  left PID {item['pid']} {code_span(cmd)}: never signalled: {item['reason']}")
    for item in res.continued:
        cmd = command_text(item["cmdline"], 100)
        _out(f"  above the job, PID {item['pid']} {code_span(cmd)}: {item['reason']}")
    _out(f"outcome: {res.outcome}")
    if res.outcome == "dry-run" and not any(p.result == "would-signal" for p in res.procs):
        # The real run would signal nothing: say so in the exit status, as it would.
        _out("a real run would be refused: no process of this job would be signalled")
        return 1
    shown = ("will-return", "may-return", "ok", "dry-run")
    if again is not None and res.outcome in shown:
        _out(_coming_back(again, res.outcome))
    elif target.restarts is not None and res.outcome in shown:
        left = _loop_left(target.restarts, res)
        if left:
            _out(left)
    return 0 if res.outcome in ("ok", "dry-run") else 1


def _forced_disable_refusal(
    args: argparse.Namespace, config: Config, db: StateDB, scan: ScanResult, target: JobTarget
) -> str | None:
    """Why ``disable-source --force`` would still refuse ``target``'s source (the guard's
    protected sources, a rogue service, nothing to disable), or None when it would act.
    Planned only: reads, changes and records nothing."""
    source = _service_source(scan, target, _again(args, config, "terminate"))
    if source is not None:
        return f"its source is {source}"
    plan = _remedy(config, db, scan).plan_disable(
        target, time.time(), stop_service=getattr(args, "stop_service", None)
    )
    return plan.refused


def _disable_force(
    args: argparse.Namespace, config: Config, db: StateDB, scan: ScanResult, target: JobTarget
) -> str:
    """The words after ``disable-source``'s refusal of a job not judged rogue: ``--force``
    is offered only where a forced run would disable something; else why it would not."""
    why = _forced_disable_refusal(args, config, db, scan, target)
    if why is None:
        return "use --force to insist"
    return f"--force would not change that: {why}"


def _terminate_force(
    args: argparse.Namespace, config: Config, db: StateDB, scan: ScanResult, target: JobTarget
) -> str:
    """The words after ``terminate``'s refusal of a job not judged rogue. The guard never
    signals a member of a sanctioned or ignored job (docs/operations.md), ``--force``
    included: ``--force`` is offered only where a forced run would signal a member the
    guard does not protect, or (with ``--and-source``) disable the job's source."""
    assert scan.protection is not None  # a scan's result always carries it
    guarded = scan.protection.pids
    if any(m.pid not in guarded for m in target.members):
        return "use --force to insist"
    job = f"an {target.verdict} job" if target.verdict[:1] in "aeiou" else f"a {target.verdict} job"
    words = f"the processes of {job} are never signalled, --force included"
    if args.and_source and _forced_disable_refusal(args, config, db, scan, target) is None:
        from ..model import finding_ref

        ref = finding_ref(target.finding_id) if target.finding_id else target.root_pid
        again = _again(args, config, "disable-source")
        words += f"; to disable its source anyway: {again} --force {ref}"
    return words


def _said_before(again: Restarts) -> str:
    """The first line of a terminate whose job's source it leaves: what starts it again,
    or, when that could not be told, that it may (never claimed)."""
    if again.known:
        return f"its source starts it again: {again.said()}"
    return f"its source may start it again: could not tell whether it does ({again.how})"


def _coming_back(again: Restarts, outcome: str) -> str:
    """The last line of a terminate whose job's source it left: it will (would) come
    back, or, when that could not be told, it may: never claimed (exit 0, ``ok``)."""
    if again.known:
        verb = "would come back" if outcome == "dry-run" else "will come back"
        return f"{verb}: its source restarts it; {again.stops or 'stop its source first'}"
    return f"may come back: could not tell whether its source starts it again ({again.how})" + (
        f"; {again.stops}" if again.stops else ""
    )


def _loop_left(loop: Restarts, res: TerminateOutcome) -> str | None:
    """The last line of a terminate advised to stop the job's loop with it whose shell
    it left (:func:`~watchdog.actions.loopcheck.settle_loop`): the loop starts the job
    again. None when it stopped that shell, or was not advised to."""
    from ..policy.guard import stop_loop_first

    shell = loop.shell
    if shell is None or not any(item.get("pid") == shell[0] for item in res.left):
        return None
    verb = "would come back" if res.outcome == "dry-run" else "will come back"
    return (
        f"{verb}: its loop's shell PID {shell[0]} was left running, not the job's alone "
        f"when the terminate acted ({loop.said()}); {stop_loop_first(shell[0])}"
    )


def _disable_first(
    remedy: Remedy, target: JobTarget, dry: bool, stop_service: str | None
) -> tuple[bool, str | None]:
    """``terminate --and-source``: disable the job's source before stopping it, printing
    that plan under its own head line.

    Returns:
        ``(disabled, refused)``: True when it was disabled (or, in a dry run, would be);
        why it was refused (nothing printed: the terminate says it under its own head
        line), else None.
    """
    action_id, plan, result = remedy.disable_source(
        target, time.time(), dry_run=dry, stop_service=stop_service
    )
    if plan.refused:
        return False, plan.refused
    head = "would disable" if dry else "disabled"
    _out(f"{head} its source first ({_action_ref(action_id)}): {plan.kind} {plan.target}")
    for step in plan.steps if dry or result is None else result.done:
        _out(f"  {step}")
    if result is not None and result.outcome != "ok":
        _out(f"  disabling its source: {result.outcome}: {result.error}")
        return False, None
    return True, None


def cmd_disable_source(args: argparse.Namespace) -> int:
    """``disable-source TARGET [--dry-run]``."""
    config, db = _setup(args)
    target, scan = resolve_target(config, db, args.target)
    if not target.unsanctioned and not args.force:
        why = _disable_force(args, config, db, scan, target)
        _out(f"{target.describe()} is {target.verdict}: refusing ({why})")
        return 1
    from ..state import JournalError

    source = _service_source(scan, target, _again(args, config, "terminate"))
    if source is not None:
        # A rogue service started the run itself: a process, no file or unit to disable.
        _out(f"cannot disable the source of {target.describe()}: its source is {source}")
        return 1
    remedy = _remedy(config, db, scan)
    dry = args.dry_run or config.enforcement.dry_run
    try:
        action_id, plan, result = remedy.disable_source(
            target, time.time(), dry_run=dry, stop_service=args.stop_service
        )
    except JournalError as exc:
        raise CliError(f"{exc}; nothing was changed (no action without a record)") from None
    head = "would disable" if dry else "disable"
    if plan.refused:
        # Nothing to name: no "none -" plan line, only why and what is left to do.
        _out(f"cannot disable the source of {target.describe()}: {plan.refused}")
        if target.running and target.refused is None and target.unsanctioned:
            # A sanctioned or ignored job's processes are never signalled: no offer.
            _out(
                f"  to stop the running job: {_again(args, config, 'terminate')} {target.root_pid}"
            )
        return 1
    _out(
        f"{head} the source of {target.describe()} ({_action_ref(action_id)}): "
        f"{plan.kind} {plan.target}"
    )
    for step in plan.steps if dry or result is None else result.done:
        _out(f"  {step}")
    if result is not None:
        if result.error:
            _out(f"  error: {result.error}")
        if result.undo:
            _out(
                f"outcome: {result.outcome}; undo with: {_again(args, config, 'undo')} {action_id}"
            )
        else:
            why = (
                "a transient unit is gone once stopped, and cannot be started again"
                if getattr(plan.data, "transient", False)
                else "what was done cannot be put back"
            )
            _out(f"outcome: {result.outcome}; nothing to undo ({why})")
        if not target.running:
            pass  # nothing was running: nothing to say about stopping it
        elif _still_running(
            target,
            config.paths.proc_root,
            wait_s=2.0 if plan.kind in ("systemd", "container", "supervisord") else 0.0,
        ):
            _out(
                "the running job is not stopped by this; to stop it: "
                f"{_again(args, config, 'terminate')} {target.root_pid}"
            )
        else:
            _out("the running job has stopped too (it ended with its source)")
        if plan.stops_service:
            _out(f"the service {plan.stops_service} was stopped with it, as asked")
        return 0 if result.outcome == "ok" else 1
    return 0


def _service_source(scan: ScanResult, target: JobTarget, terminate: str) -> str | None:
    """What the source of a run a rogue service launched is, and how to stop it (with
    ``terminate``, the command as it works here), or None when no ``rogue-service``
    finding of this scan says a service launched it."""
    from ..policy.services import service_source

    finding = next(
        (
            f
            for f in scan.findings
            if f.kind == "rogue-service"
            and f.root_pid == target.root_pid
            and f.details.get("service_pids")
        ),
        None,
    )
    if finding is None or target.origin.kind not in ("unknown", "orphan"):
        return None
    svc = finding.details["service_pids"][0]
    return (
        f"{service_source(finding)}: a process, with no file or unit to disable; to stop the "
        f"service and its run: {terminate} {svc} (or by hand: kill -TERM {svc} "
        f"{target.root_pid})"
    )


def _still_running(target: JobTarget, proc_root: str, wait_s: float = 2.0) -> bool:
    """True while a process of the job (same PID and start time) is alive and not a
    zombie. A ``systemctl disable --now`` returns once the unit stopped, but give
    the kernel a moment to finish exits before saying the job is still there."""
    from ..sources.procfs import alive_now

    idents = [(m.pid, m.start_ticks) for m in target.members] or [
        (target.root_pid, target.start_ticks)
    ]
    deadline = time.monotonic() + wait_s
    while True:
        alive = any(alive_now(ident, proc_root) for ident in idents)
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def cmd_undo(args: argparse.Namespace) -> int:
    """``undo ACTION-ID [--dry-run]``."""
    from ..actions.disable import iso
    from ..actions.effects import Effects, JournaledEffects
    from ..actions.remedy import default_actor
    from ..actions.target import MAX_ID
    from ..actions.undo import UndoError, ops_of, run_undo
    from ..state import ActionJournal, JournalError

    config, db = _setup(args)
    try:
        rec = db.action(args.action_id) if args.action_id <= MAX_ID else None
    except ValueError as exc:  # details_json/undo_json that is not JSON at all
        raise CliError(f"action {args.action_id} has an unreadable record: {exc}") from None
    if rec is None:
        raise CliError(f"no action {args.action_id} in {db.path}")
    if rec.undone_at is not None:
        _out(f"action {rec.id} was already undone at {iso(rec.undone_at)}")
        return 1
    if rec.undo is None:
        none = _NO_UNDO.get(rec.kind, "") if not rec.dry_run else ": a dry run changed nothing"
        _out(f"action {rec.id} ({rec.kind} {rec.target}) has nothing to undo{none}")
        return 1
    try:
        ops = ops_of(rec.undo)
    except UndoError as exc:
        raise CliError(f"action {rec.id} has an unreadable undo record: {exc}") from None
    why = _still_refused(rec.details) if rec.kind == "quarantine-weights" else None
    if not args.force and why is not None:
        _out(
            f"action {rec.id} ({rec.kind} {rec.target}): refusing: {why}; put back, it "
            "would be quarantined again at the gate's next look. Inspect it where it is; "
            "to put it back anyway (quarantined again, recorded, not paged again): "
            f"{_again(args, config, 'undo')} --force {rec.id}"
        )
        return 1
    effects = Effects(config.enforcement.command_prefix)
    journal = None
    if not args.dry_run:
        # Recorded before anything is restored (a daemon that sees the source start the
        # job again meanwhile reads it as this undo's, not as a failed remediation), and
        # each op as it goes (issue 32, case 4).
        try:
            facts: dict[str, Any] = {"undid": rec.id, "ops": ops}
            if why is not None:  # put back with --force: the gate pages it no more
                facts["forced"] = why
            journal = ActionJournal.begin(
                db, default_actor(), "undo", f"action {rec.id}", facts,
                finding_id=rec.finding_id, signature=rec.signature, outcome="running",
            )  # fmt: skip
        except JournalError as exc:
            raise CliError(f"{exc}; nothing was restored (no action without a record)") from None
        db.mark_undone(rec.id, time.time())
        effects = JournaledEffects(effects, journal)
    res = run_undo(ops, effects, dry_run=args.dry_run)
    head = "would undo" if args.dry_run else "undo"
    _out(f"{head} action {rec.id} ({rec.kind} {rec.target}):")
    for step in res.done:
        _out(f"  {step}")
    if res.error:
        _out(f"  {'WOULD FAIL' if args.dry_run else 'FAILED'}: {res.error}")
    if journal is not None:
        if res.outcome != "ok":
            db.mark_undone(rec.id, None)  # not undone after all: watched as before
        done = {"undid": rec.id, "done": res.done, "error": res.error}
        if why is not None:
            done["forced"] = why
        journal.finish(res.outcome, done)
    _out(f"outcome: {res.outcome}")
    return 0 if res.outcome in ("ok", "dry-run") else 1


#: Why an action of a kind that records no undo has none (a stop 46 fresh user's `undo` of
#: a terminate said only "has nothing to undo").
_NO_UNDO = {
    "terminate": (
        ": a terminate stops processes, and a stopped process cannot be put back (start the "
        "job again yourself if it was wanted)"
    ),
}


def _still_refused(details: dict[str, Any]) -> str | None:
    """Why the file a ``quarantine-weights`` action moved would fail its gate again, or
    None when it now verifies finite (or is gone: the undo's own checks say so).

    Fresh-user hour (issue 33, F item 10): ``undo`` put the NaN file back with no
    warning, and 5 s later the gate quarantined it again with another critical page.
    """
    from pathlib import Path

    from ..weights.api import verify_file
    from ..weights.report import Status
    from ..weights.scan import ScanContext

    moved, original = details.get("moved_to"), details.get("path")
    if not isinstance(moved, str) or not isinstance(original, str):
        return None
    read = moved
    if os.path.islink(moved):
        # A moved link (a Hugging Face cache entry) dangles where it lies, on purpose:
        # what it would name once back is what the gate would read.
        read = os.path.join(os.path.dirname(original), os.readlink(moved))
    if not os.path.exists(read):
        return None  # nothing to read: the undo's own checks speak
    ctx = ScanContext.default(None)
    try:
        # Read as the format its original name says (the quarantined name adds a suffix).
        report = verify_file(Path(read), ctx, name=Path(original))
    finally:
        ctx.close()
    if report.status is not Status.NON_FINITE:
        return None  # finite now (repaired), or not verifiable: not this refusal's call
    bad = report.bad_tensors
    names = ", ".join(safe_text(t.name) for t in bad[:3]) + (" …" if len(bad) > 3 else "")
    return f"{safe_text(moved)} still holds non-finite values (tensor {names})"


def action_json(rec: Any) -> dict[str, Any]:
    """One ``actions`` row as JSON."""
    return {
        "id": rec.id,
        "time": rec.created_at,
        "actor": rec.actor,
        "kind": rec.kind,
        "target": rec.target,
        "finding_id": rec.finding_id,
        "signature": rec.signature,
        "dry_run": rec.dry_run,
        "outcome": rec.outcome,
        "details": rec.details,
        "undo": rec.undo,
        "undone_at": rec.undone_at,
        "state": rec.state,
        "finished_at": rec.finished_at,
    }


#: How ``actions`` marks a row not simply finished (docs/reliability.md).
_STATE_FLAGS = {
    "pending": " [in progress, or interrupted: see status]",
    "recovering": " [interrupted, being finished]",
    "interrupted": " [interrupted]",
}


def cmd_actions(args: argparse.Namespace) -> int:
    """``actions [--json]``: the audit trail, newest first."""
    _config, db = _setup(args, say=not args.json)
    recs = db.actions(limit=args.limit)
    if args.json:
        emit(json.dumps([action_json(r) for r in recs], indent=2))
        return 0
    if not recs:
        _out(f"no actions recorded in {db.path}")
        return 0
    # The header names the columns as `undo ID` and the audit trail use them. A column
    # is as wide as its longest value (`quarantine-weights`, `will-return`), at least the
    # usual width, so the next column stays in line.
    actor_w = max([14, *(len(r.actor) + 1 for r in recs)])
    kind_w = max([15, *(len(r.kind) + 1 for r in recs)])
    outcome_w = max([9, *(len(r.outcome) + 1 for r in recs)])
    _out(
        f"{'ID':>5} {'TIME':<19} {'ACTOR':<{actor_w}} {'ACTION':<{kind_w}} "
        f"{'OUTCOME':<{outcome_w}} TARGET"
    )
    for r in recs:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at))
        flags = (" [dry-run]" if r.dry_run else "") + (" [undone]" if r.undone_at else "")
        flags += _STATE_FLAGS.get(r.state, "")
        unreadable = isinstance(r.undo, dict) and "unreadable" in r.undo
        undo = " (undo available)" if r.undo and not r.undone_at and not unreadable else ""
        _out(
            f"{r.id:>5} {when} {r.actor:<{actor_w}} {r.kind:<{kind_w}} "
            f"{r.outcome:<{outcome_w}} {r.target}{flags}{undo}"
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the action subcommands to the CLI."""
    common = argparse.ArgumentParser(add_help=False, parents=[config_parent()])
    common.add_argument(
        "--state-dir", help="state directory (default: the running daemon's, else daemon.state_dir)"
    )
    _add_terminate(sub, common)
    _add_disable_source(sub, common)
    _add_undo(sub, common)
    _add_actions(sub, common)


def _add_terminate(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    """The ``terminate`` subcommand."""
    p = sub.add_parser(
        "terminate",
        parents=[common],
        **command_help(
            "stop a training job (freeze, SIGTERM, then SIGKILL)",
            "Stop a rogue job's whole process tree: frozen with SIGSTOP first (nothing can "
            "fork meanwhile), SIGTERM, then SIGKILL after the grace "
            "period. The job is found again by a fresh scan and every process is checked "
            "(same PID and start time, not protected, not sanctioned) before it is signalled. "
            "A job whose source starts it again (a systemd Restart=, a shell loop, a cron "
            "line) is said so first and ends with outcome will-return, unless --and-source "
            "disables that source first; one where whether anything starts it again could "
            "not be told ends may-return, with 'may come back: could not tell whether ...'. "
            "Recorded in the audit trail (`actions`).",
            [
                "rogue-watchdog terminate 48213 --dry-run   # what would be signalled, and why",
                "rogue-watchdog terminate F12 --and-source  # disable its source, then stop it",
                "rogue-watchdog terminate F12               # the job of open finding F12",
            ],
            [
                (
                    0,
                    "done (or, with --dry-run, previewed)",
                ),
                (
                    1,
                    "refused (not rogue, not running, a guard) or failed; or stopped but its "
                    "source starts it again (outcome will-return) or may (may-return: "
                    "could not tell)",
                ),
                (2, "usage error: an unknown finding, a PID in no training job"),
            ],
        ),
    )
    target = p.add_argument("target", help="a PID of the job, or a finding id F12 (or #12)")
    target.complete = completers()["targets"]  # shtab reads it
    p.add_argument("--dry-run", action="store_true", help="say what would be signalled")
    p.add_argument(
        "--force",
        action="store_true",
        help="go on with a job not judged rogue: the guards still apply (a sanctioned or "
        "ignored job's processes are never signalled); with --and-source its source is "
        "disabled where the guards allow",
    )
    p.add_argument(
        "--and-source",
        action="store_true",
        help="disable the job's source first (as disable-source), so it does not come back",
    )
    p.add_argument(
        "--stop-service",
        metavar="NAME",
        help="with --and-source: the source is a service that also runs other work; stop it "
        "anyway (NAME is what the refusal names)",
    )
    p.set_defaults(func=cmd_terminate)


def _add_disable_source(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    """The ``disable-source`` subcommand."""
    p = sub.add_parser(
        "disable-source",
        parents=[common],
        **command_help(
            "disable what starts a job (cron line, unit)",
            "Keep a rogue job from coming back: comment out its cron line or stop and mask "
            "its systemd unit and timer, with a backup (`undo ACTION-ID` restores it). Works "
            "for a finding whose job has exited, from the recorded origin. The running job "
            "is not stopped: use terminate for that. A source that is a service also "
            "running other work (a unit whose own process launches the trainer) is refused "
            "unless --stop-service names it.",
            [
                "rogue-watchdog disable-source 48213 --dry-run",
                "rogue-watchdog disable-source F12 && rogue-watchdog terminate F12",
                "rogue-watchdog disable-source F12 --stop-service td-hub.service",
                "rogue-watchdog undo 7                      # put the cron line back",
            ],
            [
                (0, "done (or, with --dry-run, previewed)"),
                (1, "refused (not rogue, not running, a guard) or failed"),
                (2, "usage error: an unknown finding, a PID in no training job"),
            ],
        ),
    )
    target = p.add_argument("target", help="a PID of the job, or a finding id F12 (or #12)")
    target.complete = completers()["targets"]  # shtab reads it
    p.add_argument("--dry-run", action="store_true", help="say what would be changed")
    p.add_argument(
        "--force",
        action="store_true",
        help="also disable the source of a job not judged rogue (never a protected source: "
        "a sanctioned job's, one the allowlist pins)",
    )
    p.add_argument(
        "--stop-service",
        metavar="NAME",
        help="the source is a service that also runs other work: stop it anyway (NAME is "
        "the unit, container or program the refusal names)",
    )
    p.set_defaults(func=cmd_disable_source)


def _add_undo(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    """The ``undo`` subcommand."""
    p = sub.add_parser(
        "undo",
        parents=[common],
        **command_help(
            "undo a recorded action",
            "Restore exactly what an action changed (a crontab from its backup, a unit "
            "unmasked and re-enabled, a quarantined file moved back). The ids are in "
            "`rogue-watchdog actions`.",
            ["rogue-watchdog undo 7 --dry-run", "rogue-watchdog undo 7"],
            [
                (0, "restored (or, with --dry-run, previewed: every check passed)"),
                (1, "already undone, nothing to undo, or failed (with --dry-run: would fail)"),
                (2, "usage error: no such action, an unreadable record"),
            ],
        ),
    )
    p.add_argument("action_id", type=_action_id, metavar="ACTION-ID", help="the id `actions` lists")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="say what would be restored, after the checks the undo makes",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="put a quarantined weights file back although it still fails its gate "
        "(it is quarantined again at the gate's next look, recorded, not paged again)",
    )
    p.set_defaults(func=cmd_undo)


def _add_actions(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    """The ``actions`` subcommand (the audit trail)."""
    p = sub.add_parser(
        "actions",
        parents=[common],
        **command_help(
            "list recorded actions",
            "The audit trail, newest first: every terminate, disable-source, undo, "
            "quarantine-weights, slurm-sweep, gpu-deny and gpu-lift, who ran it, its outcome "
            "and whether it can be undone. The daemon's dry runs (enforcement.dry_run) are "
            "listed, marked [dry-run]; a --dry-run you run only looks and is not recorded "
            "(it prints `dry run, not recorded`).",
            ["rogue-watchdog actions", "rogue-watchdog actions --limit 5 --json"],
            [(0, "listed"), (2, "usage error or an unreadable state directory")],
        ),
    )
    p.add_argument("--json", action="store_true", help="print the actions as a JSON list")
    p.add_argument(
        "--limit", type=_limit, default=50, help=f"newest N actions (1..{MAX_LIMIT}, default 50)"
    )
    p.set_defaults(func=cmd_actions)

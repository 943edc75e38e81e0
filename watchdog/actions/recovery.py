"""Actions left half-way: found, finished or reported, never repeated blindly (issue 32,
case 4).

Every action with side effects writes its row before the first of them and each of them
as it goes (:class:`~watchdog.state.ActionJournal`). A row still unfinished whose owner
is gone (:func:`owner_gone`: its process exited, the host rebooted, or it was begun by an
earlier daemon in this very process) was interrupted. What it did is read back from its
steps: a step marked ``done`` was made, an ``intent`` step may have been (it is never
repeated blindly, and is checked on the host where it can be: a rename by which of its
two names exists), and what has no step was not done.

Then, by kind:

- ``terminate``: a run taken over (:class:`~watchdog.actions.terminate.Resume`) that
  never sends a wave's signal again to an identity that wave named: continued to its
  end (the grace period as recorded, then SIGKILL) when the daemon begun it and its
  decision still stands (terminate mode, not a dry run); otherwise only what it stopped
  is continued (SIGCONT) and the rest is reported.
- ``quarantine-weights``: the model moved or not, by its two names; moved, the action
  gets its outcome and its undo op, and the ``poisoned-weights`` finding it never got.
- ``disable-source``: what changed, by its steps, with the undo ops of what changed (the
  restore plan was recorded before the first change).
- ``slurm-sweep`` (the job-end sweep's waves, watchdog/actions/slurmsweep.py): what it
  stopped is continued (SIGCONT), never gone on with (Slurm's answer it acted on is
  not the daemon's to reuse), and the rest reported.
- ``undo`` and any other kind: reported from its steps.

Each raises one ``action-interrupted`` finding naming what was done, what may have
been, what was not, and how it was finished.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..lineage.base import command, quote_arg
from ..model import Finding
from ..sources.procfs import alive_now, boot_id
from ..state import ActionRecord, ActionStep
from . import sources
from .disable import SystemdChange, undo_systemd
from .gpudeny import lift_op
from .guards import Expected, read_live
from .terminate import WAVE_SIGNALS, Resume

#: Seconds an ``action-interrupted`` finding stays open once the action was finished
#: (or until it is undone).
INTERRUPTED_OPEN_S = 3600.0
# The waves of a terminate in the order it makes them (a "thaw" only ends one).
_PLAN = ("freeze", "term", "cont", "kill")
_MAX_NAMED = 5


def owner_gone(rec: ActionRecord, session: str, proc_root: str = "/proc") -> bool:
    """Whether the process that began (or took over) ``rec`` can no longer be at it.

    Args:
        rec: An unfinished action.
        session: This process's state database handle (:attr:`StateDB.session`): a row
            of this session is this process's own, in progress.
        proc_root: This host's procfs (the owner is a process here, never a fixture's).

    Returns:
        True when the owner is gone: no owner recorded, another boot, its PID gone or
        reused (another start time), or this very process under another session (an
        earlier daemon object: a restart within one process).
    """
    owner = rec.owner
    if not owner:
        return True
    if owner.get("session") == session:
        return False
    pid, start, boot = owner.get("pid"), owner.get("start_ticks"), owner.get("boot_id")
    if not isinstance(pid, int) or pid == os.getpid():
        return True
    if boot and boot != boot_id(proc_root):
        return True
    return not alive_now((pid, start), proc_root)


@dataclass
class Account:
    """What an interrupted action's steps say, in words.

    Attributes:
        done: Steps made (marked ``done``).
        unsure: Steps written but not marked: they may have been made.
        failed: Steps that failed (not made).
        not_done: What the action would still have done.
    """

    done: list[str] = field(default_factory=list)
    unsure: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    not_done: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, list[str]]:
        """Plain dict for ``details["interrupted"]``."""
        return {
            "done": self.done,
            "unsure": self.unsure,
            "failed": self.failed,
            "not_done": self.not_done,
        }


def _pids(procs: Sequence[Any]) -> str:
    pids = [str(p[0]) for p in procs if isinstance(p, list) and p]
    more = f" and {len(pids) - _MAX_NAMED} more" if len(pids) > _MAX_NAMED else ""
    return ", ".join(pids[:_MAX_NAMED]) + more


def describe_step(step: ActionStep) -> str:
    """One step in words (``SIGTERM to 2 process(es) (PID 41, 42)``, ``rename A to B``)."""
    d = step.detail
    if step.op == "signal" and "procs" in d:
        procs = d.get("procs") or []
        return f"{d.get('signal')} to {len(procs)} process(es) (PID {_pids(procs)})"
    if step.op == "signal":
        return f"{d.get('signal')} to PID {d.get('pid')}"
    if step.op in ("rename", "backup"):
        verb = "rename" if step.op == "rename" else "back up"
        # Paths are host text (a file name may hold a newline or an escape): quoted.
        return f"{verb} {quote_arg(str(d.get('from')))} to {quote_arg(str(d.get('to')))}"
    if step.op == "run":
        # Names and paths are host text (quoted); the argv may be any JSON (a damaged row).
        return command(*sources.argv_of(d.get("argv") or []))
    if step.op == "wait":
        return f"wait out the grace period ({d.get('grace_s')} s)"
    if step.op == "watch":
        above = d.get("above") or []
        return f"watch {len(above)} process(es) above the tree (PID {_pids(above)})"
    if step.op == "write":
        return f"rewrite {quote_arg(str(d.get('path')))}"
    path = d.get("path")
    return f"{step.op} {quote_arg(str(path))}" if path is not None else str(step.op)


def account(rec: ActionRecord, steps: Sequence[ActionStep]) -> Account:
    """What ``rec``'s steps say was done, may have been, failed, and was not done."""
    out = Account()
    for step in steps:
        if step.op in ("wait", "watch"):
            continue  # not side effects: when the grace ends, what a freeze may stop
        text = describe_step(step)
        if step.status == "done":
            out.done.append(text)
        elif step.status == "failed":
            out.failed.append(f"{text}: {(step.result or {}).get('error', '')}".rstrip(": "))
        else:
            out.unsure.append(text)
    if rec.kind in ("terminate", "slurm-sweep"):
        waves = [s.detail.get("wave") for s in steps if s.op == "signal"]
        last = max((_PLAN.index(w) for w in waves if w in _PLAN), default=-1)
        words = {
            "freeze": "SIGSTOP (freeze the tree)",
            "term": "SIGTERM",
            "cont": "SIGCONT after SIGTERM",
            "kill": f"SIGKILL after the grace period ({rec.details.get('grace_s')} s)",
        }
        out.not_done = [words[w] for w in _PLAN[last + 1 :]]
    elif not steps:
        out.not_done = ["everything: it was interrupted before its first side effect"]
    elif rec.kind == "disable-source":
        left = _not_loaded(rec, steps)
        out.not_done = [left] if left is not None else []
    return out


def _not_loaded(rec: ActionRecord, steps: Sequence[ActionStep]) -> str | None:
    """The post steps of an interrupted disable-source it did not make, in words
    (:func:`watchdog.actions.sources.unloaded`); None when it made them all or its
    kind has none."""
    post = sources.recorded_post(rec.details)
    left = sources.unloaded(post, steps) if post is not None else []
    return sources.unloaded_words(left) if left else None


_PF_EXITING = 0x4  # /proc/PID/stat flags: the process is exiting (linux/sched.h)


def _pending_or_exiting(pid: int, sig: signal.Signals, proc_root: str) -> bool:
    """``sig`` pending for ``pid`` (``SigPnd``/``ShdPnd`` of /proc/PID/status: sent, not
    delivered yet), or the process exiting (a delivered SIGKILL frees its memory first)."""
    base = os.path.join(proc_root, str(pid))
    try:
        with open(os.path.join(base, "status")) as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("SigPnd", "ShdPnd") and int(value.strip(), 16) >> (sig - 1) & 1:
                    return True
        with open(os.path.join(base, "stat"), "rb") as fh:
            flags = int(fh.read().rsplit(b")", 1)[1].split()[6])
        return bool(flags & _PF_EXITING)
    except (OSError, ValueError, IndexError):
        return False


def landed(sig: signal.Signals, exp: Expected, proc_root: str) -> bool:
    """Whether a signal written but not marked sent reached ``exp``, as far as the host
    shows it. A SIGTERM always counts as sent: its effect cannot be seen, and a second
    one may mean "force quit" to the job. SIGSTOP, SIGCONT and SIGKILL can be seen (the
    process stopped, running, gone, exiting, or the signal still pending): one that did
    not land is sent by the run taking over, to the same identity (pinned), so none
    ever reaches a process twice."""
    for _ in range(5):  # a signal just sent may take a moment to show
        live = read_live(exp.pid, proc_root)
        if sig == signal.SIGTERM or live is None or live.start_ticks != exp.start_ticks:
            return True  # gone (or reused): never signalled again either way
        stopped = live.state in ("T", "t")
        if live.state == "Z" or _pending_or_exiting(exp.pid, sig, proc_root):
            return True
        if (sig == signal.SIGSTOP and stopped) or (sig == signal.SIGCONT and not stopped):
            return True
        time.sleep(0.02)
    return False


def terminate_resume(steps: Sequence[ActionStep], proceed: bool, proc_root: str) -> Resume:
    """The waves an interrupted terminate wrote and its grace period's end, for a run
    that takes it over. A ``done`` wave counts for the identities it reached; an
    ``intent`` wave (written, not marked) for those it may have reached
    (:func:`landed`). The processes above the tree it watched (``watch`` steps, written
    before each freeze) come back with them, so a relay its freeze made stop is
    continued (:class:`~watchdog.actions.stopmirror.StopMirrors`); a record without
    them (written before they were journaled) is taken over as before."""
    waves: list[tuple[str, list[Expected]]] = []
    grace_until: float | None = None
    mirrors: list[Any] = []
    for step in steps:
        d = step.detail
        if step.op == "wait" and isinstance(d.get("until"), int | float):
            grace_until = float(d["until"])
        if step.op == "watch" and step.status != "failed" and isinstance(d.get("above"), list):
            mirrors += d["above"]
        if step.op != "signal" or step.status == "failed" or d.get("wave") not in WAVE_SIGNALS:
            continue
        procs = [
            Expected(int(p[0]), int(p[1]), tuple(p[2]) if len(p) > 2 and p[2] else None)
            for p in d.get("procs") or []
            if isinstance(p, list) and len(p) >= 2
        ]
        sent = (step.result or {}).get("sent") if step.status == "done" else None
        if isinstance(sent, list):
            reached = {(int(p[0]), int(p[1])) for p in sent if isinstance(p, list) and len(p) >= 2}
            procs = [e for e in procs if (e.pid, e.start_ticks) in reached]
        elif step.status == "intent":
            sig = WAVE_SIGNALS[str(d["wave"])]
            procs = [e for e in procs if landed(sig, e, proc_root)]
        if procs:  # a wave that reached no one: the run taking over makes it again
            waves.append((str(d["wave"]), procs))
    return Resume(waves, grace_until, proceed, mirrors)


def recorded_members(rec: ActionRecord, key: str = "members") -> list[Expected]:
    """The members a terminate was begun on (root first), from its row (``key``
    ``launchers``: the service ancestors to stop with them)."""
    out = []
    for m in rec.details.get(key) or []:
        if isinstance(m, list) and len(m) >= 2:
            out.append(Expected(int(m[0]), int(m[1]), tuple(m[2]) if len(m) > 2 and m[2] else None))
    return out


def _rename_state(detail: dict[str, Any]) -> str:
    """``moved``, ``not moved`` or ``unclear``: where a rename's file is now."""
    src, dst = str(detail.get("from") or ""), str(detail.get("to") or "")
    if not src or not dst:
        return "unclear"
    at_src, at_dst = os.path.lexists(src), os.path.lexists(dst)
    if at_dst and not at_src:
        return "moved"
    if at_src and not at_dst:
        return "not moved"
    return "unclear"


@dataclass
class Resolved:
    """How an interrupted action without a continuation ends.

    Attributes:
        outcome: Its outcome now (``done``/``ok``, ``partial``, ``failed``,
            ``interrupted``).
        undo: Undo ops for what it changed, or None.
        words: How it was finished, in words.
        moved_to: A quarantine's file moved there (its ``poisoned-weights`` is raised).
    """

    outcome: str
    undo: list[dict[str, Any]] | None
    words: str
    moved_to: str | None = None


def resolve(rec: ActionRecord, steps: Sequence[ActionStep]) -> Resolved:
    """Finish an interrupted action that is not a terminate from its steps and the host
    (see the module docstring). Changes nothing on the host."""
    if rec.kind == "quarantine-weights":
        return _resolve_quarantine(steps)
    if rec.kind == "disable-source":
        return _resolve_disable(rec, steps)
    if rec.kind == "gpu-deny":
        return _resolve_gpu_deny(steps)
    if rec.kind == "gpu-lift":
        # The denial it lifted is still in force in the trail: the next tick's sweep
        # lifts it again (moving back what is left, removing what is there: safe twice).
        return Resolved("interrupted", None, "the daemon lifts the denial again at its next tick")
    made = [s for s in steps if s.status != "failed"]
    if not made:
        return Resolved("interrupted", None, "nothing was changed")
    return Resolved(
        "partial", None, "reported only: check what was done and finish it by hand if needed"
    )


def _resolve_gpu_deny(steps: Sequence[ActionStep]) -> Resolved:
    """A GPU denial cut short: every cgroup it may have made is lifted by its undo."""
    made = [str(s.detail.get("path")) for s in steps if s.op == "cgroup-mkdir"
            and s.status != "failed" and s.detail.get("path")]  # fmt: skip
    if not made:
        return Resolved("interrupted", None, "nothing was changed (no cgroup made)")
    # cgroup v2: the program ids attached (known when the attach's result was written;
    # without one, the rmdir of the cgroup drops whatever is attached to it).
    ids: dict[str, list[int]] = {}
    for s in steps:
        prog = (s.result or {}).get("program") if s.op == "bpf-attach" else None
        if isinstance(prog, int) and not isinstance(prog, bool):
            ids.setdefault(str(s.detail.get("cgroup")), []).append(prog)
    undo = [lift_op(c, ids.get(c, [])) for c in made]
    return Resolved(
        "partial", undo,
        f"the denial may hold for the processes moved into {', '.join(made)}; "
        "undo lifts it",
    )  # fmt: skip


def _resolve_quarantine(steps: Sequence[ActionStep]) -> Resolved:
    if any(s.op == "rename" and s.detail.get("put_back") for s in steps):
        return Resolved(
            "failed", None, "nothing was quarantined: a newer file was moved and put back"
        )
    renames = [s for s in steps if s.op == "rename" and s.status != "failed"]
    if not renames:
        return Resolved("failed", None, "nothing was moved (interrupted before the move)")
    detail = renames[-1].detail
    state = "moved" if renames[-1].status == "done" else _rename_state(detail)
    if state == "moved" and _rename_state(detail) != "not moved":
        undo = [{"op": "rename", "from": detail["from"], "to": detail["to"]}]
        return Resolved(
            "done", undo, f"the file is in quarantine as {detail['to']}", str(detail["to"])
        )
    if state == "not moved":
        return Resolved("failed", None, f"nothing was moved: {detail.get('from')} is in place")
    return Resolved(
        "partial", None,
        f"unclear: both or neither of {detail.get('from')} and {detail.get('to')} exist",
    )  # fmt: skip


def _resolve_disable(rec: ActionRecord, steps: Sequence[ActionStep]) -> Resolved:
    restore = rec.details.get("restore") or {}
    made = [s for s in steps if s.status != "failed"]
    changes = [s for s in made if s.op not in ("backup", "touch")]
    if not changes:
        return Resolved("failed", None, "nothing was changed (only a backup was taken, if any)")
    undo = disable_undo(restore, made)
    unsure = any(s.status == "intent" for s in changes)
    words = "the undo ops of what changed are recorded" if undo else "no undo op applies"
    left = _not_loaded(rec, steps)
    if left is not None:
        # Not run here (recovery changes nothing on the host): said, and the outcome is
        # never `ok` while the source's daemon may still start the job; the next
        # terminate's restart answer reads the same steps (Remedy.loaded_restarts).
        return Resolved("partial", undo or None, f"{left}; {words}")
    return Resolved("partial" if unsure or not undo else "ok", undo or None, words)


def disable_undo(restore: dict[str, Any], made: Sequence[ActionStep]) -> list[dict[str, Any]]:
    """Undo ops for the steps of a disable-source that were (or may have been) made,
    from the restore plan recorded before its first change
    (:func:`watchdog.actions.remedy.restore_plan`)."""
    if "restore_file" in restore and any(s.op in ("write", "run") for s in made):
        # The backup holds the original bytes: restoring it is right whether or not
        # the rewrite itself happened.
        return [{"op": "restore_file", **restore["restore_file"]}]
    if "rename" in restore:
        for s in made:
            if s.op == "rename" and (s.status == "done" or _rename_state(s.detail) == "moved"):
                return [{"op": "rename", "from": s.detail["from"], "to": s.detail["to"]}]
        return []
    if "systemd" in restore:
        d = restore["systemd"]
        done = [
            sources.argv_of(s.detail.get("argv") or [])[1:]
            for s in made
            if s.op == "run"
            and sources.argv_of(s.detail.get("argv") or [])[:1] == ["systemctl"]
            and (s.status == "intent" or (s.result or {}).get("returncode") == 0)
        ]
        moved = any(s.op == "remove" for s in made)
        try:
            return undo_systemd(SystemdChange.from_json(d), done, moved)
        except (KeyError, TypeError, AttributeError):
            return []  # a malformed record: no undo op is better than a wrong one
    if "sources" in restore:
        ran = [
            sources.argv_of(s.detail.get("argv") or [])
            for s in made
            if s.op == "run" and (s.status == "intent" or (s.result or {}).get("returncode") == 0)
        ]
        written = [str(s.detail.get("path")) for s in made if s.op == "write"]
        try:
            src = restore["sources"]
            return sources.undo_ops(src["kind"], src["data"], ran, written)
        except (KeyError, TypeError):
            return []
    return []


def interrupted_note(
    rec: ActionRecord, steps: Sequence[ActionStep], now: float, actor: str
) -> dict[str, Any]:
    """``details["interrupted"]`` of an action taken over: when, by whom, whose it was,
    and its account (:func:`account`)."""
    return {
        "at": now,
        "by": actor,
        "owner": rec.owner,
        **account(rec, steps).to_json(),
        "recovery": "being finished",
    }


def _when(ts: float | None) -> str:
    if ts is None:
        return "?"
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def _listed(items: list[str]) -> str:
    shown = "; ".join(items[:_MAX_NAMED])
    return shown + (f"; and {len(items) - _MAX_NAMED} more" if len(items) > _MAX_NAMED else "")


def _outcome(rec: ActionRecord) -> str:
    """The outcome of an action taken over: decided at once for all but a terminate
    (``details["interrupted"]["resolved"]``), the row's once finished."""
    resolved = (rec.details.get("interrupted") or {}).get("resolved") or {}
    return str(resolved.get("outcome") or rec.outcome)


def interrupted_finding(rec: ActionRecord, cli_args: str = "") -> Finding:
    """The ``action-interrupted`` finding of an action taken over after an
    interruption (warning; critical for a quarantine that did move a model); its undo
    command carries ``cli_args`` (the daemon's `` --config PATH``, or empty)."""
    note = rec.details.get("interrupted") or {}
    owner = note.get("owner") or {}
    parts = [
        f"{rec.kind} action {rec.id} ({rec.target}, by {rec.actor}, begun "
        f"{_when(rec.created_at)}) was interrupted: its process (PID {owner.get('pid', '?')})"
        " stopped before it ended"
    ]
    for key, label in (
        ("done", "done"),
        ("unsure", "may have been done (recorded before, never repeated)"),
        ("failed", "failed"),
        ("not_done", "not done"),
    ):
        if note.get(key):
            parts.append(f"{label}: {_listed([str(x) for x in note[key]])}")
    parts.append(f"after the restart: {note.get('recovery', 'being finished')}")
    if rec.undo and rec.undone_at is None:
        parts.append(f"undo: rogue-watchdog undo{cli_args} {rec.id}")
    moved = rec.kind == "quarantine-weights" and _outcome(rec) == "done"
    return Finding(
        kind="action-interrupted",
        severity="critical" if moved else "warning",
        message="; ".join(parts),
        details={
            "fingerprint": f"interrupted-{rec.id}",
            "action_id": rec.id,
            "action_kind": rec.kind,
            "outcome": _outcome(rec),
            **{k: note.get(k) or [] for k in ("done", "unsure", "failed", "not_done")},
            "recovery": note.get("recovery"),
        },
    )


def quarantine_finding(rec: ActionRecord, cli_args: str = "") -> Finding | None:
    """The ``poisoned-weights`` finding a quarantine interrupted between its move and
    its record never raised (as its ship gate words it), or None when nothing moved;
    its undo command carries ``cli_args`` (as :func:`interrupted_finding`'s)."""
    d = rec.details
    moved = (d.get("interrupted") or {}).get("moved_to") or d.get("moved_to")
    if _outcome(rec) != "done" or not moved:
        return None
    head = (
        d.get("message") or f"ship gate {d.get('gate')}: {d.get('path')} holds non-finite weights"
    )
    return Finding(
        kind="poisoned-weights",
        severity="critical",
        message=(
            f"{head}; moved to {moved} (undo: rogue-watchdog undo{cli_args} {rec.id}); recorded"
            " after a restart: the daemon stopped between the move and its record"
        ),
        details={
            "fingerprint": d.get("fingerprint") or f"{d.get('gate')}:{d.get('path')}",
            "gate": d.get("gate"),
            "path": d.get("path"),
            "totals": d.get("totals"),
            "quarantined_to": moved,
            "action_id": rec.id,
        },
    )

"""A rogue training job cannot open a GPU (issue 36, item 2): ``enforcement.gpu_open``.

When the scan judges a job ``rogue`` and training (the judgement that leads to a
terminate in terminate mode), its processes are moved into a child cgroup of their own
cgroup that denies one rule per GPU device node (``enforcement.gpu_devices``,
``c 195:0 rwm``...): from then on their ``open(2)`` (and ``mknod(2)``) of those nodes
fails with ``EPERM``, and so does a CUDA initialisation. The child inherits every
restriction of the cgroup it is made in (a container's device list stays in force); a
process the job forks later is born inside it.

Two device controllers, whichever the host has (:func:`find_controller`; the v1 one
wins on a hybrid host):

- cgroup v1: the child of the process's ``devices`` cgroup gets the rules in its
  ``devices.deny``;
- cgroup v2: the child of the process's unified cgroup gets a
  ``BPF_PROG_TYPE_CGROUP_DEVICE`` program denying those nodes, attached with
  ``BPF_F_ALLOW_MULTI`` so that the programs of the cgroups above still run
  (:mod:`watchdog.actions.devprog`). Its id is recorded; a lift detaches only that id,
  then removes the cgroup (which drops anything attached to it).

Who is moved is the guard's signal set (:class:`~watchdog.actions.terminate.JobTree`):
the job's members, its exclusive wrappers, what they forked; never a process the guard
refuses (sanctioned or ignored, ``enforcement.protect``, PID 1, kernel threads,
rogue-watchdog and its ancestors), and each process alone: the other members of a
cgroup it shares stay where they are. ``excess`` runs (the sanctioned pipeline over its
``max_instances``) are never denied: they are the pipeline's own program, and a wrong
denial of the pipeline is the worst outcome here.

The denial is an action like the others (``gpu-deny``): its row and every step
(``cgroup-mkdir``, ``cgroup-write`` or ``bpf-attach``, ``cgroup-move``) are written
before they are made;
its undo op ``cgroup_lift`` moves whatever is in the denial's cgroup back to the cgroup
above it and removes it (``rogue-watchdog undo ID``). The daemon lifts a denial itself
(a ``gpu-lift`` action) when nothing is left in it (the job ended) or when the guard now
refuses one of its processes (a rule sanctions it). ``audit`` records each would-be
denial (a dry-run row per job, one entry per process) and changes nothing.

Limits (docs/operations.md, "GPU open"): a device already open before the denial stays
usable (the rule is checked at ``open(2)``); the daemon acts at its first look at the
job, which the exec event brings forward. On cgroup v2 a cgroup above that attached its
device program without ``BPF_F_ALLOW_MULTI`` makes the attach fail (nothing is moved,
and the action says why).
"""

from __future__ import annotations

import glob
import os
import sqlite3
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config.enforcement import EnforcementSettings
from ..faults import fault_point
from ..hosttext import command_text
from ..logs import get_logger
from ..model import Job, ScanResult
from ..sources.procfs import boot_time_s
from ..state import ActionJournal, ActionRecord, JournalError, StateDB
from . import devprog
from .effects import Effects, IdentityChangedError, JournaledEffects
from .guards import Expected, LiveProc, Refusal, SignalGuard, read_live
from .remedy import JobTarget, first_signature, job_details, log_action, target_from_job
from .terminate import JobTree

log = get_logger()

#: Every denial's cgroup is named ``PREFIX.TAG``: a lift never removes anything else.
DENY_PREFIX = "rogue-watchdog-gpu-deny"
#: Guards whose refusal of a job's root means nothing of the job is denied.
_ROOT_REFUSALS = ("pid-1", "pid-namespace", "kernel-thread", "self", "ancestor",
                  "sanctioned", "protected")  # fmt: skip
#: Guards whose refusal of a process inside a denial lifts the denial.
_LIFT_REFUSALS = ("sanctioned", "protected", "self", "ancestor", "pid-1", "kernel-thread")


@dataclass(frozen=True)
class Controller:
    """The device controller this host offers.

    Attributes:
        kind: ``cgroup-v1`` (the ``devices`` hierarchy), ``cgroup-v2`` (the unified
            hierarchy: a device program) or ``none``.
        hierarchy: The v1 ``devices`` hierarchy's or the unified hierarchy's directory.
        why: Why denials cannot be made here (``not enforcing: ...``), None when they can.
    """

    kind: str
    hierarchy: str | None
    why: str | None

    @property
    def usable(self) -> bool:
        """True when a denial can be made."""
        return self.why is None


def find_controller(
    cgroup_root: str, probe: Callable[[], str | None] = devprog.supported
) -> Controller:
    """Which device controller ``cgroup_root`` offers (``paths.cgroup_root``).

    A v1 ``devices`` hierarchy (``ROOT/devices/devices.deny``) wins, also beside a
    unified one (a hybrid host). Else a unified hierarchy (``ROOT`` or ``ROOT/unified``)
    where this process can load a ``BPF_CGROUP_DEVICE`` program (``probe``: one that
    allows everything is loaded and dropped) and write.

    Args:
        cgroup_root: Where the hierarchies are mounted.
        probe: None when a device program can be loaded, else why not.

    Returns:
        The controller; its :attr:`Controller.why` says why it cannot be used.
    """
    v1 = os.path.join(cgroup_root, "devices")
    if os.path.isfile(os.path.join(v1, "devices.deny")):
        if not os.access(v1, os.W_OK):
            return Controller("cgroup-v1", v1, f"not enforcing: cannot write in {v1} (needs root)")
        return Controller("cgroup-v1", v1, None)
    for unified in (cgroup_root, os.path.join(cgroup_root, "unified")):
        if os.path.isfile(os.path.join(unified, "cgroup.controllers")):
            if not os.access(unified, os.W_OK):
                why = f"not enforcing: cannot write in {unified} (needs root)"
                return Controller("cgroup-v2", unified, why)
            cannot = probe()
            if cannot is not None:
                why = f"not enforcing: cgroup v2 and {cannot} (needs CAP_SYS_ADMIN)"
                return Controller("cgroup-v2", unified, why)
            return Controller("cgroup-v2", unified, None)
    why = f"not enforcing: no device cgroup controller under {cgroup_root}"
    return Controller("none", None, why)


def device_rules(patterns: Iterable[str]) -> list[str]:
    """One ``devices.deny`` rule per device node the globs name now
    (``c MAJOR:MINOR rwm``; block devices ``b``), sorted, without repeats. A path that
    is no device node is skipped.
    """
    rules: set[str] = set()
    for pattern in patterns:
        for path in glob.glob(pattern):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode):
                kind = "c"
            elif stat.S_ISBLK(st.st_mode):
                kind = "b"
            else:
                continue
            rules.add(f"{kind} {os.major(st.st_rdev)}:{os.minor(st.st_rdev)} rwm")
    return sorted(rules)


def devices_cgroup(lines: Sequence[str], kind: str = "cgroup-v1") -> str | None:
    """The cgroup path of ``/proc/PID/cgroup`` lines in the hierarchy of ``kind``: the
    ``devices`` (v1) one, or (``cgroup-v2``) the unified one (``0::PATH``); or None."""
    for line in lines:
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if kind == "cgroup-v2":
            if hier == "0" and controllers == "":
                return path or "/"
        elif "devices" in controllers.split(","):
            return path or "/"
    return None


def is_denial(path: str) -> bool:
    """True when ``path`` (a cgroup path or directory) is a denial's own cgroup."""
    return os.path.basename(path.rstrip("/")).startswith(DENY_PREFIX + ".")


@dataclass
class DenyPlan:
    """Who a denial would move, decided by the guard.

    Attributes:
        procs: Each process to deny, with the ``devices`` cgroup it is in now.
        refused: Processes of the job the guard keeps (``pid``, ``guard``, ``reason``).
        whole: Why nothing of the job is denied, or None.
    """

    procs: list[tuple[Expected, str]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    whole: str | None = None


def _refusal(pid: int, verdict: Refusal | LiveProc, fallback: str) -> dict[str, Any]:
    if isinstance(verdict, Refusal):
        return {"pid": pid, "guard": verdict.guard, "reason": verdict.reason}
    return {"pid": pid, "guard": "not-in-tree", "reason": fallback}


def plan_deny(target: JobTarget, guard: SignalGuard, kind: str = "cgroup-v1") -> DenyPlan:
    """Decide which processes of ``target`` a denial moves (see the module docstring).

    Args:
        target: The job, with the identities the scan decided on.
        guard: The never-signal rules of this moment.
        kind: The controller (:attr:`Controller.kind`): which cgroup each process is in.

    Returns:
        The plan: empty with :attr:`DenyPlan.whole` set when the job is not ``rogue``,
        the guard refuses it as a whole (a protected origin, a protected or sanctioned
        root), or none of it is left.
    """
    if target.verdict != "rogue":
        return DenyPlan(whole=f"a {target.verdict} job is never denied the GPU")
    if target.refused is not None:
        return DenyPlan(whole=target.refused)
    root = next((m for m in target.members if m.pid == target.root_pid), None)
    if root is not None:
        verdict = guard.check(root.pid, root)
        if isinstance(verdict, Refusal) and verdict.guard in _ROOT_REFUSALS:
            return DenyPlan(whole=verdict.reason, refused=[_refusal(root.pid, verdict, "")])
    tree = JobTree(target.members, guard)
    found = tree.collect()
    plan = DenyPlan()
    for pid, (exp, _depth) in sorted(tree.blocked.items()):
        plan.refused.append(_refusal(pid, guard.check(pid, exp), "left out of the job's tree"))
    for pid, (exp, _depth) in sorted(found.items(), key=lambda kv: kv[1][1]):
        live = read_live(pid, guard.proc_root)
        path = devices_cgroup(live.cgroup, kind) if live is not None else None
        if live is None:
            continue  # exited since
        if path is None:
            plan.refused.append(
                {"pid": pid, "guard": "no-devices-cgroup",
                 "reason": f"PID {pid} is in no devices cgroup: nothing to deny it by"}
            )  # fmt: skip
        elif is_denial(path):
            plan.refused.append(
                {"pid": pid, "guard": "denied", "reason": f"PID {pid} is denied already ({path})"}
            )
        else:
            plan.procs.append((exp, path))
    if not plan.procs and plan.whole is None:
        plan.whole = "no process of the job may be denied" if plan.refused else "nothing left"
    return plan


@dataclass
class DenyOutcome:
    """What a denial did.

    Attributes:
        outcome: ``ok``, ``partial``, ``failed``, ``audit`` (nothing changed, each
            process would have been denied) or ``not-enforcing`` (the host cannot).
        procs: Per process: ``pid``, ``start_ticks``, ``cmdline``, ``cgroup`` (where it
            was), ``result`` (``denied``, ``would-deny``, ``gone``, ``reused``,
            ``refused``, ``error``) and ``reason``.
        cgroups: The denial cgroups made (directories).
        programs: cgroup v2: the id of the device program attached to each cgroup made.
        error: Why it stopped, else None.
    """

    outcome: str
    procs: list[dict[str, Any]] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    programs: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    def undo(self) -> list[dict[str, Any]]:
        """The undo ops: one ``cgroup_lift`` per cgroup made (with its program's id)."""
        return [lift_op(c, [self.programs[c]] if c in self.programs else []) for c in self.cgroups]


def lift_op(cgroup: str, programs: Sequence[int] = ()) -> dict[str, Any]:
    """The undo op lifting the denial of ``cgroup`` (detaching ``programs`` first)."""
    op: dict[str, Any] = {"op": "cgroup_lift", "cgroup": cgroup}
    if programs:
        op["programs"] = list(programs)
    return op


def _entry(exp: Expected, where: str, result: str, reason: str = "") -> dict[str, Any]:
    return {
        "pid": exp.pid, "start_ticks": exp.start_ticks, "cmdline": list(exp.cmdline or ()),
        "cgroup": where, "result": result, "reason": reason,
    }  # fmt: skip


def would_deny(plan: DenyPlan, outcome: str) -> DenyOutcome:
    """The record of a denial not made (``audit``, ``not-enforcing``): each process."""
    return DenyOutcome(outcome, [_entry(e, w, "would-deny") for e, w in plan.procs])


def apply_deny(
    plan: DenyPlan,
    rules: Sequence[str],
    hierarchy: str,
    tag: str,
    guard: SignalGuard,
    effects: Effects,
    kind: str = "cgroup-v1",
) -> DenyOutcome:
    """Make the denial: per cgroup the job is in, a child ``PREFIX.TAG`` denying
    ``rules`` (v1: its ``devices.deny``; v2: a device program attached to it); then each
    process moved in, after the guard's check with its identity (a refusal now leaves
    it). Nothing is moved into a child whose rule could not be set.

    Args:
        plan: :func:`plan_deny`'s plan (made for the same ``kind``).
        rules: ``devices.deny`` lines (:func:`device_rules`); must not be empty.
        hierarchy: The v1 ``devices`` hierarchy's or the unified hierarchy's directory.
        tag: Makes the cgroup's name unique (the action id and the daemon's session).
        guard: Checked again right before each move.
        effects: Where the changes go (a :class:`JournaledEffects`: each is recorded first).
        kind: ``cgroup-v1`` or ``cgroup-v2`` (:attr:`Controller.kind`).

    Returns:
        What was done; ``undo()`` lifts it.

    Raises:
        JournalError: A step could not be recorded: it was not made (the steps before
            it are in the action's record).
    """
    out = DenyOutcome("ok")
    made: dict[str, str | None] = {}
    name = f"{DENY_PREFIX}.{tag}"
    for exp, where in plan.procs:
        if where not in made:
            deny = os.path.join(hierarchy, where.strip("/"), name)
            try:
                effects.make_cgroup(deny)
            except JournalError:
                raise
            except OSError as exc:
                made[where] = None
                out.error = f"cannot make {deny}: {exc}"
            else:
                out.cgroups.append(deny)
                made[where] = deny
                try:
                    if kind == "cgroup-v2":
                        out.programs[deny] = effects.attach_device_program(deny, rules)
                    else:
                        for rule in rules:
                            effects.write_control(os.path.join(deny, "devices.deny"), rule)
                except JournalError:
                    raise
                except OSError as exc:
                    # A cgroup without its rule would deny nothing: never moved into,
                    # and removed now (empty); one that cannot be is left to the undo.
                    made[where] = None
                    out.error = f"cannot set the rule of {deny}: {exc}"
                    try:
                        effects.remove_cgroup(deny)
                    except JournalError:
                        raise
                    except OSError:
                        pass
                    else:
                        out.cgroups.remove(deny)
        deny_dir = made[where]
        if deny_dir is None:
            out.procs.append(_entry(exp, where, "error", out.error or ""))
            continue
        verdict = guard.check(exp.pid, exp)
        if isinstance(verdict, Refusal):
            result = {"identity": "reused", "invisible": "gone", "zombie": "gone"}.get(
                verdict.guard, "refused"
            )
            out.procs.append(_entry(exp, where, result, verdict.reason))
            continue
        fault_point("gpu-deny:move")
        try:
            effects.move_to_cgroup(exp.pid, exp.start_ticks, deny_dir)
        except JournalError:
            raise
        except IdentityChangedError as exc:
            out.procs.append(_entry(exp, where, "reused", str(exc)))
        except ProcessLookupError:
            out.procs.append(_entry(exp, where, "gone", "exited before the move"))
        except OSError as exc:
            out.procs.append(_entry(exp, where, "error", str(exc)))
        else:
            out.procs.append(_entry(exp, where, "denied"))
    denied = [p for p in out.procs if p["result"] == "denied"]
    bad = [p for p in out.procs if p["result"] in ("error", "refused")]
    if not denied:
        out.outcome = "failed" if bad or out.error else "ok"
    elif bad:
        out.outcome = "partial"
    return out


def lift(cgroup: str, effects: Effects, rounds: int = 5, programs: Sequence[int] = ()) -> list[int]:
    """Lift one denial: detach its device ``programs`` (cgroup v2: only these ids, and
    only from ``cgroup``), move everything in ``cgroup`` back to the cgroup above it
    (where it was made), then remove it (which drops whatever is still attached).

    Args:
        cgroup: A denial's cgroup directory (its name starts with :data:`DENY_PREFIX`).
        effects: Where the changes go.
        rounds: Times to look again for a process forked during the lift.
        programs: The ids of the device programs the denial attached (recorded).

    Returns:
        The PIDs moved back.

    Raises:
        OSError: ``cgroup`` is not a denial's cgroup, is gone, or could not be emptied
            or removed.
    """
    if not is_denial(cgroup):
        raise OSError(f"{cgroup} is not a denial's cgroup ({DENY_PREFIX}.*): left alone")
    back = os.path.dirname(cgroup.rstrip("/"))
    for prog_id in programs:
        # Detached first: the denial ends even if a move below fails.
        effects.detach_device_program(cgroup, prog_id)
    moved: list[int] = []
    for _ in range(rounds):
        pids = effects.cgroup_pids(cgroup)
        if not pids:
            break
        for pid in pids:
            try:
                effects.move_to_cgroup(pid, None, back)
            except ProcessLookupError:
                continue  # exited meanwhile: the kernel takes it out
            moved.append(pid)
    effects.remove_cgroup(cgroup)
    return moved


def denial_cgroups(rec: ActionRecord) -> list[str]:
    """The cgroups a ``gpu-deny`` action made: from its details, or (one found
    interrupted and resolved) from its undo ops."""
    made = rec.details.get("cgroups")
    if isinstance(made, list) and made:
        return [str(c) for c in made]
    ops = rec.undo if isinstance(rec.undo, list) else []
    return [
        str(op["cgroup"]) for op in ops
        if isinstance(op, dict) and op.get("op") == "cgroup_lift" and op.get("cgroup")
    ]  # fmt: skip


def denial_programs(rec: ActionRecord) -> dict[str, list[int]]:
    """The device program ids (cgroup v2) a ``gpu-deny`` action attached, by cgroup:
    from its details, or from its undo ops."""
    out: dict[str, list[int]] = {}
    made = rec.details.get("programs")
    if isinstance(made, dict):
        for cg, pid in made.items():
            if isinstance(pid, int) and not isinstance(pid, bool):
                out.setdefault(str(cg), []).append(pid)
        return out
    for op in rec.undo if isinstance(rec.undo, list) else []:
        if isinstance(op, dict) and op.get("op") == "cgroup_lift" and op.get("cgroup"):
            ids = op.get("programs")
            if isinstance(ids, list):
                out[str(op["cgroup"])] = [i for i in ids if isinstance(i, int)]
    return out


class GpuOpenGate:
    """The daemon's side of ``enforcement.gpu_open`` (driven by the enforcer's tick).

    Args:
        settings: The ``enforcement:`` section.
        cgroup_root: ``paths.cgroup_root``.
        db: The state database (the audit trail).
        effects: Real (or recorded) side effects.
        actor: Recorded as who acted.
        clock: Wall clock for action times.
        rules: Turns ``gpu_devices`` into ``devices.deny`` lines (the simulator's
            nodes are no device nodes).
        probe: Whether a cgroup v2 device program can be loaded (:func:`find_controller`).
    """

    def __init__(
        self,
        settings: EnforcementSettings,
        cgroup_root: str,
        db: StateDB,
        effects: Effects,
        *,
        actor: str,
        clock: Callable[[], float],
        rules: Callable[[Sequence[str]], list[str]] = device_rules,
        probe: Callable[[], str | None] = devprog.supported,
    ) -> None:
        self.settings = settings
        self.cgroup_root = cgroup_root
        self.db = db
        self.effects = effects
        self.actor = actor
        self.clock = clock
        self.rules = rules
        self._probe = probe
        self._controller: Controller | None = None
        self.handled: set[tuple[int, int]] = self._handled_before()
        self._said: str | None = None
        self._swept_off = False
        # The denials in force at the last read: a lift while the state database cannot
        # be read still knows what to give back.
        self._active: list[ActionRecord] = []

    @property
    def controller(self) -> Controller:
        """The host's device controller, looked up at first use: a daemon that never
        uses ``gpu_open`` (nor shows it) never loads the cgroup v2 probe program."""
        if self._controller is None:
            self._controller = find_controller(self.cgroup_root, self._probe)
        return self._controller

    @property
    def mode(self) -> str:
        """The default ``off``, ``audit`` or ``enforce`` (``enforcement.dry_run`` makes
        an ``enforce`` ``audit``); a rule may say otherwise for its jobs."""
        return self._effective(self.settings.gpu_open)

    def _effective(self, mode: str) -> str:
        return "audit" if mode == "enforce" and self.settings.dry_run else mode

    def mode_for(self, cmdline: Sequence[str], origin_kind: str, user: str | None) -> str:
        """``gpu_open`` for one job: the first matching rule's, else the default."""
        return self._effective(self.settings.decide(cmdline, origin_kind, user).gpu_open)

    @property
    def in_use(self) -> bool:
        """True when the default or any rule asks for audit or enforce."""
        return self.settings.gpu_open != "off" or any(
            r.gpu_open not in (None, "off") for r in self.settings.rules
        )

    def state(self, mode: str | None = None) -> tuple[str, str | None]:
        """``(state, why)`` of ``mode`` (default: the default mode): ``off``,
        ``auditing``, ``enforcing`` or ``not enforcing``."""
        mode = self.mode if mode is None else mode
        if mode == "off":
            return "off", None
        if mode == "audit":
            return "auditing", None if self.controller.usable else self.controller.why
        if not self.controller.usable:
            return "not enforcing", self.controller.why
        return "enforcing", None

    def _handled_before(self) -> set[tuple[int, int]]:
        """Root identities a ``gpu-deny`` row names since this boot (PID and start time
        mean another process after a reboot): a restart or reload never denies them
        again, nor a denial someone undid."""
        out: set[tuple[int, int]] = set()
        try:
            recs = self.db.actions(limit=1000)
        except Exception:  # an unreadable trail: the tick's own degradation says so
            return out
        booted = boot_time_s() or 0.0
        for rec in recs:
            root = rec.details.get("root")
            if rec.kind != "gpu-deny" or rec.created_at < booted:
                continue
            if isinstance(root, list) and len(root) == 2:
                try:
                    out.add((int(root[0]), int(root[1])))
                except (TypeError, ValueError):
                    continue
        return out

    def status(self) -> dict[str, Any]:
        """``gpu_open`` in status: mode, state, why, controller and active denials."""
        state, why = self.state()
        if why is None and self.in_use and not self.controller.usable:
            why = self.controller.why  # a rule asks for it; the host cannot
        denied = []
        try:
            for rec in self.active():
                procs = [p for p in rec.details.get("procs") or [] if p.get("result") == "denied"]
                denied.append({
                    "action": rec.id, "job": rec.details.get("job"),
                    "pids": [p.get("pid") for p in procs], "cgroups": rec.details.get("cgroups"),
                })  # fmt: skip
        except Exception as exc:  # status never fails on an unreadable trail
            why = why or f"denials unknown: {exc}"
        rules = [
            {"rule": r.name, "gpu_open": r.gpu_open, "state": self.state(self._effective(mode))[0]}
            for r in self.settings.rules if (mode := r.gpu_open) is not None
        ]  # fmt: skip
        return {
            "mode": self.settings.gpu_open, "state": state, "why": why, "rules": rules,
            "controller": self.controller.kind, "devices": list(self.settings.gpu_devices),
            "denied": denied,
        }  # fmt: skip

    def active(self) -> list[ActionRecord]:
        """Denials in force: made, not dry runs, not undone or lifted.

        Raises:
            sqlite3.Error: The state database cannot be read (see :meth:`sweep`).
        """
        self._active = [
            r for r in self.db.actions(limit=1000)
            if r.kind == "gpu-deny" and not r.dry_run and r.undone_at is None
            and r.outcome in ("ok", "partial") and denial_cgroups(r)
        ]  # fmt: skip
        return self._active

    def tick(self, result: ScanResult, guard: SignalGuard, open_ids: dict[str, int]) -> None:
        """Deny (or audit) each rogue training job not handled yet whose ``gpu_open``
        (the default or its rule's) is not ``off``, then lift what no longer holds. A
        record that cannot be written leaves the job to the next tick.
        """
        if not self.in_use:
            if not self._swept_off:
                self.sweep(guard)  # denials made before gpu_open was turned off
                self._swept_off = True
            return
        self._swept_off = False
        for job in sorted(result.jobs, key=lambda j: (-j.start_ticks, -j.root_pid)):
            if job.verdict != "rogue" or not job.may_train:
                continue
            ident = (job.root_pid, job.start_ticks)
            if ident in self.handled:
                continue
            mode = self.mode_for(job.cmdline, job.origin.kind, job.user)
            if mode == "off":
                continue
            state, why = self.state(mode)
            if why is not None and why != self._said:
                self._said = why
                log.warning("gpu-open-not-enforcing", state=state, why=why)
            try:
                self.deny(job, guard, open_ids, mode)
            except JournalError as exc:
                log.error("action-not-recorded", pid=job.root_pid, error=str(exc))
                continue
            self.handled.add(ident)
        self.sweep(guard)

    def deny(
        self, job: Job, guard: SignalGuard, open_ids: dict[str, int], mode: str | None = None
    ) -> int | None:
        """Deny (``enforce``) or record (``audit``, ``not enforcing``) one job.

        Args:
            job: A job of the scan.
            guard: The never-signal rules of this moment (the scan's protection).
            open_ids: Open finding ids by fingerprint (the action names its finding).
            mode: ``enforce`` or ``audit``; None: the default mode.

        Returns:
            The action id, or None when nothing was recorded (the guard refuses the
            whole job: logged).

        Raises:
            JournalError: The record could not be written (nothing was changed after).
        """
        sig = first_signature(self.db, job)  # its finding's, as the tracker keeps it
        fid = open_ids.get(f"rogue-job:{sig}")
        target = target_from_job(job, sig, fid, guard.proc_root)
        plan = plan_deny(target, guard, self.controller.kind)
        base = {
            **job_details(target), "user": target.user, "cmdline": list(target.cmdline),
            "devices": list(self.settings.gpu_devices), "refused": plan.refused,
        }  # fmt: skip
        if plan.whole is not None:
            log.info("gpu-deny-refused", pid=job.root_pid, reason=plan.whole)
            return None
        rules = self.rules(self.settings.gpu_devices)
        what = f"PID {target.root_pid} ({len(plan.procs)} process(es))"
        state, why = self.state(mode)
        if not rules:
            why = "no device node matches enforcement.gpu_devices: nothing to deny"
            state = "auditing" if state == "auditing" else "not enforcing"
        if state != "enforcing":
            res = would_deny(plan, "audit" if state == "auditing" else "not-enforcing")
            details = {**base, "rules": rules, "procs": res.procs, "why": why}
            aid = self.db.record_action(
                self.actor, "gpu-deny", what, res.outcome, details, self.clock(),
                finding_id=fid, signature=sig, dry_run=True,
            )  # fmt: skip
            log_action(aid, self.actor, "gpu-deny", what, res.outcome, True, target)
            return aid
        intent = {
            **base, "rules": rules,
            "planned": [[e.pid, e.start_ticks, list(e.cmdline or ()), w] for e, w in plan.procs],
        }  # fmt: skip
        journal = ActionJournal.begin(
            self.db, self.actor, "gpu-deny", what, intent, finding_id=fid, signature=sig,
            clock=self.clock,
        )  # fmt: skip
        fault_point("gpu-deny:begun")
        tag = f"{self.db.session[:12]}.{journal.action_id}"
        assert self.controller.hierarchy is not None
        res = apply_deny(
            plan, rules, self.controller.hierarchy, tag, guard,
            JournaledEffects(self.effects, journal), self.controller.kind,
        )  # fmt: skip
        details = {**base, "rules": rules, "procs": res.procs, "cgroups": res.cgroups}
        if self.controller.kind == "cgroup-v2":
            details["programs"] = res.programs
        if res.error:
            details["error"] = res.error
        journal.finish(res.outcome, details, undo=res.undo() or None)
        log_action(journal.action_id, self.actor, "gpu-deny", what, res.outcome, False, target)
        return journal.action_id

    def sweep(self, guard: SignalGuard) -> None:
        """Lift each denial in force whose cgroups hold nothing (the job ended) or hold a
        process the guard now refuses (a rule sanctions it, ``protect`` names it); every
        one when ``gpu_open`` is no longer ``enforce``."""
        try:
            recs = self.active()
        except Exception as exc:
            # Not withheld for want of the database: a sanctioned job kept from its GPU
            # is the dangerous direction (trust simulator, seed 64201, I14).
            log.debug("gpu-lift-from-memory", error=str(exc))
            recs = list(self._active)
        for rec in recs:
            cgroups = denial_cgroups(rec)
            why: str | None = None
            pids: list[int] = []
            for cg in cgroups:
                try:
                    pids += self.effects.cgroup_pids(cg)
                except OSError:
                    continue  # gone: lifted by hand
            for pid in pids:
                verdict = guard.check(pid)
                if isinstance(verdict, Refusal) and verdict.guard in _LIFT_REFUSALS:
                    why = f"the guard now refuses it: {verdict.reason}"
                    break
            if why is None and not pids:
                why = "the job ended: nothing is left in its cgroup"
            if why is None:
                cmdline = [str(a) for a in rec.details.get("cmdline") or []]
                kind = str((rec.details.get("origin") or {}).get("kind") or "unknown")
                user = rec.details.get("user")
                mode = self.mode_for(cmdline, kind, user if isinstance(user, str) else None)
                if mode != "enforce":
                    why = f"enforcement.gpu_open is {mode} for this job now"
            if why is None:
                continue
            try:
                self._lift(rec, cgroups, why)
            except JournalError as exc:
                log.error("action-not-recorded", action_id=rec.id, error=str(exc))
            self._active = [r for r in self._active if r.id != rec.id]

    def _lift(self, rec: ActionRecord, cgroups: list[str], why: str) -> None:
        """Lift one denial and record it. A lift is never withheld for want of a
        record (it only gives back what the denial took): a state database that
        refuses writes leaves it unrecorded, and the next tick that can write finds its
        cgroups gone and records the lift then."""
        effects: Effects = self.effects
        journal: ActionJournal | None = None
        try:
            journal = ActionJournal.begin(
                self.db, self.actor, "gpu-lift", f"action {rec.id}",
                {"lifted": rec.id, "why": why, "cgroups": cgroups}, signature=rec.signature,
                clock=self.clock,
            )  # fmt: skip
            effects = JournaledEffects(self.effects, journal)
        except JournalError as exc:
            log.warning("gpu-lift-unrecorded", lifted=rec.id, why=why, error=str(exc))
        moved: list[int] = []
        errors: list[str] = []
        programs = denial_programs(rec)
        for cg in cgroups:
            ids = programs.get(cg, [])
            try:
                moved += lift(cg, effects, programs=ids)
            except FileNotFoundError:
                continue  # lifted already (by hand, or a lift that could not be recorded)
            except JournalError:
                # A step's record failed mid-way: finish the lift without records.
                try:
                    moved += lift(cg, self.effects, programs=ids)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    errors.append(f"{cg}: {exc}")
            except OSError as exc:
                errors.append(f"{cg}: {exc}")
        outcome = "failed" if errors else "ok"
        details = {"lifted": rec.id, "why": why, "cgroups": cgroups, "moved_back": moved}
        if errors:
            details["error"] = "; ".join(errors)
        if journal is not None:
            try:
                journal.finish(outcome, details)
                if not errors:
                    self.db.mark_undone(rec.id, self.clock())
            except (JournalError, sqlite3.Error) as exc:
                log.warning("gpu-lift-unrecorded", lifted=rec.id, error=str(exc))
        log.warning(
            "gpu-lift", action_id=journal.action_id if journal else 0, lifted=rec.id, why=why,
            outcome=outcome, moved_back=moved,
            job=command_text(rec.details.get("cmdline") or [], 80),
        )  # fmt: skip

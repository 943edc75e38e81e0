"""The one guard: what rogue-watchdog must never target, and the targets it may name.

Every producer of a target asks this module: the finding text and the ``stop:`` lines,
the JSON ``remediation``, ``explain``, ``top``'s keys, the ``terminate`` and
``disable-source`` plans, automatic enforcement, the Slurm sweep and the queue actions.
Nothing else decides what may be acted on.

What is protected, computed once per scan (:func:`protection`):

- every process of a sanctioned or ignored job, by identity (PID + start time);
- every sanctioned job's origin as observed (its cron line, unit and timer, Slurm job,
  container, pod owner) and every origin an allowlist rule pins (``sanctioned[].origin``):
  the source of the one pipeline is never disabled, not even for an excess run of it;
- ``enforcement.protect`` entries: processes (and their jobs' sources), and origins;
- PID 1, kernel threads, rogue-watchdog itself and its ancestors (the live signal
  guard, :mod:`watchdog.actions.guards`, checks those again before every signal).

A job may be stopped as a job (its own processes and the wrappers that exist only for
it, :func:`exclusive_wrappers`) when it is unsanctioned and not protected; its source may
be disabled only when no protected source is the same source. A refusal always says
which rule or origin it protects, and what to change instead.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence, Set
from dataclasses import dataclass

from ..config import Config, OriginPin
from ..config.enforcement import Protect
from ..hostpaths import CRON_D, CRON_SPOOL_DIRS, config_args
from ..hosttext import clip, code_span, command_text, quoted_command, safe_text
from ..lineage.base import command, command_key, exe_name, is_wrapper, mentions, quote_arg
from ..lineage.cgroup import CgroupInfo, parse_cgroup
from ..lineage.scriptfile import ScriptFiles, ScriptRead, command_string, script_path
from ..model import (
    DISABLE_FIRST,
    Advice,
    Collateral,
    Copies,
    Job,
    Origin,
    Proc,
    Restarts,
)
from ..model.advice import COPIES_NAMED
from ..sources.procfs import ProcessTable
from .allowlist import origin_mismatch
from .copies import ScopeCopies, most_restarting
from .jobs import holder_refusal
from .services import launching_ancestors

Identity = tuple[int, int]


@dataclass(frozen=True)
class ProtectedSource:
    """One source no advice, plan or action may disable.

    Attributes:
        why: Who it belongs to, for refusals: ``sanctioned rule 'pipeline' (job PID
            812 runs from it)``, ``the allowlist pins rule 'pipeline' to it``,
            ``enforcement.protect entry 'origin={...}'``.
        rule: The sanctioned rule's name, when a rule is why (for the advice).
        origin: The observed origin of a sanctioned job, or None for a pin.
        pin: An allowlist or protect pin, or None for an observed origin.
    """

    why: str
    rule: str | None = None
    origin: Origin | None = None
    pin: OriginPin | None = None

    def covers(self, origin: Origin) -> bool:
        """True when disabling ``origin``'s source would touch this one: the same source
        key, a shared stop target (the same crontab line, unit, Slurm job, container),
        or an origin the pin matches."""
        if self.pin is not None:
            return not self.pin.any and origin_mismatch(self.pin, origin) is None
        mine = self.origin
        if mine is None:
            return False
        key = mine.source_key()
        if key is not None and any(v is not None for v in key[1:]) and key == origin.source_key():
            return True
        return bool(set(mine.stop_targets()) & set(origin.stop_targets()))


@dataclass(frozen=True)
class ScanProtection:
    """What must never be a target, for one scan.

    Attributes:
        identities: ``(PID, start ticks)`` of every process of a sanctioned or ignored
            job (root, members and the wrappers above the root that run only for it).
        pids: The same processes' PIDs (for callers that hold no start time).
        sources: Sources never disabled.
        protect: ``enforcement.protect`` entries naming processes.
        never: PIDs never signalled whatever they are: PID 1, rogue-watchdog and its
            ancestors as this scan saw them.
        training: PIDs of the scan's rogue and excess jobs: stopping a source that runs
            only these (and wrappers of them) stops no service
            (:func:`service_collateral`).
        shared_roots: ``((PID, start ticks), why)`` of job roots that are jobs only for
            an unreaped zombie's GPU memory and run other work (a hub, a shell with a web
            server beside the trainer): never a target, whatever grouped them.
        ignored: Those of ``identities`` that are an ignored job's, not a sanctioned
            one's: a refusal says which (:meth:`member_refusal`).
    """

    identities: frozenset[Identity] = frozenset()
    pids: frozenset[int] = frozenset()
    sources: tuple[ProtectedSource, ...] = ()
    protect: tuple[Protect, ...] = ()
    never: frozenset[int] = frozenset({1})
    training: frozenset[int] = frozenset()
    shared_roots: tuple[tuple[Identity, str], ...] = ()
    ignored: frozenset[Identity] = frozenset()

    def member_refusal(self, pid: int, start_ticks: int) -> str:
        """Why a process of :attr:`identities` is never signalled: ``PID 5 belongs to a
        sanctioned job`` (or ``an ignored job``: an ignore entry's job is no sanctioned
        one)."""
        if (pid, start_ticks) in self.ignored:
            return f"PID {pid} belongs to an ignored job"
        return f"PID {pid} belongs to a sanctioned job"

    def protected_source(self, origin: Origin) -> ProtectedSource | None:
        """The protected source ``origin``'s source is (or covers), or None when it may
        be disabled."""
        return next((s for s in self.sources if s.covers(origin)), None)

    def unsure(self, origin: Origin) -> tuple[Origin, ProtectedSource] | None:
        """A source that can as well have started the job (``alternatives``) and that
        is protected: then the job may be the sanctioned one, and is no target."""
        for alt in origin.alternatives():
            src = self.protected_source(alt)
            if src is not None:
                return alt, src
        return None

    def source_refusal(self, origin: Origin) -> str | None:
        """Why ``origin``'s source must never be disabled (advice, plan, automation), or
        None when it may be."""
        src = self.protected_source(origin)
        if src is None:
            return None
        return f"{origin.describe()} is the origin of {src.why}: never disabled"

    def process_refusal(self, proc: Proc) -> str | None:
        """Why ``proc`` must never be signalled, or None. (The live guard checks again
        right before a signal: start time, zombie, namespace.)"""
        if proc.pid in self.never or proc.kernel_thread:
            return f"PID {proc.pid} is init, a kernel thread or rogue-watchdog's own lineage"
        if (proc.pid, proc.start_ticks) in self.identities:
            return self.member_refusal(proc.pid, proc.start_ticks)
        for entry in self.protect:
            if entry.matches(proc.cmdline, proc.exe, proc.user):
                return f"PID {proc.pid} matches enforcement.protect entry {entry.text!r}"
        return None

    def job_refusal(self, job: Job) -> str | None:
        """Why ``job`` must never be a target at all, or None when it may be stopped."""
        if not job.unsanctioned:
            return f"the job is {job.verdict}" + (f" (rule {job.rule!r})" if job.rule else "")
        if (job.root_pid, job.start_ticks) in self.identities:
            return self.member_refusal(job.root_pid, job.start_ticks)
        for ident, shared in self.shared_roots:
            if ident == (job.root_pid, job.start_ticks):
                return shared
        root = job.lineage[0] if job.lineage else None
        if root is not None:
            why = self.process_refusal(root)
            if why is not None:
                return why
        for src in self.sources:
            if src.why.startswith("enforcement.protect") and src.covers(job.origin):
                return f"its origin ({job.origin.describe()}) is protected by {src.why}"
        alt = self.unsure(job.origin)
        if alt is not None:
            return (
                f"it may have been started by {alt[0].describe()}, the origin of {alt[1].why} "
                f"(identical lines; which one fired cannot be told): not a target while unsure"
            )
        return None


def protection(
    jobs: Sequence[Job],
    config: Config,
    *,
    table: ProcessTable | None = None,
    never: Collection[int] = (),
    kept: Iterable[Identity] = (),
    trainers: Set[int] | None = None,
) -> ScanProtection:
    """Compute what this scan must never target.

    Args:
        jobs: The scan's judged jobs.
        config: Its allowlist (the pins) and ``enforcement.protect``.
        table: The process table, to add the wrappers that run only for a sanctioned
            job (its cron ``sh -c``); None leaves them to the live guard.
        never: rogue-watchdog's own PID and its ancestors, as this scan saw them.
        kept: Identities of processes sanctioned earlier and still alive (a
            sanctioned process stays sanctioned for its life, also across restarts).
        trainers: PIDs training by what they do themselves
            (:attr:`~watchdog.policy.jobs.TrainingEvidence.own`): a rogue job whose root
            is none of them (a job only for a zombie it has not reaped) is a target only
            when the root is an exclusive wrapper of training
            (:func:`~watchdog.policy.jobs.holder_refusal`). None (with ``table``) skips
            the check.

    Returns:
        The protection for this scan.
    """
    identities: set[Identity] = set(kept)
    ignored: set[Identity] = set()
    sanctioned: set[Identity] = set()
    sources: list[ProtectedSource] = []
    for job in jobs:
        if job.unsanctioned:
            continue
        mine = _identities(job, table)
        identities.update(mine)
        (ignored if job.verdict == "ignored" else sanctioned).update(mine)
        if job.verdict == "sanctioned":
            sources.append(
                ProtectedSource(
                    f"sanctioned rule {job.rule!r} (its job PID {job.root_pid} runs from it)",
                    rule=job.rule,
                    origin=job.origin,
                )
            )
    for rule in config.sanctioned:
        sources.append(
            ProtectedSource(
                f"sanctioned rule {rule.name!r} (the allowlist pins it to {rule.origin.text()})",
                rule=rule.name,
                pin=rule.origin,
            )
        )
    protect = config.enforcement.protect
    for entry in protect:
        if entry.origin is not None:
            sources.append(
                ProtectedSource(f"enforcement.protect entry {entry.text!r}", pin=entry.origin)
            )
    for job in jobs:
        root = job.lineage[0] if job.lineage else None
        if root is not None and any(e.matches(root.cmdline, root.exe, root.user) for e in protect):
            sources.append(
                ProtectedSource(
                    f"enforcement.protect (its job PID {job.root_pid} is protected)",
                    origin=job.origin,
                )
            )
    pids = frozenset(pid for pid, _start in identities)
    return ScanProtection(
        frozenset(identities),
        pids,
        tuple(sources),
        tuple(e for e in protect if e.names_processes),
        frozenset({1, *never}),
        frozenset(pid for job in jobs if job.unsanctioned for pid in job.pids) - pids,
        _shared_roots(jobs, table, trainers),
        # A process kept from an earlier scan, or also a sanctioned job's, is sanctioned.
        frozenset(ignored - set(kept) - sanctioned),
    )


def _shared_roots(
    jobs: Sequence[Job], table: ProcessTable | None, trainers: Set[int] | None
) -> tuple[tuple[Identity, str], ...]:
    """The rogue job roots that are jobs only for a zombie's memory and run other work,
    each with the refusal's words (see :attr:`ScanProtection.shared_roots`)."""
    if table is None or trainers is None:
        return ()
    out: list[tuple[Identity, str]] = []
    for job in jobs:
        root = table.get(job.root_pid)
        if not job.unsanctioned or job.root_pid in trainers or root is None:
            continue
        why = holder_refusal(root, table, trainers)
        if why is not None:
            out.append(
                (
                    (job.root_pid, job.start_ticks),
                    f"PID {job.root_pid} is a job only for the GPU memory of a zombie it has "
                    f"not reaped, and {why}: never signalled for it (the memory is freed "
                    "when it reaps the zombie or exits)",
                )
            )
    return tuple(out)


def _identities(job: Job, table: ProcessTable | None) -> set[Identity]:
    """Every process of ``job`` with its start time, and its exclusive wrappers."""
    out = {(job.root_pid, job.start_ticks)}
    by_pid = {p.pid: p for p in job.lineage}
    for pid in job.pids:
        proc = by_pid.get(pid) or (table.get(pid) if table is not None else None)
        if proc is not None:
            out.add((proc.pid, proc.start_ticks))
    if table is not None:
        out.update((p.pid, p.start_ticks) for p in exclusive_wrappers(job, table))
    return out


def exclusive_wrappers(
    job: Job,
    table: ProcessTable,
    kept: Collection[int] = (),
    scripts: ScriptReader | None = None,
    guard: ScanProtection | None = None,
) -> list[Proc]:
    """The wrappers above the job's root that exist only for it, nearest first.

    A wrapper (a shell, ``timeout``, ``nohup``, ``sudo``, ``flock``...; see
    :data:`watchdog.lineage.base.WRAPPERS`) belongs to the job when its command line
    carries the job's command (:func:`~watchdog.lineage.base.command_key`), or it is a
    shell whose script file, unchanged since it started, loops over that command
    (:func:`script_loops`: ``bash retrain.sh``), and every one
    of its descendants is the job's or one of these wrappers: cron's ``sh -c CMD`` does,
    an orphaned shell that also runs ``python3 -m http.server`` does not, nor does the
    login shell a person started the trainer from, and nothing above such a shared
    process is the job's either. Multiplexer servers and remote clients
    never are (a tmux server holds other sessions).

    Args:
        job: A job of this scan.
        table: The process table it was built from.
        kept: Members the guard protects: as good as outside the job (a wrapper above
            one is shared with it).
        scripts: Reads the lineage shells' script files (:class:`ScriptFiles` of
            ``table`` when None).
        guard: This scan's protection: a wrapper it refuses (an ``enforcement.protect``
            entry, a sanctioned job's) is never the job's, nor anything above it, as
            ``terminate``'s live guard leaves it. None: only the table decides (what
            :func:`protection` itself asks).

    Returns:
        The wrappers, nearest the root first (empty when the root's parent is shared).
    """
    if scripts is None:
        scripts = ScriptFiles(table)
    mine = set(job.pids) - set(kept)
    key = command_key(job.cmdline)
    out: list[Proc] = []
    for proc in job.lineage[1:]:
        if proc.pid <= 1 or not is_wrapper(proc) or proc.comm.startswith("tmux"):
            break
        if guard is not None and guard.process_refusal(proc) is not None:
            # Protected: never signalled, so never named in the stop set or the by-hand
            # kill, and a loop it runs is left (the restart answer says it comes back).
            break
        if proc.state == "X":
            # Its record was kept from an exec event; it has exited since, and the other
            # children it had are re-parented: what else it ran cannot be seen, and its
            # process group may hold them (trust simulator with kernel events, seed 11).
            break
        # It carries the job's command (cron's `sh -c CMD`, `timeout 300 CMD`): a login
        # shell (`-bash`) the trainer runs in is the person's session, never the job's.
        if key is None or not carries_job(
            proc.cmdline, proc.exe, key, functools.partial(scripts, proc)
        ):
            break
        others = [d for d in table.descendants(proc.pid) if d not in mine]
        if any((p := table.get(d)) is not None and not p.is_zombie for d in others):
            break  # (a zombie it has not reaped is gone already: nothing shared)
        mine.add(proc.pid)
        out.append(proc)
    return out


# Process supervisors whose direct child is a program they run (and restart).
_SUPERVISORS = frozenset(
    {"supervisord", "runsv", "s6-supervise", "supervise", "circusd", "PM2", "pm2"}
)
#: At most this many of a service's other processes are named in its advice.
MAX_NAMED_OTHERS = 3


class SourceProcesses:
    """Which processes stopping a source would stop, for one process table: every
    process of a unit (cgroup), of a container or pod, or of a supervisor program's
    tree. The cgroups are parsed once per table, on first use.

    Args:
        table: A refreshed process table.
    """

    def __init__(self, table: ProcessTable) -> None:
        self.table = table
        self._cgroups: dict[int, CgroupInfo | None] | None = None

    def _info(self) -> dict[int, CgroupInfo | None]:
        if self._cgroups is None:
            self._cgroups = {
                pid: parse_cgroup(p.cgroup) if p.cgroup and not p.kernel_thread else None
                for pid, p in self.table.procs.items()
            }
        return self._cgroups

    def stopped(self, origin: Origin, root_pid: int) -> tuple[str, list[Proc]] | None:
        """What stopping ``origin``'s source stops: ``(its name, its processes)`` for the
        first stop target that names running processes, or None (a crontab line, a
        timer, a Slurm job: nothing else of theirs runs)."""
        for target in origin.stop_targets():
            kind = target[0]
            if kind in ("systemd-unit", "container", "pod"):
                pids = [pid for pid, info in self._info().items() if _in(target, info)]
                name = str(target[1])[:12] if kind == "container" else str(target[1])
            elif kind == "supervisor-program":
                top = _program_process(self.table, root_pid)
                if top is None:
                    continue
                pids = [top.pid, *self.table.descendants(top.pid)]
                name = str(target[2])
            else:
                continue
            procs = [p for p in map(self.table.get, pids) if p is not None]
            if procs:
                return name, procs
        return None


def _in(target: tuple[object, ...], info: CgroupInfo | None) -> bool:
    """True when a process of cgroup ``info`` is stopped with ``target``."""
    if info is None:
        return False
    kind, name = target[0], target[1]
    if kind == "container":
        return info.container_id is not None and info.container_id.startswith(str(name))
    if kind == "pod":
        return info.pod_uid == name
    if len(target) > 2:  # a user manager's unit: ("systemd-unit", unit, "user", uid, user)
        uid = target[3]
        return info.user_unit == name and (
            uid is None or info.user_uid == uid or info.unit == f"user@{uid}.service"
        )
    return info.user_unit is None and info.unit == name


def _program_process(table: ProcessTable, root_pid: int) -> Proc | None:
    """The supervisor's child the job runs under (its program's own process)."""
    chain = table.ancestors(root_pid)
    for proc, parent in itertools.pairwise(chain):
        if exe_name(parent) in _SUPERVISORS:
            return proc
    return None


def _only_wraps(proc: Proc, training: Collection[int], table: ProcessTable, depth: int = 0) -> bool:
    """True when ``proc`` is a wrapper (a shell, ``nohup``, a tmux server...) that runs
    training and nothing else: every live child is training or such a wrapper itself. A
    shell with nothing below it, or a tmux server that also holds a person's idle shell,
    runs something else."""
    if not is_wrapper(proc) or depth > 32:
        return False
    kids = [p for p in map(table.get, table.children(proc.pid)) if p and not p.is_zombie]
    return bool(kids) and all(
        k.pid in training or _only_wraps(k, training, table, depth + 1) for k in kids
    )


def service_collateral(
    origin: Origin,
    root_pid: int,
    table: ProcessTable,
    training: Collection[int],
    sources: SourceProcesses | None = None,
) -> Collateral | None:
    """The service that stopping ``origin``'s source would stop beside the job, or None.

    A unit, container, pod or supervisor program whose processes are all training (the
    job, other rogue runs of it) or wrappers that run only those is the job's own: it
    may be disabled. One that also runs anything else (a hub whose own process launches
    the trainer, a sidecar) is a service: stopping it is a separate, explicit decision.

    Args:
        origin: The job's origin.
        root_pid: The job's root (a supervisor program is found above it).
        table: A refreshed process table (the scan's, or one read right before acting).
        training: PIDs whose stopping is no collateral: the job's, its wrappers', and the
            other rogue and excess jobs'.
        sources: The table's :class:`SourceProcesses` (built when None).

    Returns:
        The service with the first :data:`MAX_NAMED_OTHERS` of its other processes.
    """
    found = (sources or SourceProcesses(table)).stopped(origin, root_pid)
    if found is None:
        return None
    name, procs = found
    others = [
        p
        for p in procs
        if p.pid not in training
        and not p.is_zombie
        and not p.kernel_thread
        and not _only_wraps(p, training, table)
    ]
    if not others:
        return None
    named = tuple(
        f"PID {p.pid} {code_span(command_text(p.cmdline, 80) or p.args_text)}"
        for p in sorted(others, key=lambda p: p.pid)[:MAX_NAMED_OTHERS]
    )
    if len(others) > MAX_NAMED_OTHERS:
        named += (f"{len(others) - MAX_NAMED_OTHERS} more",)
    return Collateral(name, quote_arg(name), origin.describe(), named, origin.remediation)


def _instead(job: Job, src: ProtectedSource, config: Config | None) -> str:
    """What to change instead of disabling a protected source, for this job."""
    rule = next((r for r in config.sanctioned if r.name == src.rule), None) if config else None
    if job.verdict == "excess" and rule is not None:
        cap = rule.max_instances
        fix = job.origin.one_at_a_time()
        return (
            f"this run is one more than rule {rule.name!r} allows (max_instances {cap}): "
            f"stop it as a job (newest run first); to keep runs from overlapping, {fix}, "
            f"or raise max_instances"
        )
    return (
        f"this job from it is not sanctioned ({job.reason or 'no rule matches'}): stop it "
        "as a job, and change the rule or the source so that the two agree"
    )


def advise(
    job: Job,
    guard: ScanProtection,
    table: ProcessTable | None = None,
    config: Config | None = None,
    groups: ProcessGroups | None = None,
    sources: SourceProcesses | None = None,
    scripts: ScriptReader | None = None,
) -> Advice:
    """Decide what may be done about ``job``.

    Args:
        job: A judged job of this scan.
        guard: This scan's :class:`ScanProtection`.
        table: The process table (for the exclusive wrappers and the process group of a
            by-hand ``kill``); None names the root alone.
        config: For the rule's ``max_instances`` in the words of a refusal.
        groups: The table's process groups (built when None).
        sources: The table's :class:`SourceProcesses` (built when None).
        scripts: Reads the script files the lineage's shells run
            (:class:`~watchdog.lineage.scriptfile.ScriptFiles` of ``table`` when None).

    Returns:
        The advice; ``refused`` is set for sanctioned, ignored and protected jobs;
        ``collateral`` when the source is a service that also runs other work.
    """
    refused = guard.job_refusal(job)
    if refused is not None:
        return Advice(refused=refused)
    if scripts is None and table is not None:
        scripts = ScriptFiles(table)
    stop_pids = _own_stop_set(job, guard, table, scripts)
    origin = job.origin
    src = guard.protected_source(origin)
    if src is not None:
        what = guard.source_refusal(origin)
        return Advice(stop_pids=stop_pids, source_refused=f"{what}; {_instead(job, src, config)}")
    if (not origin.stop_targets() and origin.kind in ("shell", "orphan")) or (
        not origin.REMEDIATION_STOPS_JOB and origin.remediation is None
    ):
        # An at job with no queued copy: nothing by hand stops its source (an `atrm` of
        # the running job leaves the run), so the run itself is what to stop.
        # Stopped by signals: name exactly the processes the signal set has.
        if groups is None and table is not None:
            groups = ProcessGroups(table)
        return Advice(
            stop_pids=stop_pids, by_hand=_kill(job, stop_pids, groups), stops_job=True,
            restarts=restarts_of(
                job, stop_pids, protected=guard.pids | guard.never, scripts=scripts
            ),
        )  # fmt: skip
    gone = origin.source_gone()
    if gone is not None:
        return Advice(stop_pids=stop_pids, source_gone=gone)
    # What disable-source keeps, named for this source (a cron.d file is no crontab).
    disables = (
        origin.disables_text(config.paths.cron_spool, config.paths.cron_d)
        if config is not None
        else origin.disables_text(CRON_SPOOL_DIRS, CRON_D)
    )
    if table is not None:
        training = guard.training | set(job.pids) | set(stop_pids)
        collateral = service_collateral(origin, job.root_pid, table, training, sources)
        if collateral is not None:
            # Stopping the source would stop a service: never offered unasked.
            return Advice(
                stop_pids=stop_pids, disables=disables, collateral=collateral,
                restarts=restarts_of(job, stop_pids, collateral, scripts=scripts),
            )  # fmt: skip
    handled = bool(origin.DISABLES) and origin.disable_handled()
    restarts = restarts_of(job, stop_pids, protected=guard.pids | guard.never, scripts=scripts)
    if restarts is not None and restarts.stops == DISABLE_FIRST and not handled:
        # disable-source does not act on this one: the step is the by-hand command.
        stops = f"stop its source first: {origin.remediation}" if origin.remediation else None
        restarts = dataclasses.replace(restarts, stops=stops)
    return Advice(
        stop_pids=stop_pids,
        disable=handled,
        by_hand=origin.remediation,
        disables=disables,
        restarts=restarts,
        then_terminate=not origin.REMEDIATION_STOPS_JOB,
    )


# A shell loop that runs its body forever: `while true`, `while :`, `while [ 1 ]`,
# `while sleep N`, `until false`, `for ((;;))`.
_LOOP = re.compile(
    r"\b(?:while\s+(?:true|:|\[\s*1\s*\]|\(\(\s*1\s*\)\)|sleep\s+[^\s;]+)|until\s+false"
    r"|for\s*\(\(\s*;\s*;\s*\)\))(?=\s*;|\s+do\b|\s*$)"
)


#: What stops a job whose shell loop ``terminate`` stops with it (``Restarts.stops``): a
#: terminate of it records the loop as stopped (``details.source_stopped``).
STOPS_WITH_LOOP = "terminate stops the loop with it"


# A literal `sleep N` run as its own command (after `;`, `&&`, `||` or a newline), up to
# the end of that command: what a loop body pauses for after the job (`sleep "$T"`, `sleep
# 5m` and the like are not read: when is then "when its loop comes round").
_SLEEP = re.compile(r"(?:[;\n]|&&|\|\|)\s*sleep\s+(\d+(?:\.\d+)?)s?\s*(?=;|&&|\|\||\n|$)")
_HEAD_SLEEP = re.compile(r"while\s+sleep\s+(\d+(?:\.\d+)?)s?$")


def loop_pause(text: str, loop: re.Match[str], key: str) -> str:
    """When a shell loop runs the job again, read from its text: ``after about 5 s`` when
    its condition is ``while sleep N`` or its body runs a literal ``sleep N`` after the
    job's command (before the body's ``done``); else ``when its loop comes round``.

    Args:
        text: The loop shell's command text.
        loop: :data:`_LOOP`'s match in ``text``.
        key: What names the job in it (:func:`command_key`).

    Returns:
        The :attr:`Restarts.when` of the loop.
    """
    head = _HEAD_SLEEP.match(loop.group(0))
    if head is not None:
        return f"after about {float(head.group(1)):g} s"
    at = text.find(key, loop.end())
    if at >= 0:
        end = re.compile(r"(?:^|[;\s])done\b").search(text, at)
        pause = _SLEEP.search(text, at + len(key), end.start() if end else len(text))
        if pause is not None:
            return f"after about {float(pause.group(1)):g} s"
    return "when its loop comes round"


#: Reads the script file a shell of the lineage runs (:class:`ScriptFiles`): None when
#: it runs none.
ScriptReader = Callable[[Proc], ScriptRead | None]

_KILL_SHELL = "kill -TERM {pid} (its shell alone: what else it started keeps running)"


def stop_loop_first(pid: int) -> str:
    """The step that stops the shell loop of shell ``pid`` by hand, the job left to
    ``terminate`` (:attr:`~watchdog.model.origin.Restarts.stops`)."""
    return f"stop the loop first: {_KILL_SHELL.format(pid=pid)}"


# The reserved words that open and close a loop's body, as command words.
_DO_DONE = re.compile(r"(?:^|(?<=[\s;&|()]))(do|done)(?=$|[\s;&|()<>])", re.MULTILINE)


# A here-document's operator and word (bash(1) Here Documents); not `<<<` (a string).
_HEREDOC = re.compile(r"(?<!<)<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


def _uncomment(line: str, quote: str) -> tuple[str, str]:
    """``line`` without its comment (from a ``#`` that starts a word outside quotes:
    bash(1) COMMENTS), and the quote still open at its end; ``quote`` is the one open at
    its start (a string may span lines; ``$`` stands for ``$'...'``, :func:`_opens`)."""
    marks, end = _scan_quotes(line, quote)
    for i, c in enumerate(line):
        starts_word = i == 0 or line[i - 1].isspace() or line[i - 1] in ";&|()"
        if c == "#" and not marks[i] and starts_word:
            return line[:i], ""
    return line, end


def shell_code(text: str) -> str:
    """Shell text (a script file's, a ``-c`` string) without its comments (the ``#!``
    line, a loop commented out, ``cmd  # was: while true; do ...``) and here-documents'
    bodies (``cat <<EOF`` text is data the shell does not run): what
    :func:`loop_around` reads. The body of a here-document a shell reads (``bash
    <<'EOF'``) is code, kept as its own :func:`shell_code`."""
    kept: list[str] = []
    ends: list[tuple[str, bool, bool]] = []  # the open here-documents: end, tabs, code
    body: list[str] = []
    quote = ""
    for line in text.split("\n"):
        if ends:
            word, tabs, code = ends[0]
            if (line.lstrip("\t") if tabs else line) != word:
                body.append(line)
                continue
            ends.pop(0)
            if code:
                kept.append(shell_code("\n".join(body)))
            body = []
            continue
        quoted = _quoted(line, quote)
        line, quote = _uncomment(line, quote)
        kept.append(line)
        ends = [
            (m.group(3), m.group(1) == "-", _FEEDS_SHELL.search(line, 0, m.start()) is not None)
            for m in _HEREDOC.finditer(line)
            # Not in a string (`echo "<<EOF"`) nor in arithmetic (`$((1<<N))`): the lines
            # after it taken for its body would hide the loops they hold.
            if not quoted[m.start()]
            and line.count("((", 0, m.start()) <= line.count("))", 0, m.start())
        ]
    return "\n".join(kept)


#: A shell that reads its commands from its standard input (a here-document), the end
#: of the text before a ``<<``: ``bash <<'EOF'``, ``sudo /bin/sh -s <<EOF``.
_FEEDS_SHELL = re.compile(r"(?:^|[;&|(){}\s])(?:\S*/)?(?:ba|da|z|k|mk|a)?sh(?:\s+[-+]\S*)*\s*$")


def _script_text(read: ScriptRead) -> str:
    """A script's text as :func:`shell_code` (its code alone)."""
    return shell_code(read.text or "")


def _opens(text: str, i: int) -> str:
    """The quote the quote character at ``i`` opens: ``'``, ``"``, or ``$`` for
    ``$'...'`` (bash(1) QUOTING: a backslash escapes in it, ``$'it\\'s'`` is one
    string)."""
    return "$" if text[i] == "'" and text[i - 1 : i] == "$" else text[i]


def _closes(quote: str) -> str:
    """The character that closes ``quote`` (:func:`_opens`)."""
    return "'" if quote == "$" else quote


def _quoted(text: str, quote: str = "") -> bytearray:
    """1 at each position of ``text`` inside single or double quotes (the quotes too);
    ``quote`` is the one open at its start (:func:`_opens`)."""
    return _scan_quotes(text, quote)[0]


def _scan_quotes(text: str, quote: str = "") -> tuple[bytearray, str]:
    """:func:`_quoted`'s marks, and the quote still open at the end of ``text`` (the one
    reading of quotes: a backslash escapes outside quotes, in ``"..."`` and ``$'...'``,
    never in ``'...'``)."""
    out = bytearray(len(text))
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            out[i] = 1
            if quote in '"$' and c == "\\" and i + 1 < len(text):
                out[i + 1] = 1
                i += 1
            elif c == _closes(quote):
                quote = ""
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote, out[i] = _opens(text, i), 1
        i += 1
    return out, quote


def loop_around(text: str, key: str, given: bool = False) -> re.Match[str] | None:
    """The first shell loop (:data:`_LOOP`) of ``text`` whose body, from its ``do`` to
    the ``done`` that closes it (nested loops counted), names ``key``
    (:func:`~watchdog.lineage.base.command_key`), else the first loop of any other kind
    (``while [ 1 -eq 1 ]``, ``for f in a b``) whose body does; None when none does. The one rule for
    a ``-c`` string and a script file's text alike (:func:`_loop_in`,
    :func:`script_loops`).

    A loop elsewhere in the text that also runs the job is not the job's: ``python3
    train.py`` then ``while true; do serve; done`` runs the job once and then other
    work, and its shell must not be taken for the job's wrapper. A body left open (no
    closing ``done``) runs to the end of the text. A loop inside quotes is a string,
    unless the string is code (:func:`_loops`, ``eval 'while ...'``).

    Args:
        text: Shell code (:func:`shell_code`: comments and here-documents already out).
        key: What names the job.
        given: The job is what the shell is given as its arguments (``bash loop.sh
            train.py``, ``bash -c 'while :; do "$@"; done' sh python3 train.py``: the
            body runs ``"$@"``): then, when no body names ``key``, the first loop.
    """
    first = None
    for loop, body, _end in _loops(text):
        first = first or loop
        if body is not None and _runs(body, key):
            return loop
    if given and first is not None:
        return first
    # Any other loop whose body runs the job runs it again too: `while [ 1 -eq 1 ]`,
    # `until [ -e /stop ]`, `for f in a b c` (before, none was seen: "nothing restarts
    # it" of a job its loop started again). Named by its head.
    for loop, body, _end in _loops(text, every=True):
        if _body_runs(body, key, given):
            return _LOOP_HEAD.match(text, loop.start()) or loop
    return None


#: A loop's head, from its reserved word to its ``do``: ``while [ 1 -eq 1 ]``.
_LOOP_HEAD = re.compile(r"(?:while|until|for|select)\b[^\n]*?(?=\s*;\s*do\b|\s+do\b|$)", re.M)


def _loops(text: str, every: bool = False) -> Iterator[tuple[re.Match[str], str | None, int]]:
    """Each shell loop of ``text`` outside quotes (``echo "while true; do ..."`` is a
    string), with its body: from its ``do`` to the ``done`` that closes it, nested loops
    counted, or to the end of the text when none does; None when it has no ``do``; and
    where the body ends. ``every``: every ``while``, ``until``, ``for`` and ``select``
    loop (:data:`_ANY_LOOP`), not only the endless ones :data:`_LOOP` knows, and those
    in a string too unless ``echo`` or ``printf`` prints it (:func:`_printed`): a string
    may be code (``eval 'while ...'``, ``sh -c 'while ...'``)."""
    quoted = _quoted(text)
    found = (m for m in _ANY_LOOP.finditer(text) if _command_word(text, m.start()))
    for loop in found if every else _LOOP.finditer(text):
        inside = quoted[loop.start()]
        if inside and (not every or _printed(text, quoted, loop.start())):
            continue
        depth, start, end = 0, None, len(text)
        for word in _DO_DONE.finditer(text, loop.end()):
            if quoted[word.start()] != inside:
                continue
            if word.group(1) == "do":
                depth += 1
                start = word.end() if start is None else start
            elif depth > 0:
                depth -= 1
                if depth == 0:
                    end = word.start()
                    break
        if inside and start is None:
            continue  # words in a string (`--note "for the paper"`), no loop in it
        yield loop, (None if start is None else text[start:end]), end


#: Any loop's reserved word (bash(1) Compound Commands), whatever its condition: ``while
#: [ 1 -eq 1 ]``, ``until [ -e /stop ]``, ``for x in $(seq 1000)``, ``while read l``.
_ANY_LOOP = re.compile(r"\b(?:while|until|for|select)(?=[\s(]|$)")

#: What may stand right before a command word: a separator, or a reserved word that
#: takes a command after it.
_BEFORE_COMMAND = re.compile(r"(?:^|[\n;&|(){}!'\"]|(?:^|[\s;&|()'\"])(?:do|then|else|elif|time))$")


def _printed(text: str, quoted: bytearray, at: int) -> bool:
    """True when the string holding position ``at`` is an argument of ``echo`` or
    ``printf`` with no command substitution before ``at``: data, not code."""
    first = at
    while first > 0 and quoted[first - 1]:
        first -= 1
    start = first
    while start > 0 and (quoted[start - 1] or text[start - 1] not in "\n;&|(){}"):
        start -= 1
    words = text[start:first].split()
    return (
        bool(words)
        and words[0] in ("echo", "printf")
        and "$(" not in text[first:at]
        and "`" not in text[first:at]
    )


def _command_word(text: str, at: int) -> bool:
    """True when the word at ``at`` is where a command starts (``while`` as a loop, not
    an argument: ``python3 train.py --for x``)."""
    return _BEFORE_COMMAND.search(text[:at].rstrip(" \t")) is not None


def _runs(body: str, key: str) -> bool:
    """True when a loop's body names ``key`` (:func:`mentions`) outside what ``echo`` or
    ``printf`` prints: ``echo "train.py finished"; serve`` names the job, runs other
    work (taken for the job's loop, its shell was killed with the job)."""
    quoted = _quoted(body)
    start = 0
    for i in range(len(body) + 1):
        if i < len(body) and (quoted[i] or body[i] not in "\n;&|"):
            continue
        words = body[start:i].split()
        while words and words[0] in _LEAD_WORDS:
            words.pop(0)  # `then echo ...`: the command is the word after
        if words and words[0] not in ("echo", "printf") and mentions(body[start:i], key):
            return True
        start = i + 1
    return False


#: Reserved words that may stand before a simple command (bash(1) SHELL GRAMMAR).
_LEAD_WORDS = frozenset({"do", "then", "else", "elif", "if", "while", "until", "{", "(", "!"})


#: A body that runs what the shell is given (``"$@"``, ``$1``): the job, when it is.
_GIVEN_WORDS = re.compile(r"\$\{?[@*1-9]")


def carries_job(
    cmdline: Sequence[str], exe: str | None, key: str, read: Callable[[], ScriptRead | None]
) -> bool:
    """True when a wrapper above a job exists for that job's command: the one rule of
    the advice's wrappers (:func:`exclusive_wrappers`) and ``terminate``'s.

    It carries the job's command (cron's ``sh -c CMD``, ``timeout 300 CMD``) and its
    ``-c`` text runs no loop of other work, or it runs a script file that runs no loop
    of other work and either is given the job's command (``bash run.sh train.py``) or
    loops over the job (:func:`script_loops`). A shell that also loops over something
    else (``python3 train.py; while true; do python3 -m http.server; sleep 60; done``,
    in ``-c`` text or in the script it runs) is a service that started the job, not the
    job's: ended with it, its other work would end too. Whether its descendants are all
    the job's is the caller's to check.

    Args:
        cmdline: The wrapper's command line (``/proc/PID/cmdline``).
        exe: Its executable, or None to go by ``cmdline[0]``.
        key: What names the job (:func:`~watchdog.lineage.base.command_key`).
        read: Reads its script file as it is now (None when it runs none); called
            only for a shell that runs a script file.
    """
    named = mentions(" ".join(cmdline), key)
    if script_path(cmdline, exe) is None:
        return named and not _other_loops(*_command_code(cmdline, exe, key), key)
    # A script's arguments are data for the file, which says what runs: `bash serve.sh
    # train.py` may run the trainer once and then a server for good.
    text = _code_as_run(read())
    if text is None or not (named or loop_around(text, key) is not None):
        return False
    return not _other_loops(text, named, key)


def _other_loops(text: str, given: bool, key: str) -> bool:
    """True when ``text`` holds a loop of anything but the job: any loop
    (``while [ 1 -eq 1 ]``, ``until [ -e /stop ]``, ``for x in $(seq 1000)``, not only
    the endless ones :func:`loop_around` reads) whose body does not run ``key`` (nor, the
    job ``given``, ``"$@"``), other than a loop inside the body of one that does."""
    inside = -1  # the end of the body of the last loop that runs the job
    for loop, body, end in _loops(text, every=True):
        if loop.start() < inside:
            continue
        if not _body_runs(body, key, given):
            return True
        inside = end
    return False


def _body_runs(body: str | None, key: str, given: bool) -> bool:
    """True when a loop's body (None: it has none) runs the job: a command naming
    ``key`` (:func:`_runs`), or, the job ``given`` to the shell, ``"$@"`` or ``$1``."""
    return body is not None and (_runs(body, key) or (given and bool(_GIVEN_WORDS.search(body))))


def script_loops(read: ScriptRead | None, key: str, given: bool = False) -> bool:
    """True when a shell's script file (:func:`~watchdog.lineage.scriptfile.read_script`),
    read and not modified since the shell started, holds a shell loop whose body runs
    ``key`` (:func:`loop_around`), as a ``-c`` text must name it to make its shell the
    job's wrapper. A file that could not be read, changed since, or read by its path
    rather than through the shell's own descriptor of it (not surely the file the shell
    reads) never does: its shell is then never signalled for the job. ``given``: the
    shell is given the job's command as its arguments (``bash run.sh train.py``), which
    the file runs, in a loop or not: any file read as it runs does."""
    text = _code_as_run(read)
    return text is not None and (given or loop_around(text, key) is not None)


def _code_as_run(read: ScriptRead | None) -> str | None:
    """A script file's code (:func:`shell_code`) when it was read as its shell runs it:
    through the shell's own descriptor, unchanged since the shell started; else None."""
    if read is None or read.text is None or read.changed or not read.own_fd:
        return None
    return _script_text(read)


def _script_of(proc: Proc, read: ScriptRead) -> str:
    """``the script `/opt/x/run.sh` of PID 812``: the path is host text, quoted."""
    return f"the script {code_span(safe_text(clip(read.path, 160)))} of PID {proc.pid}"


def _loop_in(
    proc: Proc, key: str, stop_pids: Collection[int], scripts: ScriptReader | None
) -> Restarts | None:
    """The loop of ``proc``'s ``-c`` text, else of the script file it runs, that runs
    the command ``key`` names (:func:`loop_around`: in its body, or as an argument the
    shell is given: ``bash loop.sh train.py``); None when neither holds one."""
    text, given = _command_code(proc.cmdline, proc.exe, key)
    found = loop_around(text, key, given)
    where = f"in PID {proc.pid}"
    read = None
    if found is None and scripts is not None:
        read = scripts(proc)
        if read is None or read.text is None:
            return None
        text = _script_text(read)
        found = loop_around(text, key, mentions(" ".join(proc.cmdline), key))
        where = f"in {_script_of(proc, read)} (as the file reads now)"
    if found is None:
        return None
    how = f"shell loop {code_span(safe_text(clip(' '.join(found.group(0).split()), 80)))} {where}"
    if read is not None and read.changed:
        # What the shell runs is the file as it was when it read it: maybe no loop.
        how += "; the file changed after the shell started, so whether it still loops is unsure"
        return Restarts("unknown", how, stop_loop_first(proc.pid), outlives_source=True)
    when = loop_pause(text, found, key)
    if proc.pid in stop_pids:
        return Restarts(when, how, STOPS_WITH_LOOP, False, shell=(proc.pid, proc.start_ticks))
    return Restarts(when, how, stop_loop_first(proc.pid), outlives_source=True)


def _command_code(cmdline: Sequence[str], exe: str | None, key: str) -> tuple[str, bool]:
    """The code ``proc``'s command line runs: :func:`shell_code` of a shell's ``-c``
    text, its own or the one it runs (``nohup bash -c TEXT``, ``timeout 300 sh -c
    TEXT``), else of the whole command line (``flock /run/x -c TEXT``); and whether the
    job is given to that text as an argument (``bash -c '... "$@" ...' sh python3
    train.py``)."""
    for i in range(len(cmdline)):
        dash_c = command_string(cmdline[i:], exe if i == 0 else None)
        if dash_c is not None:
            return shell_code(dash_c[0]), mentions(" ".join(dash_c[1]), key)
    return shell_code(" ".join(cmdline)), False


def shell_loop(
    job: Job, stop_pids: Collection[int], scripts: ScriptReader | None = None
) -> Restarts | None:
    """A shell loop above the job that runs its command again when it ends, read from
    the wrapper's command text (``bash -c 'while true; do python3 train.py; sleep 5;
    done'``) or, given ``scripts``, from the script file it runs (``bash retrain.sh``, as
    the file reads now): when (:func:`loop_pause`), and whether ``terminate`` stops the
    loop with the job (it does when the loop's shell runs nothing else: it is one of
    ``stop_pids``). A script changed since its shell started gives ``unknown``: it may
    come back. Files the script ``source``s and its functions are not read."""
    key = command_key(job.cmdline)
    if key is None:
        return None
    for proc in job.lineage[1:]:
        if proc.pid <= 1 or not is_wrapper(proc):
            return None
        found = _loop_in(proc, key, stop_pids, scripts)
        if found is not None:
            return found
    return None


def script_doubt(job: Job, scripts: ScriptReader) -> Restarts | None:
    """A shell above the job that runs a script file which could not be read, or which
    changed since the shell started and reads now as no loop of the job: whether it runs
    the job again is unknown (``unknown``: it may come back). None when every such
    script was read as it was run."""
    for proc in job.lineage[1:]:
        if proc.pid <= 1 or not is_wrapper(proc):
            return None
        read = scripts(proc)
        if read is None or (read.text is not None and not read.changed):
            continue
        why = (
            f"could not be read ({safe_text(read.unread or 'unknown')})"
            if read.text is None
            else "changed after the shell started"
        )
        return Restarts(
            "unknown",
            f"{_script_of(proc, read)} {why}: whether it runs the job again is unknown",
            f"if it loops, stop its shell first: {_KILL_SHELL.format(pid=proc.pid)}",
            outlives_source=True,
        )
    return None


def restarts_of(
    job: Job,
    stop_pids: Collection[int],
    collateral: Collateral | None = None,
    protected: Collection[int] = frozenset(),
    scripts: ScriptReader | None = None,
) -> Restarts | None:
    """What starts ``job`` again once it ends: a service's own launcher (``collateral``),
    a shell loop that ``terminate`` leaves, what its origin kind answers
    (:meth:`~watchdog.model.Origin.restarts`), a loop ``terminate`` stops with it, a
    shell whose script file could not be read as it runs (:func:`script_doubt`), or a
    launcher that still runs (for origins that name no spawner; never one of
    ``protected``, the guard's PIDs); None when nothing does. ``scripts`` reads the
    script files of the lineage's shells (None: only ``-c`` text is read).
    """
    if collateral is not None:
        return Restarts(
            "when its service launches it again",
            f"{collateral.what}'s own process {collateral.others[0]} (an in-process launcher)",
            f"disable-source --stop-service {collateral.arg} first (it stops the service)",
        )
    loop = shell_loop(job, stop_pids, scripts)
    if loop is not None and loop.after_terminate:
        return loop
    answer = job.origin.restarts()
    if answer is not None or loop is not None:
        return answer or loop
    doubt = script_doubt(job, scripts) if scripts is not None else None
    if doubt is not None:
        return doubt
    if not job.origin.SOURCE_FIELDS:
        # Nothing known starts it (a shell, an orphan, unknown): what launched it may.
        # The walk stops at spawners of other people's work (sshd, tmux, cron...).
        # terminate leaves the launcher: whether it starts the job again cannot be told,
        # so the terminate ends may-return, never ok (stop 46's fresh user: `ok`, then
        # back 5 s later from a supervisor script, and the pages named no stop).
        for proc in launching_ancestors(job, protected=protected)[:1]:
            text = command_text(proc.cmdline, 80) or proc.args_text
            return Restarts(
                "unknown",
                f"its launcher PID {proc.pid} {code_span(text)} still runs and may start it again",
                f"stop the launcher first: kill -TERM {proc.pid}",
                launcher=(proc.pid, proc.start_ticks),
            )
    return None


def _own_stop_set(
    job: Job, guard: ScanProtection, table: ProcessTable | None, scripts: ScriptReader | None
) -> tuple[int, ...]:
    """What a terminate of ``job`` stops of its own: its processes and its exclusive
    wrappers (:func:`exclusive_wrappers`), the root's first; never a member the guard
    protects (sanctioned earlier and still alive, on the protect list): it is never
    named, and the by-hand kill never reaches it through its group. The one rule for a
    job's advice and for each copy its terminate takes in."""
    kept = {pid for pid in job.pids if _protected_member(pid, job, guard, table)}
    wrappers = exclusive_wrappers(job, table, kept, scripts, guard) if table is not None else []
    return tuple(p for p in (*job.pids, *(w.pid for w in wrappers)) if p not in kept)


def _protected_member(
    pid: int, job: Job, guard: ScanProtection, table: ProcessTable | None
) -> bool:
    by_pid = {p.pid: p for p in job.lineage}
    proc = by_pid.get(pid) or (table.get(pid) if table is not None else None)
    return proc is not None and guard.process_refusal(proc) is not None


class ProcessGroups:
    """Process group ID -> member PIDs of one table, built on first use and once per
    scan (not once per job: a scan with hundreds of orphaned jobs walks the table once).

    Args:
        table: The scan's process table.
    """

    def __init__(self, table: ProcessTable) -> None:
        self.table = table
        self._members: dict[int, set[int]] = {}

    def members(self, pgid: int) -> set[int]:
        """Every PID of group ``pgid`` (empty when none)."""
        found = self._members.get(pgid)
        if found is None:
            # One comprehension per asked group: a scan asks for a few groups, and
            # indexing every group of a 10,000-process table costs more than that.
            found = {pid for pid, p in self.table.procs.items() if p.pgid == pgid}
            self._members[pgid] = found
        return found


def _kill(job: Job, stop_pids: Sequence[int], groups: ProcessGroups | None) -> str:
    """``kill -TERM`` for the job: its whole process group when everything in the group
    may be stopped (``-- -PGID``), else the processes that may, by PID."""
    mine = set(stop_pids)
    root = job.lineage[0] if job.lineage else None
    if groups is not None and root is not None and root.pgid > 1:
        group = groups.members(root.pgid)
        if group and group <= mine and root.pgid in mine:
            return command("kill", "-TERM", "--", f"-{root.pgid}")
    return command("kill", "-TERM", *sorted(mine, key=lambda p: (p not in job.pids, p)))


#: A copy's own stop set (its processes and exclusive wrappers) and its restart answer.
_CopyAnswer = tuple[tuple[int, ...], Restarts | None]


def _copy_answer(
    copy: Job, guard: ScanProtection, table: ProcessTable, scripts: ScriptReader | None
) -> _CopyAnswer:
    """What a copy adds to the terminate of a job that takes it in: its processes and
    its own exclusive wrappers (the rule each instance follows, :func:`exclusive_wrappers`),
    and what starts it again, read from its own lineage (:func:`restarts_of`)."""
    own = _own_stop_set(copy, guard, table, scripts)
    return own, restarts_of(copy, own, protected=guard.pids | guard.never, scripts=scripts)


def scope_loops(
    job: Job,
    stop_pids: Collection[int],
    scope: ScopeCopies,
    guard: ScanProtection,
    scripts: ScriptReader | None,
) -> list[Restarts]:
    """What a loop between two runs starts again: a shell of the job's owner, in a
    process group or session ``terminate`` takes copies from, that it does not stop,
    whose loop runs the job's command (its ``-c`` text or script: :func:`_loop_in`).
    The user's script that left ``nohup bash -c 'while true; do python3 train.py; sleep
    5; done' &`` beside the job: in its ``sleep`` no copy runs, nothing below the loop is
    a job, and the terminate said ``ok``. Such a shell is never stopped for it (it runs
    the ``sleep``, not the job): the answer says the job comes back. Only a loop that
    runs the job's very command line, arguments too (``python3 train.py --prod`` is
    another run, maybe a sanctioned one, whose shell is then never named as the rogue's
    source), and never a sanctioned or ignored job's shell."""
    key = command_key(job.cmdline)
    if key is None or not job.cmdline:
        return []
    out: list[Restarts] = []
    for shell in scope.shells(job, stop_pids):
        if (shell.pid, shell.start_ticks) in guard.identities:
            continue
        if not _runs_command(shell, job.cmdline, key, scripts):
            continue
        found = _loop_in(shell, key, stop_pids, scripts)
        if found is not None and found.after_terminate:
            out.append(found)
    return out


def _runs_command(
    shell: Proc, cmdline: Sequence[str], key: str, scripts: ScriptReader | None
) -> bool:
    """True when the shell's code (its ``-c`` text, else its script as it reads now)
    runs ``cmdline`` as a whole command: the words as the job's argv, nothing after
    them but the command's end (``;``, ``&``, ``|``, ``)``, a newline)."""
    text, _given = _command_code(shell.cmdline, shell.exe, key)
    if not mentions(text, key) and scripts is not None:
        read = scripts(shell)
        text = _script_text(read) if read is not None and read.text is not None else ""
    words = r"\s+".join(re.escape(w) for w in cmdline)
    return re.search(r"(?:^|[\s;&|(])" + words + r"[ \t]*(?:$|[;&|)\n])", text) is not None


def _with_copies(
    advice: Advice,
    job: Job,
    copies: Sequence[Job],
    answer: Callable[[Job], _CopyAnswer],
    groups: ProcessGroups | None,
    loops: Callable[[Sequence[int]], list[Restarts]] | None = None,
    places: Sequence[str] = (),
) -> Advice:
    """``advice`` over ``job`` and the copies its terminate takes in with it
    (:class:`~watchdog.policy.copies.ScopeCopies`): each copy's own stop set is stopped
    with it, and whether it comes back is read from every instance's lineage (the
    answer that says the most of a return: :func:`~watchdog.policy.copies.most_restarting`).
    A loop above a copy is then the job's as a loop above its root is: stopped with it
    when its shell runs nothing but that copy, else named, to stop first. ``answer``
    gives a copy's (:func:`_copy_answer`, once per copy and scan); ``loops`` the loops
    between runs in the terminate's groups and sessions, given the whole stop set
    (:func:`scope_loops`); ``places`` where the terminate takes the copies from, in
    words (:func:`_copies_said`). ``advice`` as it is without copies or such loops."""
    stop = list(advice.stop_pids)
    answers = [advice.restarts]
    for copy in copies:
        own, again = answer(copy)
        stop += own
        answers.append(again)
    stop = list(dict.fromkeys(stop))
    between = loops(stop) if loops is not None else []
    if not copies and not between:
        return advice
    answers += between
    # The by-hand kill names what terminate stops (only where the kill is the advice).
    by_hand = _kill(job, stop, groups) if advice.stops_job else advice.by_hand
    return dataclasses.replace(
        advice,
        stop_pids=tuple(stop),
        restarts=most_restarting(answers),
        by_hand=by_hand,
        copies=_copies_said(copies, places),
    )


def _copies_said(copies: Sequence[Job], places: Sequence[str]) -> Copies | None:
    """The copies a job's terminate takes in, as the words name them (:class:`Copies`:
    the first few with their command lines, host text quoted), or None for none."""
    if not copies:
        return None
    named = tuple(f"PID {c.root_pid} {quoted_command(c.cmdline, 60)}" for c in copies)
    return Copies(tuple(c.root_pid for c in copies), named[:COPIES_NAMED], tuple(places))


def _place(table: ProcessTable, kind: str, leader: int) -> str:
    """``process group 12130 whose leader is gone`` (or ``session``; ``whose leader it
    stops`` when the leader is one of the job's): where a copy was taken from."""
    where = "process group" if kind == "pgid" else "session"
    whose = "whose leader is gone" if table.get(leader) is None else "whose leader it stops"
    return f"{where} {leader} {whose}"


#: The process a restart answer's next step would have one signal (a loop's shell, a
#: launcher): the steps name it only as ``kill -TERM PID`` (:func:`stop_loop_first`).
_STEP_KILL = re.compile(r"\bkill -TERM (\d+)\b")


def _no_step_against(
    again: Restarts | None, guard: ScanProtection, table: ProcessTable | None
) -> Restarts | None:
    """``again`` without a next step that signals a process the guard refuses (a loop's
    shell or a launcher that ``enforcement.protect`` names, a sanctioned job's, init or
    rogue-watchdog's own): no advice against a protected process, in words either. The
    answer still says what starts the job again, and why nothing is advised against it."""
    if again is None or again.stops is None or table is None:
        return again
    m = _STEP_KILL.search(again.stops)
    proc = table.get(int(m.group(1))) if m is not None else None
    why = guard.process_refusal(proc) if proc is not None else None
    if why is None:
        return again
    return dataclasses.replace(again, how=f"{again.how} ({why}: never signalled)", stops=None)


def with_advice(
    jobs: Sequence[Job],
    guard: ScanProtection,
    table: ProcessTable | None = None,
    config: Config | None = None,
) -> list[Job]:
    """The jobs with their advice decided: a refused job's origin carries no
    remediation (the JSON ``origin.remediation`` is never a command that targets
    something protected), an allowed one the guard's; its commands carry the
    ``--config`` that judged it (:func:`watchdog.hostpaths.config_args`)."""
    out = []
    groups = ProcessGroups(table) if table is not None else None
    cli_args = config_args(config.source) if config is not None else ""
    sources = SourceProcesses(table) if table is not None else None
    scripts = ScriptFiles(table) if table is not None else None
    scope = ScopeCopies(jobs, table) if table is not None else None
    answers: dict[int, _CopyAnswer] = {}

    def answer(copy: Job) -> _CopyAnswer:
        if copy.root_pid not in answers:
            assert scope is not None
            answers[copy.root_pid] = _copy_answer(copy, guard, scope.table, scripts)
        return answers[copy.root_pid]

    for job in jobs:
        advice = advise(job, guard, table, config, groups, sources, scripts)
        if scope is not None and advice.refused is None:
            found = [
                (c, kind, leader)
                for c, kind, leader in scope.copies_in(job, advice.stop_pids)
                if guard.job_refusal(c) is None
            ]
            copies = [c for c, _kind, _leader in found]
            places = dict.fromkeys(_place(scope.table, k, leader) for _c, k, leader in found)
            loops = functools.partial(scope_loops, job, scope=scope, guard=guard, scripts=scripts)
            advice = _with_copies(advice, job, copies, answer, groups, loops, list(places))
        advice = dataclasses.replace(
            advice, cli_args=cli_args, restarts=_no_step_against(advice.restarts, guard, table)
        )
        origin = dataclasses.replace(job.origin, remediation=advice.by_hand)
        out.append(dataclasses.replace(job, origin=origin, advice=advice))
    return out

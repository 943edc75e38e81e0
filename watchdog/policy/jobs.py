"""Group training processes into jobs.

A job is a process tree judged as one: its root is the topmost training process, its
members are the root and every descendant (workers, data loaders). An 8-GPU torchrun is
one job, not 17. Roots that were re-parented (their parent exited) and share a process
group are merged: the leader of a torchrun that was killed leaves its workers behind as
siblings under PID 1, and they are still one job. So are the workers of one launch that
each got a session of their own: the same command but the rank, started together, from
one parent or all re-parented.
"""

from __future__ import annotations

import functools
import grp
import os
import pwd
import re
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from ..config import IgnoreEntry
from ..config.base import Regex, RegexError
from ..hosttext import code_span, command_text
from ..lineage.base import command_key, exe_name, is_wrapper, mentions, runs_program
from ..model import GpuHeld, GpuProcess, Job, Proc
from ..sources.procfs import ProcessTable

# Programs that adopt and reap orphans (init systems, container inits and shims): a
# zombie below one of them is not that program's doing, and the program is never a job.
REAPERS = frozenset(
    {
        "systemd", "init", "tini", "tini-static", "docker-init", "dumb-init", "catatonit",
        "conmon", "containerd-shim", "containerd-shim-runc-v2", "s6-svscan", "runsvdir",
    }
)  # fmt: skip


def zombie_holder(zombie: Proc, table: ProcessTable) -> Proc | None:
    """The parent that holds a zombie's resources and would free them by reaping it, when
    that parent is a visible ordinary process. None when the parent is PID 1, the init of
    a PID namespace (``NSpid`` ends in 1, a container's PID 1), a kernel thread or a
    known reaper (:data:`REAPERS`): those reap, and are never jobs.

    Holding a zombie does not make the parent a job: :func:`holder_refusal` says when its
    job may count the zombie's GPU memory.
    """
    parent = table.get(zombie.ppid)
    if parent is None or zombie.ppid <= 1 or parent.kernel_thread:
        return None
    if parent.nspid[-1:] == (1,) or exe_name(parent) in REAPERS:
        return None
    return parent


# Terminal multiplexers hold other sessions: never anyone's exclusive wrapper.
_MULTIPLEXERS = frozenset({"tmux", "screen", "SCREEN", "dtach", "abduco"})
# At most this many processes of a holder's tree are looked at, and named in words.
_MAX_WALK = 4096
_MAX_NAMED = 3


def other_work(proc: Proc, table: ProcessTable, trainers: Set[int]) -> list[Proc]:
    """The live processes below ``proc`` that are not training: neither one of
    ``trainers`` nor below one, nor a wrapper with such a process below it (a wrapper
    with nothing live below it is an idle shell: other work too). Zombies are gone
    already and never count.

    Args:
        proc: A process, usually a wrapper holding a zombie.
        table: The refreshed process table.
        trainers: PIDs training by what they do themselves (:attr:`TrainingEvidence.own`).

    Returns:
        The other work, ascending by PID (empty when ``proc`` runs only training).
    """
    out: list[Proc] = []
    stack = list(table.children(proc.pid))
    seen = {proc.pid}
    while stack and len(seen) < _MAX_WALK:
        cur = table.get(stack.pop())
        if cur is None or cur.pid in seen or cur.is_zombie or cur.pid in trainers:
            continue
        seen.add(cur.pid)
        kids = [k for k in table.children(cur.pid) if (p := table.get(k)) and not p.is_zombie]
        if is_wrapper(cur) and kids:
            stack.extend(kids)  # a wrapper is judged by what runs below it
        else:
            out.append(cur)
    return sorted(out, key=lambda p: p.pid)


def holder_refusal(
    proc: Proc, table: ProcessTable, trainers: Set[int], zombie: Proc | None = None
) -> str | None:
    """Why ``proc``, not training by what it does itself, must not be a job for an
    unreaped zombie's GPU memory; None when it may (NVML lists a dead process until its
    parent reaps it, and that parent frees the memory by reaping it or exiting).

    It may when it is training itself or below a training process (then it is a job, or
    a member of one, anyway), or when it is an exclusive wrapper of training: a shell,
    ``timeout``, ``nohup``... (never a multiplexer) whose command line carries the
    zombie's command and that runs nothing but training (``bash -c 'while true; do
    python3 train.py; done'``). A program that is no wrapper (a hub that launches
    trainers: it does other work), a person's shell, or a shell that also runs a web
    server never is: their job would hold what they run besides.

    Args:
        proc: The zombie's parent (:func:`zombie_holder`), or a job root to check.
        table: The refreshed process table.
        trainers: PIDs training by what they do themselves.
        zombie: The zombie it holds; None checks ``proc`` as a wrapper alone (the guard,
            which does not know which zombie made a root a job).

    Returns:
        Why not, in words (``it runs other work: PID 51 `python3 -m http.server```).
    """
    if any(p.pid in trainers for p in table.ancestors(proc.pid)):
        return None
    if not is_wrapper(proc):
        return "it is no training process and no wrapper of one (it may do other work)"
    if exe_name(proc) in _MULTIPLEXERS or proc.comm.startswith("tmux"):
        return "it is a terminal multiplexer (it holds other sessions)"
    if zombie is not None:
        key = command_key(zombie.cmdline) or zombie.comm
        if not key or not mentions(" ".join(proc.cmdline), key):
            return f"its command line does not run the trainer's ({key or 'unknown'})"
    others = other_work(proc, table, trainers)
    if others:
        named = ", ".join(
            f"PID {p.pid} {code_span(command_text(p.cmdline, 60) or p.args_text)}"
            for p in others[:_MAX_NAMED]
        )
        more = f" and {len(others) - _MAX_NAMED} more" if len(others) > _MAX_NAMED else ""
        return f"it runs other work: {named}{more}"
    return None


def is_launcher(proc: Proc, launchers: Sequence[Regex]) -> bool:
    """True when ``proc`` runs a launcher: a pattern matches its executable, or its
    command line where the line names what runs (the program, or an interpreter's
    script or module; :func:`~watchdog.lineage.base.program_span`).

    A process that only names a launcher script as data is not one: ``tail -f
    train.py``, ``vim train.py``, ``pgrep -f 'python3 train.py'``. Matching never uses
    ``comm`` (15 characters, renamed by setproctitle).
    """
    if proc.kernel_thread or not proc.cmdline or is_wrapper(proc):
        return False
    combined = any_of(tuple(launchers))
    if combined is not None:
        # The same answer with two searches instead of two per pattern: the leftmost match
        # of the alternation starts where the leftmost-starting pattern's match does, and
        # it matches the executable iff one pattern does.
        return runs_program(proc.cmdline, combined) or bool(proc.exe and combined.search(proc.exe))
    return any(
        runs_program(proc.cmdline, p) or (proc.exe and p.search(proc.exe)) for p in launchers
    )


@functools.lru_cache(maxsize=8)
def any_of(patterns: tuple[Regex, ...]) -> Regex | None:
    """One RE2 pattern matching where any of ``patterns`` does, each in its own group
    (an inline flag applies to its own pattern only).

    Returns:
        The alternation; None for no pattern (nothing matches) or when it does not
        compile (too large for RE2's memory budget, or a flag Python's ``re`` refuses
        inside a group): the caller then searches pattern by pattern.
    """
    if not patterns:
        return None
    try:
        return Regex("|".join(f"(?:{p.pattern})" for p in patterns))
    except RegexError:
        return None


def ignore_match(proc: Proc, ignore: Sequence[IgnoreEntry]) -> IgnoreEntry | None:
    """The first ignore entry matching ``proc`` by its own keys (``exe``, ``cmdline``,
    ``user``, ``group``); an entry naming an origin kind or a class matches whole jobs
    only (:func:`ignore_match_job`).

    An ``exe`` pattern with a ``/`` matches the full executable path (what a user cannot
    fake outside their own directories); one without matches the basename, which any
    user can choose by copying a binary: the defaults are all full paths.
    """
    return next((e for e in ignore if not e.per_job and _proc_matches(proc, e)), None)


def ignored_pids(procs: Iterable[Proc], ignore: Sequence[IgnoreEntry]) -> frozenset[int]:
    """The PIDs of ``procs`` that :func:`ignore_match` matches.

    Processes alike in every key an entry reads (executable, command line, user, uid,
    comm) are matched once: 4,096 forked workers of one launcher cost one match.

    Args:
        procs: Processes to check.
        ignore: The ignore list.

    Returns:
        The matching PIDs.
    """
    if not any(not e.per_job for e in ignore):
        return frozenset()
    seen: dict[tuple[object, ...], bool] = {}
    out: set[int] = set()
    for proc in procs:
        key = (proc.exe, proc.cmdline, proc.user, proc.uid, proc.comm)
        hit = seen.get(key)
        if hit is None:
            hit = seen[key] = ignore_match(proc, ignore) is not None
        if hit:
            out.add(proc.pid)
    return frozenset(out)


def ignore_match_job(job: Job, ignore: Sequence[IgnoreEntry]) -> IgnoreEntry | None:
    """The first ignore entry matching ``job``: its root by the process keys, its origin
    kind and its workload class by the others; every key an entry gives must match.

    A job of class ``training`` matches no entry that names a class (a class never hides
    training: a notebook kernel running a training script is training).
    """
    root = job.lineage[0] if job.lineage else None
    for entry in ignore:
        if root is None or not _proc_matches(root, entry):
            continue
        if entry.origin_kind and job.origin.kind not in entry.origin_kind:
            continue
        if entry.workload and job.workload not in entry.workload:
            continue
        return entry
    return None


def _proc_matches(proc: Proc, entry: IgnoreEntry) -> bool:
    """True when every process key ``entry`` gives matches ``proc``."""
    if entry.exe is not None:
        target = proc.exe if "/" in entry.exe else exe_name(proc)
        if target is None or not fnmatchcase(target, entry.exe):
            return False
    if entry.cmdline is not None and not fnmatchcase(" ".join(proc.cmdline), entry.cmdline):
        return False
    if entry.user is not None and proc.user != entry.user:
        return False
    return entry.group is None or in_group(proc.user, proc.uid, entry.group)


@functools.lru_cache(maxsize=256)
def _group_members(group: str) -> tuple[int | None, frozenset[str]]:
    try:
        g = grp.getgrnam(group)
    except KeyError:
        return None, frozenset()
    return g.gr_gid, frozenset(g.gr_mem)


def in_group(user: str | None, uid: int | None, group: str) -> bool:
    """True when ``user`` belongs to ``group`` per the host's user and group databases:
    its primary group (passwd) or a supplementary one (group's member list).

    The databases are read once per group and user for the life of the process (a
    daemon reload builds new scanners; group edits take effect at a restart).
    """
    gid, members = _group_members(group)
    if gid is None:
        return False
    if user is not None and user in members:
        return True
    if uid is None and user is not None:
        return _primary_gid_of(user) == gid  # a recorded run: its user's name only
    return uid is not None and _primary_gid(uid) == gid


@functools.lru_cache(maxsize=1024)
def _primary_gid_of(user: str) -> int | None:
    try:
        return pwd.getpwnam(user).pw_gid
    except KeyError:
        return None


@functools.lru_cache(maxsize=1024)
def _primary_gid(uid: int) -> int | None:
    try:
        return pwd.getpwuid(uid).pw_gid
    except (KeyError, OverflowError):
        return None


@dataclass
class TrainingEvidence:
    """Why each PID counts as training: ``nvml``, ``device-fd``, ``launcher``,
    ``gpu-library``.

    Attributes:
        by_pid: PID -> why it counts.
        own: PIDs that count by what they do themselves; the rest of ``by_pid`` counts
            only for the GPU memory of a zombie it has not reaped (see ``held``).
        held: Zombie PID -> the PID whose job counts its NVML listing (its parent).
        unheld: Zombie PID -> why its parent is no job for it (:func:`holder_refusal`).
    """

    by_pid: dict[int, frozenset[str]] = field(default_factory=dict)
    own: set[int] = field(default_factory=set)
    held: dict[int, int] = field(default_factory=dict)
    unheld: dict[int, str] = field(default_factory=dict)

    def add(self, pid: int, why: str, own: bool = True) -> None:
        """Record that ``pid`` counts as training for ``why`` (``own``: by itself)."""
        have = self.by_pid.get(pid, _NO_EVIDENCE)
        key = (have, why)
        # Every PID with the same reasons holds one shared set: 4,096 workers of one job
        # made 4,096 sets a tick, a fifth of the tick's memory (issue 34, item 3).
        both = _EVIDENCE_SETS.get(key)
        if both is None:
            union = have | {why}
            both = _EVIDENCE_SETS.setdefault(key, _EVIDENCE_SETS.setdefault((union, ""), union))
        self.by_pid[pid] = both
        if own:
            self.own.add(pid)


_NO_EVIDENCE: frozenset[str] = frozenset()
# (reasons so far, one more) -> the reasons together, and (reasons, "") -> the one set
# holding them (whatever order they came in); the reasons are a few fixed words.
_EVIDENCE_SETS: dict[tuple[frozenset[str], str], frozenset[str]] = {}


def collect_training(
    table: ProcessTable,
    gpu_procs: Sequence[GpuProcess],
    fd_holders: Mapping[int, Sequence[str]],
    launchers: Sequence[Regex],
    launcher_cache: LauncherCache | None = None,
    exclude: frozenset[int] = frozenset(),
    gpu_libraries: Mapping[int, Sequence[str]] | None = None,
    sanctioned: Mapping[tuple[int, int], str] | None = None,
) -> TrainingEvidence:
    """Find every training process visible in ``table``.

    Args:
        table: Refreshed process table.
        gpu_procs: NVML entries whose PIDs are visible in ``table``. A zombie is never
            training itself (it has exited); its entry counts for the parent that holds
            it (:func:`zombie_holder`) when that parent is training or an exclusive
            wrapper of training (:func:`holder_refusal`), else for nobody (an init or
            reaper, a hub, a shell that also runs other work: ``unheld`` says why).
        fd_holders: PID → device paths held open.
        launchers: Launcher patterns (RE2, linear time in the command line).
        launcher_cache: Reused across scans so unchanged processes are not re-matched.
        exclude: PIDs that are never training: the watchdog itself, which holds
            ``/dev/nvidia*`` open through NVML while it scans.
        gpu_libraries: PID → CUDA libraries it has mapped
            (:class:`watchdog.sources.gpulibs.GpuLibraryCache`): GPU-capable before it
            touches a GPU. Wrappers never count (a shell has nothing to run on a GPU).
        sanctioned: ``(PID, start ticks) -> rule`` of processes sanctioned while they
            ran: a wrapper holding such a zombie (the pipeline's cron ``sh -c``) is no
            job for it (it would be judged by its own command line: rogue).

    Returns:
        Evidence per training PID.
    """
    launcher_cache = launcher_cache or LauncherCache()
    ev = TrainingEvidence()
    zombies: list[Proc] = []
    for gp in gpu_procs:
        proc = table.get(gp.pid)
        if proc is None:
            continue
        if proc.is_zombie:
            zombies.append(proc)
            continue
        ev.add(gp.pid, "nvml")
    for pid in fd_holders:
        if table.get(pid) is not None:
            ev.add(pid, "device-fd")
    for pid in launcher_cache.matching(table, launchers):
        ev.add(pid, "launcher")
    for pid in gpu_libraries or {}:
        proc = table.get(pid)
        if proc is not None and not proc.is_zombie and not is_wrapper(proc):
            ev.add(pid, "gpu-library")
    for pid in exclude:
        ev.by_pid.pop(pid, None)
    for pid in list(ev.by_pid):
        proc = table.get(pid)
        if pid <= 1 or (proc is not None and proc.kernel_thread):
            del ev.by_pid[pid]  # init and kernel threads are never jobs (see findings)
    ev.own &= set(ev.by_pid)
    _unreaped(table, zombies, ev, exclude, sanctioned or {})
    return ev


def _unreaped(
    table: ProcessTable,
    zombies: Sequence[Proc],
    ev: TrainingEvidence,
    exclude: Set[int],
    sanctioned: Mapping[tuple[int, int], str],
) -> None:
    """Decide, for each zombie NVML lists, whether its parent's job counts it (``held``;
    the parent becomes a job when it is not one already) or why not (``unheld``)."""
    trainers = frozenset(ev.own)
    for zombie in zombies:
        holder = zombie_holder(zombie, table)
        if holder is None or holder.pid in exclude:
            continue
        why = holder_refusal(holder, table, trainers, zombie)
        training = any(p.pid in trainers for p in table.ancestors(holder.pid))
        rule = sanctioned.get((zombie.pid, zombie.start_ticks))
        if why is None and not training and rule is not None:
            why = f"it wraps a run that rule {rule!r} sanctioned"
        if why is not None:
            ev.unheld[zombie.pid] = why
            continue
        ev.held[zombie.pid] = holder.pid
        if not training:
            ev.add(holder.pid, "nvml", own=False)  # an exclusive wrapper of training


class LauncherCache:
    """Launcher verdicts kept beside a process table, recomputed only for processes the
    last refresh added or changed (``ProcessTable.changed``/``removed``)."""

    def __init__(self) -> None:
        self._hits: set[int] = set()
        self._generation: int | None = None
        self._table: int | None = None

    def matching(self, table: ProcessTable, launchers: Sequence[Regex]) -> list[int]:
        """PIDs in ``table`` whose command line matches a launcher pattern.

        A zombie never matches: it has exited, and its old command line launches nothing.
        """
        procs = table.procs
        if self._table == id(table) and self._generation == table.generation:
            return sorted(self._hits)  # asked again after the same refresh
        incremental = self._table == id(table) and self._generation == table.generation - 1
        if incremental:
            self._hits -= table.removed
            todo: Iterable[int] = table.changed
        else:
            self._hits = set()
            todo = procs
        # is_launcher reads only the command line, the executable and the kernel-thread
        # flag: processes alike (2,000 sleepers, a launcher's workers; the table shares
        # their values) are matched once per refresh.
        known: dict[tuple[tuple[str, ...], str | None, bool], bool] = {}
        for pid in todo:
            proc = procs.get(pid)
            if proc is None or proc.is_zombie:
                self._hits.discard(pid)
                continue
            key = (proc.cmdline, proc.exe, proc.kernel_thread)
            hit = known.get(key)
            if hit is None:
                hit = known[key] = is_launcher(proc, launchers)
            if hit:
                self._hits.add(pid)
            else:
                self._hits.discard(pid)
        self._table, self._generation = id(table), table.generation
        return sorted(self._hits)


def _reparented(proc: Proc, table: ProcessTable) -> bool:
    return proc.ppid <= 1 or table.get(proc.ppid) is None


def group_jobs(
    table: ProcessTable,
    evidence: TrainingEvidence,
    gpu_procs: Sequence[GpuProcess],
    fd_holders: Mapping[int, Sequence[str]],
    ignored: Set[int] = frozenset(),
) -> list[Job]:
    """Build one :class:`Job` per training process tree.

    Args:
        table: Refreshed process table.
        evidence: Output of :func:`collect_training`.
        gpu_procs: NVML entries (memory is summed over each job's members).
        fd_holders: PID → device paths.
        ignored: Training PIDs that match the ignore list. Each is a job of its own
            and never the root of anything else: a trainer started below Xorg is its own
            job, not an ignored member.

    Returns:
        Jobs ordered by root start time, then root PID. Origins and verdicts are not
        filled in yet.
    """
    roots = _roots(table, evidence, ignored)
    alias = _merged_leaders(table, set(roots.values()) - set(ignored))
    alias = _merged_launches(table, set(roots.values()) - set(ignored) - set(alias), alias)
    trees = _trees(table, roots, alias, ignored)
    holdings = _gpu_holdings(table, gpu_procs, evidence.held)
    jobs = [_job(table, root, tree, evidence, fd_holders, holdings) for root, tree in trees.items()]
    jobs.sort(key=lambda j: (j.start_ticks, j.root_pid))
    return jobs


def _roots(table: ProcessTable, evidence: TrainingEvidence, ignored: Set[int]) -> dict[int, int]:
    """Training PID -> the topmost training ancestor (itself when none), PID 1 excluded.

    An ignored process is a root of its own, unless it sits inside a training tree: then
    it is just a member of that tree and has no entry.

    Each parent chain is walked once (:func:`_top_training`), however many processes
    share it: 4,096 workers of one launcher cost one walk, not 4,096 (issue 34, item 3).
    """
    training = set(evidence.by_pid) - set(ignored)
    roots: dict[int, int] = {pid: pid for pid in ignored if pid in evidence.by_pid}
    above: dict[int, int | None] = {}
    for pid in training:
        proc = table.get(pid)
        top = _top_training(table, proc.ppid, training, above) if proc is not None else None
        if top is _LOOP:  # a parent loop (a fixture tree): walk as ancestors() stops
            top = None
            for anc in table.ancestors(pid)[1:]:
                if anc.pid in training and anc.pid > 1:
                    top = anc.pid
        roots[pid] = pid if top is None else top
    for pid in list(roots):
        if pid in ignored and any(a.pid in training for a in table.ancestors(pid)[1:]):
            del roots[pid]
    return roots


_LOOP = -1  # _top_training's answer for a chain that comes back on itself


def _top_training(
    table: ProcessTable, pid: int, training: Set[int], above: dict[int, int | None]
) -> int | None:
    """The topmost PID of ``training`` (PID 1 excluded) among ``pid`` and its ancestors,
    walked as :meth:`ProcessTable.ancestors` walks them; None when there is none, and
    :data:`_LOOP` when the chain comes back on itself (only a fixture tree can: the
    answer then depends on where the walk starts, so nothing is kept).

    ``above`` keeps each PID's answer: a chain shared by many processes is walked once.
    """
    chain: list[int] = []
    seen: set[int] = set()
    cur = table.get(pid) if pid > 0 else None
    top: int | None = None
    while cur is not None:
        if cur.pid in above:
            top = above[cur.pid]
            break
        if cur.pid in seen:
            return _LOOP
        chain.append(cur.pid)
        seen.add(cur.pid)
        if cur.ppid <= 0:
            break
        cur = table.get(cur.ppid)
    for p in reversed(chain):  # from the top down: the first trainer met is the topmost
        if top is None and p in training and p > 1:
            top = p
        above[p] = top
    return top if not chain else above[chain[0]]


def _merged_leaders(table: ProcessTable, roots: Set[int]) -> dict[int, int]:
    """Root -> the root it merges into: re-parented forked copies of one dead leader.

    Same process group (whose leader is gone), same owner, same command line; the
    earliest started (then lowest PID) stands for the rest. Separate jobs that a script
    started with `&` share a group too, but not a command line.
    """
    groups: dict[tuple[int, int | None, tuple[str, ...]], list[int]] = {}
    for root in roots:
        proc = table.get(root)
        if (
            proc is not None
            and proc.pgid > 1
            and table.get(proc.pgid) is None
            and _reparented(proc, table)
        ):
            groups.setdefault((proc.pgid, proc.uid, proc.cmdline), []).append(root)
    alias: dict[int, int] = {}
    for members in groups.values():
        if len(members) > 1:
            members.sort(key=lambda p: (table.procs[p].start_ticks, p))
            for m in members[1:]:
                alias[m] = members[0]
    return alias


# Arguments that say which worker of a launch a process is (torchrun's and most
# launchers' conventions): workers that differ only in them are one launch.
_RANK_OPTION = re.compile(r"--?(local[_-]?|node[_-]?|global[_-]?)?(rank|worker[_-]?id|proc[_-]?id)")
# Workers of one launch start together: within this many seconds of the first.
LAUNCH_WINDOW_S = 2.0


def _launch_key(proc: Proc) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The command line with the rank values folded, and the rank values; None when it
    has no rank argument (only workers that say they are ranks of something merge)."""
    out: list[str] = []
    ranks: list[str] = []
    ranked = False
    argv = list(proc.cmdline)
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if _RANK_OPTION.fullmatch(name):
            if eq and value.isdigit():
                out.append(f"{name}=#")
                ranks.append(value)
                ranked = True
            elif not eq and i + 1 < len(argv) and argv[i + 1].isdigit():
                out += [name, "#"]
                ranks.append(argv[i + 1])
                ranked, i = True, i + 1
            else:
                out.append(arg)
        else:
            out.append(arg)
        i += 1
    return (tuple(out), tuple(ranks)) if ranked else None


def _merged_launches(
    table: ProcessTable, roots: Set[int], alias: Mapping[int, int]
) -> dict[int, int]:
    """``alias`` plus the workers of one launch: roots with the same owner and
    executable whose command lines differ only in a rank argument (``--rank N``,
    ``--local_rank=N``), started within :data:`LAUNCH_WINDOW_S` of each other, and
    children of the same parent, or all re-parented (the launcher exited, each in a
    session of its own). The earliest stands for the rest."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    groups: dict[tuple[object, ...], list[tuple[Proc, tuple[str, ...]]]] = {}
    for root in roots:
        proc = table.get(root)
        if proc is None:
            continue
        key = _launch_key(proc)
        if key is None:
            continue
        parent = 0 if _reparented(proc, table) else proc.ppid
        groups.setdefault((proc.uid, proc.exe, parent, key[0]), []).append((proc, key[1]))
    out = dict(alias)
    for members in groups.values():
        members.sort(key=lambda m: (m[0].start_ticks, m[0].pid))
        # One launch has each rank once: a rank seen again is another launch of the
        # same command (started in the same window), which is a job of its own.
        launches: list[tuple[Proc, set[tuple[str, ...]]]] = []
        for proc, rank in members:
            home = next(
                (
                    (first, ranks)
                    # The latest launch first: its workers started after the earlier's.
                    for first, ranks in reversed(launches)
                    if rank not in ranks
                    and proc.start_ticks - first.start_ticks <= LAUNCH_WINDOW_S * tick
                ),
                None,
            )
            if home is None:
                launches.append((proc, {rank}))
                continue
            home[1].add(rank)
            out[proc.pid] = home[0].pid
    return out


def _trees(
    table: ProcessTable, roots: Mapping[int, int], alias: Mapping[int, int], ignored: Set[int]
) -> dict[int, set[int]]:
    """Job root -> its members: each merged root and the descendants no other root claims.

    An ignored root keeps no descendants: it is its own job and never the root of
    anything else.
    """
    trees: dict[int, set[int]] = {}
    for root in set(roots.values()):
        top, hops = alias.get(root, root), 0
        while top in alias and alias[top] != top and hops < len(alias):
            top, hops = alias[top], hops + 1
        tree = trees.setdefault(top, set())
        tree.add(root)
        if root not in ignored:
            tree.update(d for d in table.descendants(root) if roots.get(d, root) == root)
    return trees


@dataclass
class _GpuHoldings:
    """What NVML says each PID holds, a zombie's share moved to the parent whose job
    counts it (``TrainingEvidence.held``).

    Attributes:
        memory_bytes: PID -> GPU memory summed over devices (only figures NVML gave).
        uuids: PID -> GPU UUIDs (a zombie's devices count for it and for its holder).
        per_device: PID -> GPU UUID -> (index, memory in bytes or None when unknown).
    """

    memory_bytes: dict[int, int] = field(default_factory=dict)
    uuids: dict[int, set[str]] = field(default_factory=dict)
    per_device: dict[int, dict[str, tuple[int, int | None]]] = field(default_factory=dict)


def _gpu_holdings(
    table: ProcessTable, gpu_procs: Sequence[GpuProcess], held: Mapping[int, int]
) -> _GpuHoldings:
    """Sum the NVML entries per owning PID: a zombie's for the parent ``held`` names
    (:func:`collect_training`), or for nobody."""
    out = _GpuHoldings()
    for gp in gpu_procs:
        owner = gp.pid
        proc = table.get(gp.pid)
        if proc is not None and proc.is_zombie:
            holder = held.get(gp.pid)
            if holder is None:
                continue  # an init, a reaper, or a parent that runs other work: no job's
            owner = holder
        if gp.used_memory_bytes is not None:
            out.memory_bytes[owner] = out.memory_bytes.get(owner, 0) + gp.used_memory_bytes
        out.uuids.setdefault(owner, set()).add(gp.gpu_uuid)
        if owner != gp.pid:
            out.uuids.setdefault(gp.pid, set()).add(gp.gpu_uuid)
        per = out.per_device.setdefault(owner, {})
        before = per.get(gp.gpu_uuid, (gp.gpu_index, None))[1]
        add = gp.used_memory_bytes
        per[gp.gpu_uuid] = (
            gp.gpu_index,
            before if add is None else add if before is None else before + add,
        )
    return out


def _job(
    table: ProcessTable,
    root: int,
    tree: set[int],
    evidence: TrainingEvidence,
    fd_holders: Mapping[int, Sequence[str]],
    holdings: _GpuHoldings,
) -> Job:
    """The :class:`Job` for one tree: root first, members by PID, holdings summed."""
    rproc = table.procs[root]
    pids = [root, *sorted(tree - {root})]
    known = [holdings.memory_bytes[p] for p in pids if p in holdings.memory_bytes]
    why: set[str] = set()
    for p in pids:
        why |= evidence.by_pid.get(p, set())
    devices = sorted({d for p in pids for d in fd_holders.get(p, ())})
    return Job(
        root_pid=root,
        pids=pids,
        user=rproc.user,
        cmdline=rproc.cmdline,
        start_ticks=rproc.start_ticks,
        gpu_memory_bytes=sum(known) if known else None,
        gpu_uuids=sorted({u for p in pids for u in holdings.uuids.get(p, ())}),
        lineage=table.ancestors(root),
        evidence=sorted(why),
        devices=devices,
        gpus=_held(holdings.per_device, pids),
    )


def _held(held: dict[int, dict[str, tuple[int, int | None]]], pids: list[int]) -> list[GpuHeld]:
    """Sum what the members hold per device; None only when no member's figure is known."""
    out: dict[str, tuple[int, int | None]] = {}
    for pid in pids:
        for uuid, (index, memory) in held.get(pid, {}).items():
            before = out.get(uuid, (index, None))[1]
            out[uuid] = (
                index,
                before if memory is None else memory if before is None else before + memory,
            )
    return [
        GpuHeld(uuid=u, index=i, memory_bytes=m)
        for u, (i, m) in sorted(out.items(), key=lambda kv: (kv[1][0], kv[0]))
    ]

"""The job-end sweep's drain record: which job, and which processes, a drain is for.

``health-check`` (watchdog/actions/slurmsweep.py) drains the node when something of an
ended job is left (a survivor, another user's process in its cgroup, an unconfirmed
claim holding a GPU, a process that cannot be told from a copy of a leftover) or when
Slurm could not be asked whether the job ended. ``STATE_DIR/slurm-sweep.json`` records,
per job, each process the drain is for: PID and start time (its identity), owner, kind,
the proof that tied it to the job, its Slurm job cgroup and its ancestors when it was
seen. The drain is lifted only by a check that finds every one of them gone, by the same
proof:

* a recorded identity still alive is still there;
* a process in the job's cgroup is the job's (a copy inherits the cgroup);
* a process below a recorded one (by parentage, whatever its session or environment) is
  a copy of it;
* a process that started since the job was last checked, whose ancestors up to PID 1
  all started since then too (its parent exited: a copy re-parented to PID 1, in a new
  session, with an emptied environment), owned by a recorded process's user, cannot be
  told from a copy: it is recorded as ``uncertain``
  and keeps the drain (never signalled). One with an ancestor that ran before (a login
  shell, cron, slurmd) is that ancestor's.

A sweep of job N checks only N's entry; a sweep of every job, and the daemon each tick
(:class:`SweepDrainKeeper`), check them all. The reason set in Slurm names what is left
now; the node is resumed only when the record is empty and the node is still drained
with the very reason recorded as set (an admin's drain is never lifted). When someone
resumes our drain while its processes live, it is not set again for the same processes
(their decision), only when something new is left.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .. import command
from ..command import CommandRunner
from ..config import Config
from ..config.slurm import SlurmNodeSettings
from ..hosttext import plain_or_code
from ..lineage.cgroup import parse_cgroup
from ..lineage.slurm import is_slurmstepd
from ..logs import get_logger
from ..model import Proc
from ..sources.procfs import ProcessTable, boot_id
from .slurmnode import REASON_PREFIX, clean_reason, drain, node_state, resume

log = get_logger()

RECORD_NAME = "slurm-sweep.json"
MAX_PROCS_PER_JOB = 256
# Kinds of recorded process. Proven ones (the job's by cgroup, lineage or record) are
# evidence for a later sweep; a claim and an uncertain copy never are.
KINDS = ("survived", "foreign", "unchecked", "unchecked_claim", "claim", "uncertain")
PROVEN_KINDS = frozenset({"survived", "foreign", "unchecked"})
# Kinds Slurm's answer about their job settles (a later sweep of the job that Slurm
# answers): the rest are lifted only when the processes are gone.
UNCHECKED_KINDS = frozenset({"unchecked", "unchecked_claim"})


@dataclass(frozen=True)
class RecordedProc:
    """One process a drain is for.

    Attributes:
        pid: Its PID.
        start_ticks: Its start time (clock ticks after boot): with ``pid`` its identity.
        kind: ``survived`` (a proven leftover still alive after the sweep, or never
            signalled because it is protected), ``foreign`` (proven in the job, another
            user's), ``unchecked`` (proven in a job Slurm could not be asked about),
            ``unchecked_claim`` (only its environment names such a job; holds a GPU),
            ``claim`` (only its environment names an ended job; holds a GPU),
            ``uncertain`` (cannot be told from a copy of a leftover).
        uid: Its owner.
        proof: What tied it to the job when it was recorded.
        cgroup: The Slurm job cgroup it was in (a copy inherits it), or None.
        lineage: Its ancestors then, ``(pid, start_ticks)``, nearest first.
    """

    pid: int
    start_ticks: int
    kind: str
    uid: int | None
    proof: str
    cgroup: str | None = None
    lineage: tuple[tuple[int, int], ...] = ()

    @property
    def ident(self) -> tuple[int, int]:
        """``(pid, start_ticks)``."""
        return (self.pid, self.start_ticks)


@dataclass
class JobEntry:
    """What a drain is for, of one job.

    Attributes:
        job_id: The Slurm job.
        procs: The processes, at most :data:`MAX_PROCS_PER_JOB`.
        seen_up_to: The newest start time (clock ticks) among the processes the last
            check of this job saw: a process that starts later was not seen by it.
        edge: Processes with exactly that start time that it saw.
        overflow: More processes were left than recorded: only a sweep of this job
            (which finds them all again) can clear the entry.
        why: For ``unchecked`` processes, why Slurm could not be asked.
    """

    job_id: int
    procs: list[RecordedProc] = field(default_factory=list)
    seen_up_to: int = 0
    edge: tuple[tuple[int, int], ...] = ()
    overflow: bool = False
    why: str = ""


@dataclass
class SweepRecord:
    """The record in ``STATE_DIR/slurm-sweep.json``.

    Attributes:
        node: The Slurm node it is for.
        boot_id: The boot it was written in (after a reboot every process is gone).
        jobs: Entries by job id.
        applied: The drain reason set in Slurm, as sinfo shows it; None when ours is not
            set (never yet, Slurm could not be asked, or another drain was there).
        lifted: A reason of ours that someone else resumed: not set again for it.
    """

    node: str
    boot_id: str | None
    jobs: dict[int, JobEntry] = field(default_factory=dict)
    applied: str | None = None
    lifted: str | None = None

    def proven(self) -> dict[tuple[int, int], tuple[int, int | None, str]]:
        """Recorded processes whose proof holds for a later sweep: identity → (job,
        uid, proof)."""
        return {
            rp.ident: (job, rp.uid, rp.proof)
            for job, entry in self.jobs.items()
            for rp in entry.procs
            if rp.kind in PROVEN_KINDS
        }


def record_path(state_dir: str) -> str:
    """``STATE_DIR/slurm-sweep.json``."""
    return os.path.join(state_dir, RECORD_NAME)


@contextlib.contextmanager
def record_lock(state_dir: str, blocking: bool = True) -> Iterator[bool]:
    """Hold ``STATE_DIR/slurm-sweep.lock`` (flock(2)) while the record is read, changed,
    Slurm told and the record written.

    Args:
        state_dir: ``daemon.state_dir``.
        blocking: Wait for the lock; False: yield False at once when another holds it.

    Yields:
        True when the lock is held.

    Raises:
        OSError: The lock file cannot be created.
    """
    os.makedirs(state_dir, exist_ok=True)
    fd = os.open(os.path.join(state_dir, "slurm-sweep.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _ident_list(value: Any) -> tuple[tuple[int, int], ...]:
    out = []
    for item in value if isinstance(value, list) else ():
        if (
            isinstance(item, list)
            and len(item) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in item)
        ):
            out.append((item[0], item[1]))
    return tuple(out)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _proc_from(doc: Any) -> RecordedProc | None:
    if not isinstance(doc, dict):
        return None
    pid, start = _int(doc.get("pid")), _int(doc.get("start_ticks"))
    kind = doc.get("kind")
    if pid is None or start is None or kind not in KINDS:
        return None
    cgroup = doc.get("cgroup")
    return RecordedProc(
        pid, start, str(kind), _int(doc.get("uid")), str(doc.get("proof", "")),
        cgroup if isinstance(cgroup, str) else None, _ident_list(doc.get("lineage")),
    )  # fmt: skip


def load_record(state_dir: str, boot: str | None, node: str) -> SweepRecord:
    """Read the record; an empty one when there is none (or it is unreadable).

    A record of another boot keeps only the reason it set (every process it named is
    gone, so the drain may be lifted); one for another node name is not ours to use.

    Args:
        state_dir: ``daemon.state_dir``.
        boot: This boot's id (:func:`watchdog.sources.procfs.boot_id`).
        node: This node's Slurm name.
    """
    empty = SweepRecord(node, boot)
    try:
        with open(record_path(state_dir), encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return empty
    if not isinstance(doc, dict) or doc.get("node") != node:
        return empty
    applied, lifted = doc.get("applied"), doc.get("lifted")
    rec = SweepRecord(
        node, boot, applied=applied if isinstance(applied, str) else None,
        lifted=lifted if isinstance(lifted, str) else None,
    )  # fmt: skip
    if doc.get("boot_id") != boot:
        return rec
    jobs = doc.get("jobs")
    for key, item in jobs.items() if isinstance(jobs, dict) else ():
        if not (isinstance(key, str) and key.isdigit() and isinstance(item, dict)):
            continue
        procs = [p for p in map(_proc_from, item.get("procs") or ()) if p is not None]
        edge = _ident_list(item.get("edge"))
        why = item.get("why")
        rec.jobs[int(key)] = JobEntry(
            int(key), procs[:MAX_PROCS_PER_JOB], _int(item.get("seen_up_to")) or 0, edge,
            bool(item.get("overflow")) or len(procs) > MAX_PROCS_PER_JOB,
            why if isinstance(why, str) else "",
        )  # fmt: skip
    return rec


def save_record(state_dir: str, rec: SweepRecord) -> None:
    """Write the record atomically; remove the file when it holds nothing.

    Raises:
        OSError: The state directory cannot be written.
    """
    path = record_path(state_dir)
    if not rec.jobs and rec.applied is None and rec.lifted is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    doc = {
        "version": 1,
        "node": rec.node,
        "boot_id": rec.boot_id,
        "applied": rec.applied,
        "lifted": rec.lifted,
        "jobs": {
            str(job): {
                "seen_up_to": e.seen_up_to,
                "edge": [list(i) for i in e.edge],
                "overflow": e.overflow,
                "why": e.why,
                "procs": [
                    {
                        "pid": p.pid,
                        "start_ticks": p.start_ticks,
                        "kind": p.kind,
                        "uid": p.uid,
                        "proof": p.proof,
                        "cgroup": p.cgroup,
                        "lineage": [list(i) for i in p.lineage],
                    }
                    for p in e.procs
                ],
            }
            for job, e in sorted(rec.jobs.items())
        },
    }
    os.makedirs(state_dir, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(tmp, path)


# -- checking what is left -------------------------------------------------------------


def managed(lineage: Sequence[Proc]) -> bool:
    """True below a slurmstepd (a running step: Slurm's to end) or slurmd (a Prolog,
    Epilog or health check: this sweep's own ancestors carry ``SLURM_JOB_ID`` too).

    Args:
        lineage: The process and its ancestors, nearest first.
    """
    for p in lineage:
        if is_slurmstepd(p):
            return True
        name = (p.cmdline[0].rsplit("/", 1)[-1] if p.cmdline else p.comm) or ""
        if name.startswith("slurmd"):
            return True
    return False


def job_cgroup(proc: Proc) -> tuple[int, str] | None:
    """The Slurm job a process's cgroup names, with the line naming it; None if none.

    Anchored layouts only (:func:`watchdog.lineage.cgroup.parse_cgroup`): only root
    creates them. Whoever owns the process: another user's process in a job's cgroup is
    in the job all the same.
    """
    info = parse_cgroup(proc.cgroup)
    if info is None or info.slurm_job_id is None:
        return None
    job = info.slurm_job_id
    line = next((ln for ln in proc.cgroup if f"/job_{job}" in ln), info.path)
    return job, line


def lineage_of(table: ProcessTable, pid: int) -> tuple[tuple[int, int], ...]:
    """``(pid, start_ticks)`` of each ancestor of ``pid`` (not itself), nearest first."""
    return tuple((p.pid, p.start_ticks) for p in table.ancestors(pid)[1:])


def horizon(table: ProcessTable) -> tuple[int, tuple[tuple[int, int], ...]]:
    """The newest start time among the processes in ``table``, and the processes with
    it: a process not in the table started at or after it (``seen_up_to``, ``edge``)."""
    procs = [p for p in table.procs.values() if not p.kernel_thread]
    newest = max((p.start_ticks for p in procs), default=0)
    return newest, tuple(sorted((p.pid, p.start_ticks) for p in procs if p.start_ticks == newest))


def is_new(proc: Proc, seen_up_to: int, edge: Iterable[tuple[int, int]]) -> bool:
    """True when ``proc`` started after a check whose horizon was ``seen_up_to``/``edge``."""
    return proc.start_ticks > seen_up_to or (
        proc.start_ticks == seen_up_to and (proc.pid, proc.start_ticks) not in set(edge)
    )


def orphan_chain(table: ProcessTable, proc: Proc, is_fresh: Any, mine: set[int]) -> bool:
    """True when every ancestor of ``proc`` up to PID 1 is fresh (``is_fresh(p)``): no
    process that ran before vouches for it (a copy whose starter exited looks so)."""
    for anc in table.ancestors(proc.pid)[1:]:
        if anc.pid <= 1:
            return True
        if anc.pid in mine or not is_fresh(anc):
            return False
    return True


@dataclass
class JobCheck:
    """What :func:`check_entry` found of one job's entry.

    Attributes:
        procs: What is left now: recorded processes alive, and those found with them.
        found: Of them, the ones not recorded before (copies, uncertain).
        gone: Recorded processes that are gone.
    """

    procs: list[RecordedProc]
    found: list[RecordedProc]
    gone: list[RecordedProc]


def check_entry(entry: JobEntry, table: ProcessTable, mine: set[int] | None = None) -> JobCheck:
    """Look for what is left of one job's entry in a refreshed table (see the module
    docstring for the rules).

    Args:
        entry: The job's entry.
        table: A refreshed process table.
        mine: PIDs never counted (this process and its ancestors).
    """
    mine = mine or set()
    alive_ids = {
        (p.pid, p.start_ticks): p
        for p in table.procs.values()
        if not p.kernel_thread and not p.is_zombie
    }
    kept = [rp for rp in entry.procs if rp.ident in alive_ids]
    gone = [rp for rp in entry.procs if rp.ident not in alive_ids]
    known = {rp.ident: rp for rp in kept}
    uids = {rp.uid for rp in entry.procs if rp.uid is not None and rp.kind != "claim"}
    followed = [rp for rp in entry.procs if rp.kind != "claim"]
    found: list[RecordedProc] = []

    def fresh(p: Proc) -> bool:
        return is_new(p, entry.seen_up_to, entry.edge)

    for (pid, start), proc in sorted(alive_ids.items()):
        if (pid, start) in known or pid <= 1 or pid in mine or not followed:
            continue
        lineage = table.ancestors(pid)
        if managed(lineage):
            continue
        hit = _inherits(entry, proc, lineage, known, uids, fresh, table, mine)
        if hit is not None:
            rp = RecordedProc(
                pid, start, hit[0], proc.uid, hit[1],
                (jc[1] if (jc := job_cgroup(proc)) else None), lineage_of(table, pid),
            )  # fmt: skip
            known[rp.ident] = rp
            found.append(rp)
    procs = [*kept, *found]
    return JobCheck(procs, found, gone)


def _inherits(
    entry: JobEntry,
    proc: Proc,
    lineage: Sequence[Proc],
    known: Mapping[tuple[int, int], RecordedProc],
    uids: set[int],
    fresh: Any,
    table: ProcessTable,
    mine: set[int],
) -> tuple[str, str] | None:
    """``(kind, proof)`` when ``proc`` inherits the proof of what ``entry`` records."""
    owner_ok = proc.uid in uids
    jc = job_cgroup(proc)
    if jc is not None:
        if jc[0] != entry.job_id:
            return None  # another job's process
        kind = "survived" if proc.uid in uids else "foreign"
        return kind, f"cgroup {plain_or_code(jc[1])}"
    for anc in lineage[1:]:
        rp = known.get((anc.pid, anc.start_ticks))
        if rp is None:
            continue
        if rp.kind == "uncertain":
            return "uncertain", f"child of PID {anc.pid}, which may be a copy"
        kind = "survived" if proc.uid == rp.uid else "foreign"
        return kind, f"child of PID {anc.pid} ({rp.proof})"
    if owner_ok and fresh(proc) and orphan_chain(table, proc, fresh, mine):
        return "uncertain", (
            "started since the job was last checked and nothing that ran before is its "
            "parent: cannot be told from a copy of a leftover"
        )
    return None


# -- the reason, and telling Slurm -----------------------------------------------------


def _pids(procs: Sequence[RecordedProc], shown: int = 5) -> str:
    pids = sorted({p.pid for p in procs})
    text = ", ".join(str(p) for p in pids[:shown])
    return text + (f" and {len(pids) - shown} more" if len(pids) > shown else "")


def job_clause(entry: JobEntry) -> str:
    """What is left of one job, for the drain reason (``orphan of Slurm job N
    survived termination (PID ...)`` and its kin)."""
    by = {k: [p for p in entry.procs if p.kind == k] for k in KINDS}
    j = entry.job_id
    more = " and more" if entry.overflow else ""
    parts = []
    if by["survived"]:
        parts.append(
            f"orphan of Slurm job {j} survived termination (PID {_pids(by['survived'])}{more})"
        )
    if by["uncertain"]:
        head = "maybe a copy" if parts else f"Slurm job {j}: maybe a copy of a leftover"
        parts.append(f"{head}: PID {_pids(by['uncertain'])}")
    if by["foreign"]:
        parts.append(f"Slurm job {j} ended, another user's PID {_pids(by['foreign'])} left in it")
    unchecked = by["unchecked"] + by["unchecked_claim"]
    if unchecked:
        parts.append(
            f"Slurm job {j} not checked, Slurm could not be asked (PID "
            f"{_pids(unchecked)} left running)"
        )
    if by["claim"]:
        parts.append(
            f"unconfirmed claim of ended Slurm job {j} holds a GPU (PID {_pids(by['claim'])}, "
            "left running)"
        )
    return "; ".join(parts)


def wanted_reason(rec: SweepRecord) -> str | None:
    """The drain reason naming what is left now (cleaned for Slurm), or None."""
    clauses = [job_clause(e) for _j, e in sorted(rec.jobs.items()) if e.procs]
    if not clauses:
        return None
    return clean_reason(REASON_PREFIX + "; ".join(clauses))


@dataclass
class Settled:
    """What :func:`settle` did about the node.

    Attributes:
        reason: The reason wanted (None: nothing is left).
        drained: Our drain was set or updated to ``reason`` now.
        held: Our drain with ``reason`` was already in place.
        resumed: Our drain was lifted (nothing is left).
        error: Why Slurm could not be told, or why the reason was left as it is.
    """

    reason: str | None = None
    drained: bool = False
    held: bool = False
    resumed: bool = False
    error: str | None = None


def settle(rec: SweepRecord, settings: SlurmNodeSettings, run: CommandRunner) -> Settled:
    """Make the node's drain agree with the record (it is updated in place: ``applied``
    and ``lifted``; entries are emptied by the caller).

    Args:
        rec: The record, entries already checked.
        settings: The ``slurm:`` section (node name, command timeout).
        run: Runs ``sinfo``/``scontrol``.
    """
    out = Settled(wanted_reason(rec))
    if out.reason is None and rec.applied is None:
        rec.lifted = None
        return out
    timeout_s = settings.command_timeout_s
    st = node_state(rec.node, run, timeout_s)
    if isinstance(st, str):
        out.error = st
        return out
    ours = st.drained and rec.applied is not None and st.reason == rec.applied
    if out.reason is None:
        if ours:
            out.error = resume(rec.node, run, timeout_s)
            if out.error is not None:
                # 22.05 lifts the drain of a node it has not heard from since a restart
                # (UNKNOWN+DRAIN) and still answers "Invalid node state specified".
                again = node_state(rec.node, run, timeout_s)
                if not isinstance(again, str) and not again.drained:
                    out.error = None
            out.resumed = out.error is None
        if out.error is None:
            rec.applied = rec.lifted = None
        return out
    if ours and st.reason == out.reason:
        out.held = True
        return out
    if st.drained and not ours:
        if st.reason == out.reason:  # set by us, the record of it lost
            rec.applied, out.held = out.reason, True
            return out
        rec.applied = None
        out.error = f"node already drained ({st.reason}); reason left as it is"
        return out
    if not st.drained and rec.applied is not None:
        # Our drain was lifted by someone else: their decision for those processes.
        rec.lifted, rec.applied = rec.applied, None
    if not st.drained and rec.lifted == out.reason:
        out.error = (
            "our drain was resumed by someone else while these processes live; not set "
            "again for them"
        )
        return out
    out.error = drain(rec.node, out.reason, run, timeout_s)
    if out.error is None:
        rec.applied, rec.lifted, out.drained = out.reason, None, True
    return out


def check_all(rec: SweepRecord, table: ProcessTable, mine: set[int] | None = None) -> bool:
    """Check every entry against ``table``; entries with nothing left are dropped.

    Returns:
        True when anything changed.
    """
    newest, edge = horizon(table)
    changed = False
    for job, entry in list(rec.jobs.items()):
        res = check_entry(entry, table, mine)
        if res.found or res.gone:
            changed = True
        if not res.procs and not entry.overflow:
            del rec.jobs[job]
            continue
        rec.jobs[job] = replace(
            entry, procs=res.procs[:MAX_PROCS_PER_JOB], seen_up_to=newest, edge=edge,
            overflow=entry.overflow or len(res.procs) > MAX_PROCS_PER_JOB,
        )  # fmt: skip
    return changed


class SweepDrainKeeper:
    """Each daemon tick: keep the sweep's drain current (docs/slurm.md).

    While ``STATE_DIR/slurm-sweep.json`` exists, every entry is checked against the
    tick's process table: a recorded process that exited leaves the reason, a copy found
    with one joins it, and when nothing is left the drain is lifted. Slurm is told only
    when the reason changes, a drain is still to be set, or nothing is left; after a
    failed call (no controller) at most every ``retry_s``.

    Args:
        settings: Returns the current ``slurm:`` section (it follows reloads).
        state_dir: Returns ``daemon.state_dir``.
        run: Runs ``sinfo``/``scontrol``.
        retry_s: Seconds between attempts while Slurm does not answer.
    """

    def __init__(
        self,
        settings: Callable[[], SlurmNodeSettings],
        state_dir: Callable[[], str],
        run: CommandRunner = command.run,
        retry_s: float = 60.0,
    ) -> None:
        self.settings = settings
        self.state_dir = state_dir
        self.run = run
        self.retry_s = retry_s
        self._next_try = 0.0
        self.__name__ = "slurm-sweep-drain"

    def __call__(self, table: ProcessTable) -> Settled | None:
        """Check the record against ``table`` (refreshed this tick) and tell Slurm.

        Returns:
            What was done, or None when there is no record or nothing to do.
        """
        state_dir: str = self.state_dir()
        if not os.path.exists(record_path(state_dir)):
            return None
        with record_lock(state_dir, blocking=False) as held:
            # A sweep holding it is changing the record and telling Slurm: next tick.
            return self._check(state_dir, table) if held else None

    def _check(self, state_dir: str, table: ProcessTable) -> Settled | None:
        settings: SlurmNodeSettings = self.settings()
        rec = load_record(state_dir, boot_id(table.proc_root), settings.node)
        changed = check_all(rec, table, {os.getpid()})
        want = wanted_reason(rec)
        due = changed or want != rec.applied
        now = time.monotonic()
        out = None
        if due and now >= self._next_try:
            out = settle(rec, settings, self.run)
            self._next_try = now + self.retry_s if out.error else 0.0
            if out.drained or out.resumed:
                log.warning(
                    "slurm-sweep-drain", node=rec.node, reason=want, resumed=out.resumed,
                    message=f"Slurm node {rec.node} "
                    + ("resumed: nothing is left of what the sweep drained for"
                       if out.resumed else f"drained: {want}"),
                )  # fmt: skip
        save_record(state_dir, rec)
        return out


class _Daemon(Protocol):
    config: Config

    @property
    def scanner(self) -> Any:
        """The daemon's scanner (its ``table`` is refreshed each tick)."""
        ...


def keep_sweep_drain(daemon: _Daemon, run: CommandRunner = command.run) -> Callable[[Any], None]:
    """The daemon's per-tick hook for the sweep's drain (:class:`SweepDrainKeeper`),
    reading the configuration and the process table the daemon has at each tick.

    Args:
        daemon: The daemon (``config``, ``scanner.table``).
        run: Runs ``sinfo``/``scontrol``.
    """
    keeper = SweepDrainKeeper(
        lambda: daemon.config.slurm, lambda: daemon.config.daemon.state_dir, run
    )

    def slurm_sweep_drain(_summary: Any) -> None:
        keeper(daemon.scanner.table)

    return slurm_sweep_drain

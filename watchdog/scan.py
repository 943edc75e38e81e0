"""One scan: sources → GPU jobs → origins → classes → verdicts → findings.

:class:`Scanner` keeps its process table and NVML handle between calls, so a daemon that
calls :meth:`Scanner.scan` every few seconds inspects only new processes. The one-shot
``rogue-watchdog scan`` builds a Scanner and calls it once.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping, Sequence, Set
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .config import Config
from .hosttext import clip, code_span, quoted_command
from .lineage import default_resolvers
from .lineage.base import OriginResolver, ResolveContext, is_wrapper, recheck, split_answer
from .model import (
    UNKNOWN_ORIGIN,
    Finding,
    GpuProcess,
    Job,
    Origin,
    Proc,
    Protection,
    ScanResult,
)
from .policy.allowlist import judge, not_sanctioned_now, sanctioned_since
from .policy.findings import (
    gpu_visibility_findings,
    job_findings,
    missing_gpu_processes,
    pid_namespace_finding,
    unexplained_memory_findings,
    zombie_findings,
)
from .policy.guard import ScanProtection, protection, with_advice
from .policy.jobs import (
    LauncherCache,
    TrainingEvidence,
    collect_training,
    group_jobs,
    ignored_pids,
)
from .policy.nvml import DISABLED, GpuView, gpu_view
from .policy.services import service_findings, service_scope
from .policy.workload import WorkloadFacts, with_classes
from .sources.devfd import DeviceFdSource
from .sources.eventwalk import EventWalk
from .sources.gpulibs import GpuLibraryCache
from .sources.procfs import ProcessTable, boot_id, pid_namespaces, read_identity
from .sources.sockets import ListenScan, SocketReads, scan_listening

if TYPE_CHECKING:  # pynvml is imported only when NVML is used
    from .sources.nvml_records import NvmlSnapshot
    from .sources.procevents import EventBatch

# How long a resolved origin is reused for an unchanged lineage (crontabs and unit files
# are re-read after this; `next_run` may lag by as much).
ORIGIN_TTL_S = 30.0
# Once the process table is this many processes below its size at the last release, the
# next scan hands the memory their records held back to the system (release_memory):
# 4,096 workers of a job that ended left ~20 MiB resident otherwise (issue 32, case 8).
RELEASE_AFTER_REMOVED = 512
# Full sweeps after lost kernel events (every process read again, like the first scan)
# start at least this far apart, so sustained loss costs a bounded share of a core.
FULL_SWEEP_MIN_GAP_S = 2.0


class GpuSource(Protocol):
    """What the scan needs from NVML (see :class:`watchdog.sources.nvml.NvmlSource`)."""

    def snapshot(self, pid_max: int) -> NvmlSnapshot:
        """What NVML lists now (devices, processes, problems)."""
        ...


@runtime_checkable
class RemembersGpus(Protocol):
    """A GPU source that knows which whole GPUs it saw listed (a GPU that drops out of
    the list is blind, not empty: :class:`watchdog.sources.nvml.NvmlSource`)."""

    @property
    def seen_gpus(self) -> dict[str, int]:
        """UUID -> last index of every whole GPU seen listed."""
        ...

    def remember_gpus(self, gpus: Mapping[str, int]) -> None:
        """Count ``gpus`` as seen listed before."""
        ...


def still_hidden(
    missing: Sequence[GpuProcess], gpu_source: GpuSource | None, proc_root: str, pid_max: int
) -> list[GpuProcess]:
    """Of NVML entries /proc lacked, those NVML still lists on a second look while /proc
    still lacks them: invisible, not transient (the process exited between the NVML call
    and the /proc read).

    Args:
        missing: :func:`watchdog.policy.findings.missing_gpu_processes`.
        gpu_source: Asked again only when ``missing`` is not empty; None keeps them all.
        proc_root: procfs mount, to re-check presence.
        pid_max: ``kernel.pid_max``, for the NVML binding's sanity check.

    Returns:
        The entries of ``missing`` still hidden.
    """
    if not missing or gpu_source is None:
        return list(missing)
    still = {(p.pid, p.gpu_uuid) for p in gpu_source.snapshot(pid_max).processes}
    return [
        gp
        for gp in missing
        if (gp.pid, gp.gpu_uuid) in still and not os.path.exists(f"{proc_root}/{gp.pid}")
    ]


def release_memory() -> bool:
    """Return the C heap's free pages to the system (glibc ``malloc_trim(0)``): objects
    Python freed stay resident in the heap otherwise, so the daemon's RSS kept the peak
    of a job of thousands of processes after it ended.

    Returns:
        True when glibc trimmed something; False when nothing was released or the C
        library has no ``malloc_trim`` (musl).
    """
    import ctypes  # only here: most scans never release, and start-up time counts

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))


def remembered_sanctioned(
    state_dir: str, proc_root: str
) -> tuple[dict[tuple[int, int], str], dict[tuple[int, int], float]]:
    """The sanctioned processes the daemon recorded (:func:`watchdog.state.read_sanctioned`).

    SQLite is imported only when the daemon's database exists, and then only the state
    package's one query module, not its tables' and records' (issue 34, item 2).

    Args:
        state_dir: ``daemon.state_dir``.
        proc_root: procfs mount (this boot's id).

    Returns:
        ``((PID, start ticks) -> rule, (PID, start ticks) -> POSIX time a rule matched
        it while it ran, after it was judged rogue)``; empty without a database.
    """
    if not os.path.isfile(os.path.join(state_dir, "state.db")):  # state/store.py's name
        return {}, {}
    from .state.query import read_sanctioned

    return read_sanctioned(state_dir, boot_id(proc_root))


def read_listens(
    jobs: Sequence[Job], table: ProcessTable, guard: Protection | None, proc_root: str
) -> dict[int, ListenScan]:
    """Read the listening sockets of every rogue or excess job's service scope once
    (:func:`watchdog.policy.services.service_scope`): the scan JSON's ``listening`` and
    the ``rogue-service`` findings both come from this one read.

    Returns:
        Job root PID → what its scope's sockets showed.
    """
    seen = SocketReads()  # jobs below one origin share its processes: each read once
    return {
        root: scan_listening(pids, proc_root, seen)
        for root, pids in service_scope(jobs, table, guard).items()
    }


class EventFeed(Protocol):
    """Kernel process events between scans (see
    :class:`watchdog.sources.procevents.ProcEventSource`)."""

    watched: frozenset[int]
    roots: frozenset[int]
    # A wake asked for a whole tick (not only for captures); the daemon's tick clears it.
    full_wanted: bool

    def drain(self) -> EventBatch:
        """Everything gathered since the last call."""
        ...

    def captures_pending(self) -> bool:
        """Processes captured at exec wait for the next scan (and no event was lost)."""
        ...

    def status(self) -> dict[str, Any]:
        """Mode, reason and counters for ``status`` and metrics."""
        ...

    def swept(self) -> None:
        """Called after a full sweep the feed asked for."""
        ...


def resolve_origin(
    lineage: Sequence[Proc], ctx: ResolveContext, resolvers: Sequence[OriginResolver]
) -> Origin:
    """Ask each resolver in order; the first answer wins.

    A resolver that raises is a bug, not a reason to lose the scan: its error becomes
    evidence and the next resolver is asked.
    """
    # What a resolver refused to believe (a Slurm job id only the environment claims, a
    # process that only looks like cron) goes with whichever origin wins.
    said: list[str] = []
    failed: list[str] = []
    for resolver in resolvers:
        try:
            origin, notes = split_answer(resolver.resolve(lineage, ctx))
        except Exception as exc:  # a broken resolver must not stop the scan
            # The error may quote what it read (a path, a line): host text, quoted.
            said_exc = code_span(clip(str(exc), 200))
            failed.append(f"resolver {resolver.name} failed: {type(exc).__name__}: {said_exc}")
            continue
        said.extend(notes)
        if origin is not None:
            extra = [n for n in (*said, *failed) if n not in origin.evidence]
            if extra:
                return dataclasses.replace(origin, evidence=(*origin.evidence, *extra))
            return origin
    return Origin((*UNKNOWN_ORIGIN.evidence, *said, *failed))


@dataclasses.dataclass(frozen=True)
class _Events:
    """What the event stage applied: PIDs an exec event caught that already exited,
    whether every process was read again, and when the table was refreshed
    (``time.monotonic()``)."""

    exited: set[int]
    full_sweep: bool
    read_at: float
    captured: frozenset[int] = frozenset()  # candidates an exec event captured


@dataclasses.dataclass(frozen=True)
class _GpuPicture:
    """The GPU stage's answer.

    Attributes:
        view: NVML's view, judged.
        procs: NVML entries whose process is the one the table read.
        visible: Of those, the ones /proc shows (job candidates).
        blind: Some GPU's processes could not be seen.
        health: NVML and memory findings.
        visibility: Findings about NVML entries /proc does not show.
    """

    view: GpuView
    procs: list[GpuProcess]
    visible: list[GpuProcess]
    blind: bool
    health: list[Finding]
    visibility: list[Finding]


@dataclasses.dataclass(frozen=True)
class _Candidates:
    """The processes that count as GPU jobs (with why), the device fds held, and which
    of them the ignore list names."""

    evidence: TrainingEvidence
    holders: dict[int, tuple[str, ...]]
    ignored: frozenset[int]


class Scanner:
    """Scans the host; reusable across ticks.

    Args:
        config: Validated configuration.
        gpu_source: NVML source; None builds one from the config (or none when
            ``nvml.enabled`` is false).
        resolvers: Origin resolvers in priority order; None uses the default registry.
        fd_sweep_interval_s: Seconds between full device-fd sweeps (new processes are
            always inspected).
        remember: Start from the sanctioned processes the daemon recorded in
            ``daemon.state_dir`` (read only; nothing when there is no database).
        one_shot: A single look (``rogue-watchdog scan``): while NVML sees every GPU,
            only the fd tables of GPU candidates' family lines are read
            (:meth:`DeviceFdSource.holders` ``seeds``), not every process's.
    """

    def __init__(
        self,
        config: Config,
        gpu_source: GpuSource | None = None,
        resolvers: Sequence[OriginResolver] | None = None,
        fd_sweep_interval_s: float = 60.0,
        *,
        remember: bool = True,
        one_shot: bool = False,
    ) -> None:
        self.config = config
        self.one_shot = one_shot
        # Re-read every stat file about every 30 s (catches exec under the same PID).
        restat_every = max(1, round(30.0 / config.daemon.interval_s))
        # A one-shot reads a status and a cgroup where one is asked for (candidates and
        # jobs' lineages; every process's only where something looks at every process,
        # e.g. a job's unit or container): issue 34, item 2.
        self.table = ProcessTable(
            config.paths.proc_root, restat_every=restat_every, late_reads=one_shot
        )
        self.devfd = DeviceFdSource(config.training.device_glob, fd_sweep_interval_s)
        self.resolvers = list(resolvers) if resolvers is not None else default_resolvers()
        if gpu_source is None and config.nvml.enabled:
            from .sources.nvml import NvmlSource

            gpu_source = NvmlSource(config.nvml.library, config.nvml.call_timeout_s)
        self.gpu_source = gpu_source
        # gethostname(2) is uname(2)'s nodename on Linux; the socket module's enums are
        # ~2.5 ms of a one-shot's start-up that only a job's listening sockets need.
        self.host = os.uname().nodename
        self.launcher_cache = LauncherCache()
        self.gpu_libraries = GpuLibraryCache(config.training.gpu_libraries)
        # Kernel process events (the daemon attaches them; a one-shot scan has none),
        # and whether each scan walks /proc or re-reads only what they named.
        self.events: EventFeed | None = None
        self.walk = EventWalk(config.daemon.reconcile_interval_s)
        self._origins: dict[tuple[tuple[int, int], ...], tuple[float, Origin, object]] = {}
        # The origin first resolved for each job root identity (PID, start ticks).
        self._pinned: dict[tuple[int, int], Origin] = {}
        self._persistent: dict[str, object] = {}
        # NVML reports PIDs of the initial PID namespace: matched by number only when
        # proc_root shows that namespace (a fixture tree is taken as the host's).
        self.pid_ns = pid_namespaces(config.paths.proc_root) if self.table.trust_inodes else None
        self._hidepid: tuple[str] | None = None
        self._sweep_due = False
        self._last_sweep = -FULL_SWEEP_MIN_GAP_S
        self._peak_procs = 0  # the table's largest size since memory was last released
        # Processes of sanctioned jobs, (PID, start ticks) -> rule: sanctioned for life.
        # A one-shot command starts from what the daemon recorded (read only), so it never
        # calls rogue what the daemon sanctioned when it started.
        self.sanctioned, self.sanctioned_matched = (
            remembered_sanctioned(config.daemon.state_dir, config.paths.proc_root)
            if remember
            else ({}, {})
        )
        # Of those, the ones a rule matched while they ran, after they were judged rogue:
        # (PID, start ticks) -> POSIX time of that match (their reason must not say
        # "when it started"). And the job roots judged rogue or excess so far, alive.
        self._unsanctioned: set[tuple[int, int]] = set()
        # Our own PID as seen in proc_root (differs only for a fixture tree).
        self.self_pids = (
            frozenset({os.getpid()}) if config.paths.proc_root == "/proc" else frozenset()
        )

    def context(self, now: datetime) -> ResolveContext:
        """The resolver context for this config at ``now``."""
        return ResolveContext.on_host(
            self.config.paths, self.table, now, persistent=self._persistent
        )

    def keep_origins_of(self, previous: Scanner) -> None:
        """Carry the origins ``previous`` found for running processes over (a config
        reload builds a new Scanner; what started a running process does not change).

        Args:
            previous: The Scanner being replaced.
        """
        self._pinned = dict(previous._pinned)
        self.sanctioned = dict(previous.sanctioned)
        self.sanctioned_matched = dict(previous.sanctioned_matched)
        self._unsanctioned = set(previous._unsanctioned)
        # Nor does it make a GPU that drops out of NVML's list next look never listed.
        self.remember_gpus(previous.seen_gpus())

    def seen_gpus(self) -> dict[str, int]:
        """UUID -> last index of every whole GPU NVML listed (empty without NVML)."""
        src = self.gpu_source
        return src.seen_gpus if isinstance(src, RemembersGpus) else {}

    def remember_gpus(self, gpus: Mapping[str, int]) -> None:
        """Count ``gpus`` (UUID -> index) as listed before this Scanner existed: one
        missing from NVML's list is blind (its jobs are held), not a GPU whose processes
        all ended (issue 32: a reload or restart during a GPU's absence resolved its
        findings and reopened them under new ids when it came back).

        Args:
            gpus: UUID -> index of whole GPUs seen listed before.
        """
        src = self.gpu_source
        if isinstance(src, RemembersGpus) and gpus:
            src.remember_gpus(gpus)

    def keep_origins(self, origins: dict[tuple[int, int], Origin]) -> None:
        """Origins of running job roots resolved before this Scanner existed (a daemon
        restart reads them from the state database): what started a running process
        does not change, so a restart never re-attributes it (nor its findings).

        Args:
            origins: ``(root PID, start ticks) -> origin``.
        """
        for ident, origin in origins.items():
            self._pinned.setdefault(ident, origin)

    def keep_sanctioned(
        self,
        procs: dict[tuple[int, int], str],
        matched: dict[tuple[int, int], float] | None = None,
    ) -> None:
        """Processes sanctioned before this Scanner existed (a daemon restart reads them
        from the state database): each stays sanctioned while it lives.

        Args:
            procs: ``(PID, start ticks) -> rule``.
            matched: Of those, the ones a rule matched while they ran, after they were
                judged rogue: ``(PID, start ticks) -> POSIX time`` of that match.
        """
        self.sanctioned.update(procs)
        self.sanctioned_matched.update(matched or {})

    def keep_unsanctioned(self, idents: Set[tuple[int, int]]) -> None:
        """Job roots judged rogue or excess before this Scanner existed (a daemon restart
        reads them from the state database's present jobs): one a rule matches later is
        sanctioned "from" then, not "when it started" (:meth:`_note_matched`).

        Args:
            idents: ``(root PID, start ticks)``.
        """
        self._unsanctioned |= set(idents)

    def _keep_first(self, ident: tuple[int, int], fresh: Origin, ctx: ResolveContext) -> Origin:
        """The origin of a running process never changes: keep the first definite one.

        A re-resolution may match another source by command line (a retired cron line's
        ghost running the pipeline's script matches the pipeline's own line once its
        line is commented out). What started a process is fixed when it starts, so a
        different later answer only refreshes whether the first source still exists.

        The same holds for the other lines that can as well have started it (a cron
        origin's ``also``): which lines were identical when it started is a fact of its
        start, so a later look that finds the same line keeps the first look's ``also``.
        An identical line edited after the start (to run under ``flock``, a mode cron
        skips) did not stop being one that can have started it, and one that becomes
        identical later cannot have; else its verdict, its guard and its findings would
        follow the edits of a line it does not run from.
        """
        first = self._pinned.get(ident)
        if first is None or not first.definite:
            return fresh
        if fresh.definite and first.compatible(fresh) and not _knows_less(fresh, first):
            return first.keeps_first(fresh)
        if fresh.kind == "orphan" and first.kind in ("slurm", "supervisor"):
            # The Slurm job or supervisord ended: the orphan origin keeps its clue
            # (slurm_job_id and state, supervisor_program) and says so.
            return fresh
        # What its source says now (an at queue read live, a crontab line since commented
        # out): the kind's resolver reads it.
        kept = recheck(first, ctx, self.resolvers)
        note = (
            f"kept for this process's lifetime: a later look matched "
            f"{fresh.describe()}, but a running process does not change who started it"
        )
        if fresh.definite and first.compatible(fresh):
            note = (
                "kept for this process's lifetime: a later look could not read all of "
                f"its source ({fresh.describe()})"
            )
        evidence = (*(e for e in kept.evidence if not e.startswith("kept for this")), note)
        return dataclasses.replace(kept, evidence=evidence)

    def _gpu(self) -> GpuView:
        """NVML's view, judged (:func:`watchdog.policy.nvml.gpu_view`)."""
        if self.gpu_source is None:
            return DISABLED
        return gpu_view(self.gpu_source.snapshot(self.table.pid_max()))

    def _same_identity(self, gpu_procs: list[GpuProcess]) -> list[GpuProcess]:
        """Drop NVML entries whose process exited (or whose PID was reused) after the
        process table was read: the listing came later, so the table's record may be of
        a process that no longer holds anything. They are transient, not findings."""
        out = []
        root = self.config.paths.proc_root
        for gp in gpu_procs:
            proc = self.table.get(gp.pid)
            # The same inode is the same task (one stat); else its stat line decides.
            if proc is not None and not self.table.still_same(gp.pid):
                now = read_identity(gp.pid, root)
                if now is None or now[0] != proc.start_ticks:
                    continue
            out.append(gp)
        return out

    def _visibility(self) -> list[Finding]:
        """Say when the scan cannot see what it should, instead of reporting nothing."""
        out = []
        if self.table.error is not None or not self.table.procs:
            out.append(
                Finding(
                    "proc-unavailable",
                    "critical",
                    f"no processes visible: {self.table.error or 'the process table is empty'}"
                    f" (paths.proc_root is {self.config.paths.proc_root})",
                )
            )
        elif (hidden := self._hidepid_blind()) is not None:
            out.append(Finding("limited-visibility", "warning", hidden))
        elif os.geteuid() != 0:
            out.append(
                Finding(
                    "limited-visibility",
                    "warning",
                    f"running as uid {os.geteuid()}, not root: other users' open device fds, "
                    "environments and crontabs cannot be read, so GPU holders and origins "
                    "may be missed; run rogue-watchdog as root",
                )
            )
        return out

    def _hidepid_blind(self) -> str | None:
        """Why ``/proc`` hides processes from us, or None.

        ``hidepid=`` (systemd's ``ProtectProc=``) hides every process this one may not
        ptrace (proc(5)); with CAP_SYS_PTRACE that is none, without it every other
        user's. Checked once: mount options and capabilities do not change while we run.
        """
        if self._hidepid is None:
            self._hidepid = (hidepid_blind(self.config.paths.proc_root) or "",)
        return self._hidepid[0] or None

    def scan(
        self, now: datetime | None = None, known: Set[tuple[int, int]] | None = None
    ) -> ScanResult:
        """Run one scan, stage by stage: events → GPU view → candidates → jobs →
        origins → classes → verdicts → guarded advice → findings → watch set.

        Args:
            now: Wall-clock time for ``next_run`` computations; defaults to the current time.
            known: The exec path (issue 34): the identities (root PID, start ticks) of
                the jobs already tracked. Every stage up to the guard runs as always
                (the guard needs every job's verdict), then only the jobs not among
                them that hold a process captured at exec by this scan's events are
                advised, read for listening sockets and judged into findings; the
                result holds only those jobs and their findings, and the watch set
                only grows. None: the whole scan. Nothing of an earlier scan's picture
                is reused for the rest of the host: the stages that looked at every
                process keep their answers current from what the refresh changed
                (the GPU-library holders, the children index: the answer a whole loop
                gives), so the guard a pass builds is as whole as a tick's; only the
                periodic device-fd sweep is left to the next tick (:meth:`_candidates`).

        Returns:
            The scan result. Never raises for vanished processes, unreadable files or
            NVML failures: those become findings or missing values.
        """
        started = time.monotonic()
        now = now or datetime.now(UTC).astimezone()
        size = len(self.table.procs)
        if self._peak_procs - size >= RELEASE_AFTER_REMOVED:
            # Many processes ended since the table was largest (in one tick or over
            # several); what held their records is gone by now.
            self.table.compact()
            release_memory()
            self._peak_procs = size
        events = self._take_events(started)
        self._peak_procs = max(self._peak_procs, len(self.table.procs))
        gpu = self._gpu_picture()
        self.walk.after_gpu(gpu.blind, (gp.pid for gp in gpu.procs), self.table)
        candidates = self._candidates(gpu, events.read_at, whole=known is None)
        jobs = group_jobs(
            self.table, candidates.evidence, gpu.visible, candidates.holders, candidates.ignored
        )
        jobs = self._with_origins(jobs, now)
        jobs = self._with_classes(jobs, gpu, candidates, events)
        kept = self._alive_sanctioned()
        jobs = judge(jobs, self.config, kept, self.sanctioned_matched)
        only = None
        if known is not None:
            only = {
                (j.root_pid, j.start_ticks)
                for j in jobs
                if (j.root_pid, j.start_ticks) not in known and events.captured.intersection(j.pids)
            }
        judged = jobs
        jobs, guard = self._guarded(jobs, kept, candidates.evidence.own, only)
        self._note_matched(judged, kept, now.timestamp())
        jobs, listens = self._with_listening(jobs, guard)
        findings = [
            *_mark_exited(job_findings(jobs, self.config.workloads), events.exited),
            *self._kept_findings(jobs, kept),
            *service_findings(jobs, listens, self.config.services, guard),
        ]
        if only is None:
            findings += [
                *gpu.visibility,
                *zombie_findings(self.table, gpu.visible, candidates.evidence),
                *gpu.health,
                *self._visibility(),
            ]
        self._watch(gpu.procs, jobs, grow=only is not None)
        return ScanResult(
            host=self.host,
            time=now,
            duration_s=time.monotonic() - started,
            nvml=gpu.view.status,
            gpus=list(gpu.view.gpus),
            jobs=jobs,
            findings=findings,
            gpu_processes=list(gpu.procs),
            gpu_blind=gpu.blind,
            exited=events.exited,
            full_sweep=events.full_sweep,
            protection=guard,
        )

    def _take_events(self, started: float) -> _Events:
        """Stage 1: the kernel's process events since the last scan, applied to the
        process table (re-read what exec'd, a full sweep after lost events, the exited
        processes an exec event caught), then the table refreshed.

        Args:
            started: ``time.monotonic()`` when the scan started.
        """
        feed = self.events
        batch = feed.drain() if feed is not None else None
        exited: set[int] = set()
        full_sweep = False
        if feed is not None and batch is not None:
            self._sweep_due = self._sweep_due or batch.full_sweep
            # Events were lost: any process may have exec'd (even keeping its comm), so
            # every one is read in full again; at most every FULL_SWEEP_MIN_GAP_S.
            if self._sweep_due and started - self._last_sweep >= FULL_SWEEP_MIN_GAP_S:
                self._sweep_due, self._last_sweep, full_sweep = False, started, True
                self.table.reinspect(list(self.table.procs))
                feed.swept()
            self.table.reinspect(batch.reinspect)
        self.walk.refresh(self.table, batch, started)
        read_at = time.monotonic()
        if batch is not None:
            exited = self.table.add_exited(batch.captured.values())
            self.walk.kept(exited)
            for pid, (start, libs) in batch.gpu_libraries.items():
                self.gpu_libraries.note(pid, start, libs, read_at)
        captured = frozenset(batch.candidates) if batch is not None else frozenset()
        return _Events(exited=exited, full_sweep=full_sweep, read_at=read_at, captured=captured)

    def _gpu_picture(self) -> _GpuPicture:
        """Stage 2: NVML's view judged, its entries matched to the process table, and
        what could not be seen said as findings."""
        view = self._gpu()
        listed = list(view.processes)
        health = [
            *view.findings,
            *unexplained_memory_findings(
                list(view.gpus),
                listed,
                list(view.blind_gpus),
                self.config.nvml.unexplained_memory_slack_bytes,
            ),
        ]
        blind = view.blind_to_all
        ns = self.pid_ns
        if ns is not None and not ns.host_pids:
            # Another PID namespace: an NVML PID means nothing here, never look it up.
            procs: list[GpuProcess] = []
            blind = True
            if view.status.available:
                health.append(pid_namespace_finding(ns.own, ns.procfs, listed))
        else:
            procs = self._same_identity(listed)
        missing = missing_gpu_processes(self.table, procs)
        hidden = still_hidden(
            missing, self.gpu_source, self.config.paths.proc_root, self.table.pid_max()
        )
        visible, visibility = gpu_visibility_findings(self.table, procs, hidden)
        return _GpuPicture(
            view=view,
            procs=procs,
            visible=visible,
            blind=blind or bool(view.blind_gpus),
            health=health,
            visibility=visibility,
        )

    def _candidates(self, gpu: _GpuPicture, read_at: float, whole: bool = True) -> _Candidates:
        """Stage 3: every process that counts as a GPU job, with why, and which of them
        the ignore list names.

        The GPU-library answer and the launcher matches are kept between scans and
        brought up to date from what the refresh changed (with kernel events: what they
        named), not from every process: the same answer as a whole loop.

        Args:
            gpu: Stage 2's picture.
            read_at: When the process table was refreshed (``time.monotonic()``).
            whole: False for the exec path: no full device-fd sweep starts here (about
                30 µs per process); the next whole tick runs it when due. Without it the
                pass sees what every scan between two sweeps sees (new processes and
                known holders), so its picture, and the guard built from it, is as
                whole as any such tick's.
        """
        gpu_libs = self.gpu_libraries.holders(self.table, read_at, skip=is_wrapper)
        holders = self.devfd.holders(
            self.table, read_at, self._fd_seeds(gpu, gpu_libs), sweep=whole
        )
        evidence = collect_training(
            self.table,
            gpu.visible,
            holders,
            self.config.training.launchers,
            self.launcher_cache,
            self.self_pids,
            gpu_libs,
            self.sanctioned,
        )
        procs = self.table.procs
        ignored = ignored_pids((procs[pid] for pid in evidence.by_pid), self.config.ignore)
        return _Candidates(evidence=evidence, holders=holders, ignored=ignored)

    def _fd_seeds(self, gpu: _GpuPicture, gpu_libs: Mapping[int, object]) -> set[int] | None:
        """The GPU candidates whose family lines alone a one-shot scan reads fd tables of
        (issue 34, item 2), or None to read them as a daemon does. Only while NVML sees
        every GPU: then a process holding a device with a CUDA context is listed, and an
        orphaned worker holding one has CUDA mapped (it forked from a CUDA process).
        What is left unread is a holder with neither, unrelated to any candidate."""
        if not self.one_shot or gpu.blind or not gpu.view.status.available:
            return None
        launchers = self.launcher_cache.matching(self.table, self.config.training.launchers)
        return {*(gp.pid for gp in gpu.view.processes), *gpu_libs, *launchers}

    def _with_origins(self, jobs: Sequence[Job], now: datetime) -> list[Job]:
        """Stage 4: each job with the origin of its root: resolved, or reused while its
        lineage and the file naming its source are unchanged, and never changed for a
        running process (:meth:`_keep_first`)."""
        ctx = self.context(now)
        mono = time.monotonic()
        origins: dict[tuple[tuple[int, int], ...], tuple[float, Origin, object]] = {}
        pinned: dict[tuple[int, int], Origin] = {}
        resolved: list[Job] = []
        for job in jobs:
            # The same lineage resolves the same way until its files change: reuse the
            # answer for ORIGIN_TTL_S (a re-parented job has a new lineage, so a new key).
            key = tuple((p.pid, p.start_ticks) for p in job.lineage)
            ident = (job.root_pid, job.start_ticks)
            hit = self._origins.get(key)
            if hit is None or mono - hit[0] > ORIGIN_TTL_S or _file_stamp(hit[1]) != hit[2]:
                # ...or sooner when the file naming the source changed (a crontab line
                # edited while its run is alive): one stat per job per scan.
                fresh = resolve_origin(job.lineage, ctx, self.resolvers)
                first = self._keep_first(ident, fresh, ctx)
                hit = (mono, first, _file_stamp(first))
            origins[key] = hit
            pinned[ident] = hit[1]
            resolved.append(dataclasses.replace(job, origin=hit[1]))
        self._origins = origins
        self._pinned = pinned
        return resolved

    def _with_classes(
        self, jobs: Sequence[Job], gpu: _GpuPicture, candidates: _Candidates, events: _Events
    ) -> list[Job]:
        """Stage 5: each job's workload class and its evidence
        (:func:`watchdog.policy.workload.classify`): what decides a finding's kind and
        severity, and what ignore entries naming a class match."""
        facts = WorkloadFacts(
            table=self.table,
            evidence=candidates.evidence.by_pid,
            gpu_processes=gpu.visible,
            exited=events.exited,
            settings=self.config.workloads,
        )
        return with_classes(jobs, facts)

    def _guarded(
        self,
        jobs: Sequence[Job],
        kept: dict[tuple[int, int], str],
        trainers: Set[int],
        only: Set[tuple[int, int]] | None = None,
    ) -> tuple[list[Job], ScanProtection]:
        """Stage 6: what must never be targeted (the one guard), the processes that stay
        sanctioned for their life, and each job's advice decided under that guard.

        Args:
            jobs: Judged jobs.
            kept: Earlier sanctioned processes still alive (:meth:`_alive_sanctioned`).
            trainers: PIDs training by what they do themselves (not for a zombie's
                memory): a job root outside them must be an exclusive wrapper.
            only: The exec path's jobs (:meth:`scan` ``known``): the guard is built
                from every job, the advice given to these alone.

        Returns:
            ``(jobs with advice, the guard)``.
        """
        guard = protection(
            jobs,
            self.config,
            table=self.table,
            never=self._lineage_of_self(),
            kept=kept,
            trainers=trainers,
        )
        self.sanctioned = self._sanctioned_now(jobs, guard, kept)
        if only is not None:  # the exec path: only the new jobs are advised (and kept)
            jobs = [j for j in jobs if (j.root_pid, j.start_ticks) in only]
        return with_advice(jobs, guard, self.table, self.config), guard

    def _with_listening(
        self, jobs: Sequence[Job], guard: ScanProtection
    ) -> tuple[list[Job], dict[int, ListenScan]]:
        """Stage 7: the listening sockets of every unsanctioned job's service scope, read
        once (:func:`read_listens`), set on each job.

        Returns:
            ``(jobs with listening set, job root PID → what was read)``.
        """
        listens = read_listens(jobs, self.table, guard, self.config.paths.proc_root)
        out = [
            dataclasses.replace(
                job, listening=[x.to_json() for x in listens[job.root_pid].listening]
            )
            if job.root_pid in listens
            else job
            for job in jobs
        ]
        return out, listens

    def _watch(
        self, gpu_procs: Sequence[GpuProcess], jobs: Sequence[Job], grow: bool = False
    ) -> None:
        """Last stage: keep parent and state of every job member, its lineage and GPU
        PIDs current (the table re-reads them each scan; the event feed follows them).
        ``grow``: the exec path's few jobs are added to what the last scan watched."""
        watched = {gp.pid for gp in gpu_procs}
        for job in jobs:
            watched.update(job.pids)
            watched.update(p.pid for p in job.lineage)
        roots = frozenset(job.root_pid for job in jobs)
        if grow:
            watched |= self.table.watched
            roots |= self.events.roots if self.events is not None else frozenset()
        self.table.watched = watched
        if self.events is not None:
            self.events.roots = roots
            self.events.watched = frozenset(watched)

    def _alive_sanctioned(self) -> dict[tuple[int, int], str]:
        """The remembered sanctioned identities whose process still runs."""
        out = {}
        for (pid, start), rule in self.sanctioned.items():
            if self.table.alive((pid, start)):
                out[(pid, start)] = rule
        return out

    def _sanctioned_now(
        self, jobs: Sequence[Job], guard: ScanProtection, kept: dict[tuple[int, int], str]
    ) -> dict[tuple[int, int], str]:
        """Every process of this scan's sanctioned jobs with its rule, and the earlier
        ones still alive: what stays sanctioned for its life. One that exited and is not
        reaped yet is kept while it is a zombie: a wrapper holding it is no job for it
        (:func:`~watchdog.policy.jobs.collect_training`)."""
        out = dict(kept)
        for (pid, start), rule in self.sanctioned.items():
            proc = self.table.get(pid)
            if proc is not None and proc.start_ticks == start and proc.is_zombie:
                out.setdefault((pid, start), rule)
        for job in jobs:
            if job.verdict != "sanctioned" or job.rule is None:
                continue
            for pid in job.pids:
                proc = self.table.get(pid)
                if proc is not None and (pid, proc.start_ticks) in guard.identities:
                    out.setdefault((pid, proc.start_ticks), job.rule)
            out.setdefault((job.root_pid, job.start_ticks), job.rule)
        return out

    def _note_matched(
        self, jobs: Sequence[Job], kept: dict[tuple[int, int], str], now: float
    ) -> None:
        """Record when a rule first matched a job judged rogue or excess in an earlier
        scan (the operator added or widened a rule while it ran): it is kept sanctioned
        for its life from then, and its reason says so (:func:`sanctioned_since`).

        Args:
            jobs: This scan's judged jobs (all of them, before the exec path's filter).
            kept: Earlier sanctioned processes still alive.
            now: POSIX time of this scan.
        """
        for job in jobs:
            ident = (job.root_pid, job.start_ticks)
            if job.verdict != "sanctioned" or ident in kept or ident not in self._unsanctioned:
                continue
            for pid in job.pids:
                proc = self.table.get(pid)
                if proc is not None and (pid, proc.start_ticks) in self.sanctioned:
                    self.sanctioned_matched.setdefault((pid, proc.start_ticks), now)
            self.sanctioned_matched.setdefault(ident, now)
        self.sanctioned_matched = {
            i: t for i, t in self.sanctioned_matched.items() if i in self.sanctioned
        }
        self._unsanctioned = {
            (j.root_pid, j.start_ticks) for j in jobs if j.verdict in ("rogue", "excess")
        } | {i for i in self._unsanctioned if i not in self.sanctioned and self.table.alive(i)}

    def _lineage_of_self(self) -> frozenset[int]:
        """rogue-watchdog and its ancestors in this table (never a target)."""
        out: set[int] = set()
        for pid in self.self_pids:
            out.update(p.pid for p in self.table.ancestors(pid))
        return frozenset(out)

    def _kept_findings(
        self, jobs: Sequence[Job], kept: dict[tuple[int, int], str]
    ) -> list[Finding]:
        """An info finding for each sanctioned job whose ground moved since it started:
        its crontab entry was edited or removed, or no rule would sanction it if it
        started now (the allowlist changed). It stays sanctioned until it exits."""
        out = []
        for job in jobs:
            if job.verdict != "sanctioned":
                continue
            ident = (job.root_pid, job.start_ticks)
            was = kept.get(ident)
            rule = was or job.rule
            # Only a kept one can be sanctioned while no rule matches it now.
            why = not_sanctioned_now(job, self.config) if was is not None else None
            gone = job.origin.source_gone()
            if why is None and gone is None:
                continue
            what = "; ".join(x for x in (gone, why and f"if it started now: {why}") if x)
            out.append(
                Finding(
                    kind="sanctioned-changed",
                    severity="info",
                    message=(
                        f"sanctioned job PID {job.root_pid} {quoted_command(job.cmdline, 120)} "
                        f"stays sanctioned by rule {rule!r} until it exits: it was "
                        f"{sanctioned_since(self.sanctioned_matched.get(ident))} ({what}); "
                        "a new run is judged by the rules and the source as they are then"
                    ),
                    root_pid=job.root_pid,
                    details={"rule": rule, "now": why, "source": gone, "pids": list(job.pids)},
                )
            )
        return out


def _knows_less(fresh: Origin, first: Origin) -> bool:
    """True when ``fresh`` lacks a source field ``first`` knew (a container's image with
    its engine down): its signature would be that of every source that reads alike, so
    two containers of different images became one job across a daemon restart (trust
    simulator, seed 64101)."""
    known, now = first.source_key() or (), fresh.source_key() or ()
    return any(a is not None and b is None for a, b in zip(known, now, strict=False))


def _file_stamp(origin: Origin) -> object:
    """``(mtime_ns, size)`` of the file an origin's source lives in (a crontab, a unit
    file, the at spool, a supervisord config), None when it names none or it cannot be read."""
    path = origin.watched_path()
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    # Mode, owner and links too: a chmod decides whether cron reads the file at all.
    return (st.st_mtime_ns, st.st_size, st.st_mode, st.st_uid, st.st_nlink)


def _mark_exited(findings: list[Finding], exited: set[int]) -> list[Finding]:
    """Say so when a job's root had already exited (an exec event caught it): its
    record is what the kernel showed at exec time, and there is nothing to signal."""
    if not exited:
        return findings
    out = []
    for f in findings:
        if f.root_pid in exited:
            f = dataclasses.replace(
                f,
                message=f"{f.message} (already exited: seen at its exec)",
                details={**f.details, "exited": True},
            )
        out.append(f)
    return out


CAP_SYS_PTRACE = 19  # linux/capability.h


def hidepid_blind(proc_root: str) -> str | None:
    """A sentence saying other users' processes are hidden, or None when they are not.

    Args:
        proc_root: Where procfs is mounted.

    Returns:
        None when ``proc_root`` is not mounted with ``hidepid=`` other than ``0``/``off``,
        or when this process holds CAP_SYS_PTRACE (``CapEff`` of ``/proc/self/status``).
    """
    real = os.path.realpath(proc_root)
    option = None
    try:
        with open("/proc/self/mounts") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) >= 4 and fields[2] == "proc" and fields[1] == real:
                    for opt in fields[3].split(","):
                        if opt.startswith("hidepid="):
                            option = opt.partition("=")[2]
    except OSError:
        return None
    if option in (None, "0", "off"):
        return None
    try:
        with open("/proc/self/status") as fh:
            cap_eff = next((int(x.split()[1], 16) for x in fh if x.startswith("CapEff:")), 0)
    except (OSError, ValueError):
        cap_eff = 0
    if cap_eff & (1 << CAP_SYS_PTRACE):
        return None
    return (
        f"{proc_root} is mounted with hidepid={option} and rogue-watchdog lacks "
        "CAP_SYS_PTRACE: other users' processes are hidden from it, so their training "
        "jobs are missed; grant CAP_SYS_PTRACE (the shipped unit does) or mount /proc "
        "without hidepid"
    )

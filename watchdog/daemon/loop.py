"""The daemon loop: ``tick(now)`` scans, tracks, spools alerts and acts.

Tests drive :meth:`Daemon.tick` directly with any ``now``; :meth:`Daemon.run_forever`
calls it every ``daemon.interval_s`` and handles signals. Every part that can fail (the
scan, a finding source, an enforcer, a worker) degrades with one log event when it
starts failing and one when it recovers; the loop never dies from it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..config import Config, ConfigError, config_checksum, load_config
from ..hostpaths import config_args, config_file, systemctl_offered
from ..hosttext import own_code
from ..lineage.slurm import stepd_candidates, stepd_members
from ..logs import get_logger
from ..model import LOG_LEVELS, Finding, Origin, ScanResult, origin_from_json
from ..plugins import Enforcer, FindingSource, TrackResult, Worker
from ..policy.nvml import NO_LIBRARY
from ..policy.signature import job_signature
from ..report import GPU_INVENTORY_KEY, gpu_inventory
from ..scan import Scanner
from ..sources.procfs import ProcessTable, boot_id
from ..state import FindingRecord, StateDB
from .inforce import keep_in_force_copy
from .outagefile import read_outage, remove_outage, write_outage
from .sanctionedfile import read_sanctioned, write_sanctioned
from .tracker import Tracker, sink_accepts
from .tracking.fold import job_root
from .unstored import UnstoredFindings

log = get_logger()
# Degraded-component name while the configuration file on disk was refused by a reload.
RELOAD_COMPONENT = "config-reload"

# Settings read once at start, each for the reason given: a reload that changes one keeps
# the running value, logs `config-change-needs-restart` and holds a `needs-restart`
# finding naming it. Every other key takes effect at the reload
# (tests/unit/test_reload_sections.py goes through each section).
# Each is a dotted ``section.key`` of :class:`Config`, named here only: the getters and
# the replacement in :func:`keep_restart_only` are derived from it.
RESTART_ONLY_KEYS: tuple[str, ...] = (
    "daemon.state_dir",  # the state database is open
    "daemon.socket",  # the status socket is bound
    "daemon.socket_group",  # ...and chowned
    "daemon.metrics_listen",  # the listener is bound
    "daemon.events",  # the proc connector opened at start
    "daemon.events_rcvbuf_bytes",  # its buffer
    "paths.proc_root",  # the boot id, the event source
    "nvml.library",  # pynvml loads one library per process
)


def _getter(key: str) -> Callable[[Config], object]:
    section, _, name = key.partition(".")
    return lambda c: getattr(getattr(c, section), name)


#: :data:`RESTART_ONLY_KEYS` with the getter of each, in that order.
RESTART_ONLY: tuple[tuple[str, Callable[[Config], object]], ...] = tuple(
    (key, _getter(key)) for key in RESTART_ONLY_KEYS
)
# Finding kind while a reload left restart-only keys at their running values.
NEEDS_RESTART = "needs-restart"


def keep_restart_only(running: Config, new: Config) -> tuple[Config, list[str]]:
    """``new`` with the :data:`RESTART_ONLY` settings of ``running``, and the keys whose
    value in ``new`` differs (they take effect at the next restart).

    Args:
        running: The configuration in force.
        new: The configuration just read from the file.

    Returns:
        The configuration to put in force, and the keys left as they were (in
        :data:`RESTART_ONLY` order; empty when none changed).
    """
    changed = [key for key, get in RESTART_ONLY if get(running) != get(new)]
    if not changed:
        return new, []
    # Every restart-only key keeps its running value, changed or not.
    running_values: dict[str, dict[str, object]] = {}
    for key in RESTART_ONLY_KEYS:
        section, _, name = key.partition(".")
        running_values.setdefault(section, {})[name] = getattr(getattr(running, section), name)
    kept = dataclasses.replace(
        new,
        **{
            section: dataclasses.replace(getattr(new, section), **values)
            for section, values in running_values.items()
        },
    )
    return kept, changed


# Retention runs at most this often (tick time, seconds).
PRUNE_EVERY_S = 300.0
# ``meta`` key: the latest wall time (POSIX seconds) the daemon saw, written at each prune.
CLOCK_SEEN = "clock_seen"
# Daemon._outage_written once the outage file is removed (the database holds it all).
_REMOVED = "removed"
# meta: the whole GPUs NVML listed during this boot ({"boot_id", "gpus": UUID -> index}):
# a restart while one is out of the list knows it is blind there, not empty.
SEEN_GPUS = "nvml_seen_gpus"

# Early ticks (kernel events) keep the loop busy at most this fraction of the time: the
# next one starts no sooner than the last one's duration divided by it after the last
# began (and never sooner than EARLY_TICK_MIN_GAP_S), so a burst of launcher execs costs
# a bounded share of a core, not one scan per exec.
EARLY_TICK_DUTY = 0.5
EARLY_TICK_MIN_GAP_S = 0.01
# The tick that sends an open held back by alerts.settle_s comes at least this long after
# the one before (a settle already over when a tick ends asks for no busy loop).
SETTLE_TICK_MIN_S = 0.1


def early_tick_spacing_s(tick_s: float, acting_s: float) -> float:
    """Seconds from a tick's start to an early tick asked for during it.

    The duty limit spaces early ticks by the scan's own cost: the time the tick spent
    acting is no scan cost, and counting it made the daemon blind for twice the grace
    after a ``terminate`` that waited out ``grace_s`` in the tick (issue 32, case 3: a
    60 s grace put the next scan 120 s after the tick began). The grace period itself is
    now waited out off the tick (:mod:`watchdog.actions.runner`).

    Args:
        tick_s: The tick's duration (monotonic seconds).
        acting_s: Of it, the seconds the enforcers took.
    """
    return max(EARLY_TICK_MIN_GAP_S, max(0.0, tick_s - acting_s) / EARLY_TICK_DUTY)


def exec_pass_gap_s(pass_s: float) -> float:
    """Seconds from the end of a pass to an exec pass asked for meanwhile.

    The same duty limit, by the pass's own cost: the pass is idle-spaced by what the
    last one took, so passes keep the loop busy at most ``EARLY_TICK_DUTY`` of the time
    however many captures come. A whole tick's cost no longer spaces them: 2x a 20-60 ms
    tick was most of exec -> finding for a capture that came during one (issue 34,
    item 1), while a pass costs a few milliseconds. After a whole tick a pass waits for
    nothing more (:func:`exec_pass_start`).

    Args:
        pass_s: The last exec pass's duration (monotonic seconds; 0 before the first).
    """
    return max(0.0, pass_s) * (1.0 / EARLY_TICK_DUTY - 1.0)


def exec_pass_start(began: float, ended: float, after_pass: bool, pass_s: float) -> float:
    """When an exec pass asked for during the last tick or pass may start (monotonic).

    After a pass, once the loop has been idle as long as that pass took
    (:func:`exec_pass_gap_s`); after a whole tick, at once: the captures that came during
    it have waited for it already (waiting a pass's length more was most of the tail of
    exec -> finding, issue 34), and the whole ticks' own spacing
    (:func:`early_tick_spacing_s`) bounds the loop's share as before. Either way at least
    ``EARLY_TICK_MIN_GAP_S`` after the last one began.

    Args:
        began: When the last tick or pass began (monotonic seconds).
        ended: When it ended (monotonic seconds).
        after_pass: Whether it was an exec pass (else a whole tick).
        pass_s: The last exec pass's duration, seconds.
    """
    idle = exec_pass_gap_s(pass_s) if after_pass else 0.0
    return max(ended + idle, began + EARLY_TICK_MIN_GAP_S)


@dataclass
class TickSummary:
    """What the last tick saw, for ``status`` and metrics."""

    time: float
    duration_s: float
    result: ScanResult | None
    track: TrackResult | None
    findings: list[Finding] = field(default_factory=list)


LEARNING_STARTED = "learning_started"
#: ``meta`` key: POSIX time this daemon first started with this state directory (a
#: database written before the key: its oldest record). A learning period written as a
#: duration counts from it, whenever ``learn_until`` was added (docs/first-week.md).
FIRST_STARTED = "first_started"


def first_started(db: StateDB, now: float) -> float:
    """When a daemon first started with ``db``'s state directory: ``meta``
    ``first_started``, recorded now (as ``now``, or the oldest record of a database
    written before the key) when absent.

    Raises:
        sqlite3.Error: The database cannot be read or written.
    """
    was = db.meta(FIRST_STARTED)
    try:
        if was is not None:
            return float(was)
    except ValueError:
        pass  # damaged: recorded again
    first = min(now, db.earliest_record() or now)
    db.set_meta(FIRST_STARTED, repr(first))
    return first


def restart_hint(source: str | None) -> str:
    """How to restart the daemon configured by ``source``, as a hint says it:
    ``systemctl restart rogue-watchdog`` only for the unit's own instance on a host
    where systemd runs it (:func:`watchdog.hostpaths.systemctl_offered`)."""
    if systemctl_offered(source):
        return "systemctl restart rogue-watchdog"
    return f"stop it and start {own_code('rogue-watchdog run' + config_args(source))} again"


def learning_started_at(first: float | None, recorded: str | None) -> float | None:
    """When the learning period began: ``meta`` ``learning_started`` (``recorded``) when
    it is a number, else the first start with this state directory (``first``)."""
    try:
        return float(recorded) if recorded is not None else first
    except ValueError:
        return first


# Findings about what runs outside the allowlist: info while learning (daemon.learn_until),
# every kind of them (issue 35, case 5: rogue-service stayed high). ``respawned`` is made
# by the tracker, which opens it at info while learning. ``remediation-failed`` too: the
# daemon acts on nothing while learning, so it follows an operator's terminate, and the
# run back may be a pipeline the allowlist does not list yet (it paged critical beside
# its run's rogue-job and respawned at info).
LEARNED_KINDS = frozenset(
    {
        "rogue-job",
        "excess-instances",
        "queue-unsanctioned",
        "rogue-service",
        "unsanctioned-gpu-use",
        "remediation-failed",
    }
)


def learned(finding: Finding) -> Finding:
    """``finding`` as the learning period reports it: a finding about what runs outside
    the allowlist (:data:`LEARNED_KINDS`) at ``info`` (``details.learning`` true), any
    other unchanged."""
    if finding.kind not in LEARNED_KINDS:
        return finding
    return dataclasses.replace(
        finding, severity="info", details={**finding.details, "learning": True}
    )


def recorded_origins(db: StateDB) -> dict[tuple[int, int], Origin]:
    """The origins the state database holds for the jobs present at the last stop, by
    ``(pid, start_ticks)``: each job's root and every run of it.

    Raises:
        Exception: Whatever a damaged table raises (the daemon degrades ``state``).
    """
    origins = {
        (rec.root_pid, rec.start_ticks): origin_from_json(rec.origin) for rec in db.present_jobs()
    }
    # Every run of those jobs too: copies of one job share its jobs row.
    for ident, recorded in db.present_run_origins().items():
        origins.setdefault(ident, origin_from_json(recorded))
    return origins


def clock_seen_before(db: StateDB) -> float | None:
    """The latest wall time (epoch seconds) a previous run of this daemon saw (meta
    ``CLOCK_SEEN``); None when there is none to trust."""
    try:
        seen = db.meta(CLOCK_SEEN)
        return float(seen) if seen is not None else None
    except Exception:  # unreadable or not a number: no earlier clock to trust
        return None


class Daemon:
    """The long-running watchdog.

    Args:
        config: Validated configuration.
        config_path: Where it was read from (for reload and status); None for defaults.
        db: State database; None opens ``daemon.state_dir``.
        scanner: Process scanner; None builds one from ``config``.
        sources: Extra finding sources.
        enforcers: Actions after tracking.
        workers: Background threads started and stopped with the loop.
        sanctioned_file: Where to keep the sanctioned identities besides the database
            (:mod:`watchdog.daemon.sanctionedfile`; ``run`` passes the file beside the
            status socket); None keeps them in the database only.
        outage_file: Where to keep the findings paged from memory while the database
            refuses writes (:mod:`watchdog.daemon.outagefile`; ``run`` passes the file
            beside the status socket); None: nowhere, and a daemon started during an
            outage says in its pages about older runs that they may repeat one.
    """

    def __init__(
        self,
        config: Config,
        config_path: str | None = None,
        *,
        db: StateDB | None = None,
        scanner: Scanner | None = None,
        sources: Sequence[FindingSource] = (),
        enforcers: Sequence[Enforcer] = (),
        workers: Sequence[Worker] = (),
        sanctioned_file: str | None = None,
        outage_file: str | None = None,
    ) -> None:
        self.config = config
        self.config_path = config_path
        self.db = db or StateDB(config.daemon.state_dir)
        self.scanner = scanner or Scanner(
            config, fd_sweep_interval_s=config.daemon.fd_sweep_interval_s
        )
        self.tracker = Tracker(
            self.db,
            config.alerts,
            self.scanner.host,
            cli_args=config_args(config.source),
            config=config_file(config.source),
        )
        # Findings the tick could not store, alerted from memory (watchdog.daemon.unstored).
        self.unstored = UnstoredFindings()
        self.unstored.read(self.db)
        self.sources = list(sources)
        self.enforcers = list(enforcers)
        self.workers = list(workers)
        self.started_at = time.time()
        self.last: TickSummary | None = None
        self.degraded: dict[str, str] = {}
        # This tick's: whether an open finding's source could not be read (it stays open).
        self._unread: Callable[[str], bool] | None = None
        # Seconds the last tick's enforcers took (early-tick spacing leaves them out).
        self.acting_s = 0.0
        # The checksum of the configuration in force (status shows it beside the file's);
        # after a refused reload, the checksum of the refused file.
        self.config_in_force: str | None = config_checksum(config_path)
        self._keep_config_copy()
        # What the file was when a reload refused it (_file_stamp); None: none refused.
        self._refused: _Stamp | None = None
        # Keys of RESTART_ONLY the file changed since the start, with the running value
        # and the file's: they take effect at the next restart.
        self.needs_restart: dict[str, tuple[object, object]] = {}
        self.on_tick: list[Callable[[TickSummary], None]] = []
        self.on_reload: list[Callable[[Daemon], None]] = []
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._pruned_at = -math.inf
        # An event source asks for a tick now (request_tick); _wake ends the sleep.
        self._early = threading.Event()
        self._wake = threading.Event()
        # The exec path's passes (exec_tick) and how long the last one took, seconds.
        self.exec_ticks = 0
        self.exec_tick_s = 0.0
        # The new runs the last exec pass left to the tick (identities): a tick follows.
        self.exec_left: list[tuple[int, int]] = []
        # PID → wait(2) status of the processes the kernel saw exit since the last call
        # (the proc connector: events.attach_events); None when polling only. Read at the
        # start of a tick, before its scan.
        self.exit_statuses: Callable[[], Mapping[int, int]] | None = None
        # A sanctioned process stays sanctioned for its life, also across a restart.
        self.boot_id = boot_id(config.paths.proc_root)
        self._sanctioned_saved: dict[tuple[int, int], str] = {}
        # The same identities beside the socket (daemon/sanctionedfile.py): a restart
        # while state.db refused writes keeps what was sanctioned meanwhile.
        self._sanctioned_file = sanctioned_file
        self._sanctioned_written = (
            read_sanctioned(sanctioned_file, self.boot_id) if sanctioned_file else {}
        )
        self._sanctioned_file_error: str | None = None
        self.scanner.keep_sanctioned(self._sanctioned_written)
        self._gpus_known: dict[str, Any] | None = None  # the GPU inventory in meta
        self._seen_gpus_written: dict[str, int] = {}  # meta SEEN_GPUS as last written
        self._slurm_members: dict[tuple[int, int], tuple[int, int | None]] = {}
        self._slurm_members_saved: dict[tuple[int, int], tuple[int, int | None]] = {}
        # The table, its reads_changed and the PIDs that may be a slurmstepd then.
        self._stepd_candidates: tuple[ProcessTable | None, int, set[int]] = (None, -1, set())
        # The latest wall time a previous run of this daemon saw (meta CLOCK_SEEN):
        # retention trusts no clock that runs ahead of it (issue 32, case 5).
        self._started_mono = time.monotonic()
        self._clock_before = clock_seen_before(self.db)
        self.learning_started: float | None = None
        self._restore()
        # What an earlier daemon of this boot paged from memory during a storage outage.
        self._outage_file = outage_file
        self._outage_written: object = None
        self._outage_file_error: str | None = None
        # The findings the file holds, as the last tick that could not store left them;
        # None while the database takes writes. The delivery thread rewrites the file
        # when it sent one of their alerts (the lock orders it with the loop's writes).
        self._outage_paged: list[FindingRecord] | None = None
        self._outage_lock = threading.Lock()
        self.unstored.spool.on_done.append(self._flush_outage)
        self._take_outage_account()

    def _take_outage_account(self) -> None:
        """Take back the findings an earlier daemon paged from memory (the outage file)
        and say so; without an account, the pages this one cannot tell from an earlier
        one's say so (``UnstoredFindings.unknown_before``)."""
        path = self._outage_file
        account = read_outage(path, self.boot_id) if path else None
        self.unstored.adopt(account, self.db, self.started_at)
        self._keep_adopted_signatures()
        if self.unstored.adopted:
            # Kept in step from now on: a re-queued alert sent before the first tick too.
            self._outage_paged = self.unstored.account().findings
            log.warning(
                "unstored-findings-adopted",
                path=path,
                findings=[f"F{i}" for i in self.unstored.adopted],
                message="findings paged from memory by the daemon before this one, while the "
                "state database could not be written, are kept as paged: not paged again",
            )

    def _keep_adopted_signatures(self) -> None:
        """Each run an adopted finding is about keeps the signature it was paged under,
        as a stored run's does (``Tracker.first_signature`` from the job rows): the job
        rows of the outage are not in the file, and a signature computed afresh after
        the restart can differ (its container engine not answering now: another origin),
        so the running rogue was filed under a new fingerprint and paged again (seed
        69103, I4/I5: "rogue-job ... reopened as F4 (was F1)")."""
        adopted = set(self.unstored.adopted)
        for rec in self.unstored.open.values():
            if rec.id not in adopted or "fingerprint" in rec.details:
                continue
            sig = rec.details.get("signature")
            if not isinstance(sig, str):
                sig = rec.fingerprint.partition(":")[2]
            named = rec.details.get("instance_roots")
            idents = [rec.details.get("root"), *(named if isinstance(named, list) else [])]
            for pid, start in filter(None, map(job_root, idents)):
                # Signatures are keyed by a run: a copy recorded without its start is none.
                if start is not None:
                    self.tracker.first_signature.setdefault((pid, start), sig)
                    self.unstored.first_signature.setdefault((pid, start), sig)

    def _write_outage_file(self) -> None:
        """Keep the outage file in step with the findings paged from memory (after a
        tick that could not store)."""
        if self._outage_file is None:
            return
        self._outage_paged = self.unstored.account().findings
        self._flush_outage()

    def _flush_outage(self) -> None:
        """Write the outage file when what it holds changed: at a tick that could not
        store, and when the delivery worker sent an alert it held (a restart then must
        not send it again). A failure is logged once per error and retried at the next
        change."""
        with self._outage_lock:
            if self._outage_file is None or self._outage_paged is None:
                return
            account = self.unstored.account(self._outage_paged)
            key = (
                [(r.id, r.last_alert_at) for r in account.findings],
                [(q[0], q[1], q[2]) for q in account.queued],
            )
            if key == self._outage_written:
                return
            try:
                write_outage(self._outage_file, account, self.boot_id)
            except OSError as exc:
                text = f"{type(exc).__name__}: {exc}"
                if text != self._outage_file_error:
                    log.warning(
                        "outage-file-unwritable",
                        path=self._outage_file,
                        error=text,
                        message="a restart before the state database takes writes again "
                        "pages the findings paged from memory again, saying it may repeat",
                    )
                    self._outage_file_error = text
                return
            self._outage_written, self._outage_file_error = key, None

    def _drop_outage_file(self) -> None:
        """The database holds what the outage file held: remove it (a failure is
        harmless: the ids stored since make the next daemon skip its findings)."""
        with self._outage_lock:
            self._outage_paged = None
            if self._outage_file is None or self._outage_written == _REMOVED:
                return
            try:
                remove_outage(self._outage_file)
            except OSError as exc:
                log.warning("outage-file-unremovable", path=self._outage_file, error=str(exc))
                return
            self._outage_written = _REMOVED

    def _say_dropped(self) -> None:
        """Say once per outage that the bound on the memory dropped findings or runs."""
        dropped = self.unstored.dropped
        if not dropped or dropped.said:
            return
        dropped.said = True
        log.warning(
            "unstored-memory-full",
            findings=dropped.findings,
            paged=dropped.paged,
            runs=dropped.runs,
            message="the memory kept while the state database cannot be written is full: "
            "the least useful entries are dropped (status counts them); a dropped finding "
            "already paged whose run still runs is paged again",
        )

    def _save_sanctioned(self, now: float) -> None:
        """Write the sanctioned identities when they changed (and, of the new ones, when
        a rule matched those judged rogue before: ``Scanner.sanctioned_matched``)."""
        if self.scanner.sanctioned != self._sanctioned_saved:
            self.db.set_sanctioned_procs(
                self.scanner.sanctioned, self.boot_id, now, self.scanner.sanctioned_matched
            )
            self._sanctioned_saved = dict(self.scanner.sanctioned)

    def _restore(self) -> None:
        """What a previous run of this daemon left in the state database: sanctioned
        identities, Slurm members, recorded origins, GPUs seen, the first start (for
        learning). A damaged table degrades ``state`` and never stops the daemon."""
        try:
            self._sanctioned_saved = self.db.sanctioned_procs(self.boot_id)
            self.scanner.keep_sanctioned(
                self._sanctioned_saved, self.db.sanctioned_matched(self.boot_id)
            )
            self._slurm_members = self.db.slurm_members(self.boot_id)
            self.scanner.keep_origins(recorded_origins(self.db))
            self.scanner.keep_unsanctioned(
                {
                    (rec.root_pid, rec.start_ticks)
                    for rec in self.db.present_jobs()
                    if rec.verdict in ("rogue", "excess")
                }
            )
            self._slurm_members_saved = dict(self._slurm_members)
            self.scanner.remember_gpus(self._seen_gpus_saved())
        except Exception as exc:  # a damaged table must not stop the daemon
            self._failed("state", exc)
        try:
            first_started(self.db, time.time())
            self._start_learning()
        except Exception as exc:
            self._failed("state", exc)
        if self.db.recovered_from:
            log.warning(
                "state-recovered",
                kept=self.db.recovered_from,
                reason=self.db.recovered_reason,
                message="the state database was unreadable; a fresh one was created",
            )

    # -- degradation -------------------------------------------------------------------

    def _failed(self, part: str, exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {exc}"
        if self.degraded.get(part) != text:
            log.error(
                "component-degraded",
                component=part,
                error=text,
                traceback=traceback.format_exc(limit=5),
            )
        self.degraded[part] = text

    def _write_sanctioned_file(self) -> None:
        """Mirror the sanctioned identities to the file beside the socket when they
        changed (before anything is acted on this tick). A failure is logged once per
        error and retried next tick: the database still holds them when it can."""
        now = self.scanner.sanctioned
        if self._sanctioned_file is None or now == self._sanctioned_written:
            return
        try:
            write_sanctioned(self._sanctioned_file, now, self.boot_id)
        except OSError as exc:
            text = f"{type(exc).__name__}: {exc}"
            if text != self._sanctioned_file_error:
                log.warning("sanctioned-file-unwritable", path=self._sanctioned_file, error=text)
                self._sanctioned_file_error = text
            return
        self._sanctioned_written = dict(now)
        self._sanctioned_file_error = None

    def _seen_gpus_saved(self) -> dict[str, int]:
        """The whole GPUs an earlier run of this daemon saw NVML list during this boot
        (meta :data:`SEEN_GPUS`); empty when none, another boot's, or unreadable."""
        raw = self.db.meta(SEEN_GPUS)
        try:
            saved = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        if not isinstance(saved, dict) or saved.get("boot_id") != self.boot_id:
            return {}
        gpus = saved.get("gpus")
        if not isinstance(gpus, dict):
            return {}
        out = {str(u): i for u, i in gpus.items() if isinstance(i, int)}
        self._seen_gpus_written = dict(out)
        return out

    def _record_seen_gpus(self) -> None:
        """Keep the whole GPUs NVML listed during this boot in ``meta`` (written when
        they change): a restart while one of them is out of the list then holds its
        jobs and findings instead of resolving them (they would reopen under new ids
        when it comes back)."""
        seen = self.scanner.seen_gpus()
        if seen and seen != self._seen_gpus_written:
            self.db.set_meta(
                SEEN_GPUS, json.dumps({"boot_id": self.boot_id, "gpus": seen}, sort_keys=True)
            )
            self._seen_gpus_written = seen

    def _record_gpus(self, result: ScanResult | None) -> None:
        """Keep every GPU seen (index, name) in ``meta``: the report names its timeline
        rows by them (runs record UUIDs). Written only when the inventory changes."""
        if result is None or not result.gpus:
            return
        if self._gpus_known is None:
            raw = self.db.meta(GPU_INVENTORY_KEY)
            try:
                loaded = json.loads(raw) if raw else {}
            except ValueError:
                loaded = {}
            self._gpus_known = loaded if isinstance(loaded, dict) else {}
        changed = gpu_inventory(self._gpus_known, result.gpus)
        if changed is not None:
            self.db.set_meta(GPU_INVENTORY_KEY, json.dumps(changed, sort_keys=True))
            self._gpus_known = changed

    def _nvml_health(self, result: ScanResult) -> None:
        """An NVML library that is there but cannot be used (a garbage or overwritten
        file, a driver mismatch) blinds every GPU: ``nvml`` is degraded until it works,
        not merely an info finding (issue 32, case 6). No library at all is a host
        without NVIDIA GPUs, not a fault."""
        nvml = result.nvml
        error = str(nvml.error or "")
        library = self.config.nvml.library
        # A configured library file that is there but does not load is unusable, not absent.
        there = library is not None and os.path.isfile(library)
        unusable = not error.startswith(NO_LIBRARY) or there
        if self.config.nvml.enabled and not nvml.available and unusable:
            if self.degraded.get("nvml") != error:
                log.error("component-degraded", component="nvml", error=error)
            self.degraded["nvml"] = error
        else:
            self._ok("nvml")

    def _sink_logs(self, rec: FindingRecord) -> bool:
        """True when a ``log`` sink on stdout will write this finding's event itself."""
        return any(
            s.type == "log" and s.path is None and sink_accepts(s, rec)
            for s in self.config.alerts.sinks
        )

    def _ok(self, part: str) -> None:
        if self.degraded.pop(part, None) is not None:
            log.info("component-recovered", component=part)

    def _health_findings(self) -> list[Finding]:
        out = self._restart_findings() + [
            Finding(
                kind="component-degraded",
                severity="warning",
                message=f"{part} is failing and being retried: {error}",
                details={"fingerprint": part, "component": part, "error": error},
            )
            for part, error in sorted(self.degraded.items())
        ]
        for line in self.db.recreated:
            out.append(
                Finding(
                    kind="state-recovered",
                    severity="warning",
                    message=line,
                    details={"fingerprint": f"recreated:{line}"},
                )
            )
        if self.db.recovered_from:
            out.append(
                Finding(
                    kind="state-recovered",
                    severity="warning",
                    message=(
                        f"the state database was unreadable ({self.db.recovered_reason}); "
                        f"it was kept as {self.db.recovered_from} and a fresh one created"
                    ),
                    details={"fingerprint": self.db.recovered_from},
                )
            )
        return out

    def _restart_findings(self) -> list[Finding]:
        if not self.needs_restart:
            return []
        each = "; ".join(
            f"{key}: {running!r} in use, {wanted!r} in the file"
            for key, (running, wanted) in self.needs_restart.items()
        )
        return [
            Finding(
                kind="needs-restart",
                severity="warning",
                message=(
                    f"the configuration was reloaded, but {', '.join(self.needs_restart)} "
                    f"take(s) effect only at a restart ({each}); restart the daemon "
                    f"({restart_hint(self.config.source)})"
                ),
                details={"fingerprint": NEEDS_RESTART, "keys": list(self.needs_restart)},
            )
        ]

    # -- one tick ----------------------------------------------------------------------

    def _start_learning(self) -> None:
        """Note when the learning period began (``meta.learning_started``), once: a
        period written as a duration counts from the first start, across restarts."""
        if self.config.daemon.learn_until is None:
            return
        was = self.db.meta(LEARNING_STARTED)
        self.learning_started = learning_started_at(None, was)
        if self.learning_started is None:
            # Added by a reload (or first set at a restart): the period still counts from
            # the first start with this state directory, as docs/first-week.md says
            # (issue 33: "learning until" was the reload's time + 7d).
            self.learning_started = first_started(self.db, time.time())
            self.db.set_meta(LEARNING_STARTED, repr(self.learning_started))

    def learning_until(self) -> float | None:
        """POSIX time the learning period ends (past or future), or None without one."""
        learn = self.config.daemon.learn_until
        if learn is None:
            return None
        return learn.end(self.learning_started if self.learning_started is not None else 0.0)

    def learning(self, now: float) -> bool:
        """True while the learning period (``daemon.learn_until``) lasts."""
        until = self.learning_until()
        return until is not None and now < until

    def _alive(self, pid: int, start_ticks: int) -> bool:
        """Whether the process ``pid`` with this start time still runs (last refresh)."""
        return self.scanner.table.alive((pid, start_ticks))

    def tick(self, now: float) -> TickSummary:
        """Scan, gather findings, track them and spool alerts, then act.

        Args:
            now: POSIX time of this tick (tests pass any value; ``run_forever`` passes
                the clock).

        Returns:
            The summary kept as :attr:`last`.
        """
        started = time.monotonic()
        self.acting_s = 0.0
        feed = self.scanner.events
        if feed is not None:
            feed.full_wanted = False  # this tick answers every wake so far
        self._recheck_reload()
        exits = self._exits()
        result: ScanResult | None = None
        try:
            result = self.scanner.scan(datetime.fromtimestamp(now).astimezone())
            self._ok("scan")
            self._nvml_health(result)
        except Exception as exc:
            self._failed("scan", exc)
        if result is not None:
            self._write_sanctioned_file()
        findings: list[Finding] = list(result.findings) if result else []
        if result is not None:
            findings.extend(self._source_findings(now, result))
        else:
            self._unread = None
        learning = self.learning(now)
        if learning:
            # Jobs no rule sanctions are what the learning period is for: recorded and
            # shown, alerted at info only. Every other finding keeps its severity.
            findings = [learned(f) for f in findings]
        track: TrackResult | None = None
        try:
            lost = self.db.ensure_present()
            if lost is not None:
                log.error("state-dir-lost", state_dir=str(self.db.dir), message=lost)
            self._store_unstored()
            track = self.tracker.update(
                result.jobs if result else [],
                [*findings, *self._health_findings()],
                now,
                self.scanner.table.start_time_s,
                blind=result is not None and result.gpu_blind,
                alive=self._alive,
                learning=learning,
                exits=exits,
                gpu_lists=result is not None and result.nvml.available,
                unread=self._unread,
            )
            self.unstored.note(track)
            self._drop_outage_file()
            self._prune(now)
            self._save_sanctioned(now)
            self._record_slurm_members(now)
            self._record_gpus(result)
            self._record_seen_gpus()
            self._ok("state")
        except Exception as exc:
            self._failed("state", exc)
        stored = track is not None
        if track is None:
            track = self._track_unstored(result, findings, now)
            # An open held back by the settle in memory is due as one in the database is.
            self.tracker.settle_due = self.unstored.settle_due
        if track is not None:
            self._log_events(track)
        if result is not None and stored and track is not None and not learning:
            # Nothing is acted on while learning (no terminate, no disable, no drain),
            # nor without a record (a tick whose findings could not be stored).
            acting = time.monotonic()
            for enforcer in self.enforcers:
                try:
                    findings.extend(enforcer.act(now, result, track))
                    self._ok(enforcer.name)
                except Exception as exc:
                    self._failed(enforcer.name, exc)
            self.acting_s = time.monotonic() - acting
        elif result is not None and not stored:
            self._relieve(result)
        summary = TickSummary(now, time.monotonic() - started, result, track, findings)
        self.last = summary
        for hook in self.on_tick:
            try:
                hook(summary)
            except Exception as exc:
                self._failed(f"hook {getattr(hook, '__name__', hook)}", exc)
        return summary

    def exec_tick(self, now: float) -> TrackResult | None:
        """The exec path (issue 34): judge what kernel events captured at exec (a
        launcher, a process that mapped CUDA libraries) without a whole tick.

        The scan is the daemon's own (:meth:`Scanner.scan` with ``known``: the same
        lineage, origin, class, verdict and guard a tick would give; advice, listening
        sockets and findings only for the captured jobs not tracked yet), and only the
        findings of jobs first seen now are filed (:meth:`Tracker.open_new`: the same
        settle, debounce and fold rules; their pages wait for them as a tick's would).
        Everything else (findings seen again or resolved, the extra sources, health, the enforcers,
        the state kept per tick) waits for the next tick, which is not moved.

        Args:
            now: POSIX time of this pass.

        Returns:
            What was filed; None when the scan or the state database failed (a whole
            tick is then due: :meth:`run_forever` runs one).
        """
        started = time.monotonic()
        try:
            result = self.scanner.scan(
                datetime.fromtimestamp(now).astimezone(), known=self.tracker.first_signature.keys()
            )
        except Exception as exc:
            log.warning("exec-path-failed", part="scan", error=repr(exc))
            return None  # the tick that follows says why (degraded "scan")
        learning = self.learning(now)
        findings = [learned(f) for f in result.findings] if learning else result.findings
        first = self.tracker.first_signature
        fresh = [
            (j.root_pid, j.start_ticks)
            for j in result.jobs
            if j.verdict != "ignored" and (j.root_pid, j.start_ticks) not in first
        ]
        try:
            track = self.tracker.open_new(
                result.jobs,
                findings,
                now,
                self.scanner.table.start_time_s,
                learning=learning,
                gpu_lists=result.nvml.available,
            )
        except Exception as exc:
            log.warning("exec-path-failed", part="state", error=repr(exc))
            return None  # nothing was filed (rolled back): the tick stores or keeps it
        self._log_events(track)
        last = self.last
        if last is not None and last.result is not None:
            # `status` lists the jobs this pass saw first (a finding it filed names a job
            # that `status` shows); every other entry stays the last whole scan's (the
            # pass gives advice and sockets for its new jobs only: a known job's entry
            # from it would lose its advice, and `terminate` completion its PID).
            had = {(j.root_pid, j.start_ticks) for j in last.result.jobs}
            new = [j for j in result.jobs if (j.root_pid, j.start_ticks) not in had]
            if new:
                shown = dataclasses.replace(last.result, jobs=[*last.result.jobs, *new])
                self.last = dataclasses.replace(last, result=shown)
        self.exec_ticks += 1
        self.exec_tick_s = time.monotonic() - started
        # A new run the pass left to the tick (a return of a known signature, several
        # instances, an undo to name) is judged by a whole tick at once, as before the
        # exec path: a 300 ms cron run gone before the next interval's tick was never
        # seen (test_proc_events, a periodic loop's second run).
        self.exec_left = [i for i in fresh if i not in self.tracker.first_signature]
        return track

    def _pass_next(self, deadline: float) -> bool:
        """Whether the wake now waiting is answered by an exec pass (as
        :meth:`run_forever` decides it), not by a whole tick."""
        return time.monotonic() < deadline and not self.exec_left and self._exec_ready()

    def _exec_ready(self) -> bool:
        """Whether the exec path may answer a wake first: captures wait (and no lost
        events with them), a tick has run and stored its findings, and neither the scan
        nor the state database failed since (a tick reports and recovers those)."""
        feed = self.scanner.events
        return (
            feed is not None
            and self.last is not None
            and self.last.track is not None
            and not {"scan", "state"} & self.degraded.keys()
            and feed.captures_pending()
        )

    def _relieve(self, result: ScanResult) -> None:
        """Without a record nothing is acted on, but what only gives back is not
        withheld: each enforcer's ``relieve`` (the GPU denial of a job now sanctioned)."""
        for enforcer in self.enforcers:
            relieve = getattr(enforcer, "relieve", None)
            if relieve is None:
                continue
            try:
                relieve(result)
            except Exception as exc:
                self._failed(enforcer.name, exc)

    def _source_findings(self, now: float, result: ScanResult) -> list[Finding]:
        """The findings of the extra sources (queue, ship watch…) for this tick.

        A source that raises is said degraded, and what it had open stays open through
        :attr:`_unread` (blindness never resolves, and a resolve now would page again
        when it answers).
        """
        findings: list[Finding] = []
        unread: list[Callable[[str], bool]] = []
        for source in self.sources:
            try:
                findings.extend(source.findings(now, result))
                self._ok(source.name)
            except Exception as exc:
                self._failed(source.name, exc)
                covers = getattr(source, "covers", None)
                if covers is not None:
                    unread.append(covers)
        self._unread = (lambda fp: any(c(fp) for c in unread)) if unread else None
        return findings

    def _exits(self) -> Mapping[int, int]:
        """The exit statuses since the last tick (empty without kernel events)."""
        if self.exit_statuses is None:
            return {}
        try:
            return self.exit_statuses()
        except Exception as exc:  # no evidence is the loud side: returns are respawns
            self._failed("proc-events", exc)
            return {}

    def _log_events(self, track: TrackResult) -> None:
        """One log line per finding event: a log sink on stdout writes its own
        ``finding`` line for every event it accepts, so the loop writes only the rest."""
        for rec in track.opened:
            if not self._sink_logs(rec):
                getattr(log, LOG_LEVELS.get(rec.severity, "warning"))(
                    "finding-opened", id=rec.id, kind=rec.kind, severity=rec.severity,
                    message=rec.message, root_pid=rec.root_pid,
                )  # fmt: skip
        for rec in track.resolved:
            if not self._sink_logs(rec):
                log.info("finding-resolved", id=rec.id, kind=rec.kind, message=rec.message)

    def _track_unstored(
        self, result: ScanResult | None, findings: list[Finding], now: float
    ) -> TrackResult | None:
        """Track this tick's findings in memory when they could not be stored, so
        their alerts go out all the same (issue 32, case 1); None when that fails too."""
        first = self.tracker.first_signature
        try:
            track = self.unstored.track(
                self.db,
                result.jobs if result else [],
                [*findings, *self._health_findings()],
                now,
                signature=lambda j: (
                    first.get((j.root_pid, j.start_ticks))
                    or job_signature(j.user, j.cmdline, j.origin)
                ),
                alerts=self.config.alerts,
                host=self.scanner.host,
                blind=result is None or result.gpu_blind,
                exits=self.tracker.exits,
                gpu_lists=result is not None and result.nvml.available,
                unread=self._unread,
                learning=self.learning(now),
                start_time_s=self.scanner.table.start_time_s,
                alive=self._alive,
            )
        except Exception as exc:
            self._failed("unstored-alerts", exc)
            return None
        # A job first seen now keeps the signature it got now, as a stored tick's does:
        # its findings keep their fingerprint (and id) once stored (seed 67701).
        for ident, sig in self.unstored.first_signature.items():
            first.setdefault(ident, sig)
        self._write_outage_file()
        self._say_dropped()
        return track

    def _store_unstored(self) -> None:
        """Store what was kept in memory while the database refused writes, first in a
        tick that can write (the tracker then takes each finding for one alerted).

        Raises:
            sqlite3.Error, OSError: The database still cannot be written.
        """
        if not self.unstored.pending():
            return
        dropped = self.unstored.dropped
        kept = self.unstored.store(self.db)
        log.warning(
            "unstored-findings-stored",
            findings=kept,
            dropped_findings=dropped.findings,
            dropped_runs=dropped.runs,
            message="findings kept in memory while the state database could not be "
            "written are stored now; their alerts are not sent again",
        )

    def _record_slurm_members(self, now: float) -> None:
        """Keep the record of processes seen below a slurmstepd (still alive), which
        ``health-check`` needs to prove a leftover was its job's. Written only when it
        changes; costs a walk of the slurmstepd trees per tick (none on other hosts)."""
        table = self.scanner.table
        alive = {ident: job for ident, job in self._slurm_members.items() if table.alive(ident)}
        ctx = self.scanner.context(datetime.fromtimestamp(now).astimezone())
        kept_table, reads, maybe = self._stepd_candidates
        since = table.read_since(reads) if kept_table is table else None
        if since is None:
            maybe = set(stepd_candidates(table))
        elif since:
            # Only the records read again since can answer otherwise (the filter over
            # every record cost 0.3 ms per tick at 2,000 processes: issue 34).
            maybe = (maybe - since) | set(stepd_candidates(table, since))
        self._stepd_candidates = (table, table.reads_changed, maybe)
        alive.update(stepd_members(table, ctx, sorted(maybe)))
        if alive != self._slurm_members_saved:
            self.db.set_slurm_members(alive, self.boot_id, now)
            self._slurm_members_saved = dict(alive)
        self._slurm_members = alive

    def _prune(self, now: float) -> None:
        """Apply the retention windows (``daemon.retention_*_s``) every ``PRUNE_EVERY_S``
        of tick time, a bounded batch at a time."""
        if 0 <= now - self._pruned_at < PRUNE_EVERY_S:
            return  # (a clock set back re-arms it rather than stopping it for as long)
        self._pruned_at = now
        d = self.config.daemon
        deleted = self.db.prune(
            self._retention_now(now),
            findings_s=d.retention_findings_s,
            alerts_s=d.retention_alerts_s,
            jobs_s=d.retention_jobs_s,
        )
        if any(deleted.values()):
            log.info("state-pruned", **deleted)
        if self._clock_before is None or now > self._clock_before:
            self.db.set_meta(CLOCK_SEEN, repr(now))

    def _retention_now(self, now: float) -> float:
        """The time retention counts from: ``now``, but never later than the latest
        wall time a previous run saw plus the time this run has been up (monotonic).
        A daemon started with its clock days ahead (faketime, a bad RTC) would otherwise
        delete a finding resolved seconds before as days old (issue 32, case 5: it did,
        and the next finding took its id). A clock set back is safe as it is: history
        stamped ahead of it is younger than any window."""
        if self._clock_before is None:
            return now
        return min(now, self._clock_before + (time.monotonic() - self._started_mono))

    # -- lifecycle ---------------------------------------------------------------------

    def reload(self) -> bool:
        """Re-read the configuration file; keep the old one when the new one is invalid.

        Every section is put in force; the :data:`RESTART_ONLY` keys keep their running
        values, and while the file's differ a ``needs-restart`` finding names them.

        Returns:
            True when the new configuration is in force (but for those keys).
        """
        stamp = _file_stamp(self.config_path)
        try:
            new = load_config(self.config_path)
        except ConfigError as exc:
            log.error("config-reload-refused", error=str(exc), kept=self.config_path)
            # Open while the refused file is on disk (_recheck_reload).
            self.degraded[RELOAD_COMPONENT] = f"refused, the previous one stays in force: {exc}"
            self._refused = stamp
            return False
        self._ok(RELOAD_COMPONENT)
        self._refused = None
        loaded = new
        new, pending = keep_restart_only(self.config, loaded)
        get = dict(RESTART_ONLY)
        self.needs_restart = {key: (get[key](new), get[key](loaded)) for key in pending}
        self.config = new
        self.config_in_force = stamp[0]
        self._keep_config_copy()
        try:
            self._start_learning()
        except Exception as exc:
            self._failed("state", exc)
        old_scanner = self.scanner
        self.scanner = Scanner(new, fd_sweep_interval_s=new.daemon.fd_sweep_interval_s)
        self.scanner.keep_origins_of(old_scanner)  # a reload does not re-attribute
        self.scanner.gpu_libraries.adopt(old_scanner.gpu_libraries)  # nor re-read maps
        # Its table starts empty: walked in full, said as the reload's walk.
        self.scanner.walk.carry(old_scanner.walk, "config reload")
        first, clocks = self.tracker.first_signature, self.tracker.clocks
        exits = self.tracker.exits
        self.tracker = Tracker(
            self.db,
            new.alerts,
            self.scanner.host,
            cli_args=config_args(new.source),
            config=config_file(new.source),
        )
        self.tracker.first_signature.update(first)
        self.tracker.clocks = clocks
        self.tracker.exits = exits  # how the runs before the reload ended
        for hook in self.on_reload:
            try:
                hook(self)
            except Exception as exc:
                self._failed(f"reload {getattr(hook, '__name__', hook)}", exc)
        if pending:
            log.warning(
                "config-change-needs-restart",
                keys=pending,
                message="these keys take effect at the next restart; the old values stay in use",
            )
        # Every other section is in force from here (the reload hooks rebuilt its parts).
        log.info("config-reloaded", path=self.config_path, needs_restart=pending)
        return True

    def _keep_config_copy(self) -> None:
        """Keep the version now in force for ``scan``/``explain`` (daemon.inforce); one
        that could not be kept is said (they then fail on a refused file, as before)."""
        state_dir = getattr(self.db, "dir", None)  # a test's stand-in store has none
        if state_dir is None:
            return
        why = keep_in_force_copy(state_dir, self.config_path, self.config_in_force)
        if why is not None:
            log.warning(
                "config-copy-not-kept",
                message=f"scan and explain cannot judge under this version while an edit "
                f"of the file stands refused: {why}",
            )

    def _recheck_reload(self) -> None:
        """After a refused reload, follow the file: any change to it (its bytes, its
        owner or mode, what the path points at) is reloaded as the refused reload was
        asked for, so putting the previous file back, or fixing its mode, clears
        ``config-reload`` at the next tick. Costs one read of the file per tick, only
        while a reload stands refused."""
        if RELOAD_COMPONENT not in self.degraded:
            return
        if _file_stamp(self.config_path) != self._refused:
            self.reload()

    def request_stop(self) -> None:
        """Ask :meth:`run_forever` to return after the current tick."""
        self._stop.set()
        self._wake.set()

    def request_reload(self) -> None:
        """Ask :meth:`run_forever` to reload the configuration before the next tick."""
        self._reload.set()
        self._wake.set()

    def request_tick(self) -> None:
        """Ask :meth:`run_forever` to tick now instead of at the end of the interval
        (safe from any thread: the proc-event source calls it for a launcher's exec).
        Requests during a tick fold into one more tick, spaced so that early ticks
        keep the loop busy at most ``EARLY_TICK_DUTY`` of the time."""
        self._early.set()
        self._wake.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop cleanly; SIGHUP reloads the configuration."""
        signal.signal(signal.SIGTERM, lambda *_: self.request_stop())
        signal.signal(signal.SIGINT, lambda *_: self.request_stop())
        signal.signal(signal.SIGHUP, lambda *_: self.request_reload())

    def run_forever(self, clock: Callable[[], float] = time.time) -> None:
        """Tick every ``daemon.interval_s`` until stopped; start and stop the workers."""
        for w in self.workers:
            w.start()
        try:
            deadline = -math.inf
            while True:
                began = time.monotonic()
                # A run the last pass left to the tick gets that tick next, also while
                # more captures come (an exec storm must not hold it off).
                exec_first = (
                    self._early.is_set()
                    and began < deadline
                    and not self.exec_left
                    and self._exec_ready()
                )
                self._early.clear()
                now = clock()
                passed = exec_first and self.exec_tick(now) is not None
                if passed:
                    feed = self.scanner.events
                    if self.exec_left or (feed is not None and feed.full_wanted):
                        # A watched exit or the like asked too, or the pass left a new
                        # run to the tick: that whole tick follows, spaced like any
                        # early tick, after the captures were judged.
                        self._early.set()
                else:
                    self.exec_left = []
                    self.tick(now)
                    # The next tick an interval after this one; the exec path moves none.
                    deadline = time.monotonic() + self.config.daemon.interval_s
                ended = time.monotonic()
                settle = self.tracker.settle_due
                if settle is not None:
                    # An open alert held back by alerts.settle_s is due before then.
                    deadline = min(deadline, began + max(SETTLE_TICK_MIN_S, settle - now))
                while not (self._stop.is_set() or self._reload.is_set()):
                    if self._early.is_set():
                        if self._pass_next(deadline):
                            start = exec_pass_start(began, ended, passed, self.exec_tick_s)
                            gap = start - time.monotonic()
                        else:
                            spacing = early_tick_spacing_s(ended - began, self.acting_s)
                            gap = began + spacing - time.monotonic()
                        if gap <= 0:
                            break
                        self._stop.wait(gap)
                        continue
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._wake.wait(left)
                    self._wake.clear()
                if self._reload.is_set():
                    self._reload.clear()
                    self.reload()
                    deadline = -math.inf  # a whole tick first, with the new scanner
                    continue
                if self._stop.is_set():
                    break
        finally:
            for w in reversed(self.workers):
                try:
                    w.stop()
                except Exception as exc:
                    self._failed(w.name, exc)
            self.db.close()


_Stamp = tuple[str | None, tuple[int, int, int, int] | None, str | None]


def _file_stamp(path: str | None) -> _Stamp:
    """What a reload's verdict rests on: the file's checksum, and the owner, mode and
    target that the trust check reads (a chmod alone can make a refused file good)."""
    try:
        st = os.stat(path) if path is not None else None
    except OSError:
        st = None
    meta = (st.st_uid, st.st_gid, st.st_mode, st.st_ino) if st is not None else None
    real = os.path.realpath(path) if path is not None else None
    return (config_checksum(path), meta, real)

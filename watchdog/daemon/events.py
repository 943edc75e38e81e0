"""Wire kernel process events into the daemon: an exec of a launcher ticks at once.

:func:`attach_events` gives the daemon a :class:`~watchdog.sources.procevents.ProcEventSource`
(a worker: its thread starts and stops with the loop), hands it to the scanner as its
event feed (again after every reload, which builds a new scanner) and lets it call
:meth:`~watchdog.daemon.loop.Daemon.request_tick`. :func:`events_status` is the ``events``
object of ``status``; ``watchdog.daemon.metrics.EventsCollector`` puts its counters on
``/metrics`` (there, so that a daemon without metrics never imports prometheus_client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..model import Proc
from ..policy.jobs import is_launcher
from ..sources.gpulibs import library_pattern
from ..sources.procevents import ProcEventSource

if TYPE_CHECKING:
    from .loop import Daemon

PREFIX = "rogue_watchdog"
# Commands whose launcher answer is kept (cleared whole when full), and the longest
# command line kept: at most about 0.5 MiB, whatever runs.
CANDIDATE_MEMO = 1024
CANDIDATE_MEMO_ARGV_CHARS = 512


def attach_events(daemon: Daemon) -> ProcEventSource | None:
    """Give ``daemon`` kernel process events unless ``daemon.events`` is ``off``.

    Call before :meth:`Daemon.run_forever` (the source is started with the workers).
    Where the connector cannot be opened the source says so once and the daemon polls.

    Returns:
        The source, or None when events are off (or ``paths.proc_root`` is not the
        host's ``/proc``: kernel PIDs would not match a fixture tree).
    """
    config = daemon.config
    if config.daemon.events == "off" or config.paths.proc_root != "/proc":
        return None

    # The answer for each command seen, per set of launchers: an exec storm runs the
    # same few commands (a shell loop, a build), and the pattern search is the bulk of
    # its cost. The record holds only exe and cmdline, all that is_launcher reads.
    known: dict[tuple[str | None, tuple[str, ...]], bool] = {}
    known_for: list[object] = [None]

    def is_candidate(proc: Proc) -> bool:
        launchers = daemon.config.training.launchers  # per call: a reload may change them
        if known_for[0] is not launchers:
            known.clear()
            known_for[0] = launchers
        if sum(map(len, proc.cmdline)) > CANDIDATE_MEMO_ARGV_CHARS:
            return is_launcher(proc, launchers)  # long lines are rare: not worth memory
        key = (proc.exe, proc.cmdline)
        answer = known.get(key)
        if answer is None:
            if len(known) >= CANDIDATE_MEMO:
                known.clear()
            answer = known[key] = is_launcher(proc, launchers)
        return answer

    source = ProcEventSource(
        config.paths.proc_root,
        is_candidate,
        config.training.gpu_libraries,
        config.daemon.events_rcvbuf_bytes,
        wake=daemon.request_tick,
    )
    daemon.scanner.events = source
    daemon.exit_statuses = source.exits  # how runs ended: periodic or respawned
    daemon.workers.insert(0, source)  # started before the first tick, stopped last

    def reattach(d: Daemon) -> None:
        source.pattern = library_pattern(d.config.training.gpu_libraries)
        d.scanner.events = source

    daemon.on_reload.append(reattach)
    return source


def events_status(daemon: Daemon) -> dict[str, Any]:
    """The ``events`` object of the status document (docs/status.md)."""
    feed = daemon.scanner.events
    if feed is None:
        return {
            "mode": "polling",
            "available": False,
            "reason": "kernel process events are off (daemon.events: off, or a "
            "paths.proc_root other than /proc)",
        }
    # With the walk's counters: how many scans re-read only what events named.
    # And the exec path's passes (Daemon.exec_tick): captures judged between ticks.
    return {**feed.status(), **daemon.scanner.walk.status(), "exec_passes": daemon.exec_ticks}

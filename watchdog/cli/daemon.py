"""``rogue-watchdog run`` (the daemon) and ``rogue-watchdog status`` (ask it over its socket).

Exit codes of ``status`` (docs/status.md): 0 running and nothing open, 1 running with open
findings of severity warning or above, 3 not running, 4 unknown (permission denied,
timeout, garbage reply). ``run`` exits 0 after a clean stop, 2 on configuration, state or
socket errors at start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable
from functools import partial
from typing import IO, TYPE_CHECKING, Any

from ..logs import get_logger
from ..spelling import SEVERITIES
from .common import (
    CliError,
    config_parent,
    configure_logging,
    emit,
    gpu_index,
    resolve_config_path,
    seconds,
    socket_path,
)
from .help import command_help

if TYPE_CHECKING:
    from ..config import Config
    from ..daemon.loop import Daemon, TickSummary
    from ..plugins import Worker

# The daemon's modules (loop, state, alerts, httpx, structlog) are imported by the
# command that runs: `status` and `--help` must start fast (see watchdog/cli/__init__.py).


log = get_logger()  # structlog is imported on the first event

DEFAULT_LOG_FILE = "/var/log/rogue-watchdog.log"


# -- run ---------------------------------------------------------------------------------


def extra_workers(daemon: Daemon) -> list[Worker]:
    """Background workers besides the status socket and sd_notify: alert delivery
    (docs/alerts.md) and, when ``daemon.metrics_listen`` is set, Prometheus metrics
    (docs/metrics.md). Both add their own tick hooks."""
    from ..daemon.assemble import build_alert_workers, build_metrics_workers

    return [*build_alert_workers(daemon), *build_metrics_workers(daemon)]


def _restart_watch(daemon: Daemon, said: set[tuple[str, str, str]]) -> Any:
    """Tick hook: after a reload, log the configuration warnings not said yet (the keys
    a reload cannot change are the daemon's: ``Daemon.needs_restart``).

    Args:
        daemon: The running daemon; its ``config`` is replaced by each accepted reload.
        said: The warnings logged so far (``log_config_warnings``'s memory), shared with
            the start-up call.
    """
    seen: list[Config] = [daemon.config]

    def config_watch(_: TickSummary) -> None:
        if daemon.config is seen[0]:
            return
        seen[0] = daemon.config
        log_config_warnings(daemon.config, said)

    return config_watch


def log_config_warnings(config: Config, said: set[tuple[str, str, str]] | None = None) -> None:
    """One ``config-warning`` event per doubt about the configuration in force (a user
    this host does not know): what check-config prints, for a daemon nobody watches.

    Args:
        config: The configuration now in force.
        said: Warnings already logged by this daemon, as (path, key, message), updated
            in place to those of ``config``. A doubt still there after a reload was said
            once and is not said again at each reload (a fresh user's log repeated the
            same unknown user at every edit); one that went away and comes back is new.
            The line is left out of the key: an edit above it moves it.
    """
    now = {(w.path, w.key, w.message) for w in config.warnings}
    for w in config.warnings:
        if said is None or (w.path, w.key, w.message) not in said:
            log.warning("config-warning", path=w.path, line=w.line, key=w.key, message=w.message)
    if said is not None:
        said.clear()
        said.update(now)


def _pidfile_owner(path: str) -> int | None:
    """PID of a live process named in ``path``; removes a stale file."""
    try:
        with open(path) as fh:
            pid = int(fh.read().strip() or 0)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        pid = 0
    if pid > 0:
        try:
            os.kill(pid, 0)
            return pid
        except PermissionError:
            return pid
        except ProcessLookupError:
            pass
    with contextlib.suppress(OSError):
        os.unlink(path)
    return None


def _detach(pidfile: str, log_file: str, keep: list[int]) -> contextlib.AbstractContextManager[Any]:
    """A python-daemon context: double fork, setsid, chdir /, umask 022, pidfile, logs.

    Args:
        pidfile: Absolute PID file path.
        log_file: Absolute log file path (stdout and stderr of the daemon).
        keep: File descriptors to keep open across detaching (the state-dir lock).

    Raises:
        SystemExit: (exit 2, message on stderr) another daemon holds the pidfile, or the
            log file cannot be opened, before detaching, so the user sees why.
    """
    import daemon as pydaemon  # type: ignore[import-untyped]  # python-daemon, no stubs
    from daemon.pidfile import TimeoutPIDLockFile  # type: ignore[import-untyped]

    owner = _pidfile_owner(pidfile)
    if owner is not None:
        print(
            f"rogue-watchdog: already running as PID {owner} (pidfile {pidfile})", file=sys.stderr
        )
        raise SystemExit(2)
    try:
        out: IO[str] = open(log_file, "a", buffering=1)  # noqa: SIM115 - handed to the daemon
    except OSError as exc:
        print(f"rogue-watchdog: cannot open log file {log_file}: {exc.strerror}", file=sys.stderr)
        raise SystemExit(2) from None
    ctx: contextlib.AbstractContextManager[Any] = pydaemon.DaemonContext(
        pidfile=TimeoutPIDLockFile(pidfile),
        umask=0o022,
        stdout=out,
        stderr=out,
        detach_process=True,
        files_preserve=keep,
    )
    return ctx


def preflight(config: Config, pidfile: str | None) -> int:
    """The start checks that can fail, done while the terminal still sees the answer
    (before ``--daemonize`` detaches): the state-dir lock, the socket not in use, the
    pidfile's directory writable.

    Args:
        config: The validated configuration.
        pidfile: Absolute ``--pidfile`` path, or None in the foreground.

    Returns:
        The state-dir lock descriptor (see :func:`~watchdog.state.lock_state_dir`).

    Raises:
        SystemExit: Exit 2 with the reason on stderr.
    """
    from ..daemon.ipc import socket_in_use, socket_path_taken
    from ..state import StateError, lock_state_dir

    if pidfile is not None:
        owner = _pidfile_owner(pidfile)
        if owner is not None:
            raise CliError(f"already running as PID {owner} (pidfile {pidfile})")
        directory = os.path.dirname(pidfile) or "."
        if not os.path.isdir(directory):
            raise CliError(f"pidfile directory {directory} does not exist")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise CliError(f"pidfile directory {directory} is not writable")
    taken = socket_path_taken(config.daemon.socket)
    if taken is not None:
        raise CliError(taken)
    try:
        lock_fd = lock_state_dir(config.daemon.state_dir)
    except StateError as exc:
        raise CliError(str(exc)) from None
    if socket_in_use(config.daemon.socket):
        os.close(lock_fd)
        raise CliError(
            f"another process is listening on {config.daemon.socket}: is another daemon running?"
        )
    return lock_fd


def cmd_run(args: argparse.Namespace) -> int:
    """``run``: the daemon, in the foreground unless ``--daemonize``."""
    from ..config import load_config
    from ..state import write_lock_pid
    from .common import resolve_config_path

    path = resolve_config_path(args.config)
    if path is not None:
        path = os.path.abspath(path)  # reload after chdir (daemonize) and status show it
    config = load_config(path)  # invalid → ConfigError → exit 2 before anything starts
    if args.daemonize:
        if not args.pidfile:
            print("rogue-watchdog: --daemonize needs --pidfile PATH", file=sys.stderr)
            return 2
        pidfile = os.path.abspath(args.pidfile)
        log_file = os.path.abspath(args.log_file)
        lock_fd = preflight(config, pidfile)
        read_fd, write_fd = os.pipe()
        child = os.fork()
        if child > 0:
            os.close(write_fd)
            os.close(lock_fd)  # the daemon holds its own copy of the lock (flock)
            return _wait_ready(child, read_fd, pidfile, log_file)
        os.close(read_fd)
        with _detach(pidfile, log_file, [lock_fd, write_fd]):
            write_lock_pid(lock_fd)  # the detached daemon has a new PID
            ready = partial(_say_ready, write_fd)
            return _serve(config, path, ready=ready, log_format=args.log_format)
    preflight(config, None)
    return _serve(config, path, log_format=args.log_format)


#: How long ``run --daemonize`` waits for the daemon to be ready before giving up.
READY_TIMEOUT_S = 120.0


def _say_ready(fd: int) -> None:
    """Tell the waiting ``run --daemonize`` that the daemon is ready."""
    with contextlib.suppress(OSError):  # it gave up waiting: nothing to tell
        os.write(fd, b"1")
    with contextlib.suppress(OSError):
        os.close(fd)


def _wait_ready(child: int, fd: int, pidfile: str, log_file: str) -> int:
    """``run --daemonize`` returns when the daemon is ready, not when it has forked: its
    pidfile written, its status socket listening and its signal handlers installed, so
    ``kill -HUP "$(cat PIDFILE)"`` and ``status`` right after work (before, it returned
    100-200 ms before the pidfile existed).

    Returns:
        0 ready; 2 the daemon exited first or was not ready within
        :data:`READY_TIMEOUT_S` (said on stderr, naming its log).
    """
    import select

    with contextlib.suppress(ChildProcessError):
        os.waitpid(child, 0)  # the first fork exits at once (python-daemon forks again)
    ready, _, _ = select.select([fd], [], [], READY_TIMEOUT_S)
    said = os.read(fd, 1) if ready else b""
    os.close(fd)
    if said == b"1":
        return 0
    why = "exited before it was ready" if ready else f"was not ready in {READY_TIMEOUT_S:g} s"
    print(f"rogue-watchdog: the daemon {why}: see {log_file} (pidfile {pidfile})", file=sys.stderr)
    return 2


def _log_fatal_signals() -> None:
    """A fatal signal (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL: an NVML library
    overwritten in place under the daemon) is written to the daemon's log (stderr)
    with every thread's stack before it dies (faulthandler), instead of nothing
    (issue 32, case 6)."""
    import contextlib
    import faulthandler

    # No usable stderr (AttributeError, ValueError, OSError): nothing to log to.
    with contextlib.suppress(AttributeError, ValueError, OSError):
        faulthandler.enable(file=sys.stderr, all_threads=True)


def _serve(
    config: Config,
    path: str | None,
    ready: Callable[[], None] | None = None,
    log_format: str = "auto",
) -> int:
    """Run the daemon until it is stopped; ``ready`` is called once it answers on its
    socket and handles its signals (``run --daemonize`` waits for that). Its events are
    human lines at a terminal and JSON lines in a pipe, a file or the journal
    (``log_format`` ``auto``; ``--log-format`` forces either)."""
    from ..daemon.assemble import attach_parts
    from ..daemon.ipc import SocketInUseError, SocketPathTakenError, StatusServer
    from ..daemon.loop import Daemon
    from ..daemon.notify import Notifier
    from ..daemon.outagefile import outage_path
    from ..daemon.sanctionedfile import sanctioned_path
    from ..daemon.status import build_status
    from ..state import StateError

    configure_logging(None, log_format, clock=True)
    _log_fatal_signals()
    try:
        # The sanctioned identities also beside the socket: a restart while state.db
        # refuses writes keeps them (docs/reliability.md, limits).
        socket = config.daemon.socket
        daemon = Daemon(
            config,
            path,
            sanctioned_file=sanctioned_path(socket),
            outage_file=outage_path(socket),
        )
    except StateError as exc:
        print(f"rogue-watchdog: {exc}", file=sys.stderr)
        return 2
    said: set[tuple[str, str, str]] = set()
    log_config_warnings(config, said)
    notifier = Notifier.from_env()
    settings = config.daemon
    notifier.interval_s = settings.interval_s
    server = StatusServer(
        settings.socket,
        lambda: build_status(daemon),
        group=settings.socket_group,
        degraded=daemon.degraded,
    )
    try:
        server.start()
        daemon.workers.append(server)
    except SocketInUseError as exc:
        print(f"rogue-watchdog: {exc}: is another daemon running?", file=sys.stderr)
        daemon.db.close()
        return 2
    except SocketPathTakenError as exc:
        print(f"rogue-watchdog: {exc}", file=sys.stderr)
        daemon.db.close()
        return 2
    except OSError as exc:  # e.g. no permission on /run: run without a socket, say so
        daemon.degraded["status-socket"] = f"{type(exc).__name__}: {exc}"
        log.error("component-degraded", component="status-socket", error=str(exc))
    attach_parts(daemon)
    daemon.workers.extend(extra_workers(daemon))
    daemon.workers.append(notifier)  # last: stopped first, so STOPPING=1 goes out early
    daemon.on_tick.append(_restart_watch(daemon, said))
    daemon.on_tick.append(notifier.hook(daemon))
    daemon.install_signal_handlers()
    log.info(
        "daemon-started",
        pid=os.getpid(),
        config=path,
        socket=settings.socket,
        interval_s=settings.interval_s,
        sd_notify=notifier.enabled,
        watchdog_ping_s=notifier.watchdog_s,
    )
    if ready is not None:
        ready()
    try:
        daemon.run_forever()
    finally:
        server.stop()  # idempotent; also when a worker failed to start
    log.info("daemon-stopped", pid=os.getpid())
    return 0


# -- status ------------------------------------------------------------------------------


def not_running_hint(config: str | None, run_dir: str | None = None) -> str:
    """What ``status`` says when the daemon of ``config`` is not running: the commands
    that start it or look once, each with the ``--config`` of that instance, and
    ``systemctl`` only where systemd runs the unit of that instance
    (:func:`watchdog.hostpaths.systemctl_offered`). Issue 33: ``status --config X``
    offered `systemctl start rogue-watchdog` on a host without systemd as PID 1, and a
    `rogue-watchdog run` and `scan` that found another instance.

    Args:
        config: The configuration file named (``--config``, else the default if present).
        run_dir: ``/run/systemd/system`` (tests pass their own).
    """
    from ..hostpaths import SYSTEMD_RUN_DIR, config_args, systemctl_offered

    args = config_args(config)
    run = f"`rogue-watchdog run{args}`"
    if systemctl_offered(config, run_dir or SYSTEMD_RUN_DIR):
        start = f"`systemctl start rogue-watchdog` (or {run})"
    else:
        start = run
    return (
        f"The rogue-watchdog daemon is not running. Start it with {start}, or look once "
        f"with `rogue-watchdog scan{args}`."
    )


def finding_limit(text: str) -> int:
    """argparse type for ``status --limit N``: 1 to 100000 (ASCII digits)."""
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or not 1 <= int(t) <= 100_000:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number from 1 to 100000")
    return int(t)


def cmd_status(args: argparse.Namespace) -> int:
    """``status``: what the running daemon sees; exit 0/1/3/4 (docs/status.md), 2 on
    usage errors."""
    if args.watch:
        if args.severity is not None or args.limit is not None:
            print(
                "rogue-watchdog: status: --severity and --limit are for the printed status, "
                "not --watch (its findings are listed most severe first)",
                file=sys.stderr,
            )
            return 2
        from .top import run

        return run(args)
    from ..daemon.ipc import StatusError, query_status

    loaded: dict[str, Config] = {}
    path = socket_path(args, loaded)
    try:
        doc = query_status(path, timeout_s=args.timeout)
    except StatusError as exc:
        message = str(exc)
        if exc.exit_code == 3:
            message += "\n" + not_running_hint(resolve_config_path(args.config))
        if args.json:
            state = "not-running" if exc.exit_code == 3 else "unknown"
            emit(json.dumps({"state": state, "socket": path, "error": str(exc)}))
        print(f"rogue-watchdog: {message}", file=sys.stderr)
        return exc.exit_code
    from ..daemon.status import (
        exit_code,
        filter_gpu,
        missing_gpu,
        render_status,
        select_findings,
    )

    other = _other_daemon(args, doc, path, loaded)
    if other is not None:
        if args.json:
            emit(json.dumps({"state": "other-daemon", "socket": path, "error": other}))
        print(f"rogue-watchdog: {other}", file=sys.stderr)
        return 4
    if args.gpu is not None:
        missing = missing_gpu(doc, args.gpu)
        if missing is not None:  # a typo is not an empty view
            print(f"rogue-watchdog: {missing}", file=sys.stderr)
            return 2
        doc = filter_gpu(doc, args.gpu)
    if args.severity is not None or args.limit is not None:
        doc = select_findings(doc, args.severity, args.limit)
    if args.json:
        emit(json.dumps(doc, indent=2, sort_keys=True))
    else:
        emit(render_status(doc))
    return exit_code(doc)


def _other_daemon(
    args: argparse.Namespace,
    doc: dict[str, object],
    path: str,
    loaded: dict[str, Config] | None = None,
) -> str | None:
    """Why the daemon that answered on ``path`` is not the one this ``status`` was
    asked about (its configuration file or state directory differ from the ones of
    ``--config``), or None when it is, or when nothing was expected: ``--socket``
    alone, no configuration file, or a daemon too old to say. A socket path that
    leads to another daemon's socket (a symlink) must not pass for this one
    (issue 32, case 6). ``loaded``: configurations :func:`socket_path` read and
    validated a moment ago, by path (not read again)."""
    from .common import resolve_config_path

    if args.socket is not None and args.config is None:
        return None
    expected = resolve_config_path(args.config)
    if expected is None:
        return None
    theirs = doc.get("config")
    their_path = theirs.get("path") if isinstance(theirs, dict) else None
    if isinstance(their_path, str) and os.path.realpath(their_path) != os.path.realpath(expected):
        return (
            f"the daemon answering on {path} runs with {their_path}, not {expected}: "
            "it is another daemon (check daemon.socket and the socket path)"
        )
    their_dir = doc.get("state_dir")
    # The configuration code (PyYAML, every section's dataclass) is most of a client's
    # start-up: imported only where the state directory must be compared (issue 34).
    from ..config import ConfigError, load_config

    try:
        config = (loaded or {}).get(expected) or load_config(expected)
    except (ConfigError, OSError):
        return None
    mine = config.daemon.state_dir
    if isinstance(their_dir, str) and os.path.realpath(their_dir) != os.path.realpath(mine):
        return (
            f"the daemon answering on {path} keeps its state in {their_dir}, not {mine}: "
            "it is another daemon (check daemon.socket and the socket path)"
        )
    return None


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``run`` and ``status`` to the CLI."""
    _register_run(sub)
    _register_status(sub)


def _register_run(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "run",
        parents=[config_parent(daemon_first=False)],
        **command_help(
            "run the watchdog daemon (foreground unless --daemonize)",
            "The daemon: scan every daemon.interval_s, track findings in the state "
            "database, alert, enforce (per the enforcement mode) and answer `status` on "
            "the status socket. Logs are JSON lines on stdout. SIGHUP reloads the "
            "configuration; SIGTERM or Ctrl-C stops it.",
            [
                "rogue-watchdog run --config /etc/rogue-watchdog/config.yaml",
                "rogue-watchdog run --daemonize --pidfile /run/rogue-watchdog.pid",
                "systemctl start rogue-watchdog     # installed by scripts/install.sh",
            ],
            [
                (0, "stopped cleanly"),
                (2, "configuration, state directory, socket or pidfile error at start"),
            ],
        ),
    )
    p.add_argument(
        "--daemonize",
        action="store_true",
        help="detach into the background (hosts without systemd); needs --pidfile",
    )
    p.add_argument("--pidfile", help="with --daemonize: PID file, locked while running")
    p.add_argument(
        "--log-file",
        default=DEFAULT_LOG_FILE,
        help=f"with --daemonize: append the JSON log here (default {DEFAULT_LOG_FILE})",
    )
    p.set_defaults(func=cmd_run)


def _register_status(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "status",
        parents=[config_parent(daemon_first=False)],
        **command_help(
            "ask the running daemon what it sees",
            "What the running daemon sees now: its configuration, last scan, the GPUs with "
            "the memory sanctioned and unsanctioned jobs hold, the jobs with their GPU and "
            "origin, open findings (ids F12, for terminate and disable-source) and alert "
            "delivery. When no daemon runs, `rogue-watchdog scan` looks once.",
            [
                "rogue-watchdog status",
                "rogue-watchdog status --gpu 3",
                "rogue-watchdog status --severity critical   # only what is critical",
                "rogue-watchdog status --severity high --limit 10   # the 10 most severe",
                "rogue-watchdog status --json | jq '.findings[] | {id, kind, message}'",
                "rogue-watchdog status --socket /run/rogue-watchdog/status.sock --timeout 2",
            ],
            [
                (0, "running, nothing open"),
                (
                    1,
                    "running, with open findings of severity warning or above (with --gpu, "
                    "--severity or --limit: among those shown), or degraded",
                ),
                (
                    2,
                    "usage error; --gpu N names a GPU that NVML, answering, does not list "
                    "(the error names those it lists; while NVML is unavailable every job "
                    "is listed, with a note)",
                ),
                (3, "not running"),
                (4, "state unknown: permission denied, timeout or a garbled answer"),
            ],
        ),
    )
    p.add_argument("--json", action="store_true", help="print the status document as JSON")
    p.add_argument("--socket", help="status socket (default: daemon.socket of the config)")
    p.add_argument(
        "--gpu",
        type=gpu_index,
        metavar="N",
        help="only GPU N (NVML index): that GPU, the jobs on it and their open findings",
    )
    p.add_argument(
        "--severity",
        choices=SEVERITIES,
        metavar="LEVEL",
        help="only findings of LEVEL or above (info, warning, high, critical), most severe first",
    )
    p.add_argument(
        "--limit",
        type=finding_limit,
        metavar="N",
        help="at most N findings (1..100000), most severe first, then oldest first",
    )
    p.add_argument(
        "--timeout", type=seconds, default=5.0, help="seconds to wait for an answer (default 5)"
    )
    p.add_argument(
        "--watch",
        action="store_true",
        help="a live, refreshing view with keys to act (the same as `rogue-watchdog top`)",
    )
    p.add_argument(
        "--interval",
        type=seconds,
        default=2.0,
        help="with --watch: seconds between refreshes (default 2)",
    )
    p.set_defaults(func=cmd_status)


def add_watch_arguments(p: argparse.ArgumentParser) -> None:
    """The live view's options (``top``; ``status --watch`` shares the socket ones)."""
    p.add_argument("--socket", help="status socket (default: daemon.socket of the config)")
    p.add_argument(
        "--interval",
        type=seconds,
        default=2.0,
        help="seconds between refreshes (default 2)",
    )
    p.add_argument(
        "--timeout", type=seconds, default=5.0, help="seconds to wait for the daemon (default 5)"
    )


def cmd_top(args: argparse.Namespace) -> int:
    """``top``: the live view (watchdog/cli/top.py)."""
    from .top import run

    return run(args)


def register_top(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``top`` (the live view) to the CLI."""
    p = sub.add_parser(
        "top",
        parents=[config_parent(daemon_first=False)],
        **command_help(
            "live view: GPUs, jobs and findings, with keys to act",
            "A live, refreshing view (also `status --watch`): the GPUs with the memory "
            "sanctioned and unsanctioned jobs hold, every training job with its verdict, GPU, "
            "origin and command, and the open findings, from the daemon's status socket, or "
            "from a local scan when no daemon runs. The GPUs and the selected job stay on "
            "screen while the list scrolls. Keys: up/down (j/k), PgUp/PgDn, Home/End move; "
            "M U A V P sort by GPU memory, user, age, verdict, PID (I inverts); / filters; "
            "e explains the job in a pane that scrolls; t terminate it, d disable its "
            "source (both show the dry run and ask y, then run the ordinary commands, "
            "guards and all); r refresh; q quit (or back from a pane).",
            ["rogue-watchdog top", "rogue-watchdog top --interval 5 --config /etc/rw.yaml"],
            [(0, "quit with q"), (2, "usage error, or no terminal")],
        ),
    )
    add_watch_arguments(p)
    p.set_defaults(func=cmd_top)

"""What every subcommand module shares: the error type, the ``--config`` option, output.

Subcommand modules (``watchdog.cli.actions``, ``.daemon``, ``.weights``, ``.slurm``,
``.fleet``, ``.top``) import this module and the layers below the CLI, never
``watchdog.cli`` itself nor each other, so the CLI has no import cycle. It imports only
the standard library at import (the rest inside functions): ``--help`` and ``status``
must start fast.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO

# Here, not in watchdog.config: `--help` and `status` must not load the configuration
# package (PyYAML, RE2, every section) just to print a default path.
from ..hostpaths import DEFAULT_CONFIG as DEFAULT_CONFIG

if TYPE_CHECKING:
    from ..config import Config

# The socket asked for the running daemon's configuration; None: the environment's
# ROGUE_WATCHDOG_SOCKET, else the default socket, else the daemons found running
# (:func:`running_daemon_sockets`). Tests point it at their own daemon.
DAEMON_SOCKET: str | None = None
#: Environment variable naming the socket commands ask for the running daemon: set, no
#: other daemon is looked for (a host running several, a test suite running its own).
SOCKET_ENV = "ROGUE_WATCHDOG_SOCKET"
#: ``__SO_ACCEPTCON`` in ``/proc/net/unix`` Flags: a listening socket (net/unix/af_unix.c).
_SO_ACCEPTCON = 0x10000


class CliError(Exception):
    """A command cannot go on: bad input, an unusable file, stdout gone.

    ``watchdog.cli.main`` prints ``rogue-watchdog: MESSAGE`` to stderr and exits 2.
    """


class SeveralDaemons(CliError):
    """Several daemons run and nothing says which one a command means.

    Every command refuses then, a look included: judging under a guessed file (or the
    built-in defaults, where nothing is sanctioned) would print rogue verdicts and
    ``terminate`` hints for jobs the daemons sanction.
    """


def config_parent(*, daemon_first: bool = True) -> argparse.ArgumentParser:
    """A parent parser holding the one ``--config`` option the subcommands take.

    Args:
        daemon_first: The command judges or acts, so without ``--config`` it runs with
            the running daemon's configuration (:func:`command_config_path`); False for
            ``run``, ``status`` and ``top``, which read the default file.

    Returns:
        A parser built with ``add_help=False``, for ``add_parser(..., parents=[...])``.
    """
    default = f"{DEFAULT_CONFIG} if present"
    if daemon_first:
        default = f"the running daemon's, else {default}"
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--config", help=f"configuration file (default: {default})")
    return parent


def resolve_config_path(path: str | None) -> str | None:
    """The ``--config`` value, else the default file when it exists, else None."""
    if path is None and os.path.exists(DEFAULT_CONFIG):
        return DEFAULT_CONFIG
    return path


# A named tuple, not a dataclass: the dataclasses module (inspect, ast, dis) is 8 ms of
# the start-up of `status` and `--help`, which need no other (issue 34).
class RunningDaemon(NamedTuple):
    """A daemon that answered on its status socket.

    Attributes:
        socket: Where it answered.
        config: Its configuration file (absolute), None on built-in defaults.
        state_dir: Its state directory as it reported it (``state_dir`` of the status
            document), None when it did not say.
        checksum: The checksum of the configuration in force (``config.checksum``),
            None when it did not say.
    """

    socket: str
    config: str | None
    state_dir: str | None
    checksum: str | None = None


def _is_daemon_argv(argv: list[bytes]) -> bool:
    """``rogue-watchdog run ...`` or ``python -m rogue_watchdog run ...`` (or ``-m
    watchdog``: a daemon started before the package was installed as ``rogue_watchdog``)."""
    words = [os.path.basename(a) for a in argv[:4]]
    if b"run" not in argv:
        return False
    if b"rogue-watchdog" in words:
        return True
    modules = ([b"-m", b"rogue_watchdog"], [b"-m", b"watchdog"])
    return any(argv[i : i + 2] in modules for i in range(min(len(argv), 4)))


def running_daemon_sockets(proc_root: str = "/proc") -> list[str]:
    """The Unix sockets that running ``rogue-watchdog run`` processes listen on.

    A daemon is found wherever its socket is (``daemon.socket`` of any configuration):
    ``/proc/net/unix`` lists the listening sockets of this network namespace by inode,
    and a daemon process's ``/proc/PID/fd`` holds those inodes. Reading other users'
    fds needs root, as the commands that act do.

    Args:
        proc_root: The procfs mount.

    Returns:
        Socket paths, sorted, each once; empty when none can be read.
    """
    listening: dict[str, str] = {}
    try:
        with open(f"{proc_root}/net/unix", "rb") as fh:
            lines = fh.read().decode("utf-8", "surrogateescape").splitlines()[1:]
    except OSError:
        return []
    for line in lines:
        # Num RefCount Protocol Flags Type St Inode [Path]; a path may hold spaces.
        parts = line.split(None, 7)
        if len(parts) < 8 or parts[7].startswith("@"):
            continue
        try:
            if int(parts[3], 16) & _SO_ACCEPTCON:
                listening[parts[6]] = parts[7]
        except ValueError:
            continue
    found: set[str] = set()
    try:
        entries = [e.name for e in os.scandir(proc_root) if e.name.isdigit()]
    except OSError:
        return []
    for pid in entries:
        try:
            with open(f"{proc_root}/{pid}/cmdline", "rb") as fh:
                argv = fh.read(4096).split(b"\0")
            if not _is_daemon_argv(argv):
                continue
            fds = os.listdir(f"{proc_root}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{proc_root}/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in listening:
                found.add(listening[target[8:-1]])
    return sorted(found)


def _ask_daemon(socket: str, timeout_s: float) -> RunningDaemon | None:
    """The daemon answering at ``socket``, or None when none runs there.

    Raises:
        CliError: Something answers there but not usably (busy past the deadline, a
            reply that is not a status document, no ``config.path``, a relative path):
            guessing another configuration could judge or guard under the wrong rules.
    """
    from ..daemon.ipc import StatusError, query_status

    try:
        doc = query_status(socket, timeout_s=timeout_s)
    except StatusError as exc:
        if exc.exit_code == 3:
            return None
        raise CliError(f"{exc}; pass --config to say which configuration to use") from None
    config = doc.get("config")
    path = config.get("path", "") if isinstance(config, dict) else ""
    if path is not None and (not isinstance(path, str) or not os.path.isabs(path)):
        raise CliError(
            f"the daemon at {socket} did not name its configuration file (config.path); "
            "pass --config to say which configuration to use"
        )
    state_dir = doc.get("state_dir")
    state = state_dir if isinstance(state_dir, str) and os.path.isabs(state_dir) else None
    checksum = config.get("checksum") if isinstance(config, dict) else None
    return RunningDaemon(socket, path, state, checksum if isinstance(checksum, str) else None)


def find_daemon(timeout_s: float = 2.0) -> RunningDaemon | None:
    """The running daemon commands use without ``--config``, or None when none runs.

    :data:`DAEMON_SOCKET`, else ``$ROGUE_WATCHDOG_SOCKET``: that socket alone. Else the
    default socket, and when no daemon answers there, every socket a running
    ``rogue-watchdog run`` listens on (:func:`running_daemon_sockets`): one daemon is
    found wherever its socket is.

    Raises:
        CliError: A daemon answered unusably (:func:`_ask_daemon`), or several daemons
            run and none at the default socket (naming each one's ``--config``).
    """
    from ..hostpaths import DEFAULT_SOCKET, config_args

    pinned = DAEMON_SOCKET or os.environ.get(SOCKET_ENV)
    if pinned:
        return _ask_daemon(pinned, timeout_s)
    first = _ask_daemon(DEFAULT_SOCKET, timeout_s)
    if first is not None:
        return first
    found: list[RunningDaemon] = []
    for sock in running_daemon_sockets():
        if sock == DEFAULT_SOCKET:
            continue
        try:
            daemon = _ask_daemon(sock, timeout_s)
        except CliError:
            continue  # not a status socket (the daemon's other listeners), or wedged
        if daemon is not None:
            found.append(daemon)
    if len(found) > 1:
        which = "; ".join(
            f"{d.socket} ({config_args(d.config).strip() or 'built-in defaults'})" for d in found
        )
        raise SeveralDaemons(
            f"{len(found)} rogue-watchdog daemons are running: {which}; "
            f"pass --config (or set {SOCKET_ENV}) to say which"
        )
    return found[0] if found else None


def daemon_config_path(socket: str, timeout_s: float = 2.0) -> tuple[bool, str | None]:
    """The configuration file the daemon answering at ``socket`` runs with.

    A finding id comes from the daemon, and so must the rules that guard acting on it (the
    protect list, the state directory): without ``--config`` an action uses the daemon's
    file, not whatever the default path holds (or built-in defaults with no protect list).

    Returns:
        ``(True, path)`` when the daemon answered (``path`` None: it runs on built-in
        defaults, ``"config": {"path": null}``); ``(False, None)`` when no daemon runs
        there (no socket, or nothing listening).

    Raises:
        CliError: Something answers there but not usably (busy past the deadline, a
            reply that is not a status document, no ``config.path``, a relative path):
            guessing another configuration could judge or guard under the wrong rules.
    """
    daemon = _ask_daemon(socket, timeout_s)
    return (False, None) if daemon is None else (True, daemon.config)


def command_config_path(config: str | None, *, acts: bool) -> str | None:
    """The configuration a command that judges or acts runs with: ``--config``, else the
    running daemon's (said on stderr), else the default file when it exists, else None.

    Every verdict the daemon gave (``status``, finding ids) was reached under its file;
    ``scan``, ``explain``, the actions and ``health-check`` must judge and guard under the
    same allowlist and protect list, not under whatever the default path holds.

    Args:
        config: The ``--config`` value.
        acts: The command signals, edits or records (``terminate``, ``disable-source``,
            ``undo``, ``actions``, ``health-check``): a daemon that answers unusably is
            then an error. A command that only looks (``scan``, ``explain``) says so on
            stderr and goes on with the default file.

    Raises:
        CliError: ``acts`` and the daemon answered unusably (see
            :func:`daemon_config_path`).
        SeveralDaemons: Several daemons run and nothing names one (any command: a look
            would judge under a guessed allowlist).
    """
    if config is not None:
        return config
    daemon = command_daemon(acts=acts)
    return resolve_config_path(None) if daemon is None else daemon.config


def look_config(config: str | None) -> tuple[str | None, Config]:
    """The path and configuration a command that only looks (``scan``, ``explain``)
    judges under: :func:`command_config_path`'s, loaded.

    When that is the running daemon's file and the file does not load (an edit the
    daemon refused: invalid, or untrusted), the daemon still runs the version it
    accepted before. Its verdicts are that version's, so the look's are too: the daemon
    keeps a copy of it in its state directory (daemon.inforce), taken when its checksum
    is the one the daemon says is in force, and said on stderr with the file's error.
    Never for an action: one acts only under a file that loads now.

    Args:
        config: The ``--config`` value.

    Returns:
        ``(path, config)``: the file named in reports (the daemon's file, also when
        judged under its kept copy), and the configuration.

    Raises:
        ConfigError: The file does not load and no kept copy of the version in force
            is there to stand for it (or ``--config`` named the file).
        SeveralDaemons: As :func:`command_config_path`.
    """
    from ..config import ConfigError, load_config

    if config is not None:
        return config, load_config(config)
    daemon = command_daemon(acts=False)
    path = resolve_config_path(None) if daemon is None else daemon.config
    try:
        return path, load_config(path)
    except ConfigError as exc:
        refused = exc
        copy = _kept_copy(daemon)
        if copy is None or path is None:
            raise
        try:
            kept = load_config(copy)
        except ConfigError:
            raise exc from None
    import dataclasses

    from ..render import printable

    assert daemon is not None  # a kept copy is a running daemon's
    print(
        printable(
            f"rogue-watchdog: warning: the running daemon refused {path} as it reads now and "
            f"runs the version it accepted before (sha256:{daemon.checksum}): judging under "
            f"that version, kept at {copy}. The file's error: {refused}"
        ),
        file=sys.stderr,
    )
    # Named as the daemon's file: printed follow-ups (--config) point at it.
    return path, dataclasses.replace(kept, source=path)


def _kept_copy(daemon: RunningDaemon | None) -> str | None:
    if daemon is None or daemon.state_dir is None or daemon.checksum is None:
        return None
    from ..daemon.inforce import in_force_copy

    return in_force_copy(daemon.state_dir, daemon.checksum)


def command_daemon(*, acts: bool, quiet: bool = False) -> RunningDaemon | None:
    """The running daemon whose configuration a command without ``--config`` uses (said
    on stderr unless ``quiet``: a command that reads only its history says that), or
    None (none runs; or, for a command that only looks, none usable).

    Raises:
        CliError: ``acts`` and the daemon answered unusably (:func:`find_daemon`).
        SeveralDaemons: Several run and nothing names one, whatever the command.
    """
    from ..render import printable

    try:
        daemon = find_daemon()
    except CliError as exc:
        if acts or isinstance(exc, SeveralDaemons):
            raise
        print(printable(f"rogue-watchdog: warning: {exc}"), file=sys.stderr)
        return None
    if daemon is None or quiet:
        return daemon
    shown = daemon.config if daemon.config is not None else "(built-in defaults)"
    print(
        printable(f"rogue-watchdog: using the running daemon's configuration: {shown}"),
        file=sys.stderr,
    )
    return daemon


def say_state_db(state_dir: str, why: str) -> None:
    """Say on stderr which state database a command reads history from, and why that
    one (``--state-dir``, the running daemon's, a configuration's ``daemon.state_dir``):
    two instances on one host keep two histories, and reading the wrong one silently
    looks exactly like reading the right one."""
    from ..render import printable

    path = os.path.join(state_dir, "state.db")
    print(printable(f"rogue-watchdog: reading {path} ({why})"), file=sys.stderr)


def emit(text: str) -> None:
    """Print to stdout; a reader that went away (``| head``) is not an error.

    Raises:
        CliError: stdout is closed or cannot be written (``>&-``, ``> /dev/full``).
    """
    if sys.stdout is None:
        raise CliError("standard output is closed")
    _write_out(text)


def finish_stdout() -> None:
    """Flush what a command left in stdout's buffer (a report printed without
    :func:`emit`) while its failure can still be told, not at the interpreter's exit.

    Raises:
        CliError: stdout cannot be written (``> /dev/full``).
    """
    if sys.stdout is not None:
        _write_out(None)


def _write_out(text: str | None) -> None:
    try:
        if text is not None:
            print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        drop_stdout()
    except OSError as exc:
        drop_stdout()
        raise CliError(f"cannot write the output: {exc.strerror}") from None


def drop_stdout() -> None:
    """Point stdout's descriptor at ``/dev/null`` after a write to it failed.

    A failed flush leaves the text in Python's buffer (stdout to a pipe or a file is
    block-buffered unless ``PYTHONUNBUFFERED`` is set), and the interpreter flushes it
    again at exit: that second failure printed "Exception ignored ... OSError" and
    turned the command's exit code into 120. Flushed into ``/dev/null`` it cannot fail.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def gpu_index(text: str) -> int:
    """argparse type for ``--gpu N``: an NVML device index (ASCII digits, at most 1023)."""
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or int(t) > 1023:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a GPU index (0, 1, ...)")
    return int(t)


def seconds(text: str) -> float:
    """argparse type for ``--timeout`` and ``--interval``: finite seconds, 0 < t <= 3600."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (0 < value <= 3600):  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be seconds in (0, 3600], got {text!r}")
    return value


def socket_path(args: argparse.Namespace, loaded: dict[str, Config] | None = None) -> str:
    """``--socket``, else ``daemon.socket`` from ``--config`` or the default file, else
    the running daemon's wherever it listens (:func:`find_daemon`), else the default.

    A configuration file that no longer validates (the daemon may be running with the
    previous one) is read leniently for ``daemon.socket`` alone.

    Args:
        args: The command's arguments (``socket``, ``config``).
        loaded: Where to keep the configuration read here (its path -> the
            :class:`~watchdog.config.Config`), when it validated: a caller that needs it
            too does not read and validate the file a second time (8 ms for
            config/example.yaml). None keeps nothing.

    Raises:
        CliError: ``--socket ""``, or a configuration file that is unreadable or not
            YAML at all (falling back to the default socket would hide the mistake).
    """
    if args.socket is not None:
        if not args.socket:
            raise CliError("--socket needs a path")
        return str(args.socket)
    from ..hostpaths import DEFAULT_SOCKET

    path = resolve_config_path(args.config)
    if path is None:
        pinned = DAEMON_SOCKET or os.environ.get(SOCKET_ENV)
        if pinned:
            return pinned
        if os.path.exists(DEFAULT_SOCKET):
            return DEFAULT_SOCKET  # asked by the command itself: its exit code says how
        daemon = find_daemon()
        if daemon is None:
            return DEFAULT_SOCKET
        from ..render import printable

        # Found elsewhere: say whose answer this is (fresh user L, issue 33: before their
        # own daemon was up, `status` answered from another engineer's without a word).
        shown = daemon.config if daemon.config is not None else "(built-in defaults)"
        print(
            printable(
                f"rogue-watchdog: no daemon on the default socket {DEFAULT_SOCKET}; asking "
                f"the one running with {shown} at {daemon.socket} (--config names another)"
            ),
            file=sys.stderr,
        )
        return daemon.socket
    import yaml

    from ..config import MAX_CONFIG_BYTES, ConfigError, load_config
    from ..config.daemon import DaemonSettings
    from ..safeio import read_regular

    try:
        config = load_config(path)
    except ConfigError as exc:
        error = exc
    else:
        if loaded is not None:
            loaded[path] = config
        return config.daemon.socket
    try:
        # The safe reader again: a FIFO or device given as --config must not block here.
        # Strict UTF-8: a socket path read through replacement characters is not the
        # daemon's. RecursionError: nesting the parser refuses to follow.
        raw = yaml.safe_load(read_regular(path, MAX_CONFIG_BYTES).decode("utf-8"))
    except (OSError, ValueError, yaml.YAMLError, RecursionError):
        raise CliError(f"cannot read daemon.socket from the configuration: {error}") from None
    try:
        value = raw["daemon"]["socket"]
    except (KeyError, TypeError):
        return DaemonSettings().socket
    if isinstance(value, str) and value:
        return value
    raise CliError(f"cannot read daemon.socket from the configuration: {error}")


#: ``--log-format`` values: ``auto`` is human lines on a terminal, JSON lines otherwise.
LOG_FORMATS = ("auto", "json", "human")


def configure_logging(
    stream: TextIO | None = None, fmt: str = "json", *, clock: bool = False
) -> None:
    """Log events on ``stream``: stdout for the daemon (journald under systemd); a
    one-shot command passes stderr, keeping stdout for its report.

    Args:
        stream: Where events go; None is stdout.
        fmt: ``json`` (structlog JSON lines, stable keys per event: what the daemon and
            any pipe or file get), ``human`` (``rogue-watchdog: warning: EVENT: message
            (key=value, ...)``, host text escaped) or ``auto`` (human when ``stream`` is
            a terminal, else JSON: a pipe, a file, the journal under systemd).
        clock: Human lines start with the local time (``HH:MM:SS``): the daemon's, read
            as they come; a one-shot command's are read at once.
    """
    import logging

    import structlog

    from ..logs import defer_configure

    defer_configure(None)  # this one replaces any still deferred
    out = sys.stdout if stream is None else stream
    if fmt == "auto":
        try:
            fmt = "human" if out.isatty() else "json"
        except (AttributeError, ValueError):  # closed or not a file
            fmt = "json"
    renderer: Any = structlog.processors.JSONRenderer()
    if fmt == "human":
        renderer = functools.partial(human_log_line, clock=clock)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.dict_tracebacks,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(out),
        # Not cached: a logger bound on first use would keep writing to the stream of
        # the first configure, also after a later one (in-process runs, as tests make,
        # wrote to a closed capture: "I/O operation on closed file").
        cache_logger_on_first_use=False,
    )


#: Events a person at a terminal is not shown: the command's own answer on stdout says
#: the same (``action``: what terminate, disable-source and undo did, also recorded in
#: the state database for ``actions``).
HUMAN_SILENT_EVENTS = frozenset({"action"})


#: Keys a person at a terminal is not shown: ids for machines (the JSON form keeps them).
HUMAN_SILENT_KEYS = frozenset({"delivery_id", "host", "opened_at", "resolved_at", "seen_count"})


def human_log_line(
    _logger: object, _name: str, event: dict[str, Any], *, clock: bool = False
) -> str:
    """structlog renderer for a person at a terminal: one line per event,
    ``rogue-watchdog: LEVEL: EVENT: MESSAGE (key=value, ...)``, host text escaped
    (:func:`watchdog.render.printable`); with ``clock``, ``HH:MM:SS`` (local time) first,
    else the timestamp is left to the JSON form.

    Raises:
        structlog.DropEvent: For :data:`HUMAN_SILENT_EVENTS`.
    """
    import structlog

    from ..render import printable

    level = str(event.pop("level", "info"))
    name = str(event.pop("event", ""))
    if name in HUMAN_SILENT_EVENTS:
        raise structlog.DropEvent
    event.pop("timestamp", None)
    message = event.pop("message", None)
    text = f"rogue-watchdog: {level}: {name}"
    if clock:
        import time

        text = f"{time.strftime('%H:%M:%S')} {text}"
    if message is not None:
        text += f": {message}"
    rest = ", ".join(
        f"{k}={v}" for k, v in event.items() if v is not None and k not in HUMAN_SILENT_KEYS
    )
    if rest:
        text += f" ({rest})"
    return printable(text)


def history_state_dir(
    state_dir: str | None,
    daemon: RunningDaemon | None,
    config_state_dir: str,
    source: str,
    *,
    say: bool = True,
) -> str:
    """The state directory a command reads history from: ``--state-dir``, else the
    running daemon's (the one whose finding and action ids were printed), else
    ``daemon.state_dir`` of the configuration read.

    Args:
        state_dir: ``--state-dir``.
        daemon: The running daemon whose configuration is used, if any.
        config_state_dir: ``daemon.state_dir`` of the configuration read.
        source: That configuration's file (``Config.source``).
        say: Say on stderr which database and why (:func:`say_state_db`); the
            commands that act name it in their errors instead (``no finding F98 in
            /var/lib/rogue-watchdog/state.db``).
    """
    if state_dir:
        found, why = state_dir, "--state-dir"
    elif daemon is not None and daemon.state_dir is not None:
        found, why = daemon.state_dir, f"the running daemon's, at {daemon.socket}"
    else:
        shown = source if not source.startswith("<") else "the built-in defaults"
        found, why = config_state_dir, f"daemon.state_dir of {shown}"
    if say:
        say_state_db(found, why)
    return found

"""``daemon:`` configuration section (docs/config.md): how ``rogue-watchdog run`` behaves."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

import yaml

from ..hostpaths import DEFAULT_SOCKET
from . import datatypes
from .base import MAX_DURATION_S, NodeReader, build, setting

MIN_INTERVAL_S = 0.1
# A scan interval past an hour has stopped watching the host.
MAX_INTERVAL_S = 3600.0
Events = Literal["auto", "off"]
EVENTS: tuple[Events, ...] = get_args(Events)
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes with the NUL (unix(7))


def parse_listen(text: str) -> tuple[str, int]:
    """Split a ``HOST:PORT`` listen address.

    Args:
        text: ``127.0.0.1:9101``, ``[::1]:9101`` or ``localhost:9101``; port 0 asks the
            kernel for a free port (tests).

    Returns:
        ``(host, port)``, the host without IPv6 brackets.

    Raises:
        ValueError: No port, a port outside 0..65535, or an empty host.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:9101), got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not host:
            raise ValueError(f"empty IPv6 address in brackets, got {text!r}")
    elif ":" in host:
        raise ValueError(f"put an IPv6 address in brackets ([::1]:9101), got {text!r}")
    return host, int(port)


def _listen(r: NodeReader, node: yaml.Node, key: str) -> str:
    """A ``HOST:PORT`` listen address (:func:`parse_listen`), kept as written."""
    text = r.string(node, key)
    try:
        parse_listen(text)
    except ValueError as exc:
        raise r.err(node, key, str(exc)) from None
    return text


def _socket_path(r: NodeReader, node: yaml.Node, key: str) -> str:
    """An absolute path short enough for a unix socket address."""
    path = datatypes.absolute_path(r, node, key)
    if len(path.encode()) > _SUN_PATH_MAX:
        raise r.err(node, key, f"a unix socket path is at most {_SUN_PATH_MAX} bytes")
    return path


def _group(r: NodeReader, node: yaml.Node, key: str) -> str:
    """A group name (as useradd(8) allows) or a numeric gid below 2**32."""
    text = r.string(node, key)
    if text.isdigit() and int(text) >= 2**32:
        raise r.err(node, key, "a numeric gid must be below 2**32")
    if not text or not (text.isdigit() or re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\$?", text)):
        raise r.err(node, key, f"expected a group name or a numeric gid, got {text!r}")
    return text


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d|w)")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_duration_s(text: str) -> float:
    """Seconds of a duration written ``90``, ``90s``, ``30m``, ``12h``, ``7d`` or ``2w``.

    Raises:
        ValueError: Anything else, or a duration of 0 or past 10 years.
    """
    t = text.strip()
    m = _DURATION.fullmatch(t)
    try:
        value = float(m.group(1)) * _UNIT_S[m.group(2)] if m else float(t)
    except ValueError:
        raise ValueError(
            f"expected a duration (7d, 12h, 30m, seconds) or a date, got {text!r}"
        ) from None
    if not 0 < value <= MAX_DURATION_S:
        raise ValueError(f"must be above 0 and at most 10 years, got {text!r}")
    return value


@dataclass(frozen=True)
class LearnUntil:
    """``daemon.learn_until``: the end of the learning period, as a date or as a
    duration counted from the first start of the daemon with this state database.

    Attributes:
        text: As written.
        at: POSIX time of the end, for a date; None for a duration.
        duration_s: Seconds from the first start, for a duration; None for a date.
    """

    text: str
    at: float | None = None
    duration_s: float | None = None

    def end(self, started_at: float) -> float:
        """POSIX time the learning period ends, given when it started."""
        return self.at if self.at is not None else started_at + (self.duration_s or 0.0)


def _learn_until(r: NodeReader, node: yaml.Node, key: str) -> LearnUntil:
    """A date (ISO 8601; a date alone is midnight, local time) or a duration."""
    if not isinstance(node, yaml.ScalarNode) or not node.value:
        raise r.err(node, key, "expected a date (2026-12-09T00:00) or a duration (7d)")
    text = node.value
    if node.tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
        value = r.number(node, key)
        if value <= 0:
            raise r.err(node, key, f"must be above 0, got {text}")
        return LearnUntil(text, duration_s=value)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        try:
            return LearnUntil(text, duration_s=parse_duration_s(text))
        except ValueError as exc:
            raise r.err(node, key, str(exc)) from None
    return LearnUntil(text, at=when.astimezone().timestamp())


_interval = datatypes.at_least_s(MIN_INTERVAL_S, datatypes.positive_s(MAX_INTERVAL_S))
_retention = datatypes.non_negative_s()


@dataclass(frozen=True)
class DaemonSettings:
    """How ``rogue-watchdog run`` behaves.

    Attributes:
        interval_s: Seconds between scans.
        state_dir: Directory of the SQLite state database.
        socket: Path of the status unix socket.
        socket_group: Group that may read the socket (mode 0660); None keeps root's.
        fd_sweep_interval_s: Seconds between full device-fd sweeps.
        metrics_listen: ``HOST:PORT`` for Prometheus metrics (``[::1]:9101`` for IPv6);
            None disables them. Validated by :func:`parse_listen`.
        retention_findings_s: Resolved findings are deleted this long after they
            resolved (0 keeps them forever).
        retention_alerts_s: Delivered and dead-lettered alerts are deleted this long
            after they were spooled (0 keeps them forever).
        retention_jobs_s: Jobs no longer seen are forgotten this long after they went
            (0 keeps them forever); a respawn after that counts as a new job.
        events: ``auto``: also follow the kernel's process events (proc connector) and
            fall back to polling alone where they are unavailable; ``off``: poll only.
        events_rcvbuf_bytes: Receive buffer of the proc connector socket
            (``SO_RCVBUF``); events beyond it are dropped by the kernel (``ENOBUFS``)
            and a full sweep follows.
        reconcile_interval_s: With events up, a scan re-reads only the processes they
            named; every process is walked at least this often (and at once after
            lost events or a blind source). Seconds.
        learn_until: The learning period (docs/first-week.md): until then, jobs no rule
            sanctions are recorded and shown but alerted at ``info`` only and never
            acted on. None: no learning period.
    """

    interval_s: float = setting(5.0, _interval)
    state_dir: str = setting("/var/lib/rogue-watchdog", datatypes.absolute_path)
    socket: str = setting(DEFAULT_SOCKET, _socket_path)
    socket_group: str | None = setting(None, _group)
    fd_sweep_interval_s: float = setting(60.0, _interval)
    metrics_listen: str | None = setting(None, _listen)
    retention_findings_s: float = setting(7 * 86400.0, _retention)
    retention_alerts_s: float = setting(7 * 86400.0, _retention)
    retention_jobs_s: float = setting(7 * 86400.0, _retention)
    events: Events = setting("auto", datatypes.choice(EVENTS, "must be auto or off, got {text!r}"))
    events_rcvbuf_bytes: int = setting(
        4 << 20,
        datatypes.integer(4096, 1 << 30, too_high="must be at most {maximum} (1 GiB), got {value}"),
    )
    reconcile_interval_s: float = setting(30.0, _interval)
    learn_until: LearnUntil | None = setting(None, _learn_until)


def parse_daemon(r: NodeReader, node: yaml.Node) -> DaemonSettings:
    """Validate the ``daemon:`` section.

    Raises:
        ConfigError: Unknown keys, wrong types, non-positive intervals, relative paths.
    """
    settings = build(DaemonSettings, r, node, "daemon")
    learn = settings.learn_until
    keep = settings.retention_jobs_s
    if learn is not None and keep > 0:
        import time

        period = learn.duration_s if learn.at is None else learn.at - time.time()
        if period is not None and period > keep:
            value = _value_node(node, "learn_until")
            r.warn(
                value,
                "daemon.learn_until",
                f"the learning period ({period / 86400:.1f} days) is longer than "
                f"daemon.retention_jobs_s ({keep:g} s = {keep / 86400:.1f} days): runs "
                "seen early in it will be forgotten before 'allowlist suggest' reads them; "
                "raise retention_jobs_s to cover it",
            )
    return settings


def _value_node(node: yaml.Node, name: str) -> yaml.Node:
    for k, v in node.value if isinstance(node, yaml.MappingNode) else ():
        if isinstance(k, yaml.ScalarNode) and k.value == name:
            return v  # type: ignore[no-any-return]
    return node

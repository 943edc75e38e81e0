"""``daemon:`` and ``alerts:`` configuration sections (docs/config.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial
from typing import Literal
from urllib.parse import urlsplit

import yaml

from watchdog.config.base import MAX_DURATION_S, NodeReader
from watchdog.model import DEFAULT_SOCKET

SEVERITIES = ("info", "warning", "high", "critical")
# Every Finding kind the code can emit (tests/unit/test_daemon_hostile.py keeps this in
# sync with the source); ``kinds:`` naming anything else would silently never match.
FINDING_KINDS = (
    "binding-mismatch", "component-degraded", "deploy-stale", "excess-instances",
    "gpu-memory-unexplained", "gpu-pid-invisible", "gpu-processes-hidden", "gpu-query-failed",
    "gpu-query-hung", "limited-visibility",
    "nvml-unavailable", "pid-namespace", "poisoned-weights", "proc-unavailable",
    "queue-output-malformed", "queue-unavailable", "queue-unsanctioned",
    "remediation-failed", "respawned", "rogue-job", "rogue-service", "ship-gate-degraded",
    "state-recovered", "weights-unverified", "zombie-gpu-memory",
    "slurm-drain-failed", "slurm-node-drained",
)  # fmt: skip
MIN_INTERVAL_S = 0.1
# Default least seconds between two messages per sink type: Slack allows about one message
# per second per incoming webhook; Discord about 30 per minute per channel.
MIN_INTERVAL_DEFAULTS = {"slack": 1.0, "discord": 2.0}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes with the NUL (unix(7))


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
    """

    interval_s: float = 5.0
    state_dir: str = "/var/lib/rogue-watchdog"
    socket: str = DEFAULT_SOCKET
    socket_group: str | None = None
    fd_sweep_interval_s: float = 60.0
    metrics_listen: str | None = None
    retention_findings_s: float = 7 * 86400.0
    retention_alerts_s: float = 7 * 86400.0
    retention_jobs_s: float = 7 * 86400.0
    events: Literal["auto", "off"] = "auto"
    events_rcvbuf_bytes: int = 4 << 20


@dataclass(frozen=True)
class SinkSettings:
    """One alert destination.

    Attributes:
        type: ``log``, ``slack``, ``discord``, ``webhook`` or ``alertmanager``.
        name: Name used in status and logs (defaults to the type).
        path: For ``log``: a file to append JSON lines to; None means stdout.
        url_env: Environment variable holding the webhook URL (a secret).
        url_file: File holding the webhook URL (a secret).
        min_severity: Lowest severity delivered.
        kinds: Finding kinds delivered; empty means all.
        timeout_s: Per-request timeout in seconds.
        urls: ``alertmanager`` only: base URLs of the Alertmanagers (an HA pair, say),
            given inline: an address, not a credential (user:password@ is refused).
        resend_s: ``alertmanager`` only: seconds between re-sends of a firing alert.
        min_interval_s: Least time between two messages to this sink, in seconds (a
            rate limit); None means the type's default (:data:`MIN_INTERVAL_DEFAULTS`).
        coalesce: Send every alert due at once as one message (a storm becomes one
            chat post listing the jobs, or one webhook document with the full list).
    """

    type: Literal["log", "slack", "discord", "webhook", "alertmanager"]
    name: str
    path: str | None = None
    url_env: str | None = None
    url_file: str | None = None
    min_severity: str = "info"
    kinds: tuple[str, ...] = ()
    timeout_s: float = 5.0
    urls: tuple[str, ...] = ()
    resend_s: float = 60.0
    min_interval_s: float | None = None
    coalesce: bool = True

    @property
    def interval_s(self) -> float:
        """The rate limit in force: ``min_interval_s`` or the type's default."""
        if self.min_interval_s is not None:
            return self.min_interval_s
        return MIN_INTERVAL_DEFAULTS.get(self.type, 0.0)


@dataclass(frozen=True)
class AlertSettings:
    """Alert policy and sinks.

    Attributes:
        reminder_after_s: Seconds after which a still-open finding is alerted again.
        retry_base_s: Delay before the first retry of a failed delivery; doubled after
            each further failure.
        retry_max_s: Cap on the retry delay.
        sinks: Destinations; by default one JSON log sink on stdout.
        min_lifetime_s: A finding must stay open this long before its alert is sent
            (debounce); one that resolves sooner is recorded and counted, not alerted.
    """

    reminder_after_s: float = 3600.0
    retry_base_s: float = 5.0
    retry_max_s: float = 600.0
    sinks: tuple[SinkSettings, ...] = field(
        default_factory=lambda: (SinkSettings(type="log", name="log"),)
    )
    min_lifetime_s: float = 0.0


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


# Upper bounds: a scan interval past an hour has stopped watching the host; a timeout or
# a retry step past a day has stopped delivering; retention past ten years is a typo.
MAX_INTERVAL_S = 3600.0
MAX_TIMEOUT_S = 600.0
MAX_DELAY_S = 86400.0
MAX_REMINDER_S = 365 * 86400.0


def _positive(r: NodeReader, node: yaml.Node, key: str, maximum: float = MAX_DELAY_S) -> float:
    value = r.number(node, key)
    if value <= 0:
        raise r.err(node, key, f"must be greater than 0, got {value}")
    if value > maximum:
        raise r.err(node, key, f"must be at most {maximum:g} s, got {node.value}")
    return value


def _non_negative(r: NodeReader, node: yaml.Node, key: str, maximum: float = MAX_DELAY_S) -> float:
    value = r.number(node, key)
    if value < 0:
        raise r.err(node, key, f"must be 0 or more, got {value}")
    if value > maximum:
        raise r.err(node, key, f"must be at most {maximum:g} s, got {node.value}")
    return value


def parse_daemon(r: NodeReader, node: yaml.Node) -> DaemonSettings:
    """Validate the ``daemon:`` section.

    Raises:
        ConfigError: Unknown keys, wrong types, non-positive intervals.
    """
    allowed = (
        "interval_s",
        "state_dir",
        "socket",
        "socket_group",
        "fd_sweep_interval_s",
        "metrics_listen",
        "retention_findings_s",
        "retention_alerts_s",
        "retention_jobs_s",
        "events",
        "events_rcvbuf_bytes",
    )
    m = r.mapping(node, "daemon", allowed)
    vals: dict[str, object] = {}
    for name, (_, v) in m.items():
        key = f"daemon.{name}"
        if name in ("interval_s", "fd_sweep_interval_s"):
            vals[name] = _positive(r, v, key, MAX_INTERVAL_S)
            if vals[name] < MIN_INTERVAL_S:  # type: ignore[operator]
                raise r.err(v, key, f"must be at least {MIN_INTERVAL_S} s, got {vals[name]}")
        elif name in ("state_dir", "socket"):
            text = r.string(v, key)
            if not text.startswith("/"):
                raise r.err(v, key, f"must be an absolute path, got {text!r}")
            if name == "socket" and len(text.encode()) > _SUN_PATH_MAX:
                raise r.err(v, key, f"a unix socket path is at most {_SUN_PATH_MAX} bytes")
            vals[name] = text
        elif name == "socket_group":
            text = r.string(v, key)
            if text.isdigit() and int(text) >= 2**32:
                raise r.err(v, key, "a numeric gid must be below 2**32")
            if not text or not (
                text.isdigit() or re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\$?", text)
            ):
                raise r.err(v, key, f"expected a group name or a numeric gid, got {text!r}")
            vals[name] = text
        elif name.startswith("retention_"):
            vals[name] = _non_negative(r, v, key, MAX_DURATION_S)
        elif name == "metrics_listen":
            text = r.string(v, key)
            try:
                parse_listen(text)
            except ValueError as exc:
                raise r.err(v, key, str(exc)) from None
            vals[name] = text
        elif name == "events":
            text = r.string(v, key)
            if text not in ("auto", "off"):
                raise r.err(v, key, f"must be auto or off, got {text!r}")
            vals[name] = text
        elif name == "events_rcvbuf_bytes":
            vals[name] = r.integer(v, key, 4096)
            if vals[name] > 1 << 30:  # type: ignore[operator]
                raise r.err(v, key, f"must be at most {1 << 30} (1 GiB), got {vals[name]}")
        else:
            vals[name] = r.string(v, key)
    return DaemonSettings(**vals)  # type: ignore[arg-type]


def _sink(r: NodeReader, node: yaml.Node, key: str) -> SinkSettings:
    allowed = (
        "type", "name", "path", "url_env", "url_file", "min_severity", "kinds", "timeout_s",
        "urls", "resend_s",
        "min_interval_s", "coalesce",
    )  # fmt: skip
    if isinstance(node, yaml.MappingNode):
        for knode, _ in node.value:
            if getattr(knode, "value", None) in ("url", "token", "webhook"):
                raise r.err(
                    knode,
                    f"{key}.{knode.value}",
                    "inline webhook URLs are refused: the URL is a secret; name an "
                    "environment variable with url_env or a file with url_file",
                )
    m = r.mapping(node, key, allowed)
    if "type" not in m:
        raise r.err(
            node, f"{key}.type", "required key missing (log, slack, discord, webhook, alertmanager)"
        )
    kind = r.string(m["type"][1], f"{key}.type")
    if kind not in ("log", "slack", "discord", "webhook", "alertmanager"):
        raise r.err(m["type"][1], f"{key}.type", f"unknown sink type {kind!r}")
    vals: dict[str, object] = {"type": kind, "name": kind}
    for name, (_, v) in m.items():
        sub = f"{key}.{name}"
        if name == "type":
            continue
        if name == "kinds":
            kinds = r.strings(v, sub)
            unknown = [k for k in kinds if k not in FINDING_KINDS]
            if unknown:
                raise r.err(
                    v,
                    sub,
                    f"unknown finding kind(s) {', '.join(unknown)}; known: "
                    f"{', '.join(FINDING_KINDS)}",
                )
            vals[name] = kinds
        elif name == "url_env":
            text = r.string(v, sub)
            if not _ENV_NAME.fullmatch(text):  # never echo it: it may be the URL itself
                raise r.err(
                    v,
                    sub,
                    "must be the NAME of an environment variable ([A-Za-z_][A-Za-z0-9_]*) "
                    "holding the URL, not the URL (value not shown: it may be a secret)",
                )
            r.refer(v, sub, "env", text)
            vals[name] = text
        elif name == "url_file":
            text = r.string(v, sub)
            if "://" in text or not text.startswith("/"):
                raise r.err(
                    v,
                    sub,
                    "must be the absolute path of a file holding the URL, not the URL "
                    "(value not shown: it may be a secret)",
                )
            r.refer(v, sub, "file", text)
            vals[name] = text
        elif name == "timeout_s":
            vals[name] = _positive(r, v, sub, MAX_TIMEOUT_S)
        elif name in ("urls", "resend_s"):
            if kind != "alertmanager":
                raise r.err(v, sub, "only an alertmanager sink takes this key")
            if name == "resend_s":
                vals[name] = _positive(r, v, sub)
            else:
                vals[name] = _alertmanager_urls(r, v, sub)
        elif name == "min_interval_s":
            vals[name] = _non_negative(r, v, sub)
        elif name == "coalesce":
            vals[name] = r.boolean(v, sub)
        elif name == "min_severity":
            sev = r.string(v, sub)
            if sev not in SEVERITIES:
                raise r.err(v, sub, f"must be one of {', '.join(SEVERITIES)}")
            vals[name] = sev
        else:
            vals[name] = r.string(v, sub)
    if kind == "alertmanager" and vals.get("urls"):
        if vals.get("url_env") or vals.get("url_file"):
            raise r.err(node, key, "give urls, or url_env / url_file, not both")
    elif kind != "log" and not (vals.get("url_env") or vals.get("url_file")):
        raise r.err(
            node,
            key,
            "a webhook sink needs url_env or url_file (the URL is a secret: never inline)",
        )
    if "url_env" in vals and "url_file" in vals:
        raise r.err(node, key, "give url_env or url_file, not both")
    if kind == "log" and (vals.get("url_env") or vals.get("url_file")):
        raise r.err(node, key, "a log sink takes path, not url_env/url_file")
    return SinkSettings(**vals)  # type: ignore[arg-type]


def _alertmanager_urls(r: NodeReader, node: yaml.Node, key: str) -> tuple[str, ...]:
    """Validate ``urls`` of an alertmanager sink: http(s) base URLs, no credentials."""
    urls = r.strings(node, key)
    if not urls:
        raise r.err(node, key, "empty: give at least one Alertmanager URL")
    for i, url in enumerate(urls):
        try:
            parts = urlsplit(url)
            ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            ok = False
        if not ok:
            raise r.err(
                node, f"{key}[{i}]", f"expected http(s)://HOST[:PORT][/PREFIX], got {url!r}"
            )
        if parts.username is not None or parts.password is not None:
            raise r.err(
                node,
                f"{key}[{i}]",
                "credentials in an inline URL are refused (value not shown: it is a secret); "
                "put the URL in url_file or url_env",
            )
        if parts.query or parts.fragment:
            raise r.err(node, f"{key}[{i}]", "a base URL takes no query or fragment")
    return tuple(urls)


def parse_alerts(r: NodeReader, node: yaml.Node) -> AlertSettings:
    """Validate the ``alerts:`` section.

    Raises:
        ConfigError: Unknown keys, wrong types, unknown sink types, inline URLs, a retry
            cap below the retry base.
    """
    numbers = ("reminder_after_s", "retry_base_s", "retry_max_s")
    m = r.mapping(node, "alerts", (*numbers, "sinks", "min_lifetime_s"))
    vals: dict[str, object] = {}
    nums = {
        name: _positive(
            r,
            m[name][1],
            f"alerts.{name}",
            MAX_REMINDER_S if name == "reminder_after_s" else MAX_DELAY_S,
        )
        for name in numbers
        if name in m
    }
    vals.update(nums)
    if "min_lifetime_s" in m:
        vals["min_lifetime_s"] = _non_negative(r, m["min_lifetime_s"][1], "alerts.min_lifetime_s")
    base = nums.get("retry_base_s", AlertSettings.retry_base_s)
    cap = nums.get("retry_max_s", AlertSettings.retry_max_s)
    if cap < base:
        where = m["retry_max_s"][1] if "retry_max_s" in m else node
        raise r.err(where, "alerts.retry_max_s", f"must be at least retry_base_s ({base})")
    if "sinks" in m:
        if not r.sequence(m["sinks"][1], "alerts.sinks"):
            raise r.err(
                m["sinks"][1],
                "alerts.sinks",
                "empty: no alerts would be sent; remove the key for the default log sink "
                "or add a sink",
            )
        items = r.sequence(m["sinks"][1], "alerts.sinks")
        # A failing sink is recorded and the others still checked (one run, every error).
        parsed = [
            r.attempt(partial(_sink, r, n, f"alerts.sinks[{i}]")) for i, n in enumerate(items)
        ]
        sinks = tuple(s for s in parsed if s is not None)
        names = [s.name if s is not None else None for s in parsed]
        for i, name in enumerate(names):
            if name is not None and name in names[:i]:
                raise r.err(
                    items[i],
                    f"alerts.sinks[{i}].name",
                    f"duplicate sink name {name!r}; give each sink a name",
                )
        vals["sinks"] = sinks
    return AlertSettings(**vals)  # type: ignore[arg-type]

"""``alerts:`` configuration section (docs/alerts.md): alert policy and sinks."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from urllib.parse import urlsplit

import yaml

from ..model import FINDING_KINDS, SEVERITIES
from . import datatypes
from .base import (
    NodeReader,
    construct,
    keys,
    read,
    required,
    setting,
    setting_factory,
)
from .sinks import sink_key_owners, sink_kind, sink_names, sink_own_keys

# Upper bounds: a timeout or a retry step past a day has stopped delivering; a reminder
# past a year is a typo.
MAX_TIMEOUT_S = 600.0
MAX_DELAY_S = 86400.0
MAX_REMINDER_S = 365 * 86400.0
# A settle longer than a minute is no longer "the first complete picture": it is a delay.
MAX_SETTLE_S = 60.0


def _sink_type(r: NodeReader, node: yaml.Node, key: str) -> str:
    """A listed sink kind's name (:func:`~watchdog.config.sinks.sink_names`, read when the
    file is, so a list handed in after import is known)."""
    return datatypes.choice(sink_names(), "unknown sink type {text!r}")(r, node, key)


# Keys that would put the secret URL itself in the file.
_INLINE_SECRET_KEYS = ("url", "token", "webhook")


def _kinds(r: NodeReader, node: yaml.Node, key: str) -> tuple[str, ...]:
    """Finding kinds from :data:`FINDING_KINDS`."""
    kinds = datatypes.texts(r, node, key)
    unknown = [k for k in kinds if k not in FINDING_KINDS]
    if unknown:
        raise r.err(
            node,
            key,
            f"unknown finding kind(s) {', '.join(unknown)}; known: {', '.join(FINDING_KINDS)}",
        )
    return kinds


def _alertmanager_urls(r: NodeReader, node: yaml.Node, key: str) -> tuple[str, ...]:
    """Validate ``urls`` of an alertmanager sink: http(s) base URLs, no credentials."""
    urls = datatypes.texts(r, node, key)
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


@dataclass(frozen=True)
class SinkSettings:
    """One alert destination.

    Attributes:
        type: A listed sink kind (:data:`~watchdog.config.sinks.SINK_KINDS`):
            ``log``, ``slack``, ``discord``, ``webhook`` or ``alertmanager``.
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
            rate limit); None means the kind's default
            (:attr:`~watchdog.config.sinks.SinkKind.min_interval_s`).
        coalesce: Send every alert due at once as one message (a storm becomes one
            chat post listing the jobs, or one webhook document with the full list).
    """

    type: str = required(_sink_type)
    name: str = required(datatypes.text)
    path: str | None = setting(None, datatypes.text)
    url_env: str | None = setting(None, datatypes.secret_env)
    url_file: str | None = setting(None, datatypes.secret_file)
    min_severity: str = setting(
        "info", datatypes.choice(SEVERITIES, f"must be one of {', '.join(SEVERITIES)}")
    )
    kinds: tuple[str, ...] = setting((), _kinds)
    timeout_s: float = setting(5.0, datatypes.positive_s(MAX_TIMEOUT_S))
    urls: tuple[str, ...] = setting((), _alertmanager_urls)
    resend_s: float = setting(60.0, datatypes.positive_s(MAX_DELAY_S))
    min_interval_s: float | None = setting(None, datatypes.non_negative_s(MAX_DELAY_S))
    coalesce: bool = setting(True, datatypes.boolean)

    @property
    def interval_s(self) -> float:
        """The rate limit in force: ``min_interval_s`` or the type's default."""
        if self.min_interval_s is not None:
            return self.min_interval_s
        kind = sink_kind(self.type)
        return kind.min_interval_s if kind is not None else 0.0


def _sink(r: NodeReader, node: yaml.Node, key: str) -> SinkSettings:
    """One sink: its type first (what else it takes depends on it), then its keys."""
    if isinstance(node, yaml.MappingNode):
        for knode, _ in node.value:
            if getattr(knode, "value", None) in _INLINE_SECRET_KEYS:
                raise r.err(
                    knode,
                    f"{key}.{knode.value}",
                    "inline webhook URLs are refused: the URL is a secret; name an "
                    "environment variable with url_env or a file with url_file",
                )
    m = r.mapping(node, key, keys(SinkSettings))
    if "type" not in m:
        missing = r.err(node, f"{key}.type", f"required key missing ({', '.join(sink_names())})")
        raise r.misspelt(key, "type") or missing
    sink_type = _sink_type(r, m["type"][1], f"{key}.type")
    kind = sink_kind(sink_type)
    assert kind is not None  # _sink_type took only a listed name
    vals: dict[str, object] = {"name": sink_type}
    claimed = sink_own_keys()
    for name in m:  # in file order, refusing another kind's own keys where they stand
        if name in claimed and name not in kind.own_keys:
            owners = " or ".join(sink_key_owners(name))
            article = "an" if owners[:1] in "aeiou" else "a"
            raise r.err(m[name][1], f"{key}.{name}", f"only {article} {owners} sink takes this key")
        vals.update(read(SinkSettings, r, m, key, order=(name,)))
    sink = construct(SinkSettings, vals)
    secret = sink.url_env or sink.url_file
    if kind.receiver == "secret-or-urls" and sink.urls:
        if secret:
            raise r.err(node, key, "give urls, or url_env / url_file, not both")
    elif kind.receiver != "none" and not secret:
        # A misspelt url_file (``url_fle``) is reported as such, not as a missing secret.
        raise r.misspelt(key, "url_env", "url_file") or r.err(
            node,
            key,
            "a webhook sink needs url_env or url_file (the URL is a secret: never inline)",
        )
    if sink.url_env is not None and sink.url_file is not None:
        raise r.err(node, key, "give url_env or url_file, not both")
    if kind.receiver == "none" and secret:
        raise r.err(node, key, f"a {sink_type} sink takes path, not url_env/url_file")
    return sink


def _sinks(r: NodeReader, node: yaml.Node, key: str) -> tuple[SinkSettings, ...]:
    """At least one sink, names unique; a failing sink is recorded and the others are
    still checked (one run, every error)."""
    items = r.sequence(node, key)
    if not items:
        raise r.err(
            node,
            key,
            "empty: no alerts would be sent; remove the key for the default log sink or add a sink",
        )
    parsed = [r.attempt(partial(_sink, r, n, f"{key}[{i}]")) for i, n in enumerate(items)]
    names = [s.name if s is not None else None for s in parsed]
    for i, name in enumerate(names):
        if name is not None and name in names[:i]:
            raise r.err(
                items[i], f"{key}[{i}].name", f"duplicate sink name {name!r}; give each sink a name"
            )
    return tuple(s for s in parsed if s is not None)


def _default_sinks() -> tuple[SinkSettings, ...]:
    return (SinkSettings(type="log", name="log"),)


@dataclass(frozen=True)
class AlertSettings:
    """Alert policy and sinks.

    Attributes:
        reminder_after_s: Seconds after which a still-open finding is alerted again.
        retry_base_s: Delay before the first retry of a failed delivery; doubled after
            each further failure.
        retry_max_s: Cap on the retry delay (at least ``retry_base_s``).
        sinks: Destinations; by default one JSON log sink on stdout.
        min_lifetime_s: A finding must stay open this long before its alert is sent
            (debounce); one that resolves sooner is recorded and counted, not alerted.
        settle_s: At most this long, the first alert of a finding about a job waits for
            its first complete picture (the GPUs NVML lists it on, the same at two looks
            in a row), so memory appearing a tick later is part of the open, not a
            reminder. Without NVML's process lists the open waits all of it, to see
            the job still running. 0 sends the open at once.
    """

    reminder_after_s: float = setting(3600.0, datatypes.positive_s(MAX_REMINDER_S))
    retry_base_s: float = setting(5.0, datatypes.positive_s(MAX_DELAY_S))
    retry_max_s: float = setting(600.0, datatypes.positive_s(MAX_DELAY_S))
    sinks: tuple[SinkSettings, ...] = setting_factory(_default_sinks, _sinks)
    min_lifetime_s: float = setting(0.0, datatypes.non_negative_s(MAX_DELAY_S))
    settle_s: float = setting(5.0, datatypes.non_negative_s(MAX_SETTLE_S))


def parse_alerts(r: NodeReader, node: yaml.Node) -> AlertSettings:
    """Validate the ``alerts:`` section.

    Raises:
        ConfigError: Unknown keys, wrong types, unknown sink types, inline URLs, a retry
            cap below the retry base.
    """
    m = r.mapping(node, "alerts", keys(AlertSettings))
    timing = ("reminder_after_s", "retry_base_s", "retry_max_s", "min_lifetime_s", "settle_s")
    vals = read(AlertSettings, r, m, "alerts", order=timing)
    policy = construct(AlertSettings, vals)
    # A misspelt retry key is reported as such: the other is compared with a default.
    misspelt = r.misspelt("alerts", "retry_base_s", "retry_max_s")
    if policy.retry_max_s < policy.retry_base_s and misspelt is None:
        where = m["retry_max_s"][1] if "retry_max_s" in m else node
        raise r.err(
            where, "alerts.retry_max_s", f"must be at least retry_base_s ({policy.retry_base_s})"
        )
    # Sinks last: a retry cap below its base fails the section before any sink is read.
    return construct(
        AlertSettings, {**vals, **read(AlertSettings, r, m, "alerts", order=("sinks",))}
    )

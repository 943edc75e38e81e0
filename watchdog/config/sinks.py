"""The sink kinds: every ``alerts.sinks[].type`` rogue-watchdog knows, each named once.

A :class:`SinkKind` says what the configuration needs to know of a kind (how it finds
its receiver, which kind-specific keys it takes, its default rate limit). The
configuration never imports the implementation (it sits in the daemon layer, above this
one): :data:`watchdog.daemon.alerts.delivery.SINK_FACTORIES` lists each kind's factory.

Adding a sink kind is one new module holding a factory ``(SinkSettings, SinkContext) ->
Sink``, one :class:`SinkKind` line in :data:`SINK_KINDS` below and one line in
``SINK_FACTORIES`` (docs/architecture.md, "Adding a sink"): typed lists of imported
objects, as gpud's ``components/all/all.go``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# How a kind finds its receiver:
#   none: nothing to read (the log sink writes a file or stdout);
#   secret: one URL from url_env or url_file, never inline (it carries the token);
#   secret-or-urls: inline base ``urls`` (addresses, not credentials) or one secret URL.
Receiver = Literal["none", "secret", "secret-or-urls"]


@dataclass(frozen=True)
class SinkKind:
    """One sink kind.

    Attributes:
        name: The ``type:`` written in the configuration (and the default sink name).
        receiver: How the sink finds its receiver (see :data:`Receiver`).
        own_keys: Keys of :class:`~watchdog.config.alerts.SinkSettings` that only this
            kind (or the other kinds naming them too) takes, e.g. ``urls``.
        min_interval_s: Default least seconds between two messages (a rate limit the
            receiver imposes); 0 means none.
    """

    name: str
    receiver: Receiver = "secret"
    own_keys: tuple[str, ...] = ()
    min_interval_s: float = 0.0


#: Every sink kind, once, in the order messages list them. Slack allows about one message
#: per second per incoming webhook, Discord about 30 per minute per channel: their
#: default rate limits.
SINK_KINDS: tuple[SinkKind, ...] = (
    SinkKind("log", receiver="none"),
    SinkKind("slack", min_interval_s=1.0),
    SinkKind("discord", min_interval_s=2.0),
    SinkKind("webhook"),
    SinkKind("alertmanager", receiver="secret-or-urls", own_keys=("urls", "resend_s")),
)


def sink_kinds() -> tuple[SinkKind, ...]:
    """The kinds in force: :data:`SINK_KINDS` (a test adds a throwaway kind by handing in
    a longer tuple in its place)."""
    return SINK_KINDS


def sink_kind(name: str) -> SinkKind | None:
    """The kind called ``name``, or None."""
    return next((k for k in sink_kinds() if k.name == name), None)


def sink_names() -> tuple[str, ...]:
    """Every kind's name, in order."""
    return tuple(k.name for k in sink_kinds())


def sink_key_owners(key: str) -> tuple[str, ...]:
    """Names of the kinds that take the kind-specific ``key``."""
    return tuple(k.name for k in sink_kinds() if key in k.own_keys)


def sink_own_keys() -> frozenset[str]:
    """Every key some kind claims as its own."""
    return frozenset(key for k in sink_kinds() for key in k.own_keys)

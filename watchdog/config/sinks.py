"""The sink kinds: every ``alerts.sinks[].type`` rogue-watchdog knows, each named once.

A :class:`SinkKind` says what the configuration needs to know of a kind (how it finds
its receiver, which kind-specific keys it takes, its default rate limit) and where its
implementation lives, as ``"module:attribute"``. The configuration never imports the
implementation (it sits in the daemon layer, above this one): the delivery worker does,
when it first needs a sink of that kind (:func:`watchdog.daemon.alerts.delivery.make_sink`).

Adding a sink kind is one new module holding a factory ``(SinkSettings, SinkContext) ->
Sink`` and one :meth:`SinkRegistry.register` line below (docs/architecture.md, "Adding a
sink"). Model: prometheus client_python's ``CollectorRegistry``, which refuses a name
registered twice.
"""

from __future__ import annotations

from collections.abc import Iterator
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
        implementation: ``"module:attribute"`` of the factory the daemon calls with
            ``(SinkSettings, SinkContext)`` to get the sink object.
        receiver: How the sink finds its receiver (see :data:`Receiver`).
        own_keys: Keys of :class:`~watchdog.config.alerts.SinkSettings` that only this
            kind (or the other kinds naming them too) takes, e.g. ``urls``.
        min_interval_s: Default least seconds between two messages (a rate limit the
            receiver imposes); 0 means none.
    """

    name: str
    implementation: str
    receiver: Receiver = "secret"
    own_keys: tuple[str, ...] = ()
    min_interval_s: float = 0.0


class SinkRegistry:
    """The sink kinds by name, in registration order; a name registers once."""

    def __init__(self) -> None:
        self._kinds: dict[str, SinkKind] = {}

    def register(self, kind: SinkKind) -> SinkKind:
        """Add ``kind``.

        Returns:
            ``kind``, so a module can keep it: ``TEAMS = SINK_KINDS.register(...)``.

        Raises:
            ValueError: A kind of that name is registered already, or the implementation
                is not written ``module:attribute``.
        """
        if kind.name in self._kinds:
            raise ValueError(f"sink kind {kind.name!r} is registered twice")
        module, _, attr = kind.implementation.partition(":")
        if not module or not attr:
            raise ValueError(
                f"sink kind {kind.name!r}: implementation {kind.implementation!r} "
                "is not module:attribute"
            )
        self._kinds[kind.name] = kind
        return kind

    def unregister(self, name: str) -> None:
        """Remove the kind called ``name`` (a test's throwaway kind); absent is fine."""
        self._kinds.pop(name, None)

    def get(self, name: str) -> SinkKind | None:
        """The kind called ``name``, or None."""
        return self._kinds.get(name)

    def names(self) -> tuple[str, ...]:
        """Every kind's name, in registration order."""
        return tuple(self._kinds)

    def owners(self, key: str) -> tuple[str, ...]:
        """Names of the kinds that take the kind-specific ``key``."""
        return tuple(k.name for k in self._kinds.values() if key in k.own_keys)

    def own_keys(self) -> frozenset[str]:
        """Every key some kind claims as its own."""
        return frozenset(key for k in self._kinds.values() for key in k.own_keys)

    def __iter__(self) -> Iterator[SinkKind]:
        return iter(list(self._kinds.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._kinds


SINK_KINDS = SinkRegistry()
# Every sink kind, once. Slack allows about one message per second per incoming webhook,
# Discord about 30 per minute per channel: their default rate limits.
SINK_KINDS.register(SinkKind("log", ".daemon.alerts.sinks:LogSink", receiver="none"))
SINK_KINDS.register(SinkKind("slack", ".daemon.alerts.sinks:slack", min_interval_s=1.0))
SINK_KINDS.register(SinkKind("discord", ".daemon.alerts.sinks:discord", min_interval_s=2.0))
SINK_KINDS.register(SinkKind("webhook", ".daemon.alerts.sinks:webhook"))
SINK_KINDS.register(
    SinkKind(
        "alertmanager",
        ".daemon.alerts.alertmanager:AlertmanagerSink",
        receiver="secret-or-urls",
        own_keys=("urls", "resend_s"),
    )
)

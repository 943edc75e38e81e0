"""What every sink is: the :class:`Sink` Protocol, what a sink is built with, how it fails.

A sink kind is listed once in :data:`watchdog.config.sinks.SINK_KINDS` (what the
configuration reads) and once in :data:`watchdog.daemon.alerts.delivery.SINK_FACTORIES`:
its factory ``(SinkSettings, SinkContext) -> Sink`` (a class or a function), which
:func:`watchdog.daemon.alerts.delivery.make_sink` calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ...config.alerts import SinkSettings
from .alert import Outgoing

if TYPE_CHECKING:
    import httpx


class SendError(Exception):
    """A delivery attempt failed.

    Args:
        reason: Why, already free of secrets (stored as ``last_error``, logged, shown
            in ``status``).
        sink_down: True when the whole sink is unusable for now (connection refused,
            timeout, 5xx, 429, a wrong URL, missing secret): its other deliveries wait
            too. False when only this message failed.
        retry_after_s: How long the receiver asked to wait, in seconds (``Retry-After``
            header, or Discord's ``retry_after`` in a 429 body), when it said.
        permanent: This message can never be sent as it is (it cannot be encoded, or the
            receiver refused it with a 4xx that is not about the URL or rate): the worker
            sets it aside (dead letter) instead of retrying it.
    """

    def __init__(
        self,
        reason: str,
        *,
        sink_down: bool = True,
        retry_after_s: float | None = None,
        permanent: bool = False,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.sink_down = sink_down
        self.retry_after_s = retry_after_s
        self.permanent = permanent


@dataclass(frozen=True)
class SinkContext:
    """What the delivery worker lends a sink it builds.

    Attributes:
        client: The sink's own httpx client (one thread uses it;
            :func:`watchdog.daemon.alerts.http.new_client`).
        environ: Environment to read ``url_env`` from; None means ``os.environ``.
        clock: POSIX time source (Alertmanager's ``endsAt``).
    """

    client: httpx.Client
    environ: Mapping[str, str] | None = None
    clock: Callable[[], float] = field(default=time.time)


@runtime_checkable
class Sink(Protocol):
    """One configured alert destination."""

    settings: SinkSettings

    def send(self, out: Outgoing) -> None:
        """Deliver ``out`` once.

        Raises:
            SendError: The attempt failed; the reason carries no secret.
        """
        ...


@runtime_checkable
class BatchSink(Sink, Protocol):
    """A sink that can also send several alerts as one message, which the worker uses to
    coalesce a storm (``coalesce``)."""

    def send_batch(self, batch: Sequence[Outgoing]) -> None:
        """Deliver ``batch`` (oldest first) as one message, once.

        Raises:
            SendError: As :meth:`Sink.send`.
        """
        ...


SinkFactory = Callable[[SinkSettings, SinkContext], Sink]

"""The ``rogue-watchdog`` structlog logger, imported when the first event is logged.

Importing structlog costs about 0.1 s on a small VM (it imports asyncio, and rich when
installed), a sixth of a one-shot ``scan`` that logs nothing. Modules take
:func:`get_logger` at import time instead of ``structlog.get_logger``; structlog is
imported, and a configuration deferred with :func:`defer_configure` applied, on the first
attribute looked up on such a logger (``log.info``...). Until then nothing is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_pending: Callable[[], None] | None = None


def defer_configure(configure: Callable[[], None] | None) -> None:
    """Run ``configure`` (a structlog configuration) before the first event is logged.

    Args:
        configure: The configuration to apply; None drops one still pending (a command
            that logged nothing has finished, or structlog was configured directly).
    """
    global _pending
    _pending = configure


def configure_pending() -> None:
    """Apply the deferred configuration now, if one is pending (once)."""
    global _pending
    configure, _pending = _pending, None
    if configure is not None:
        configure()


class LazyLogger:
    """Stands for ``structlog.get_logger(name)`` until an attribute is first looked up.

    Args:
        name: The logger name structlog is given.
    """

    __slots__ = ("_name", "_proxy")

    def __init__(self, name: str) -> None:
        self._name = name
        self._proxy: Any = None

    def __getattr__(self, attr: str) -> Any:
        proxy = self._proxy
        if proxy is None:
            configure_pending()
            import structlog

            proxy = self._proxy = structlog.get_logger(self._name)
        return getattr(proxy, attr)


def get_logger(name: str = "rogue-watchdog") -> Any:
    """A :class:`LazyLogger` for ``name`` (typed Any: it answers structlog's methods)."""
    return LazyLogger(name)

"""What every table of the state store shares: the connection its methods run on, and
how column values are written (:func:`clean`) and read back (:func:`_loads`).

Each table is a mixin class whose methods use ``self.conn`` and ``self.transaction()``;
:class:`Table` types them, and :class:`watchdog.state.StateDB` composes the mixins
with the one owner of the connection (:class:`~watchdog.state.store.Store`), so every
table shares its connection, its transactions and its recovery.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..hosttext import safe_text


class Table(Protocol):
    """What a table mixin needs from the store it is composed with."""

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection (see :attr:`watchdog.state.store.Store.conn`)."""
        ...

    @property
    def session(self) -> str:
        """This handle's random id (see :attr:`watchdog.state.store.Store.session`)."""
        ...

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (see :meth:`watchdog.state.store.Store.transaction`)."""
        ...

    def spooled(self) -> None:
        """An alert was spooled (see :meth:`watchdog.state.store.Store.spooled`)."""
        ...


def clean(text: str | None) -> str | None:
    """Text for the state store's text columns: :func:`watchdog.hosttext.safe_text`
    (non-UTF-8 bytes as ``\\xNN``, control characters escaped, newlines as ``⏎``)."""
    return None if text is None else safe_text(text)


def _loads(text: str | None, kind: type | tuple[type, ...], unreadable: Any) -> Any:
    """A JSON column read back: its value when it parses to ``kind``, else ``unreadable``
    (a damaged or hand-edited database must not crash a listing or hide its other rows).

    ``unreadable`` may be a callable taking the reason, e.g.
    :class:`watchdog.model.UnreadableRecord`.
    """
    try:
        value = json.loads(text) if text is not None else None
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting too deep
        reason = str(exc) or type(exc).__name__
    else:
        if isinstance(value, kind):
            return value
        kinds = kind if isinstance(kind, tuple) else (kind,)
        reason = f"not a JSON {' or '.join(k.__name__ for k in kinds)}"
    return unreadable(reason) if callable(unreadable) else unreadable


def _details(text: str | None) -> dict[str, Any]:
    value: dict[str, Any] = _loads(text, dict, lambda reason: {"unreadable": reason})
    return value


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, int) else None

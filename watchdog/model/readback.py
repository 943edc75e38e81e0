"""Reading a recorded origin back from its JSON: typed, never trusted."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from .origin import Origin, UnreadableOrigin, UnreadableRecord
from .origins import origin_kind


def origin_from_json(doc: object, kinds: Sequence[type[Origin]] | None = None) -> Origin:
    """The origin a scan JSON ``origin`` object describes (state DB rows, IPC).

    The inverse of :meth:`Origin.to_json`: unknown keys are ignored, missing ones take the
    record's defaults, lists become tuples; an unknown ``kind`` gives the base
    (``unknown``) origin. A ``systemd`` object is a user unit
    (:attr:`SystemdOrigin.user_unit`) when it says so (``user_unit`` true or a unit
    name) or carries the ``user``/``uid`` keys :meth:`Origin.to_json` writes for one.

    A recorded origin is read back, not trusted: one that is not an object, or has a
    field of the wrong type (a list for ``unit``, a number for ``script``), gives the
    ``unknown`` origin with evidence saying so, which names nothing to act on.

    Args:
        doc: The decoded ``origin`` object.
        kinds: The kinds it may be (default :func:`origin_kinds`).
    """
    if isinstance(doc, UnreadableRecord):
        return UnreadableOrigin(evidence=(f"the recorded origin is unreadable: {doc.reason}",))
    if not isinstance(doc, Mapping):
        return UnreadableOrigin(
            evidence=(f"the recorded origin is not an object ({_json_type(doc)})",)
        )
    cls = origin_kind(str(doc.get("kind")), kinds) or Origin
    hints = _field_types(cls)
    kw: dict[str, Any] = {}
    for key, value in doc.items():
        if key not in hints or key in cls.READ_BACK_KEYS:
            continue
        if (
            isinstance(value, str)
            and value.isascii()
            and value.isdigit()
            and len(value) <= 18  # an id, not a number int() refuses to build
            and _fits(0, hints[key])
            and not _fits(value, hints[key])
        ):
            value = int(value)  # an id written as a JSON string ("4242")
        if not _fits(value, hints[key]):
            return UnreadableOrigin(
                evidence=(
                    f"the recorded {cls.kind} origin is unreadable: {key} is {_json_type(value)}",
                )
            )
        kw[key] = tuple(value) if isinstance(value, list) else value
    cls._read_back(doc, kw)
    return cls(**kw)


def _json_type(value: object) -> str:
    """How a JSON value is named in a message: ``a list``, ``a number``, ``null``..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list | tuple) else "an object"


def _field_types(cls: type[Origin]) -> dict[str, object]:
    """Field name → declared type of an origin record (``str | None``, ``tuple[str, ...]``)."""
    known = _FIELD_TYPES.get(cls)
    if known is None:
        hints = typing.get_type_hints(cls)
        known = _FIELD_TYPES[cls] = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    return known


# Filled on first use: get_type_hints evaluates every annotation, once per class is enough.
_FIELD_TYPES: dict[type[Origin], dict[str, object]] = {}


def _fits(value: object, hint: object) -> bool:
    """True when a JSON value can be the field of declared type ``hint`` (the types origin
    records use: str, int, bool, their ``| None``, and ``tuple[X, ...]``)."""
    if hint is Any:
        return True
    if isinstance(hint, types.UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        return isinstance(value, list | tuple) and all(_fits(v, item) for v in value)
    return False

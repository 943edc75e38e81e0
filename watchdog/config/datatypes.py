"""Converters: one per kind of configuration value, each written once.

A converter reads one YAML value node: ``convert(reader, node, dotted_key) -> value``
(:data:`~watchdog.config.base.Converter`), and raises
:class:`~watchdog.config.base.ConfigError` naming file, line and key. Sections declare
their fields with these (:func:`~watchdog.config.base.setting`), as supervisor's
``options.py`` declares its options with ``datatypes.py``.

Some checks keep a section-specific wording (``must not be negative`` where another
section says ``must be 0 or more``): messages are part of what users and their scripts
see, so the converters take the wording as an argument rather than change it.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Callable
from typing import TypeVar

import yaml

from .base import (
    MAX_DURATION_S,
    Converter,
    NodeReader,
    Regex,
    RegexError,
    glob_problem,
)

T = TypeVar("T")
L = TypeVar("L", bound=str)

# -- scalars -----------------------------------------------------------------------------


def text(r: NodeReader, node: yaml.Node, key: str) -> str:
    """A non-empty string without NUL or lone surrogates."""
    return r.string(node, key)


def boolean(r: NodeReader, node: yaml.Node, key: str) -> bool:
    """``true`` or ``false`` (YAML 1.1: ``yes``/``no`` too)."""
    return r.boolean(node, key)


def integer(
    minimum: int, maximum: int | None = None, *, too_high: str = "must be at most {maximum}"
) -> Converter[int]:
    """An integer in ``[minimum, maximum]``.

    Args:
        minimum: Smallest allowed (below: ``must be at least MIN, got V``).
        maximum: Largest allowed, or None for no bound.
        too_high: Message above ``maximum``; ``{maximum}`` and ``{value}`` are filled in.
    """

    def convert(r: NodeReader, node: yaml.Node, key: str) -> int:
        value = r.integer(node, key, minimum)
        if maximum is not None and value > maximum:
            raise r.err(node, key, too_high.format(maximum=maximum, value=value))
        return value

    return convert


def _seconds(
    low_ok: Callable[[float], bool], maximum: float, too_low: str, too_high: str
) -> Converter[float]:
    def convert(r: NodeReader, node: yaml.Node, key: str) -> float:
        value = r.number(node, key)
        for ok, message in ((low_ok(value), too_low), (value <= maximum, too_high)):
            if not ok:
                raise r.err(
                    node, key, message.format(value=value, text=node.value, maximum=maximum)
                )
        return value

    return convert


# Messages take {value} (the number read), {text} (as written) and {maximum}.
_TOO_HIGH_S = "must be at most {maximum:g} s, got {text}"


def positive_s(
    maximum: float = MAX_DURATION_S,
    *,
    too_low: str = "must be greater than 0, got {value}",
    too_high: str = _TOO_HIGH_S,
) -> Converter[float]:
    """A duration in seconds, greater than 0 and at most ``maximum``.

    Every number is also finite and at most 10 years
    (:meth:`~watchdog.config.base.NodeReader.number`).
    """
    return _seconds(lambda v: v > 0, maximum, too_low, too_high)


def non_negative_s(
    maximum: float = MAX_DURATION_S,
    *,
    too_low: str = "must be 0 or more, got {value}",
    too_high: str = _TOO_HIGH_S,
) -> Converter[float]:
    """A duration in seconds, 0 or more and at most ``maximum``."""
    return _seconds(lambda v: v >= 0, maximum, too_low, too_high)


def at_least_s(minimum: float, convert: Converter[float]) -> Converter[float]:
    """``convert``, then refuse a value below ``minimum`` seconds."""

    def checked(r: NodeReader, node: yaml.Node, key: str) -> float:
        value = convert(r, node, key)
        if value < minimum:
            raise r.err(node, key, f"must be at least {minimum} s, got {value}")
        return value

    return checked


_YAML_BOOL = "tag:yaml.org,2002:bool"


def choice(values: tuple[L, ...], message: str) -> Converter[L]:
    """One of ``values`` (a string); ``message`` refuses anything else, with ``{text}``
    (what was written) filled in, or, when it has no ``{text``, followed by ``, got
    'WHAT'`` (``repr``: what was written is echoed quoted, its control characters
    escaped), so a typo is seen in the error.

    YAML 1.1 (PyYAML) reads an unquoted ``off``, ``on``, ``yes``, ``no``, ``true`` or
    ``false`` as a boolean, yet ``events: off`` means the word. Such a boolean is read by
    what was written (``Off`` counts as ``off``), and where that word is not one of
    ``values``, a false one stands for ``off`` and a true one for ``on`` when the choice
    has them: ``events: false`` means off too. Any other boolean is refused with
    ``message``.
    """

    if "{text" not in message:
        message = message.replace("{", "{{").replace("}", "}}") + ", got {text!r}"

    def convert(r: NodeReader, node: yaml.Node, key: str) -> L:
        if isinstance(node, yaml.ScalarNode) and node.tag == _YAML_BOOL:
            written = str(node.value)
            meant = r.boolean(node, key)
            for value in values:
                if written.lower() == value:
                    return value
            for value in values:
                if value == ("on" if meant else "off"):
                    return value
            raise r.err(node, key, message.format(text=written))
        got = r.string(node, key)
        for value in values:
            if got == value:
                return value
        raise r.err(node, key, message.format(text=got))

    return convert


# -- patterns and names ------------------------------------------------------------------


def regex(r: NodeReader, node: yaml.Node, key: str) -> Regex:
    """A regular expression compiled by RE2 (:class:`~watchdog.config.base.Regex`).

    Raises:
        ConfigError: Not a string, or RE2 cannot compile it (the message says whether it
            is invalid or merely needs backtracking).
    """
    pattern = r.string(node, key)
    try:
        return Regex(pattern)
    except RegexError as exc:
        raise r.err(node, key, str(exc)) from None


def glob(r: NodeReader, node: yaml.Node, key: str) -> str:
    """An fnmatch glob whose brackets are well formed
    (:func:`~watchdog.config.base.glob_problem`)."""
    pattern = r.string(node, key)
    problem = glob_problem(pattern)
    if problem is not None:
        raise r.err(node, key, f"bad glob {pattern!r}: {problem}")
    return pattern


def user(r: NodeReader, node: yaml.Node, key: str) -> str:
    """A user name; one this host's passwd database does not know is a warning (the
    rule cannot match until it exists), as is a uid that has a name (jobs carry the
    name, so the number would never match)."""
    name = r.string(node, key)
    if name.isdigit():
        try:
            known = pwd.getpwuid(int(name)).pw_name
        except (KeyError, OverflowError):
            return name
        r.warn(
            node, key, f"uid {name} is user {known!r} here and jobs carry the name: "
            f"write {known!r}, or the rule never matches"
        )  # fmt: skip
        return name
    try:
        pwd.getpwnam(name)
    except KeyError:
        r.warn(
            node, key, f"user {name!r} is not on this host yet (passwd): this entry "
            "matches no job until that user exists"
        )  # fmt: skip
    return name


# -- paths and secrets -------------------------------------------------------------------


def absolute_path(r: NodeReader, node: yaml.Node, key: str) -> str:
    """An absolute path, as written."""
    path = r.string(node, key)
    if not os.path.isabs(path):
        raise r.err(node, key, f"must be an absolute path, got {path!r}")
    return path


def normalized_path(r: NodeReader, node: yaml.Node, key: str) -> str:
    """An absolute path, normalized (``/d/../e/`` is ``/e``) so paths compare equal."""
    return os.path.normpath(absolute_path(r, node, key))


def secret_file(r: NodeReader, node: yaml.Node, key: str) -> str:
    """The absolute path of a file holding a secret (a webhook URL); noted as a file the
    daemon trusts. The value is never echoed: a URL given here by mistake is a secret."""
    path = r.string(node, key)
    if "://" in path or not os.path.isabs(path):
        raise r.err(
            node,
            key,
            "must be the absolute path of a file holding the URL, not the URL "
            "(value not shown: it may be a secret)",
        )
    r.refer(node, key, "file", path)
    return path


# -- lists -------------------------------------------------------------------------------


def tuple_of(convert: Converter[T]) -> Converter[tuple[T, ...]]:
    """A list (``null`` is empty) whose items ``convert`` reads as ``key[i]``; the first
    failing item fails the list."""

    def convert_all(r: NodeReader, node: yaml.Node, key: str) -> tuple[T, ...]:
        return tuple(
            convert(r, item, f"{key}[{i}]") for i, item in enumerate(r.sequence(node, key))
        )

    return convert_all


def each_of(convert: Converter[T]) -> Converter[tuple[T, ...]]:
    """Like :func:`tuple_of`, but in collect mode a failing item is recorded and left
    out, and the others are still checked (:meth:`NodeReader.each`)."""

    def convert_all(r: NodeReader, node: yaml.Node, key: str) -> tuple[T, ...]:
        return tuple(r.each(node, key, lambda item, sub: convert(r, item, sub)))

    return convert_all


texts = tuple_of(text)
globs = tuple_of(glob)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def secret_env(r: NodeReader, node: yaml.Node, key: str) -> str:
    """The name of an environment variable holding a secret (a webhook URL); noted as a
    variable the daemon trusts. The value is never echoed: it may be the secret itself."""
    name = r.string(node, key)
    if not _ENV_NAME.fullmatch(name):
        raise r.err(
            node,
            key,
            "must be the NAME of an environment variable ([A-Za-z_][A-Za-z0-9_]*) "
            "holding the URL, not the URL (value not shown: it may be a secret)",
        )
    r.refer(node, key, "env", name)
    return name

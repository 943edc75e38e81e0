"""Shared plumbing for configuration sections: the error type and a YAML node reader.

Every section parser (core, daemon, alerts, enforcement, queue, ship gates) reads YAML
nodes through :class:`NodeReader`, so each error names the file, the line and the key
path the same way. Configured regular expressions are compiled by RE2 (:class:`Regex`):
they run against command lines any user controls, so they must run in linear time.
"""

from __future__ import annotations

import pwd
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal, TypeVar

import re2  # type: ignore[import-untyped]  # google-re2, no stubs
import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """The configuration is invalid.

    Attributes:
        path: File the error is in.
        line: 1-based line, or None when the error is about the whole file.
        key: Dotted key path such as ``sanctioned[0].origin.systemd_unit``.
        message: The message without the location.
        warnings: Set by ``parse_config`` on the error it raises: the warnings it found.
        refs: Likewise, the files, programs and variables the parsed part names (so
            ``check-config`` still checks the sinks when another key is wrong).
    """

    def __init__(self, path: str, line: int | None, key: str, message: str) -> None:
        self.path = path
        self.line = line
        self.key = key
        self.message = message
        # What parse_config saw besides the errors, so check-config can go on from there.
        self.warnings: tuple[ConfigError, ...] = ()
        self.refs: tuple[ConfigRef, ...] = ()
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {key}: {message}" if key else f"{where}: {message}")


class ConfigErrors(ConfigError):
    """Several configuration errors, found in one pass.

    ``path``, ``line``, ``key`` and ``message`` are those of the first error (by line);
    ``str()`` lists every error, one per line.

    Attributes:
        errors: Every error, sorted by line.
    """

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        unique = list({str(e): e for e in errors}.values())
        self.errors = sorted(unique, key=lambda e: e.line or 0)
        first = self.errors[0]
        super().__init__(first.path, first.line, first.key, first.message)
        self.args = ("\n".join(str(e) for e in self.errors),)

    def __str__(self) -> str:
        return str(self.args[0])


def raise_all(errors: Sequence[ConfigError]) -> None:
    """Raise the one error, or :class:`ConfigErrors` for several; nothing when empty."""
    if len({str(e) for e in errors}) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(errors)


def errors_of(exc: ConfigError) -> list[ConfigError]:
    """The individual errors in ``exc`` (one for a plain :class:`ConfigError`)."""
    return list(exc.errors) if isinstance(exc, ConfigErrors) else [exc]


@dataclass(frozen=True)
class ConfigRef:
    """Something outside the file that the configuration makes the daemon trust.

    Attributes:
        kind: ``file`` (read: a secret, a library), ``program`` (executed) or ``env``
            (an environment variable holding a secret).
        value: The path, or the variable's name.
        line: Line of the key in the configuration file.
        key: Dotted key path, e.g. ``alerts.sinks[0].url_file``.
    """

    kind: Literal["file", "program", "env"]
    value: str
    line: int | None
    key: str


class RegexError(ValueError):
    """A pattern RE2 cannot compile; the message says why."""


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # RE2 would print every refused pattern on stderr
# Host text keeps undecodable bytes as lone surrogates (surrogateescape); RE2 takes UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")


class Regex:
    """A configured regular expression, compiled and run by RE2.

    RE2 matches in time linear in the text, whatever the pattern (``(a+)+$`` included),
    so a command line crafted by any user cannot stall a scan. It refuses what needs
    backtracking: backreferences, lookahead and lookbehind, atomic groups, possessive
    quantifiers (RE2 syntax: https://github.com/google/re2/wiki/Syntax). ``\\d``, ``\\w``,
    ``\\s`` and ``\\b`` are ASCII-only there.

    Args:
        pattern: The pattern text.

    Raises:
        RegexError: RE2 cannot compile it.
    """

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str) -> None:
        try:
            self._compiled = re2.compile(pattern, _RE2_OPTIONS)
        except re2.error as exc:
            raise RegexError(_re2_refusal(pattern, exc)) from None
        # RE2 reads a few things Python's re refuses as literals (``a{99999999999}``):
        # a pattern must be valid in both, so it means what its author expects.
        try:
            re.compile(pattern)
        except (re.error, OverflowError, RecursionError, ValueError) as exc:
            raise RegexError(f"invalid regular expression: {exc}") from None
        self.pattern = pattern

    def search(self, text: str) -> object | None:
        """The first match anywhere in ``text`` (like :meth:`re.Pattern.search`), or None.

        A lone surrogate (an undecodable byte of host text) is searched as U+FFFD.
        """
        try:
            return self._compiled.search(text)  # type: ignore[no-any-return]
        except UnicodeEncodeError:
            return self._compiled.search(_SURROGATE.sub("\ufffd", text))  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Regex) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(("Regex", self.pattern))

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r})"


def _re2_refusal(pattern: str, exc: Exception) -> str:
    raw = exc.args[0] if exc.args else exc
    why = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    try:
        re.compile(pattern)
    except Exception:  # invalid in any dialect (re.error, RecursionError, OverflowError)
        return f"invalid regular expression: {why}"
    return (
        f"RE2 cannot express it ({why}): configured patterns run in linear time against "
        "command lines any user controls, so backreferences, lookaround, atomic groups and "
        "possessive quantifiers are refused"
    )


def glob_problem(pattern: str) -> str | None:
    """Why an fnmatch glob does not mean what it seems to, or None.

    fnmatch(3)-style brackets as Python's :mod:`fnmatch` reads them: a ``[`` without a
    closing ``]`` silently matches a literal ``[``, and a range whose start sorts after
    its end (``[z-a]``) matches nothing.
    """
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c != "[":
            continue
        j = i
        if j < n and pattern[j] == "!":
            j += 1
        if j < n and pattern[j] == "]":
            j += 1
        while j < n and pattern[j] != "]":
            j += 1
        if j >= n:
            return (
                f"unclosed '[' at offset {i - 1}: fnmatch would match a literal '[' "
                "there; write '[[]' for a literal '['"
            )
        body = pattern[i:j]
        chars = body[1:] if body.startswith("!") else body
        k = 0
        while k < len(chars):
            if k + 2 < len(chars) and chars[k + 1] == "-":
                if chars[k] > chars[k + 2]:
                    return f"range '{chars[k]}-{chars[k + 2]}' in '[{body}]' is empty"
                k += 3
            else:
                k += 1
        i = j + 1
    return None


# Every number in the configuration is a duration in seconds. Past this, the daemon's
# clocks overflow (datetime, time_t, threading timeouts) or it stops doing its work.
MAX_DURATION_S = 10 * 365 * 86400.0
# Texts a pattern that matches "everything" matches: command lines, executables, names
# of every shape (a pattern matching all of these matches any text a host can show).
_ANY_TEXT = ("a", "Z9", "0 -", "/q/x y -z", "\u2603", "CRON -f", "-")
_ANY_PATH = ("/a", "/Z9/b c", "/\u2603", "/usr/sbin/cron", "/x.-_/0")


def regex_matches_everything(regex: Regex) -> bool:
    """True when ``regex`` is found in any text at all (``|x``, ``(?i)``, ``.``, ``.*``).

    Such a pattern decides nothing: sanctioning, ignoring or launching "whatever the
    command line" must be said by not giving a pattern, never by one that matches all.
    """
    return all(regex.search(text) is not None for text in _ANY_TEXT)


def glob_matches_everything(glob: str, *, paths: bool = False) -> bool:
    """True when the fnmatch ``glob`` matches any text (``*``, ``?*``), or any absolute
    path when ``paths`` is set (``/*``)."""
    return all(fnmatchcase(text, glob) for text in (_ANY_PATH if paths else _ANY_TEXT))


_CONSTRUCTOR = yaml.SafeLoader("")  # its construct_object turns a checked scalar into a value


class NodeReader:
    """Typed access to YAML nodes; every failure is a :class:`ConfigError`.

    Args:
        path: File name used in messages.
        collect: Record errors and go on where a parser can (an unknown or duplicate
            key is skipped, a failing list item or section left out) so one pass finds
            them all; the caller raises :class:`ConfigErrors` from :attr:`errors` at the
            end. False raises the first error.

    Attributes:
        errors: Errors recorded in collect mode.
        warnings: Doubts that do not make the file invalid (a user with no passwd entry).
        refs: Files, programs and environment variables the configuration names.
    """

    def __init__(self, path: str, *, collect: bool = False) -> None:
        self.path = path
        self.collect = collect
        self.errors: list[ConfigError] = []
        self.warnings: list[ConfigError] = []
        self.refs: list[ConfigRef] = []

    def err(self, node: yaml.Node | None, key: str, msg: str) -> ConfigError:
        line = node.start_mark.line + 1 if node is not None else None
        return ConfigError(self.path, line, key, msg)

    def record(self, error: ConfigError) -> None:
        """Record ``error`` in collect mode; raise it otherwise."""
        if not self.collect:
            raise error
        self.errors.append(error)

    def attempt(self, fn: Callable[[], T]) -> T | None:
        """``fn()``, or None after recording its :class:`ConfigError` (collect mode)."""
        try:
            return fn()
        except ConfigError as exc:
            self.record(exc)
            return None

    def each(self, node: yaml.Node, key: str, fn: Callable[[yaml.Node, str], T]) -> list[T]:
        """``fn(item, "key[i]")`` for every item of a list; in collect mode a failing item
        is recorded and left out, and the others are still checked."""
        out: list[T] = []
        for i, item in enumerate(self.sequence(node, key)):
            try:
                out.append(fn(item, f"{key}[{i}]"))
            except ConfigError as exc:
                self.record(exc)
        return out

    def warn(self, node: yaml.Node | None, key: str, msg: str) -> None:
        """Note a doubt that does not make the file invalid."""
        self.warnings.append(self.err(node, key, msg))

    def refer(
        self, node: yaml.Node, key: str, kind: Literal["file", "program", "env"], value: str
    ) -> None:
        """Note a file, program or variable the configuration makes the daemon trust."""
        self.refs.append(ConfigRef(kind, value, node.start_mark.line + 1, key))

    def mapping(
        self, node: yaml.Node, key: str, allowed: tuple[str, ...], *, keep_going: bool = False
    ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """The keys of a mapping node → (key node, value node).

        Args:
            node: The node.
            key: Its dotted key path, for messages.
            allowed: Known keys.
            keep_going: In collect mode, record unknown and duplicate keys and return the
                others (top level: sections stand alone). Otherwise every bad key is
                recorded and the mapping fails, since the errors that follow from a
                misspelt key ("required key missing") would only be noise.

        Raises:
            ConfigError: Not a mapping; unknown or duplicate keys (see ``keep_going``).
        """
        if not isinstance(node, yaml.MappingNode):
            raise self.err(node, key, f"expected a mapping, got {_kind(node)}")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        problems: list[ConfigError] = []
        for knode, vnode in node.value:
            name = knode.value if isinstance(knode, yaml.ScalarNode) else None
            sub = f"{key}.{name}" if key else str(name)
            if name not in allowed:
                hint = f"; allowed: {', '.join(allowed)}"
                problems.append(self.err(knode, sub, f"unknown key {name!r}{hint}"))
            elif name in out:
                problems.append(self.err(knode, sub, "duplicate key"))
            else:
                out[name] = (knode, vnode)
        if problems and self.collect and keep_going:
            self.errors.extend(problems)
        elif problems:
            # Every bad key of this mapping is reported; the mapping itself then fails
            # (going on without those keys would only add errors that follow from them).
            if self.collect:
                self.errors.extend(problems[:-1])
            raise problems[-1] if self.collect else problems[0]
        return out

    def sequence(self, node: yaml.Node, key: str) -> list[yaml.Node]:
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
            return []
        if not isinstance(node, yaml.SequenceNode):
            raise self.err(node, key, f"expected a list, got {_kind(node)}")
        return list(node.value)

    def string(self, node: yaml.Node, key: str) -> str:
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:str":
            raise self.err(node, key, f"expected a string, got {_kind(node)}")
        if not node.value:
            raise self.err(node, key, "must not be empty")
        text = str(node.value)
        if "\0" in text:
            raise self.err(node, key, "must not contain a NUL character")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise self.err(node, key, "must not contain lone surrogate escapes") from None
        return text

    def _construct(self, node: yaml.Node, key: str, what: str) -> object:
        # YAML 1.1 as PyYAML reads it: 0o17, 0x1F, 1_000, sexagesimal 1:30, yes/no...
        try:
            return _CONSTRUCTOR.construct_object(node, deep=True)
        except (ValueError, KeyError, OverflowError, yaml.YAMLError):
            raise self.err(node, key, f"expected {what}, got {node.value!r}") from None

    def integer(self, node: yaml.Node, key: str, minimum: int) -> int:
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:int":
            raise self.err(node, key, f"expected an integer, got {_kind(node)}")
        if len(node.value) > 30:
            raise self.err(node, key, "integer too large")
        value = self._construct(node, key, "an integer")
        assert isinstance(value, int)
        if value < minimum:
            raise self.err(node, key, f"must be at least {minimum}, got {value}")
        return value

    def number(self, node: yaml.Node, key: str) -> float:
        if not isinstance(node, yaml.ScalarNode) or node.tag not in (
            "tag:yaml.org,2002:int",
            "tag:yaml.org,2002:float",
        ):
            raise self.err(node, key, f"expected a number, got {_kind(node)}")
        if len(node.value) > 30:
            raise self.err(node, key, "number too large")
        raw = self._construct(node, key, "a number")
        assert isinstance(raw, int | float)
        value = float(raw)
        if value != value or value in (float("inf"), float("-inf")):
            raise self.err(node, key, f"must be a finite number, got {node.value}")
        if abs(value) > MAX_DURATION_S:
            raise self.err(
                node,
                key,
                f"must be at most {MAX_DURATION_S:.0f} s (10 years), got {node.value}",
            )
        return value

    def boolean(self, node: yaml.Node, key: str) -> bool:
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:bool":
            raise self.err(node, key, f"expected true or false, got {_kind(node)}")
        value = self._construct(node, key, "true or false")
        assert isinstance(value, bool)
        return value

    def regex(self, node: yaml.Node, key: str) -> Regex:
        """A regular expression compiled by RE2 (:class:`Regex`).

        Raises:
            ConfigError: Not a string, or RE2 cannot compile it (the message says whether
                it is invalid or merely needs backtracking).
        """
        text = self.string(node, key)
        try:
            return Regex(text)
        except RegexError as exc:
            raise self.err(node, key, str(exc)) from None

    def glob(self, node: yaml.Node, key: str) -> str:
        """An fnmatch glob whose brackets are well formed (:func:`glob_problem`)."""
        text = self.string(node, key)
        problem = glob_problem(text)
        if problem is not None:
            raise self.err(node, key, f"bad glob {text!r}: {problem}")
        return text

    def globs(self, node: yaml.Node, key: str) -> tuple[str, ...]:
        return tuple(
            self.glob(item, f"{key}[{i}]") for i, item in enumerate(self.sequence(node, key))
        )

    def user(self, node: yaml.Node, key: str) -> str:
        """A user name; one this host's passwd database does not know is a warning (the
        rule cannot match until it exists), as is a uid that has a name (jobs carry the
        name, so the number would never match)."""
        text = self.string(node, key)
        if text.isdigit():
            try:
                name = pwd.getpwuid(int(text)).pw_name
            except (KeyError, OverflowError):
                return text
            self.warn(
                node, key, f"uid {text} is user {name!r} here and jobs carry the name: "
                f"write {name!r}, or the rule never matches"
            )  # fmt: skip
            return text
        try:
            pwd.getpwnam(text)
        except KeyError:
            self.warn(
                node, key, f"no user {text!r} on this host (passwd): nothing matches it "
                "until the user exists"
            )  # fmt: skip
        return text

    def strings(self, node: yaml.Node, key: str) -> tuple[str, ...]:
        return tuple(
            self.string(item, f"{key}[{i}]") for i, item in enumerate(self.sequence(node, key))
        )


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    tag = node.tag.rsplit(":", 1)[-1]
    return {"str": "a string", "int": "an integer", "bool": "a boolean", "null": "nothing"}.get(
        tag, tag
    ) + (f" ({node.value!r})" if tag != "null" else "")

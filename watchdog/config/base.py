"""Shared plumbing for configuration sections: the error type, a YAML node reader and
the declaration of a section's keys.

Every section parser (core, daemon, alerts, enforcement, queue, ship gates) reads YAML
nodes through :class:`NodeReader`, so each error names the file, the line and the key
path the same way. A section is a frozen dataclass whose fields declare their key, their
converter (:mod:`watchdog.config.datatypes`) and their default once (:func:`setting`,
:func:`required`); :func:`build` walks the mapping and calls the dataclass, the way
supervisor's ``options.py`` reads its sections through ``datatypes.py``. Configured
regular expressions are compiled by RE2 (:class:`Regex`): they run against command lines
any user controls, so they must run in linear time.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import partial
from typing import TYPE_CHECKING, Literal, TypeVar

import re2  # type: ignore[import-untyped]  # google-re2, no stubs
import yaml

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
S = TypeVar("S", bound="DataclassInstance")


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
        # Mapping key path -> (the known key an unknown one looks like, its error): a
        # check that such a key is absent says nothing the unknown key's error did not.
        self._misspelt: dict[str, list[tuple[str | None, ConfigError]]] = {}

    def err(self, node: yaml.Node | None, key: str, msg: str) -> ConfigError:
        line = node.start_mark.line + 1 if node is not None else None
        return ConfigError(self.path, line, key, msg)

    def record(self, error: ConfigError) -> None:
        """Record ``error`` in collect mode; raise it otherwise."""
        if not self.collect:
            raise error
        # An error raised again to abandon a mapping (:meth:`misspelt`) is listed once.
        if not any(e is error for e in self.errors):
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
        self, node: yaml.Node, key: str, allowed: tuple[str, ...]
    ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """The keys of a mapping node → (key node, value node).

        In collect mode an unknown or duplicate key is recorded and left out, and the
        other keys are returned, so their values are still checked in the same run. An
        unknown key that looks like a known one says so (``did you mean 'user'?``), and
        a later check that the known key is absent defers to it (:meth:`misspelt`).

        Args:
            node: The node.
            key: Its dotted key path, for messages.
            allowed: Known keys.

        Raises:
            ConfigError: Not a mapping; outside collect mode, the first unknown or
                duplicate key.
        """
        if not isinstance(node, yaml.MappingNode):
            raise self.err(node, key, f"expected a mapping, got {_kind(node)}")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for knode, vnode in node.value:
            name = knode.value if isinstance(knode, yaml.ScalarNode) else None
            sub = f"{key}.{name}" if key else str(name)
            if name not in allowed:
                like = _looks_like(name, allowed)
                guess = f" (did you mean {like!r}?)" if like is not None else ""
                hint = f"; allowed: {', '.join(allowed)}"
                error = self.err(knode, sub, f"unknown key {name!r}{guess}{hint}")
                self.record(error)
                self._misspelt.setdefault(key, []).append((like, error))
            elif name in out:
                self.record(self.err(knode, sub, "duplicate key"))
            else:
                out[name] = (knode, vnode)
        return out

    def misspelt(self, key: str, *names: str) -> ConfigError | None:
        """The recorded error of an unknown key of mapping ``key`` that looks like one
        of ``names`` (no names: any unknown key of it), or None.

        A check that a key is absent (``required key missing``, ``needs X beside it``)
        raises this instead of its own error when there is one: the key is most likely
        there, misspelt, and one error says so. Raising it again abandons the mapping
        without listing it twice (:meth:`record`).
        """
        found = self._misspelt.get(key, ())
        return next((e for like, e in found if like in names or not names), None)

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


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    tag = node.tag.rsplit(":", 1)[-1]
    return {"str": "a string", "int": "an integer", "bool": "a boolean", "null": "nothing"}.get(
        tag, tag
    ) + (f" ({node.value!r})" if tag != "null" else "")


def _looks_like(name: object, allowed: Sequence[str]) -> str | None:
    """The allowed key ``name`` is most likely a misspelling of (difflib's ratio at
    least 0.7, or a case-only difference), or None."""
    if not isinstance(name, str):
        return None
    folded = {a.lower(): a for a in allowed}
    if name.lower() in folded:
        return folded[name.lower()]
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.7)
    return close[0] if close else None


# -- declared sections -----------------------------------------------------------------

#: Reads one value node: ``convert(reader, node, dotted_key)``; raises :class:`ConfigError`.
Converter = Callable[[NodeReader, yaml.Node, str], T]
# Field metadata key of the converter; the YAML key is the field's name.
_CONVERT = f"{__name__}:convert"  # a dataclass metadata key of our own


def setting(default: T, convert: Converter[T]) -> T:
    """Declare a dataclass field read from the YAML key of its name.

    mypy checks that ``default`` and what ``convert`` returns fit the field's type.

    Args:
        default: The value when the key is absent (immutable: the dataclasses are frozen).
        convert: Reads and checks the value node.
    """
    out: T = dataclasses.field(default=default, metadata={_CONVERT: convert})
    return out


def setting_factory(factory: Callable[[], T], convert: Converter[T]) -> T:
    """Like :func:`setting`, for a default built per instance by ``factory``."""
    out: T = dataclasses.field(default_factory=factory, metadata={_CONVERT: convert})
    return out


def required(convert: Converter[T]) -> T:
    """Declare a field without a default: :func:`build` refuses a mapping without it."""
    out: T = dataclasses.field(metadata={_CONVERT: convert})
    return out


def _declared(cls: type[DataclassInstance]) -> dict[str, dataclasses.Field[object]]:
    """YAML key → declared field, in declaration order (fields without a converter, such
    as a rule's ``line``, are filled by the parser, never read from the file)."""
    return {f.name: f for f in dataclasses.fields(cls) if _CONVERT in f.metadata}


def keys(cls: type[DataclassInstance]) -> tuple[str, ...]:
    """The YAML keys ``cls`` declares, in declaration order (the ``allowed:`` hint)."""
    return tuple(_declared(cls))


def read(
    cls: type[DataclassInstance],
    r: NodeReader,
    m: Mapping[str, tuple[yaml.Node, yaml.Node]],
    key: str,
    *,
    order: Sequence[str] | None = None,
    keep_going: bool = False,
) -> dict[str, object]:
    """Convert every key present in ``m`` (from :meth:`NodeReader.mapping`).

    Args:
        cls: The section dataclass declaring the keys.
        r: The reader (for errors, warnings and references).
        m: The section's keys → (key node, value node).
        key: The section's dotted key path; a value's path is ``key.name``.
        order: The YAML keys in the order they are checked (which error comes first,
            which references are noted before it); None checks them in file order.
        keep_going: Record a failing value and go on (collect mode), leaving it out;
            otherwise the first failure is raised.

    Returns:
        Field name → converted value, for the keys present.

    Raises:
        ConfigError: A value its converter refuses (unless ``keep_going``).
    """
    declared = _declared(cls)
    out: dict[str, object] = {}
    for name in m if order is None else [n for n in order if n in m]:
        convert, vnode = declared[name].metadata[_CONVERT], m[name][1]
        sub = f"{key}.{name}" if key else name
        if keep_going:
            value = r.attempt(partial(convert, r, vnode, sub))
            if value is not None:
                out[name] = value
        else:
            out[name] = convert(r, vnode, sub)
    return out


def construct(cls: type[S], values: Mapping[str, object]) -> S:
    """``cls(**values)``: the values come from the converters mypy checked against the
    fields (:func:`setting`), so this one call needs no per-field check."""
    return cls(**values)


def build(
    cls: type[S], r: NodeReader, node: yaml.Node, key: str, *, order: Sequence[str] | None = None
) -> S:
    """Read a section mapping into ``cls``: unknown and duplicate keys refused, each
    :func:`required` key present, each value converted, defaults for the rest.

    Args:
        cls: The section dataclass.
        r: The reader.
        node: The section's mapping node.
        key: The section's dotted key path.
        order: As for :func:`read`; None checks the keys in file order.

    Raises:
        ConfigError: Not a mapping, an unknown or duplicate key, ``KEY.NAME: required
            key missing``, or a value its converter refuses (the first, in ``order``;
            in collect mode each is recorded instead).
    """
    m = r.mapping(node, key, keys(cls))
    needed = [n for n, f in _declared(cls).items() if _is_required(f)]
    # Collect mode (check-config): every missing key and bad value of the section is
    # recorded, and the section is built from the good ones and the defaults, so later
    # sections are still checked; the file is refused at the end all the same.
    before = len(r.errors)
    for name in needed:
        if name not in m:
            r.record(r.misspelt(key, name) or r.err(node, _sub(key, name), "required key missing"))
    values = read(cls, r, m, key, order=order, keep_going=r.collect)
    failed = [n for n in needed if n not in values]
    if failed:
        # No section to build. An error already recorded is raised (the caller records
        # it, once: NodeReader.record): the first about the first failed key.
        prefix = _sub(key, failed[0])
        mine = r.errors[before:]
        error = next((e for e in mine if e.key.startswith(prefix)), None)
        raise error or r.misspelt(key, failed[0]) or mine[0]
    return construct(cls, values)


def parser(
    cls: type[S], key: str, *, order: Sequence[str] | None = None
) -> Callable[[NodeReader, yaml.Node], S]:
    """A section parser ``parse(reader, node)`` that :func:`build` s ``cls`` at ``key``."""
    return lambda r, node: build(cls, r, node, key, order=order)


def _is_required(f: dataclasses.Field[object]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def require(
    r: NodeReader,
    node: yaml.Node,
    key: str,
    m: Mapping[str, tuple[yaml.Node, yaml.Node]],
    *names: str,
) -> None:
    """Refuse a mapping without one of ``names``: ``KEY.NAME: required key missing``, or
    the error of an unknown key that looks like it (:meth:`NodeReader.misspelt`)."""
    for name in names:
        if name not in m:
            raise r.misspelt(key, name) or r.err(node, _sub(key, name), "required key missing")


def _sub(key: str, name: str) -> str:
    """The dotted path of ``name`` in the mapping at ``key`` (``""``: the top level)."""
    return f"{key}.{name}" if key else name

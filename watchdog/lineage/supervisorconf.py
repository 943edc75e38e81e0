"""What supervisord's configuration says about one program: ``autostart``,
``autorestart``, ``startretries``, ``exitcodes`` (issue 31, case 6), each with the file
and line that set it.

Read the way supervisord 4 reads it (``supervisor/options.py``, ``ServerOptions``):

* the file named by ``-c``/``--configuration`` (relative to supervisord's working
  directory), else the first that exists of ``HERE/etc/supervisord.conf``,
  ``HERE/supervisord.conf``, ``supervisord.conf``, ``etc/supervisord.conf``,
  ``/etc/supervisord.conf``, ``/etc/supervisor/supervisord.conf`` (``HERE``: two levels
  above supervisord's ``argv[0]``);
* one :class:`configparser.RawConfigParser` with ``inline_comment_prefixes=(';', '#')``
  and ``strict=False`` (supervisor's ``UnhosedConfigParser``): a later value of an
  option, in the same file or an included one, wins;
* the main file's ``[include] files=``: space-separated globs relative to that file's
  directory (``%(here)s`` expanded), each glob's matches read in sorted order; included
  files include nothing further.

Plain :mod:`configparser` rather than the ``supervisor`` package: the daemon runs on
hosts without it, and supervisor's parser is that class with two keyword arguments.
Values that use other ``%(...)s`` expansions (``%(ENV_X)s``) are reported as unread, not
guessed. A file over 1 MiB, a FIFO, or an unparsable file is unread, and said so.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import safeio
from ..hosttext import clip, code_span, plain_or_code
from ..model import FALSY as FALSY
from ..model import TRUTHY as TRUTHY

if TYPE_CHECKING:
    # Imported where a supervisord program is read: ~1.2 ms of every one-shot scan's
    # start-up otherwise, on hosts without supervisord too (issue 34, item 2).
    import configparser

_MAX_BYTES = 1 << 20
_SECTION = re.compile(r"\[(?P<header>.+)\]")
#: The options read, with supervisord's defaults (supervisor/options.py).
DEFAULTS = {"autostart": "true", "autorestart": "unexpected", "startretries": "3", "exitcodes": "0"}


@dataclass(frozen=True)
class ProgramSettings:
    """What supervisord's configuration says about one program.

    Attributes:
        section: The section, e.g. ``program:train``; None when it was not found.
        file: The file holding the section header (the first one that named it).
        values: Option → (value as written, ``FILE:LINE`` that set it, or ``default``).
        unread: Why the settings could not be read; None when they were.
        files: Every file read, in order.
    """

    section: str | None
    file: str | None = None
    values: dict[str, tuple[str, str]] = field(default_factory=dict)
    unread: str | None = None
    files: tuple[str, ...] = ()

    def value(self, option: str) -> str:
        """The option's value (lower case), supervisord's default when unset."""
        return self.values.get(option, (DEFAULTS[option], "default"))[0].strip().lower()

    def where(self, option: str) -> str:
        """``FILE:LINE`` that set the option, or ``default``."""
        return self.values.get(option, ("", "default"))[1]


def config_file(argv: list[str], cwd: str | None) -> str | None:
    """The configuration file a supervisord with this command line reads.

    Args:
        argv: supervisord's command line (``python supervisord -c F`` too).
        cwd: Its working directory (``/proc/PID/cwd``), for relative paths.

    Returns:
        An absolute path, or None when none of the default places has a file.
    """
    named: str | None = None
    for i, arg in enumerate(argv):
        if arg in ("-c", "--configuration") and i + 1 < len(argv):
            named = argv[i + 1]
        elif arg.startswith("--configuration="):
            named = arg.split("=", 1)[1]
        elif arg.startswith("-c") and len(arg) > 2 and not arg.startswith("--"):
            named = arg[2:]
    base = cwd or "/"
    if named is not None:
        return os.path.normpath(os.path.join(base, named))
    script = next((a for a in argv if a.rsplit("/", 1)[-1].startswith("supervisord")), argv[0])
    here = os.path.dirname(os.path.dirname(os.path.join(base, script)))
    for path in (
        os.path.join(here, "etc", "supervisord.conf"),
        os.path.join(here, "supervisord.conf"),
        os.path.join(base, "supervisord.conf"),
        os.path.join(base, "etc/supervisord.conf"),
        "/etc/supervisord.conf",
        "/etc/supervisor/supervisord.conf",
    ):
        if os.path.exists(path):
            return os.path.normpath(path)
    return None


def _parser() -> configparser.RawConfigParser:
    import configparser

    return configparser.RawConfigParser(inline_comment_prefixes=(";", "#"), strict=False)


def _read(path: str) -> str:
    return safeio.read_regular(path, _MAX_BYTES).decode("utf-8", "surrogateescape")


def _lines(text: str, path: str, section: str, out: dict[str, tuple[str, str]]) -> None:
    """Record ``FILE:LINE`` of each read option set in ``section`` of this file (the
    last setting wins, as in the parser)."""
    current = None
    opt = re.compile(r"(?P<name>[^=:\s][^=:]*?)\s*[=:]\s*(?P<value>.*)$")
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith(("#", ";")):
            continue
        if raw[0].isspace() and current is not None:
            continue  # a continuation line
        head = _SECTION.match(raw.strip())
        if head is not None:
            current = head.group("header")
            continue
        m = opt.match(raw)
        if current == section and m is not None:
            name = m.group("name").strip().lower()
            if name in DEFAULTS:
                value = re.split(r"\s[;#]", " " + m.group("value"), maxsplit=1)[0].strip()
                out[name] = (value, f"{path}:{number}")


def _section_for(parser: configparser.RawConfigParser, group: str, process: str) -> str | None:
    """The section of supervisord's group ``group`` running process ``process``."""
    for kind in ("program", "fcgi-program", "eventlistener"):
        if parser.has_section(f"{kind}:{group}"):
            return f"{kind}:{group}"
    if parser.has_section(f"group:{group}") and parser.has_option(f"group:{group}", "programs"):
        names = [p.strip() for p in parser.get(f"group:{group}", "programs").split(",")]
        for name in names:
            if (name == process or process.startswith(name)) and parser.has_section(
                f"program:{name}"
            ):
                return f"program:{name}"
    if parser.has_section(f"program:{process}"):
        return f"program:{process}"
    return None


def read_program(config: str | None, group: str | None, process: str) -> ProgramSettings:
    """The settings of the program supervisord runs as ``group:process``.

    Args:
        config: The main configuration file (:func:`config_file`); None when unknown.
        group: ``SUPERVISOR_GROUP_NAME`` (the program's name unless a ``[group:x]``
            section groups it); None to use ``process``.
        process: ``SUPERVISOR_PROCESS_NAME``.

    Returns:
        The program's settings, or why they could not be read (``unread``); never raises.
    """
    if config is None:
        return ProgramSettings(None, unread="no supervisord configuration file was found")
    import configparser

    parser = _parser()
    files: list[str] = []
    texts: dict[str, str] = {}
    first_file: dict[str, str] = {}
    reading = config

    def take(path: str) -> None:
        # One file into the parser, as supervisord reads them: a section belongs to the
        # first file that has it.
        nonlocal reading
        reading = path
        texts[path] = _read(path)
        parser.read_string(texts[path], source=path)
        files.append(path)
        for section in parser.sections():
            first_file.setdefault(section, path)

    try:
        take(config)
        includes: list[str] = []
        if parser.has_section("include") and parser.has_option("include", "files"):
            here = os.path.dirname(os.path.abspath(config))
            for pattern in parser.get("include", "files").replace("%(here)s", here).split():
                includes.extend(sorted(glob.glob(os.path.join(here, pattern))))
        for path in includes:
            take(path)
    except (OSError, ValueError, configparser.Error) as exc:
        if isinstance(exc, OSError | ValueError):
            reason = safeio.unread_reason(exc)
        else:  # the parser's message quotes the file's lines: host text
            reason = code_span(clip(" ".join(str(exc).split()), 200))
        return ProgramSettings(
            None,
            unread=f"{plain_or_code(reading)} could not be read: {reason}",
            files=tuple(files),
        )
    found = _section_for(parser, group or process, process)
    if found is None:
        return ProgramSettings(
            None,
            unread=f"no [program:{plain_or_code(group or process)}] section in "
            f"{', '.join(plain_or_code(f) for f in files)}",
            files=tuple(files),
        )
    values: dict[str, tuple[str, str]] = {}
    for path in files:
        _lines(texts[path], path, found, values)
    for name in DEFAULTS:
        if parser.has_option(found, name):
            value = parser.get(found, name)
            where = values.get(name, ("", "?"))[1]
            values[name] = (value, where)
    return ProgramSettings(found, first_file.get(found), values, None, tuple(files))

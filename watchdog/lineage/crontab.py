"""Crontab parsing and schedule evaluation, as Debian's Vixie cron 3.0 reads the files.

Pure functions over text: no process inspection here (see :mod:`watchdog.lineage.cron`).
Behaviour follows crontab(5) and cron(8) of Debian's ``cron`` 3.0pl1 and its sources
(``entry.c``, ``env.c``, ``do_command.c``, ``crontab.c``):

* A line whose first non-blank character is ``#`` is a comment; blank lines are skipped.
* ``NAME = value`` lines set the environment for the entries below them; blanks around
  ``=`` are optional and a value in matching single or double quotes loses the quotes.
* An entry is five time fields (or one ``@alias``), then the user name in the system
  crontab format (``/etc/crontab``, ``/etc/cron.d/*``), then the command: the rest of the
  line, trailing blanks included.
* At run time an unescaped ``%`` ends the command and the rest becomes stdin (further
  ``%`` turn into newlines); ``\\%`` is a literal ``%`` (``do_command.c``).
* Day of week 0 and 7 are Sunday; when day of month and day of week are both restricted
  (neither starts with ``*``) a day matching either runs the job (crontab(5) "Note").
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

# Vixie cron's special strings (entry.c) and the five-field schedules they stand for.
ALIASES: dict[str, str | None] = {
    "@reboot": None,
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

REBOOT_NEXT_RUN = "when cron starts"

# cron(8), DEBIAN SPECIFIC: /etc/cron.d file names must match run-parts(8)'s default
# naming rule, so no dots (which skips *.dpkg-old, *.bak...) and no ~ backups.
_CRON_D_NAME = re.compile(r"[A-Za-z0-9_-]+")
# env.c: NAME (optionally quoted), optional blanks, '=', value.
_ENV_LINE = re.compile(r"""^\s*("[^"]*"|'[^']*'|[^\s=]+)\s*=\s*(.*?)\s*$""")
# Characters Vixie cron accepts in a time field: numbers, 3-letter names, * , - /
_FIELD_CHARS = re.compile(r"[0-9A-Za-z*,/-]+")
_NAME_TOKEN = re.compile(r"[A-Za-z]+")
_MONTH_NAMES = frozenset(
    ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
)
_DAY_NAMES = frozenset(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])
# crontab(1) writes this many comment lines on top of every installed user crontab and
# `crontab -l` hides up to that many leading comment lines (crontab.c, NHEADER_LINES).
NHEADER_LINES = 3


@dataclass(frozen=True)
class CronEntry:
    """One job line of a crontab.

    Attributes:
        file: Path of the crontab the line is in.
        line: 1-based line number in that file.
        raw: The line as written, without its newline.
        schedule: The schedule as written: five fields joined by one space, or an
            ``@alias`` such as ``@weekly``.
        expression: Five-field expression the schedule stands for; None for ``@reboot``.
        user: The user the job runs as (the user field, or the crontab's owner).
        command: The command text as written (before ``%`` processing).
        env: Environment lines in effect at this line (``MAILTO``, ``SHELL``,
            ``PATH``, ``CRON_TZ``...), in file order.
    """

    file: str
    line: int
    raw: str
    schedule: str
    expression: str | None
    user: str
    command: str
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def run_command(self) -> str:
        """The command cron hands to ``$SHELL -c`` (after ``%`` processing)."""
        return split_percent(self.command)[0]

    @property
    def stdin(self) -> str | None:
        """Text cron feeds to the job's stdin, or None when there is no unescaped ``%``."""
        return split_percent(self.command)[1]

    @property
    def is_reboot(self) -> bool:
        """True for ``@reboot`` entries (run once when cron starts)."""
        return self.expression is None


@dataclass(frozen=True)
class Crontab:
    """A parsed crontab file.

    Attributes:
        path: The file's path.
        system: True for the system format (user field present).
        owner: Owner of a user crontab (the spool file name); None for system files.
        entries: Job lines in file order.
        warnings: One message per skipped malformed line (``path:line: reason``).
        header_lines: Leading comment lines ``crontab -l`` hides (0..3), so that line
            ``N`` of the file is line ``N - header_lines`` of ``crontab -l``.
    """

    path: str
    system: bool
    owner: str | None
    entries: tuple[CronEntry, ...]
    warnings: tuple[str, ...] = ()
    header_lines: int = 0


def cron_d_name_ok(name: str) -> bool:
    """Whether Debian cron reads a file of this name in ``/etc/cron.d``.

    Source: cron(8) "DEBIAN SPECIFIC": names must consist solely of letters, digits,
    underscores and hyphens (run-parts(8) naming), so ``foo.dpkg-old``, ``foo.bak``,
    ``foo~`` and ``.placeholder`` are ignored.
    """
    return bool(_CRON_D_NAME.fullmatch(name))


def split_percent(command: str) -> tuple[str, str | None]:
    """Apply cron's ``%`` rule to an entry's command text.

    Args:
        command: The command part of an entry, as written.

    Returns:
        ``(command run by the shell, stdin text or None)``. The first unescaped ``%``
        ends the command; in the stdin text each further unescaped ``%`` is a newline.
        ``\\%`` is a literal ``%`` on both sides; other backslashes are kept. Source:
        ``do_command.c`` of Vixie cron 3.0 and crontab(5).
    """
    out: list[str] = []
    escaped = False
    for i, ch in enumerate(command):
        if escaped:
            if ch != "%":
                out.append("\\")
            out.append(ch)
            escaped = False
            continue
        if ch == "\\":
            escaped = True
            continue
        if ch == "%":
            return "".join(out), _stdin_text(command[i + 1 :])
        out.append(ch)
    if escaped:
        out.append("\\")
    return "".join(out), None


def _stdin_text(rest: str) -> str:
    out: list[str] = []
    escaped = False
    for ch in rest:
        if escaped:
            if ch != "%":
                out.append("\\")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        else:
            out.append("\n" if ch == "%" else ch)
    if escaped:
        out.append("\\")
    return "".join(out)


def parse_env_line(line: str) -> tuple[str, str] | None:
    """Parse ``NAME=value`` / ``NAME = "value"``, or return None when it is not one.

    Source: ``env.c`` (load_env) of Vixie cron 3.0 and crontab(5): blanks around ``=`` are
    optional; a value wrapped in matching quotes loses them.
    """
    m = _ENV_LINE.match(line)
    if m is None:
        return None
    name, value = m.group(1), m.group(2)
    if len(name) >= 2 and name[0] == name[-1] and name[0] in "'\"":
        name = name[1:-1]
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return name, value


def check_fields(fields: list[str]) -> str | None:
    """Validate five time fields the way Vixie cron would.

    Args:
        fields: minute, hour, day of month, month, day of week.

    Returns:
        None when valid, else a short reason. Extensions that Vixie cron rejects
        (``L``, ``W``, ``#``, ``?``, seconds) are rejected here even though cronsim
        knows them; names are three-letter month/day names only.
    """
    for pos, text in enumerate(fields):
        if not _FIELD_CHARS.fullmatch(text):
            return f"bad character in field {pos + 1} {text!r}"
        for name in _NAME_TOKEN.findall(text):
            allowed = _MONTH_NAMES if pos == 3 else _DAY_NAMES if pos == 4 else frozenset()
            if name.upper() not in allowed:
                return f"bad name {name!r} in field {pos + 1}"
    try:
        CronSim(" ".join(fields), datetime(2000, 1, 1))
    except (CronSimError, ValueError, IndexError) as exc:
        return f"bad schedule {' '.join(fields)!r}: {exc}"
    return None


def parse_crontab(text: str, path: str, *, system: bool, owner: str | None = None) -> Crontab:
    """Parse crontab text.

    Args:
        text: Whole file content.
        path: Path to record in entries and warnings.
        system: True for the system format (``/etc/crontab``, ``/etc/cron.d/*``) whose
            entries carry a user field; False for user crontabs.
        owner: The user a user crontab belongs to (its spool file name).

    Returns:
        The parsed file. Malformed lines never raise: each is skipped with a warning.
    """
    entries: list[CronEntry] = []
    warnings: list[str] = []
    env: dict[str, str] = {}
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for lineno, raw in enumerate(lines, start=1):
        raw = raw.removesuffix("\r")
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        # Like cron's load_database: a line that parses as NAME=value is one.
        pair = parse_env_line(raw)
        if pair is not None:
            env[pair[0]] = pair[1]
            continue
        if stripped[0] not in "@*" and not stripped[0].isdigit():
            warnings.append(f"{path}:{lineno}: neither an entry nor NAME=value: {raw!r}")
            continue
        entry_or_reason = _parse_entry(raw, path, lineno, system, owner, env)
        if isinstance(entry_or_reason, str):
            warnings.append(f"{path}:{lineno}: {entry_or_reason}: {raw!r}")
        else:
            entries.append(entry_or_reason)
    header = 0
    for raw in lines[:NHEADER_LINES]:
        if not raw.startswith("#"):
            break
        header += 1
    return Crontab(path, system, owner, tuple(entries), tuple(warnings), header)


def _parse_entry(
    raw: str,
    path: str,
    lineno: int,
    system: bool,
    owner: str | None,
    env: dict[str, str],
) -> CronEntry | str:
    body = raw.lstrip()
    want_user = 1 if system else 0
    if body.startswith("@"):
        parts = body.split(None, 1 + want_user)
        alias = parts[0]
        if alias not in ALIASES:
            return f"unknown special string {alias}"
        schedule, expression = alias, ALIASES[alias]
        rest = parts[1:]
    else:
        parts = body.split(None, 5 + want_user)
        if len(parts) < 5:
            return "fewer than five time fields"
        reason = check_fields(parts[:5])
        if reason is not None:
            return reason
        schedule = expression = " ".join(parts[:5])
        rest = parts[5:]
    if len(rest) < 1 + want_user:
        return "no user field and command" if system else "no command"
    user = rest[0] if system else (owner or "")
    command = rest[-1]
    return CronEntry(path, lineno, raw, schedule, expression, user, command, dict(env))


def parse_anacrontab(text: str, path: str) -> Crontab:
    """Parse an anacrontab(5) file: ``period delay job-identifier command`` lines.

    Args:
        text: Whole file content.
        path: Path to record.

    Returns:
        A system-format :class:`Crontab` whose entries run as root; ``schedule`` is
        ``"every N days, delay M min (anacron JOB)"`` (or the ``@monthly``-style period)
        and ``expression`` is None: anacron runs by elapsed days, not a clock schedule.
    """
    entries: list[CronEntry] = []
    warnings: list[str] = []
    env: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        parts = stripped.split(None, 3)
        if len(parts) == 4 and (parts[0].isdigit() or parts[0].startswith("@")):
            period = f"every {parts[0]} days" if parts[0].isdigit() else parts[0]
            schedule = f"{period}, delay {parts[1]} min (anacron {parts[2]})"
            entries.append(
                CronEntry(path, lineno, raw, schedule, None, "root", parts[3], dict(env))
            )
            continue
        pair = parse_env_line(raw)
        if pair is not None:
            env[pair[0]] = pair[1]
        else:
            warnings.append(f"{path}:{lineno}: not an anacron job line: {raw!r}")
    return Crontab(path, True, None, tuple(entries), tuple(warnings))


def local_zone(etc: str = "/etc") -> tzinfo:
    """The host's local time zone as cron sees it (``/etc/localtime``).

    Args:
        etc: Directory holding ``localtime`` and ``timezone``; tests pass fixture roots.

    Returns:
        A ZoneInfo when the zone can be named or read, else UTC.
    """
    link = f"{etc}/localtime"
    try:
        target = os.readlink(link)
    except OSError:
        target = ""
    candidates = []
    if "zoneinfo/" in target:
        candidates.append(target.split("zoneinfo/", 1)[1])
    try:
        with open(f"{etc}/timezone", encoding="utf-8") as fh:
            candidates.append(fh.read().strip())
    except OSError:
        pass
    for key in candidates:
        try:
            return ZoneInfo(key)
        except (ZoneInfoNotFoundError, ValueError):
            continue
    try:
        with open(link, "rb") as fh:
            return ZoneInfo.from_file(fh, key="localtime")
    except (OSError, ValueError):
        return ZoneInfo("UTC")


def next_run(entry: CronEntry, now: datetime, zone: tzinfo) -> str | None:
    """When ``entry`` fires next, as ISO 8601 with offset.

    Args:
        entry: The entry.
        now: Time to count from (timezone-aware).
        zone: Zone the cron daemon keeps time in; ``CRON_TZ`` in the entry's
            environment overrides it (cronie semantics; Debian's cron 3.0pl1 ignores
            ``CRON_TZ``, see docs/origins-cron.md).

    Returns:
        The first fire time strictly after ``now`` (cronsim, which follows Debian cron's
        day-of-month/day-of-week and DST rules), :data:`REBOOT_NEXT_RUN` for
        ``@reboot``, or None when the entry has no clock schedule (anacron) or never fires.
    """
    if entry.schedule == "@reboot":
        return REBOOT_NEXT_RUN
    if entry.expression is None:
        return None
    tz_name = entry.env.get("CRON_TZ")
    if tz_name:
        with contextlib.suppress(ZoneInfoNotFoundError, ValueError):
            zone = ZoneInfo(tz_name)
    start = now.astimezone(zone)
    try:
        return next(CronSim(entry.expression, start)).isoformat()
    except (CronSimError, StopIteration, ValueError):
        return None

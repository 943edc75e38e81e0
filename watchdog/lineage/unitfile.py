"""Read systemd unit and timer files the way systemd does, without systemd.

Syntax follows systemd.syntax(7) and systemd.unit(5): ``[Section]`` headers, ``Key=Value``
lines, ``#``/``;`` comments, a trailing backslash continues a line, drop-ins in
``NAME.d/*.conf`` (and ``TEMPLATE@.TYPE.d/`` for instances) are applied in file-name order
after the main file, and an empty assignment (``ExecStart=``) resets a list setting. The
search follows the unit path order: the first directory that has ``NAME`` wins, an instance
falls back to its template, and a drop-in from an earlier directory masks a same-named one
from a later directory.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import safeio
from ..hosttext import plain_or_code

# Timer settings that schedule a start (systemd.timer(5)); order is display order.
TIMER_KEYS = (
    "OnCalendar",
    "OnActiveSec",
    "OnBootSec",
    "OnStartupSec",
    "OnUnitActiveSec",
    "OnUnitInactiveSec",
)
# Largest unit file or drop-in read. systemd.syntax(7) caps a line, continuations joined,
# at 1 MB (LONG_LINE_MAX in fileio.h); a longer file is no real unit, and reading one
# whole (a symlink to /dev/zero, a huge file in a user's own unit dir) is a denial of
# service on a root scan.
MAX_UNIT_FILE_BYTES = 1 << 20


@dataclass
class UnitFile:
    """A unit's merged settings.

    Attributes:
        name: Unit name as asked for, e.g. ``train@1.service``.
        path: The fragment file read (the template's file for an instance), or None when
            only drop-ins were found.
        dropins: Drop-in files applied, in order.
        sections: ``section -> key -> values`` in file order, after resets.
        skipped: One ``skipped PATH: reason`` note per file on the way that was not read
            (not a regular file, too large, unreadable).
    """

    name: str
    path: str | None
    dropins: list[str] = field(default_factory=list)
    sections: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def values(self, section: str, key: str) -> list[str]:
        """Every value of ``key`` in ``section`` (after resets), in order."""
        return list(self.sections.get(section, {}).get(key, []))

    def get(self, section: str, key: str, default: str | None = None) -> str | None:
        """The last value of ``key`` (systemd's rule for single-valued settings)."""
        vals = self.sections.get(section, {}).get(key)
        return vals[-1] if vals else default

    @property
    def masked(self) -> bool:
        """True when the fragment is a symlink to ``/dev/null`` (``systemctl mask``)."""
        return self.path is not None and os.path.realpath(self.path) == os.devnull

    @property
    def instance(self) -> str | None:
        """The instance string of ``foo@bar.service`` (``bar``), or None."""
        stem = self.name.rsplit(".", 1)[0]
        _, at, inst = stem.partition("@")
        return inst if at and inst else None

    def exec_start(self) -> list[str]:
        """``ExecStart=`` command lines with ``%i``/``%I``/``%n``/``%N`` expanded.

        Only these specifiers are expanded (systemd.unit(5) "Specifiers"); the leading
        special-executable prefixes (``-``, ``@``, ``:``, ``+``, ``!``) are kept as written.
        """
        return [self.expand(v) for v in self.values("Service", "ExecStart")]

    def expand(self, text: str) -> str:
        """Expand ``%i %I %n %N %p %%`` in ``text`` for this unit's name."""
        inst = self.instance or ""
        stem = self.name.rsplit(".", 1)[0]
        table = {"i": inst, "I": inst, "n": self.name, "N": stem, "p": stem.split("@")[0]}
        out: list[str] = []
        i = 0
        while i < len(text):
            c = text[i]
            if c == "%" and i + 1 < len(text):
                nxt = text[i + 1]
                if nxt == "%":
                    out.append("%")
                    i += 2
                    continue
                if nxt in table:
                    out.append(table[nxt])
                    i += 2
                    continue
            out.append(c)
            i += 1
        return "".join(out)

    def restart(self) -> str:
        """``Restart=`` of a service; ``no`` when unset (systemd.service(5) default)."""
        return self.get("Service", "Restart", "no") or "no"

    def timer_schedule(self) -> list[str]:
        """Scheduling settings of a timer as ``Key=Value`` strings, e.g. ``OnCalendar=daily``."""
        timer = self.sections.get("Timer", {})
        return [f"{k}={v}" for k in TIMER_KEYS for v in timer.get(k, [])]

    def timer_unit(self) -> str:
        """Unit a timer starts: ``Unit=``, else the timer's name with ``.service``."""
        unit = self.get("Timer", "Unit")
        if unit:
            return self.expand(unit)
        return self.name.rsplit(".", 1)[0] + ".service"


def parse_into(text: str, sections: dict[str, dict[str, list[str]]]) -> None:
    """Apply one unit file or drop-in's settings to ``sections``.

    Args:
        text: File content.
        sections: Settings so far; updated in place. An empty value clears the key.
    """
    section = ""
    # Continued pieces collected in a list and joined once: repeated string concatenation
    # is quadratic on a long run of backslash-continued lines.
    pending: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if pending:
            # Comment lines inside a continuation are skipped (systemd.syntax(7)).
            if line.startswith(("#", ";")):
                continue
            if line.endswith("\\"):
                pending.append(line[:-1].rstrip())
                continue
            pending.append(line)
            line = " ".join(pending)
            pending = []
        elif not line or line.startswith(("#", ";")):
            continue
        elif line.endswith("\\"):
            pending.append(line[:-1].rstrip())
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            sections.setdefault(section, {})
            continue
        key, sep, value = line.partition("=")
        if not sep or not section:
            continue
        key, value = key.strip(), value.strip()
        bucket = sections.setdefault(section, {})
        if value == "":
            bucket[key] = []
        else:
            bucket.setdefault(key, []).append(value)
    if pending and section:
        key, sep, value = " ".join(pending).partition("=")
        if sep:
            sections.setdefault(section, {}).setdefault(key.strip(), []).append(value.strip())


def read_text_or_reason(
    path: str, max_bytes: int = MAX_UNIT_FILE_BYTES
) -> tuple[str | None, str | None]:
    """A small text file's content, or why it was not read; never raises, never blocks.

    Unlike :func:`watchdog.safeio.read_regular` (bytes, raises), this answers with a
    pair for callers that note unread files and go on: the read itself goes through
    safeio (regular files only, ``O_NONBLOCK``, re-checked after opening, refused
    rather than truncated past ``max_bytes``). A symlink to ``/dev/null`` (a masked
    unit, systemctl(1) ``mask``) reads as empty.

    Args:
        path: File to read.
        max_bytes: Largest size read, in bytes.

    Returns:
        ``(text, None)`` on success (undecodable bytes replaced), ``(None, reason)`` when
        the file was refused or unreadable (:func:`watchdog.safeio.unread_reason`'s
        words), and ``(None, None)`` when it does not exist.
    """
    try:
        if os.path.realpath(path) == os.devnull:
            return "", None
        data = safeio.read_regular(path, max_bytes)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, safeio.unread_reason(exc)
    return data.decode("utf-8", "replace"), None


def _read(path: str, skipped: list[str] | None) -> str | None:
    text, why = read_text_or_reason(path)
    if why is not None and skipped is not None:
        skipped.append(f"skipped {plain_or_code(path)}: {why}")
    return text


def _template_of(name: str) -> str | None:
    stem, dot, suffix = name.rpartition(".")
    prefix, at, inst = stem.partition("@")
    return f"{prefix}@.{suffix}" if at and inst and dot else None


def _usable(path: str, skipped: list[str] | None) -> bool | None:
    """True for a regular file or a mask (symlink to /dev/null), None when absent.

    Anything else (a FIFO, a socket, a device such as /dev/zero) is refused with a note:
    systemd only loads regular files or symlinks to them (unit-file.c), and opening a
    FIFO would block the scan.
    """
    try:
        if os.path.realpath(path) == os.devnull:
            return True
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        if skipped is not None:
            skipped.append(f"skipped {plain_or_code(path)}: {safeio.unread_reason(exc)}")
        return False
    if stat.S_ISDIR(st.st_mode):
        return None
    if not stat.S_ISREG(st.st_mode):
        if skipped is not None:
            skipped.append(f"skipped {plain_or_code(path)}: not a regular file")
        return False
    return True


def find_fragment(
    name: str, unit_dirs: Sequence[str], skipped: list[str] | None = None
) -> str | None:
    """Path of the unit file for ``name`` on the search path, or None.

    An instance ``foo@bar.service`` uses ``foo@bar.service`` if any directory has it,
    else the template ``foo@.service``. A symlink to ``/dev/null`` (a masked unit) counts
    as found; callers see an empty file. Entries that are not regular files are passed
    over (and noted in ``skipped``).
    """
    candidates = [name]
    tmpl = _template_of(name)
    if tmpl:
        candidates.append(tmpl)
    for cand in candidates:
        for d in unit_dirs:
            p = os.path.join(d, cand)
            if _usable(p, skipped):
                return p
    return None


def find_dropins(
    name: str, unit_dirs: Sequence[str], skipped: list[str] | None = None
) -> list[str]:
    """Drop-in ``.conf`` files for ``name``, ordered by file name (systemd.unit(5)).

    Template drop-ins (``foo@.service.d``) apply to instances before the instance's own;
    among same-named files the earliest directory on the path wins. Entries that are not
    regular files are passed over (and noted in ``skipped``).
    """
    dirs = []
    tmpl = _template_of(name)
    if tmpl:
        dirs.append(tmpl + ".d")
    dirs.append(name + ".d")
    chosen: dict[str, str] = {}
    order: list[str] = []
    for sub in dirs:
        for d in unit_dirs:
            base = os.path.join(d, sub)
            try:
                files = sorted(os.listdir(base))
            except OSError:
                continue
            for f in files:
                if f.endswith(".conf") and f not in chosen:
                    p = os.path.join(base, f)
                    if _usable(p, skipped):
                        chosen[f] = p
                        order.append(f)
    return [chosen[f] for f in sorted(order)]


def load_unit(
    name: str, unit_dirs: Sequence[str], skipped: list[str] | None = None
) -> UnitFile | None:
    """Find and merge the unit file and drop-ins of ``name``.

    Args:
        name: Unit name, e.g. ``nightly.service`` or ``train@2.service``.
        unit_dirs: Search path, highest priority first.
        skipped: When given, receives a ``skipped PATH: reason`` note for every file on
            the way that was not read (also kept in :attr:`UnitFile.skipped`).

    Returns:
        The merged unit, or None when neither a fragment nor a drop-in exists.
        Files that are not regular, over :data:`MAX_UNIT_FILE_BYTES` or unreadable are
        skipped, never opened in a way that blocks.
    """
    notes: list[str] = []
    path = find_fragment(name, unit_dirs, notes)
    dropins = find_dropins(name, unit_dirs, notes)
    if path is None and not dropins:
        if skipped is not None:
            skipped.extend(notes)
        return None
    sections: dict[str, dict[str, list[str]]] = {}
    if path is not None:
        parse_into(_read(path, notes) or "", sections)
    for d in dropins:
        parse_into(_read(d, notes) or "", sections)
    if skipped is not None:
        skipped.extend(notes)
    return UnitFile(name=name, path=path, dropins=dropins, sections=sections, skipped=notes)


def find_timers(
    service: str, unit_dirs: Sequence[str], skipped: list[str] | None = None
) -> list[UnitFile]:
    """Timers on the search path whose target is ``service``.

    A timer targets ``Unit=`` when set, otherwise the service with its own name
    (systemd.timer(5)). Instances: ``foo@bar.timer`` (from ``foo@.timer``) is considered
    for ``foo@bar.service``.

    Args:
        service: The service name.
        unit_dirs: Search path, highest priority first.
        skipped: When given, receives a note for every timer file (or drop-in) that was
            not read: such a timer may start ``service`` without this function knowing.

    Returns:
        The matching timers, by name.
    """
    stem = service.rsplit(".", 1)[0]
    names: set[str] = {stem + ".timer"}
    for d in unit_dirs:
        try:
            entries = os.listdir(d)
        except OSError:
            continue
        names.update(e for e in entries if e.endswith(".timer") and not e.endswith("@.timer"))
    out = []
    for n in sorted(names):
        unit = load_unit(n, unit_dirs, skipped)
        if unit is not None and unit.timer_unit() == service:
            out.append(unit)
    return out

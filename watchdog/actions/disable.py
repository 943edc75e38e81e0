"""Disable the source of a rogue job, with a backup and the ops that undo it.

A plan is made first (:func:`plan_disable`): it reads the files and asks ``systemctl``
(read-only), and says in words what it would change and why. ``--dry-run`` prints that;
:meth:`DisablePlan.execute` then performs the change through the :class:`Effects` and
returns the generic undo ops (the ``actions.undo_json`` contract, see undo.py).

Sources:

- **cron, system files** (``/etc/crontab``, ``/etc/cron.d/*``): the file is copied to a
  timestamped backup (owner and mode kept), exactly the matched line is commented out
  with a marker naming rogue-watchdog, the time and the reason, and the file is replaced
  atomically (same owner and mode). The directory's mtime is touched so cron(8) rescans.
  The line must still read as it did at scan time, else nothing is changed.
- **cron, user crontabs** (spool files): the same backup, then the new text goes
  through ``crontab -u USER -`` so cron reloads it (crontab(1) writes its own header, so
  the installed text is the spool file minus its header). Undo restores the spool file
  byte for byte (an atomic rename inside the spool directory, whose new mtime cron
  notices).
- **run-parts chains** (origin field ``script``): the crontab line runs a whole
  directory; the script is renamed with a marker suffix containing a dot, which
  run-parts(8) skips.
- **systemd** (system units): ``is-enabled``/``is-active`` of the timer and the service
  are recorded, then ``disable --now`` the timer and ``stop`` the service (or ``disable
  --now`` the service without a timer), and ``mask`` it when ``Restart=`` would bring it
  back. Undo re-applies the recorded enablement and activity.
- **Docker/Podman containers, supervisord programs, queued at jobs**:
  :mod:`watchdog.actions.sources`.
- **orphan / unknown** (only with ``quarantine_unknown_exe``): the job's script (for an
  interpreter) or executable is renamed with a marker suffix; system directories are
  never touched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from .. import hostpaths, safeio
from ..hosttext import clip, code_span
from ..lineage.base import is_interpreter
from ..lineage.cronfiles import MAX_CRONTAB_BYTES
from ..lineage.crontab import (
    DISABLED_MARK,
    cron_d_name_ok,
    hidden_header_lines,
    installed_header_lines,
)
from ..lineage.unitfile import MAX_UNIT_FILE_BYTES
from ..model import CronOrigin, Origin, SystemdOrigin
from ..safeio import unread_reason
from .effects import Effects

SUFFIX = ".rogue-watchdog-disabled-"
_SYSTEM_DIRS = ("/usr/bin/", "/usr/sbin/", "/bin/", "/sbin/", "/usr/lib/", "/lib/", "/lib64/")
# Where run-parts scripts of the crontab live (Debian's /etc/crontab and anacrontab).
_RUN_PARTS_DIRS = frozenset(
    {"cron.hourly", "cron.daily", "cron.weekly", "cron.monthly", "cron.yearly"}
)


@dataclass
class DisableResult:
    """What :meth:`DisablePlan.execute` did.

    Attributes:
        outcome: ``ok``, ``partial`` (some steps failed; undo still restores what was
            done) or ``failed`` (nothing was changed, or the first change failed).
        done: One line per step taken, with its result.
        undo: Generic undo ops, in the order that restores the previous state.
        error: The first failure, or None.
    """

    outcome: str
    done: list[str] = field(default_factory=list)
    undo: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


class FileCopyJson(TypedDict):
    """The stored form of a :class:`FileCopy` (the keys of a ``restore_file`` op)."""

    path: str
    backup: str
    uid: int
    gid: int
    mode: int
    sha256: str
    mtime_ns: NotRequired[int]


#: The stored form of a :class:`Rename` (``from`` is a keyword, hence this spelling).
RenameJson = TypedDict("RenameJson", {"from": str, "to": str})


class UnitStateJson(TypedDict):
    """The stored form of a :class:`UnitState`."""

    enabled: str
    active: str


class SystemdJson(TypedDict):
    """The restore plan of a :class:`SystemdChange` as recorded before the first change."""

    unit: str
    timer: str | None
    timers: list[str]
    before: dict[str, UnitStateJson]
    move: FileCopyJson | None
    transient: bool


@dataclass(frozen=True)
class FileCopy:
    """A file saved before it is changed, and how to put it back: the ``restore_file``
    undo op (:mod:`watchdog.actions.undo`) and the restore plan recorded before the
    first change hold exactly these keys.

    Attributes:
        path: The file.
        backup: Its copy.
        uid: Owner to restore.
        gid: Group to restore.
        mode: Permission bits to restore.
        sha256: Hex digest of the saved bytes (the backup must still hash to it).
        mtime_ns: Modification time to restore (a unit file moved aside); None keeps
            the new one (cron reloads only a crontab whose mtime changed).
    """

    path: str
    backup: str
    uid: int
    gid: int
    mode: int
    sha256: str
    mtime_ns: int | None = None

    def to_json(self) -> FileCopyJson:
        """The stored form (``mtime_ns`` only when there is one)."""
        out: FileCopyJson = {
            "path": self.path, "backup": self.backup, "uid": self.uid, "gid": self.gid,
            "mode": self.mode, "sha256": self.sha256,
        }  # fmt: skip
        if self.mtime_ns is not None:
            out["mtime_ns"] = self.mtime_ns
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FileCopy:
        """Read a stored copy back.

        Raises:
            KeyError: A key is missing.
            TypeError: ``d`` is not a mapping of those keys.
        """
        return cls(
            d["path"], d["backup"], d["uid"], d["gid"], d["mode"], d["sha256"], d.get("mtime_ns")
        )

    def restore_op(self) -> dict[str, Any]:
        """The ``restore_file`` undo op."""
        return {"op": "restore_file", **self.to_json()}


@dataclass(frozen=True)
class CronEdit:
    """A ``cron-file`` or ``user-crontab`` plan: one crontab line commented out.

    Attributes:
        copy: The crontab's backup and how to restore it.
        line: The line (1-based, as the file numbers it).
        new: The whole new file.
        original_line: The line as it read.
        new_line: The marker line that replaces it.
        user: The spool file's owner (a user crontab, installed through ``crontab -u``).
        install: What goes through ``crontab -u USER -`` (the file without the header
            crontab(1) writes itself).
    """

    copy: FileCopy
    line: int
    new: bytes
    original_line: str
    new_line: str
    user: str | None = None
    install: bytes | None = None


@dataclass(frozen=True)
class Rename:
    """A ``run-parts`` or ``quarantine`` plan: ``from_path`` renamed to ``to_path``."""

    from_path: str
    to_path: str

    def to_json(self) -> RenameJson:
        """The stored form (restore plan and ``rename`` undo op keys)."""
        return {"from": self.from_path, "to": self.to_path}


@dataclass(frozen=True)
class UnitState:
    """``systemctl is-enabled`` and ``is-active`` of a unit before the change."""

    enabled: str
    active: str

    def to_json(self) -> UnitStateJson:
        """The stored form."""
        return {"enabled": self.enabled, "active": self.active}


@dataclass(frozen=True)
class SystemdChange:
    """A ``systemd`` plan: the unit, its timers, their state before, the ``systemctl``
    commands in order and the unit file moved aside for the mask.

    Attributes:
        unit: The service or scope.
        timers: Every timer that can start it (the origin's first).
        before: ``is-enabled``/``is-active`` of each timer and the unit.
        commands: ``systemctl`` argv without the program, in order.
        move: The unit file in the mask directory, moved aside before ``mask``.
        transient: A transient unit (gone once stopped: never started again).
    """

    unit: str
    timers: tuple[str, ...]
    before: dict[str, UnitState]
    commands: tuple[tuple[str, ...], ...] = ()
    move: FileCopy | None = None
    transient: bool = False

    def to_json(self) -> SystemdJson:
        """The restore plan recorded before the first change (the commands left out;
        ``timer`` is the first timer, as plans recorded before ``timers`` had)."""
        return {
            "unit": self.unit,
            "timer": self.timers[0] if self.timers else None,
            "timers": list(self.timers),
            "before": {u: s.to_json() for u, s in self.before.items()},
            "move": self.move.to_json() if self.move is not None else None,
            "transient": self.transient,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SystemdChange:
        """Read a recorded restore plan back (one with only ``timer`` too).

        Raises:
            KeyError: A key undo needs is missing.
            TypeError: A value is not of the recorded shape.
        """
        timers = d.get("timers") or ([d["timer"]] if d.get("timer") else [])
        move = d.get("move")
        return cls(
            unit=d["unit"],
            timers=tuple(timers),
            before={u: UnitState(s["enabled"], s["active"]) for u, s in d["before"].items()},
            move=FileCopy.from_json(move) if move is not None else None,
            transient=bool(d.get("transient")),
        )


#: The kind-specific facts of a plan: typed for the kinds of this module, a mapping for
#: those of :mod:`watchdog.actions.sources`.
PlanData = CronEdit | Rename | SystemdChange | dict[str, Any]


@dataclass
class DisablePlan:
    """What disabling a source would do.

    Attributes:
        kind: ``cron-file``, ``user-crontab``, ``run-parts``, ``systemd``,
            ``quarantine``, ``container``, ``supervisord``, ``at`` (those three:
            :mod:`watchdog.actions.sources`) or ``none``.
        target: What is changed (``FILE:LINE``, a unit, a path).
        steps: What would be changed and why, one line each.
        refused: Why nothing can be done (then ``steps`` is empty).
        data: Kind-specific facts for :meth:`execute` (:data:`PlanData`).
        stops_service: The service a person asked to stop with the source.
        runner: What performs the plan, for a kind planned outside this module
            (:mod:`watchdog.actions.sources` hands its own; this module imports none).
    """

    kind: str
    target: str
    steps: list[str] = field(default_factory=list)
    refused: str | None = None
    data: PlanData = field(default_factory=dict)
    stops_service: str | None = None
    runner: Callable[[DisablePlan, Effects], DisableResult] | None = field(
        default=None, compare=False, repr=False
    )

    def execute(self, effects: Effects) -> DisableResult:
        """Perform the plan. Never raises for an OS or command failure: the result
        says what failed and which steps were done (with their undo ops)."""
        if self.refused is not None:
            return DisableResult("failed", error=self.refused)
        runner = (
            self.runner
            or {
                "cron-file": _exec_cron_file,
                "user-crontab": _exec_user_crontab,
                "run-parts": _exec_rename,
                "quarantine": _exec_rename,
                "systemd": _exec_systemd,
            }[self.kind]
        )
        try:
            return runner(self, effects)
        except OSError as exc:
            return DisableResult("failed", error=f"{type(exc).__name__}: {exc}")


def stamp(now: float) -> str:
    """``20261129T222708Z``: UTC time for file names."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))


def iso(now: float) -> str:
    """ISO 8601 UTC time for markers and messages."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def one_line(text: str, limit: int = 160) -> str:
    """``text`` on one line (control characters become spaces), at most ``limit`` chars."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", text).strip()[:limit]


def tool_said(text: str, limit: int = 160) -> str:
    """What an external tool wrote (its stderr) as a message quotes it: one line, in a
    :func:`~watchdog.hosttext.code_span`.

    An engine's error echoes host text (``docker``: a container's name or command;
    ``systemctl``, ``crontab``: a unit's or user's name), so a backtick or the product's
    own words in it must not read as the message's own.

    Args:
        text: The tool's stderr (or stdout), as decoded.
        limit: Most characters kept (:func:`one_line`).

    Returns:
        `` `text` `` on one line; `` ` ` `` when the tool wrote nothing.
    """
    return code_span(one_line(text, limit))


def backup_path(backup_dir: str, original: str, now: float) -> str:
    """A fresh backup file name for ``original`` under ``backup_dir``.

    The name holds the time and the original path (``/`` as ``_``); a counter is added
    when the name is taken (two backups in one second).
    """
    base = f"{stamp(now)}{original.replace('/', '_')}"
    path = os.path.join(backup_dir, base)
    n = 1
    while os.path.lexists(path):
        path = os.path.join(backup_dir, f"{base}.{n}")
        n += 1
    return path


def marker_line(original: str, now: float, reason: str) -> str:
    """The comment that replaces a disabled crontab line (keeps the original text)."""
    return f"{DISABLED_MARK} at {iso(now)} ({one_line(reason)}): {original}"


@dataclass(frozen=True)
class PlanRequest:
    """What a :data:`Planner` is given beside the origin (see :func:`plan_disable`).

    Attributes:
        reason: Why (goes into markers and records).
        now: POSIX time for markers and backup names.
        backup_dir: Where backups go.
        effects: For read-only queries (``systemctl is-enabled``).
        places: The system crontab, the crontab directory and the user crontab spools.
        quarantine_unknown_exe: Renaming an orphan's or unknown job's script is allowed.
        cmdline: The job root's argv (for quarantine).
        exe: The job root's executable (for quarantine).
    """

    reason: str
    now: float
    backup_dir: str
    effects: Effects
    places: tuple[str, str, Sequence[str]]
    quarantine_unknown_exe: bool = False
    cmdline: tuple[str, ...] = ()
    exe: str | None = None


#: What an origin kind's ``planner`` (:class:`watchdog.model.OriginKindEntry`) is: the
#: origin (of that kind) and the request in, the plan out; never raises for a host error.
Planner = Callable[[Origin, PlanRequest], DisablePlan]


def plan_quarantine(origin: Origin, req: PlanRequest) -> DisablePlan:
    """The planner of ``orphan`` and ``unknown`` origins: rename the job's script or
    executable, only when ``enforcement.quarantine_unknown_exe`` allows it."""
    if not req.quarantine_unknown_exe:
        return DisablePlan(
            "none",
            "-",
            refused=(
                f"its origin ({origin.kind}) names nothing to disable, and "
                "enforcement.quarantine_unknown_exe is off"
            ),
        )
    return _plan_quarantine(req.cmdline, req.exe, req.now, req.reason)


def plan_cron(origin: Origin, req: PlanRequest) -> DisablePlan:
    """The planner of ``cron`` origins: comment out the crontab line, or rename the
    run-parts script it ran (only inside a ``cron.daily``-style directory)."""
    assert isinstance(origin, CronOrigin)  # the registry hands each planner its kind
    if origin.script:
        parent = os.path.basename(os.path.dirname(os.path.realpath(origin.script)))
        if parent not in _RUN_PARTS_DIRS:
            return DisablePlan(
                "none",
                origin.script,
                refused=f"{origin.script} is not in a run-parts directory "
                f"({', '.join(sorted(_RUN_PARTS_DIRS))}): not renamed",
            )
        return _plan_rename("run-parts", origin.script, req.now, req.reason)
    return _plan_cron(origin, req.reason, req.now, req.backup_dir, req.places)


def plan_systemd(origin: Origin, req: PlanRequest) -> DisablePlan:
    """The planner of ``systemd`` origins: stop, disable and mask the unit and its timer
    (a system unit only)."""
    assert isinstance(origin, SystemdOrigin)  # the registry hands each planner its kind
    return _plan_systemd(origin, req.effects, req.backup_dir, req.now)


# -- cron --------------------------------------------------------------------------------


def _linked_in_other_root(path: str) -> bool:
    """True when a component of ``path`` after ``/proc/PID/root`` is a symlink (the
    crontabs of a cron in another mount namespace, read as it sees them)."""
    m = re.match(r"^(/.*?/[0-9]+/root)(/.+)$", path)
    if m is None:
        return False
    cur = m.group(1)
    for part in m.group(2).strip("/").split("/"):
        cur = f"{cur}/{part}"
        if os.path.islink(cur):
            return True
    return False


def _crontab_problem(path: str, places: tuple[str, str, Sequence[str]]) -> str | None:
    """Why ``path`` is not a crontab cron reads (so never edited), or None.

    A recorded origin is read back, not trusted: its ``file`` must resolve (symlinks and
    ``..`` followed) to the system crontab, a file cron reads directly in the crontab
    directory (cron(8) file-name rules), or a file directly in a user crontab spool.
    """
    crontab, cron_d, spool_dirs = places
    if _linked_in_other_root(path):
        # Under /proc/PID/root an absolute symlink resolves against *our* root: the file
        # edited would be one of this host's, not the one that cron reads.
        return f"{path} is reached through a symlink under another mount namespace's root"
    real = os.path.realpath(path)
    parent, name = os.path.split(real)
    if real == os.path.realpath(crontab):
        return None
    if parent == os.path.realpath(cron_d) and cron_d_name_ok(name):
        return None
    if parent in {os.path.realpath(d) for d in spool_dirs}:
        return None
    return f"{path} is not a crontab cron reads ({crontab}, {cron_d}/NAME or a spool file)"


def _plan_cron(
    origin: CronOrigin,
    reason: str,
    now: float,
    backup_dir: str,
    places: tuple[str, str, Sequence[str]],
) -> DisablePlan:
    path, line = origin.file, origin.line
    spool_dirs = places[2]
    if not path or not isinstance(line, int):
        return DisablePlan(
            "none",
            "-",
            refused="no crontab line matches the job (edited or removed after it started)",
        )
    target = f"{path}:{line}"
    problem = _crontab_problem(path, places)
    if problem is not None:
        return DisablePlan("none", target, refused=problem)
    if origin.entry is None:
        # Without the line as it was seen there is nothing to check the file against.
        return DisablePlan(
            "none", target, refused=f"no recorded entry for {target} to check it against"
        )
    try:
        # Through the safe reader: the path comes from a scan, and a FIFO or a giant put
        # there since must not hang or swamp the planner.
        data = safeio.read_regular(path, MAX_CRONTAB_BYTES)
        st = os.stat(path)
    except (OSError, ValueError) as exc:
        return DisablePlan("none", target, refused=f"cannot read {path}: {unread_reason(exc)}")
    lines = data.splitlines(keepends=True)
    if not 1 <= line <= len(lines):
        return DisablePlan("none", target, refused=f"{path} has no line {line} any more")
    current = lines[line - 1].rstrip(b"\r\n").decode("utf-8", "surrogateescape")
    entry = origin.entry
    if current != entry:
        return DisablePlan(
            "none",
            target,
            refused=f"{path}:{line} changed since the scan: now {code_span(current)}, "
            f"was {code_span(entry or '')}",
        )
    ending = lines[line - 1][len(lines[line - 1].rstrip(b"\r\n")) :] or b"\n"
    new_line = marker_line(current, now, reason)
    shown = line - hidden_header_lines(lines)  # as `crontab -l` numbers it now
    lines[line - 1] = new_line.encode("utf-8", "surrogateescape") + ending
    user_tab = os.path.dirname(os.path.abspath(path)) in {os.path.abspath(d) for d in spool_dirs}
    backup = backup_path(backup_dir, path, now)
    copy = FileCopy(path, backup, st.st_uid, st.st_gid, st.st_mode & 0o7777, sha256(data))
    edit = CronEdit(copy, line, b"".join(lines), current, new_line)
    steps = [
        f"copy {path} to {backup} (owner {st.st_uid}:{st.st_gid}, mode {st.st_mode & 0o7777:04o})"
    ]
    if user_tab:
        owner = os.path.basename(path)
        # crontab(1) writes its own header anew; every other line, a leading comment
        # `crontab -l` hides included, is the user's and goes back in.
        install = b"".join(lines[installed_header_lines(lines) :])
        edit = dataclasses.replace(edit, user=owner, install=install)
        steps += [
            f"comment out line {line} ({shown} in `crontab -l`): {code_span(current)}",
            f"as {code_span(new_line)}",
            f"install through `crontab -u {owner} -` so cron reloads it",
        ]
        return DisablePlan("user-crontab", target, steps, data=edit)
    steps += [
        f"comment out line {line}: {code_span(current)}",
        f"as {code_span(new_line)}",
        f"replace {path} atomically (same owner and mode) and touch "
        f"{os.path.dirname(path)} so cron rescans",
    ]
    return DisablePlan("cron-file", target, steps, data=edit)


def _exec_cron_file(plan: DisablePlan, effects: Effects) -> DisableResult:
    d = plan.data
    assert isinstance(d, CronEdit)  # execute() runs each kind's own plan
    c = d.copy
    effects.copy_backup(c.path, c.backup)
    res = DisableResult("ok", [f"backup {c.backup}"], [c.restore_op()])
    effects.write_file_atomic(c.path, d.new, c.uid, c.gid, c.mode)
    res.done.append(f"commented out {c.path}:{d.line}")
    effects.touch(os.path.dirname(c.path) or ".")
    return res


def _exec_user_crontab(plan: DisablePlan, effects: Effects) -> DisableResult:
    d = plan.data
    assert isinstance(d, CronEdit) and d.user is not None and d.install is not None
    c = d.copy
    effects.copy_backup(c.path, c.backup)
    out = effects.run(["crontab", "-u", d.user, "-"], d.install)
    if out.returncode != 0:
        return DisableResult(
            "failed",
            [f"backup {c.backup}"],
            [],
            f"crontab -u {d.user} - exited {out.returncode}: {tool_said(out.stderr)}",
        )
    return DisableResult(
        "ok",
        [f"backup {c.backup}", f"commented out {c.path}:{d.line} via crontab -u {d.user}"],
        [c.restore_op()],
    )


# -- renames (run-parts scripts, quarantine) ----------------------------------------------


def _plan_rename(kind: str, path: str, now: float, reason: str) -> DisablePlan:
    real = os.path.realpath(path)
    if real.startswith(_SYSTEM_DIRS):
        return DisablePlan(kind, path, refused=f"{real} is in a system directory: never renamed")
    try:
        st = os.stat(path)
    except OSError as exc:
        return DisablePlan(kind, path, refused=f"cannot stat {path}: {exc.strerror}")
    new = f"{path}{SUFFIX}{stamp(now)}"
    why = (
        "run-parts skips names with a dot"
        if kind == "run-parts"
        else "nothing can start it under its old name"
    )
    return DisablePlan(
        kind,
        path,
        [
            f"rename {path} to {new} (mode {st.st_mode & 0o7777:04o} kept; {why})"
            f" [{one_line(reason)}]"
        ],
        data=Rename(path, new),
    )


def _exec_rename(plan: DisablePlan, effects: Effects) -> DisableResult:
    d = plan.data
    assert isinstance(d, Rename)
    effects.rename(d.from_path, d.to_path)
    return DisableResult(
        "ok", [f"renamed {d.from_path} to {d.to_path}"], [{"op": "rename", **d.to_json()}]
    )


def _plan_quarantine(
    cmdline: Sequence[str], exe: str | None, now: float, reason: str
) -> DisablePlan:
    target = exe
    if exe and is_interpreter(exe):
        target = None
        args = list(cmdline[1:])
        if "-m" in args or "-c" in args:
            return DisablePlan(
                "quarantine", exe, refused="the job runs `-m MODULE`/`-c CODE`: no script file"
            )
        for arg in args:
            if not arg.startswith("-") and os.path.isfile(arg):
                target = arg
                break
    if not target:
        return DisablePlan("quarantine", "-", refused="no script or executable file to quarantine")
    return _plan_rename("quarantine", target, now, reason)


# -- systemd -----------------------------------------------------------------------------


def _state(effects: Effects, verb: str, unit: str) -> str:
    out = effects.query(["systemctl", verb, unit])
    return (
        out.stdout.strip().splitlines()[0]
        if out.stdout.strip()
        else f"unknown (rc {out.returncode})"
    )


MASK_DIR = hostpaths.MASK_DIR


def _show(effects: Effects, unit: str, *props: str) -> dict[str, str]:
    """``systemctl show -p P... UNIT`` as a dict (read-only, also in dry runs)."""
    argv = ["systemctl", "show"]
    for p in props:
        argv += ["-p", p]
    out = effects.query([*argv, unit])
    values: dict[str, str] = {}
    for line in out.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key] = value
    return values


# systemd.unit(5), "DESCRIPTION": a unit name is letters, digits, ":", "-", "_", ".", "\\"
# and "@" (templates), at most 255 characters. A leading "-" would read as an option to
# systemctl (the root mount unit "-.mount" is never a job's source).
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.\\@-]{1,255}")


def unit_name_problem(name: str, suffixes: Sequence[str]) -> str | None:
    """Why ``name`` is not a unit disable-source may act on, or None when it is.

    Args:
        name: A unit name from a (recorded) origin.
        suffixes: The unit types allowed here, e.g. ``(".service", ".scope")``.
    """
    if not _UNIT_NAME.fullmatch(name) or name.startswith("-"):
        return f"{code_span(clip(name, 160))}, which is not a valid unit name (systemd.unit(5))"
    if not name.endswith(tuple(suffixes)):
        return f"{code_span(name)}, which is not a {' or '.join(s[1:] for s in suffixes)} unit"
    return None


def _systemd_refusal(origin: SystemdOrigin, unit: str) -> str | None:
    """Why the recorded systemd origin (of ``unit``) is never acted on, or None."""
    # A user manager's unit, even one whose owner's uid is unknown: `systemctl` here
    # would act on the system manager's unit of the same name.
    if origin.user_unit or origin.uid is not None:
        return "user units are not disabled automatically" + (
            f"; run: {origin.remediation}" if origin.remediation else ""
        )
    problem = unit_name_problem(unit, (".service", ".scope"))
    if problem is None and origin.timer is not None:
        problem = unit_name_problem(origin.timer, (".timer",))
    if problem is not None:
        return f"the recorded origin names {problem}"
    return None


def _plan_systemd(
    origin: SystemdOrigin, effects: Effects, backup_dir: str, now: float
) -> DisablePlan:
    unit = origin.unit
    if not unit:
        return DisablePlan("none", "-", refused="no unit named")
    refused = _systemd_refusal(origin, unit)
    if refused is not None:
        return DisablePlan("none", unit, refused=refused)
    restart = origin.restart or "no"
    info = _show(effects, unit, "FragmentPath", "Transient", "TriggeredBy")
    if origin.timer and origin.timer not in info.get("TriggeredBy", "").split():
        # A record is read back, not trusted: the named timer must be one systemd says
        # starts this unit, or `disable --now` would stop something else.
        return DisablePlan(
            "none",
            unit,
            refused=f"{origin.timer} does not trigger {unit} (systemctl show -p TriggeredBy)",
        )
    fragment = info.get("FragmentPath") or ""
    transient = info.get("Transient") == "yes" or fragment.startswith("/run/systemd/transient/")
    # Every timer that can start the unit, not only the one the origin named: a timer
    # left active starts a masked-to-be unit again (or the mask fails on it).
    timers = [origin.timer] if origin.timer else []
    timers += [t for t in info.get("TriggeredBy", "").split() if t.endswith(".timer")]
    timers = list(dict.fromkeys(timers))
    before = {
        u: UnitState(_state(effects, "is-enabled", u), _state(effects, "is-active", u))
        for u in [*timers, unit]
    }
    commands = _stop_commands(unit, origin.timer, timers, before, transient)
    mask = restart != "no" and not unit.endswith(".scope") and not transient
    move: FileCopy | None = None
    if mask and before[unit].enabled != "masked":
        if (
            os.path.dirname(fragment) == MASK_DIR
            and os.path.isfile(fragment)
            and not os.path.islink(fragment)
        ):
            # `systemctl mask` refuses ("already exists") when the unit file itself lives
            # where the mask link goes (systemd #27965): move it to the backup first.
            moved = _unit_file_copy(fragment, backup_dir, now)
            if isinstance(moved, str):
                return DisablePlan("none", unit, refused=moved)
            move = moved
        commands.append(("mask", unit))
    change = SystemdChange(unit, tuple(timers), before, tuple(commands), move, transient)
    steps = _systemd_steps(change, mask, restart)
    return DisablePlan("systemd", " ".join([*timers, unit]), steps, data=change)


def _stop_commands(
    unit: str,
    named_timer: str | None,
    timers: Sequence[str],
    before: dict[str, UnitState],
    transient: bool,
) -> list[tuple[str, ...]]:
    """The ``systemctl`` commands that stop ``unit`` and keep its timers from starting
    it (an idle timer the origin did not name is left alone)."""
    commands: list[tuple[str, ...]] = []
    for t in timers:
        idle = before[t].enabled in ("disabled", "masked") and before[t].active == "inactive"
        if t == named_timer or not idle:
            commands.append(("disable", "--now", t))
    if unit.endswith(".scope") or transient or timers:
        commands.append(("stop", unit))
    else:
        commands.append(("disable", "--now", unit))
    return commands


def _unit_file_copy(fragment: str, backup_dir: str, now: float) -> FileCopy | str:
    """Where the unit file in the mask directory goes aside, or why it cannot be read."""
    try:
        st = os.stat(fragment)
        digest = sha256(safeio.read_regular(fragment, MAX_UNIT_FILE_BYTES))
    except (OSError, ValueError) as exc:
        return f"cannot read {fragment}: {unread_reason(exc)}"
    # Put back as it was, times included (a crontab's restore gets a new mtime on
    # purpose: cron reloads only a file whose mtime changed).
    return FileCopy(
        fragment, backup_path(backup_dir, fragment, now), st.st_uid, st.st_gid,
        st.st_mode & 0o7777, digest, st.st_mtime_ns,
    )  # fmt: skip


def _systemd_steps(change: SystemdChange, mask: bool, restart: str) -> list[str]:
    """What a systemd plan would do, in words."""
    unit, move = change.unit, change.move
    steps = [
        f"before: {u} is-enabled={s.enabled} is-active={s.active}" for u, s in change.before.items()
    ]
    for c in change.commands:
        if c[0] == "mask" and move is not None:
            steps.append(
                f"move {move.path} to {move.backup} (systemctl mask cannot replace a "
                f"unit file in {MASK_DIR}; undo puts it back)"
            )
        steps.append(f"systemctl {' '.join(c)}")
    if mask:
        steps.append(f"(mask because Restart={restart} would start {unit} again)")
        steps.append(f"verify: systemctl show -p LoadState {unit} says masked")
    if change.transient:
        steps.append(
            f"({unit} is a transient unit: once stopped it is gone, and undo cannot start it "
            "again; it is recorded without enable or start)"
        )
    return steps


def undo_systemd(
    change: SystemdChange, done: Sequence[Sequence[str]], moved: bool
) -> list[dict[str, Any]]:
    """Ops that bring back the recorded ``before`` state of what ``done`` changed.

    Nothing that cannot work is recorded: a transient unit is not enabled or started
    again (it no longer exists once stopped).

    Args:
        change: The plan, or its restore plan read back (:meth:`SystemdChange.from_json`).
        done: The ``systemctl`` argv (without the program) that ran, or may have.
        moved: The unit file was moved aside.
    """
    ops: list[dict[str, Any]] = []
    unit, before = change.unit, change.before
    if ["mask", unit] in [list(c) for c in done]:
        ops.append({"op": "systemctl", "argv": ["unmask", unit]})
    if moved and change.move is not None:
        ops.append(change.move.restore_op())
        ops.append({"op": "systemctl", "argv": ["daemon-reload"]})
    again = [*change.timers, *([] if change.transient else [unit])]
    for u in again:
        state = before[u].enabled
        if state == "enabled":
            ops.append({"op": "systemctl", "argv": ["enable", u]})
        elif state == "enabled-runtime":
            ops.append({"op": "systemctl", "argv": ["enable", "--runtime", u]})
    for u in again:
        if before[u].active in ("active", "activating", "reloading"):
            ops.append({"op": "systemctl", "argv": ["start", u]})
    return ops


def _exec_systemd(plan: DisablePlan, effects: Effects) -> DisableResult:
    d = plan.data
    assert isinstance(d, SystemdChange)
    res = DisableResult("ok")
    done: list[list[str]] = []
    moved = False
    move = d.move
    for command in d.commands:
        argv = list(command)
        if argv[0] == "mask" and move is not None:
            try:
                effects.copy_backup(move.path, move.backup)
                effects.remove(move.path)
            except OSError as exc:
                res.error = res.error or f"cannot move {move.path} aside: {exc}"
                res.done.append(f"FAILED move {move.path} to {move.backup}: {exc}")
                continue  # the mask would fail ("already exists"): not attempted
            moved = True
            res.done.append(f"moved {move.path} to {move.backup}")
        out = effects.run(["systemctl", *argv])
        if out.returncode != 0:
            res.error = res.error or (
                f"systemctl {' '.join(argv)} exited {out.returncode}: {tool_said(out.stderr)}"
            )
            res.done.append(f"FAILED systemctl {' '.join(argv)}: {tool_said(out.stderr)}")
            continue
        done.append(argv)
        res.done.append(f"systemctl {' '.join(argv)}")
        if argv[0] == "mask":
            state = _show(effects, d.unit, "LoadState").get("LoadState", "unknown")
            if state == "masked":
                res.done.append(f"verified: {d.unit} LoadState=masked")
            else:
                res.error = res.error or f"{d.unit} LoadState={state} after mask, not masked"
                res.done.append(f"FAILED verify: {d.unit} LoadState={state}, not masked")
    res.undo = undo_systemd(d, done, moved)
    if res.error is not None:
        res.outcome = "partial" if done or moved else "failed"
    return res

"""Cron origin: which crontab line started a process, and when it fires next.

Debian cron runs a job as ``cron`` → ``CRON`` (a forked child, same executable) →
``$SHELL -c CMD`` → the job, where CMD is the entry's command after ``%`` processing;
dash stays as the parent of the last command. Anacron runs ``/bin/sh -c CMD`` from
``/etc/anacrontab`` the same way. A job that daemonised (double fork, ``setsid ... &``)
loses that chain: it is re-parented to PID 1 (and on systemd hosts stays in
``cron.service``'s cgroup because of ``KillMode=process``); it is then found by matching
its own command line against the live entries.

Files read (all through :class:`~watchdog.lineage.base.ResolveContext` paths):
``ctx.cron_files`` (system format), ``ctx.cron_d_dir`` (system format, only names cron(8)
accepts), every regular file in ``ctx.cron_spool_dirs`` (user format, owner = file name),
and ``anacrontab`` next to the first of ``ctx.cron_files``. Parsed files are cached in
``ctx.persistent`` by (path, mtime, size). A file or directory that exists but could not
be read (no permission: Debian's spool dir is mode 1730, so every non-root scan hits
this), is not a regular file, or is over 1 MiB is recorded with the reason: an answer
then never claims that no entry starts the job.
"""

from __future__ import annotations

import functools
import os
import pwd
import re
import shlex
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, tzinfo
from typing import cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .. import hostpaths, safeio
from ..hosttext import clip, code_span, plain_or_code
from ..model import NOT_LIVE, CronOrigin, Origin, Proc
from .base import (
    Answer,
    ResolveContext,
    command,
    comment,
    exe_name,
    exe_path,
    quote_arg,
    script_argument,
    system_daemon,
    with_notes,
)
from .cronfiles import MAX_CRONTAB_BYTES, cron_skips, list_crontabs
from .crontab import (
    DISABLE_PREFIX,
    CronEntry,
    Crontab,
    cron_d_name_ok,
    local_zone,
    next_run,
    parse_anacrontab,
    parse_crontab,
)

CRON_DAEMONS = frozenset({"cron", "crond", "anacron"})
# Where distributions install the daemons (Debian/Ubuntu cron, cronie, anacron; with and
# without the /usr merge). A cron ancestor must run one of these, owned by root, as root:
# a copy of any program named "cron" elsewhere proves nothing.
CRON_DAEMON_PATHS = frozenset(
    f"{d}/{n}" for d in ("/usr/sbin", "/usr/bin", "/sbin", "/bin") for n in CRON_DAEMONS
)
_CRON_UNIT = re.compile(r"/(cron|crond|cronie|anacron)\.service(/|$)")
_ANY_UNIT = re.compile(r"/([^/]+\.service)(/|$)")
_MAX_FILE_BYTES = MAX_CRONTAB_BYTES


# Host text in evidence lines: quoted (hosttext.code_span, plain_or_code), so no command
# line, crontab line or file name reads as the product's own words.
def _cmd(text: str) -> str:
    return code_span(clip(text, 200))


def _at(path: str, line: object) -> str:
    """``FILE:LINE`` of a crontab entry, the file quoted when it is not one plain word."""
    return f"{plain_or_code(path)}:{line}"


def _ran(proc: Proc) -> str:
    return plain_or_code(proc.exe) if proc.exe else _cmd(proc.args_text)


@dataclass
class _Tabs:
    """Crontabs read, and every candidate file or directory that could not be.

    Attributes:
        tabs: Parsed crontabs, in cron's load order.
        problems: ``(path, note)`` per candidate not read; the note says why, e.g.
            ``could not read /var/spool/cron/crontabs (permission denied)``.
    """

    tabs: list[Crontab] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class _Match:
    entry: CronEntry
    exact: bool
    how: str


class CronResolver:
    """Resolve processes started by cron or anacron to their crontab line.

    Attributes:
        name: ``cron``.
    """

    name = "cron"

    def resolve(self, lineage: Sequence[Proc], ctx: ResolveContext) -> Answer:
        """Name the crontab entry that started ``lineage[0]``.

        Args:
            lineage: The process and its ancestors, nearest first.
            ctx: Paths to the crontabs, the clock and the parse cache.

        Returns:
            An origin of kind ``cron`` with ``file``, ``line``, ``entry``, ``user``,
            ``schedule``, ``next_run`` (and ``script`` for a run-parts chain), or None
            when no ancestor is a cron daemon and the re-parented top process matches no
            live entry; with notes (:class:`~watchdog.lineage.base.Resolved`) for an
            ancestor that only looks like a cron daemon, or a line of the same command
            that could not have started it.
        """
        if not lineage:
            return None
        notes: list[str] = []
        for idx in range(1, len(lineage)):
            if exe_name(lineage[idx]).lower() not in CRON_DAEMONS:
                continue
            why = not_cron_daemon(lineage[idx], ctx)
            if why is None:
                return with_notes(self._from_daemon(lineage, idx, ctx), notes)
            notes.append(
                f"ancestor PID {lineage[idx].pid} is named like a cron daemon "
                f"({plain_or_code(comment(exe_name(lineage[idx])))}) but is not one: {why}"
            )
        return with_notes(self._from_orphan(lineage, ctx), notes)

    # -- a cron daemon is an ancestor -----------------------------------------------

    def _from_daemon(self, lineage: Sequence[Proc], idx: int, ctx: ResolveContext) -> Origin:
        daemon = lineage[idx]
        shell = lineage[idx - 1]
        # The daemon itself, above its per-job children (Debian's CRON, cronie's crond).
        daemon_top = daemon
        for above in lineage[idx + 1 :]:
            if exe_path(above) != exe_path(daemon) or not_cron_daemon(above, ctx) is not None:
                break
            daemon_top = above
        daemon_name = exe_name(daemon).lower()
        evidence = [f"ancestor PID {daemon.pid} runs {_ran(daemon)}"]
        view = _cron_view(daemon_top, ctx)
        if view is not None:
            ctx, seen_as = view
            evidence.append(seen_as)
        read = _anacrontabs(ctx) if daemon_name == "anacron" else _live_crontabs(ctx)
        entries = [e for t in read.tabs for e in t.entries]
        cmd = _shell_command(shell)
        matches: list[_Match] = []
        others: list[_Match] = []
        if cmd is not None:
            evidence.append(f"job shell PID {shell.pid}: {_cmd(f'{shell.cmdline[0]} -c {cmd}')}")
            wanted = _norm(cmd)
            matches = [
                _Match(e, True, "its shell command equals the entry's command")
                for e in entries
                if _norm(e.run_command) == wanted
            ]
            refused: list[str] = []
            if matches:
                matches, refused = _could_start(matches, shell, daemon_top, ctx, _TICK_SLACK_S)
                evidence.extend(refused)
            if not matches:
                # cron ran exactly CMD: an entry with another command did not start this
                # process, however much of it the command line shares (a pipeline's line
                # running the same script must never inherit a retired line's ghost).
                others = _contained(lineage[: idx - 1] or lineage[:1], entries)
                retired = _retired_entry(ctx, read, cmd, shell.user)
                if retired is not None:
                    return _retired_origin(retired, lineage, evidence, others, ctx, cmd)
                if refused:
                    return _refused_origin(shell, evidence, read, ctx)
        else:
            matches = _contained(lineage[: idx - 1] or lineage[:1], entries)
            if matches:
                matches, refused = _could_start(matches, shell, daemon_top, ctx, _TICK_SLACK_S)
                evidence.extend(refused)
                if not matches:
                    return _refused_origin(shell, evidence, read, ctx)
        matches = _prefer_user(matches, shell.user)
        if not matches:
            remediation = None
            if read.problems:
                # Not seeing the entry proves nothing when a candidate file went unread.
                evidence.extend(_unread_notes(read))
                evidence.append(
                    "no entry in the crontabs that were read matches; the job may still "
                    "come from an unread file: inspect those before killing it"
                )
                remediation = _inspect_command([p for p, _ in read.problems], lineage[0])
            else:
                evidence.append(
                    "no live entry matches: the entry was edited or removed after this job "
                    "started; kill the job, nothing will start it again from this line"
                )
            evidence.extend(_not_its_entry(others, cmd))
            evidence.extend(_dead_notes(ctx, cmd, lineage[:1]))
            return replace(
                _fields(None, shell.user, ctx),
                evidence=tuple(evidence),
                remediation=remediation,
                entry_state=None if read.problems else "removed",
            )
        evidence.extend(_unread_notes(read))
        return _origin(matches, lineage, idx, evidence, ctx, cmd)

    # -- no cron ancestor: a daemonised job -----------------------------------------

    def _from_orphan(self, lineage: Sequence[Proc], ctx: ResolveContext) -> Answer:
        reparented = len(lineage) >= 2 and lineage[-1].pid == 1
        top = lineage[-2] if reparented else lineage[-1]
        in_cron_unit = any(_CRON_UNIT.search(line) for line in top.cgroup)
        if not in_cron_unit:
            if not reparented:
                return None
            if any(_ANY_UNIT.search(line) for line in top.cgroup):
                return None  # a systemd service of its own: the systemd resolver's case
        read = _live_crontabs(ctx)
        entries = [e for t in read.tabs for e in t.entries]
        matches = _contained([top], entries)
        evidence: list[str] = []
        if matches:
            matches, refused = _could_start(matches, top, None, ctx, _SCRIPT_LAG_S)
            if not matches:
                # Same command line, but the wrong user or the wrong time: not that line's.
                return with_notes(
                    _from_script(top, lineage, entries, read, ctx, in_cron_unit), refused
                )
            evidence.extend(refused)
        matches = _prefer_user(matches, top.user)
        if not matches:
            return _from_script(top, lineage, entries, read, ctx, in_cron_unit)
        if in_cron_unit:
            evidence.append(
                f"PID {top.pid} lives in cron's cgroup (KillMode=process keeps daemonised "
                "cron jobs there) although no cron process is its ancestor"
            )
        else:
            evidence.append(
                f"PID {top.pid} was re-parented to PID 1 (its starter exited): "
                "a daemonised job, matched by command line"
            )
        timing = _start_vs_schedule(top, matches[0].entry, ctx)
        if timing:
            evidence.append(timing)
        evidence.extend(_unread_notes(read))
        return _origin(matches, lineage, None, evidence, ctx, None)

    def recheck(self, origin: Origin, ctx: ResolveContext) -> Origin | None:
        """A kept cron origin whose line no longer runs (commented out, removed, in a file
        cron no longer loads) marked so (:func:`with_entry_state`); None for other kinds."""
        if not isinstance(origin, CronOrigin):
            return None
        if origin.entry_state not in (None, *NOT_LIVE):
            return origin  # unattributed: no line to read again
        # The state now, not the first one seen: a line disabled and then re-enabled (by
        # `rogue-watchdog undo` or by hand) runs again (issue 33, fresh user E).
        state = entry_state(origin, ctx)
        if state in NOT_LIVE:
            return origin if state == origin.entry_state else with_entry_state(origin, state)
        if state == "live" and origin.entry_state is not None:
            return live_again(origin, ctx)
        return origin

    def gone_now(self, origin: Origin, ctx: ResolveContext) -> str | None:
        """``its crontab entry is removed now`` (``disabled``, ``ignored``), or None."""
        if not isinstance(origin, CronOrigin):
            return None
        state = entry_state(origin, ctx)
        return f"its crontab entry is {state} now" if state in NOT_LIVE else None


# -- building the answer ----------------------------------------------------------------


def _origin(
    matches: list[_Match],
    lineage: Sequence[Proc],
    daemon_idx: int | None,
    evidence: list[str],
    ctx: ResolveContext,
    cmd: str | None,
) -> Origin:
    best = matches[0]
    entry = best.entry
    evidence.append(f"{_at(entry.file, entry.line)}: {best.how}")
    for other in matches[1:]:
        kind = "exactly" if other.exact else "by containment"
        evidence.append(
            f"ambiguous: also matches {_at(other.entry.file, other.entry.line)} {kind}: "
            f"{_cmd(other.entry.raw.strip())}"
        )
    fields = _fields(entry, entry.user, ctx)
    script_path: str | None = None
    if "CRON_TZ" in entry.env:
        evidence.append(
            f"next_run uses CRON_TZ={plain_or_code(entry.env['CRON_TZ'])} (cronie honours it; "
            "Debian's cron 3.0 ignores it and uses the host's zone)"
        )
    remediation = _disable_command(entry, ctx)
    also = tuple(f"{m.entry.file}:{m.entry.line}" for m in matches[1:] if m.exact)
    fields = replace(fields, also=also)
    script = _run_parts_script(lineage, daemon_idx)
    if script is not None:
        runner, path = script
        script_path = path
        evidence.append(
            f"run-parts PID {runner.pid} ({_cmd(runner.args_text)}) runs script "
            f"{plain_or_code(path)}; "
            "the crontab line runs every script in that directory"
        )
        remediation = command("chmod", "-x", path)
    evidence.extend(_dead_notes(ctx, cmd, lineage[:1]))
    return replace(fields, evidence=tuple(evidence), remediation=remediation, script=script_path)


def _fields(entry: CronEntry | None, user: str | None, ctx: ResolveContext) -> CronOrigin:
    """The origin's line fields (all None but ``user`` when no line is named)."""
    if entry is None:
        return CronOrigin(user=user)
    return CronOrigin(
        file=entry.file,
        line=entry.line,
        entry=entry.raw,
        user=entry.user,
        schedule=entry.schedule,
        next_run=next_run(entry, ctx.now, _zone(ctx)),
    )


def _zone(ctx: ResolveContext) -> tzinfo:
    # A ZoneInfo on ctx.now is taken as the cron daemon's zone (tests pin it); any other
    # tzinfo (UTC, a fixed offset) only fixes the instant, so the host's zone applies.
    if isinstance(ctx.now.tzinfo, ZoneInfo):
        return ctx.now.tzinfo
    cached = ctx.cache.get("cron:zone")
    if isinstance(cached, tzinfo):
        return cached
    zone = local_zone()
    ctx.cache["cron:zone"] = zone
    return zone


def _disable_command(entry: CronEntry, ctx: ResolveContext) -> str:
    """The exact command that comments the entry out.

    System files are edited in place with sed (cron(8) notices the new mtime). User
    crontabs must go through crontab(1) so cron reloads them; line numbers there are
    those of ``crontab -l``, which hides the header crontab(1) wrote.
    """
    sed = f"{entry.line}s/^/{DISABLE_PREFIX}/"
    tab = _cached_tab(ctx, entry.file)
    if tab is not None and not tab.system and tab.owner:
        shown = entry.line - tab.header_lines
        user = quote_arg(tab.owner)
        return f"crontab -u {user} -l | sed '{shown}s/^/{DISABLE_PREFIX}/' | crontab -u {user} -"
    return command("sed", "-i", sed, entry.file)


def _run_parts_script(lineage: Sequence[Proc], daemon_idx: int | None) -> tuple[Proc, str] | None:
    end = daemon_idx if daemon_idx is not None else len(lineage)
    for r in range(1, end):
        runner = lineage[r]
        if exe_name(runner) != "run-parts":
            continue
        args = [a for a in runner.cmdline[1:] if not a.startswith("-")]
        directory = args[-1].rstrip("/") if args else ""
        child = lineage[r - 1]
        candidates = [*child.cmdline, child.exe or ""]
        for arg in candidates:
            if directory and arg.startswith(directory + "/"):
                return runner, arg
        for arg in child.cmdline[1:] or child.cmdline:
            if arg.startswith("/"):
                return runner, arg
    return None


# -- matching ---------------------------------------------------------------------------


_SHELLS = frozenset({"sh", "dash", "bash", "zsh", "ksh", "mksh", "busybox", "fish", "csh", "tcsh"})


def _shell_command(proc: Proc) -> str | None:
    """The ``CMD`` of cron's ``$SHELL -c CMD``, or None.

    Only a shell's ``-c`` argument is the entry's command: bash execs a simple command,
    so below cron there may be ``python3 -c CODE`` itself, whose CODE is not the entry.
    """
    if len(proc.cmdline) >= 3 and proc.cmdline[1] == "-c" and exe_name(proc) in _SHELLS:
        return proc.cmdline[2]
    return None


def _norm(text: str) -> str:
    return " ".join(text.split())


@functools.lru_cache(maxsize=1024)
def _entry_tokens(command: str) -> tuple[str, ...]:
    """:func:`_tokens` of a crontab entry's command, kept: every job's lineage is matched
    against every entry each scan, and the same few lines were split again for each
    (issue 34, item 3: 38 jobs cost 228 splits)."""
    return tuple(_tokens(command))


def _tokens(command: str) -> list[str]:
    try:
        lex = shlex.shlex(command, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = ""
        return list(lex)
    except ValueError:
        return command.split()


def _has_run(hay: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    return n > 0 and any(list(hay[i : i + n]) == list(needle) for i in range(len(hay) - n + 1))


def _contained(procs: Sequence[Proc], entries: Sequence[CronEntry]) -> list[_Match]:
    """Entries whose command contains a process's argv as consecutive shell words.

    A bare word such as ``python3`` is too weak to count: the argv must have two words
    or contain a path. A script run through its interpreter (``/bin/sh /opt/x.sh``) is
    also tried without argv[0].
    """
    out: list[_Match] = []
    for proc in procs:
        argvs = [list(proc.cmdline)]
        if len(proc.cmdline) >= 2 and proc.cmdline[1].startswith("/"):
            argvs.append(list(proc.cmdline[1:]))
        argvs = [a for a in argvs if len(a) >= 2 or (a and "/" in a[0])]
        for entry in entries:
            words = _entry_tokens(entry.run_command)
            if any(_has_run(words, argv) for argv in argvs):
                how = f"the command line of PID {proc.pid} ({_cmd(proc.args_text)}) is part of it"
                out.append(_Match(entry, False, how))
        if out:
            break
    return out


def not_cron_daemon(proc: Proc, ctx: ResolveContext) -> str | None:
    """Why ``proc`` is not the host's cron daemon (or its per-job child); None when it is.

    The executable the kernel runs must be one of :data:`CRON_DAEMON_PATHS`, owned by
    root, and the process must run as root (Debian's ``CRON`` child stays root; only the
    job's shell takes the entry's user).

    Args:
        proc: An ancestor whose executable is named like a cron daemon.
        ctx: Resolve context (for the executable's owner).

    Returns:
        None, or a phrase for evidence.
    """
    return system_daemon(proc, ctx, lambda path: path in CRON_DAEMON_PATHS)


def runs_as(proc: Proc, user: str | None) -> bool | None:
    """Whether ``proc`` runs as the crontab entry's ``user``; None when unknown."""
    if user is None or (proc.user is None and proc.uid is None):
        return None
    if proc.user == user:
        return True
    try:
        return pwd.getpwnam(user).pw_uid == proc.uid
    except KeyError:
        return False


def _could_start(
    matches: list[_Match],
    proc: Proc,
    daemon: Proc | None,
    ctx: ResolveContext,
    slack_s: float,
) -> tuple[list[_Match], list[str]]:
    """The matches whose entry can have started ``proc``, and why the others cannot.

    cron runs an entry's command as the entry's user (the crontab's owner, or the user
    field of a system crontab), at a time its schedule fires (``@reboot``: when the
    daemon starts). A process running as another user, or started when the entry did
    not fire, was not started by it, however exactly its command line matches: that is
    someone replaying the entry's command, and the real line must not be blamed (nor
    disabled) for it. An unknown start time keeps the match.

    Args:
        matches: Candidate entries.
        proc: The job shell cron forked (or the re-parented process itself).
        daemon: The cron daemon, for ``@reboot`` entries; None when not an ancestor.
        ctx: Resolve context (clock, zone, start times).
        slack_s: How long after the fire time the process may have started.

    Returns:
        ``(kept, reasons)``: reasons are evidence lines ``not FILE:LINE: ...``.
    """
    start_s = ctx.table.start_time_s(proc.start_ticks)
    kept: list[_Match] = []
    reasons: list[str] = []
    for m in matches:
        e = m.entry
        where = f"not {_at(e.file, e.line)}"
        if runs_as(proc, e.user) is False:
            reasons.append(
                f"{where}: PID {proc.pid} runs as {plain_or_code(comment(str(proc.user)))}, "
                f"and cron runs that entry as {plain_or_code(comment(str(e.user)))}"
            )
            continue
        late = _late(e, proc, start_s, daemon, ctx, slack_s)
        if late is not None:
            reasons.append(f"{where}: {late}")
            continue
        kept.append(m)
    return kept, reasons


def _late(
    entry: CronEntry,
    proc: Proc,
    start_s: float | None,
    daemon: Proc | None,
    ctx: ResolveContext,
    slack_s: float,
) -> str | None:
    """Why ``entry`` cannot have fired just before ``proc`` started; None if it can."""
    if start_s is None:
        return None
    when = datetime.fromtimestamp(start_s, _zone(ctx)).isoformat(timespec="seconds")
    if entry.expression is None:
        # anacron entries run by elapsed days after a delay: no clock time to check.
        if daemon is None or entry.schedule != "@reboot":
            return None
        daemon_s = ctx.table.start_time_s(daemon.start_ticks)
        if daemon_s is None or 0 <= start_s - daemon_s <= _REBOOT_SLACK_S:
            return None
        return (
            f"PID {proc.pid} started at {when}, {start_s - daemon_s:.0f} s after cron "
            f"started; cron runs {plain_or_code(entry.schedule)} entries only when it starts"
        )
    lag = _fired_before(entry, start_s, ctx)
    if lag is None or lag <= slack_s:
        return None
    return (
        f"PID {proc.pid} started at {when}, {lag:.0f} s after that entry "
        f"({comment(entry.schedule)}) last fired: it did not fire then"
    )


def _refused_origin(shell: Proc, evidence: list[str], read: _Tabs, ctx: ResolveContext) -> Origin:
    """A real cron ran this job, but no entry that matches its command can have
    (``entry_state`` ``unattributed``; the reasons are already in ``evidence``)."""
    evidence.extend(_unread_notes(read))
    evidence.append(
        "no live entry can have started it (wrong user or time): it is attributed to no "
        "line, and no line is to be disabled for it"
    )
    return replace(
        _fields(None, shell.user, ctx),
        evidence=tuple(evidence),
        remediation=None,
        entry_state="unattributed",
    )


def _prefer_user(matches: list[_Match], user: str | None) -> list[_Match]:
    """Exact before contained; among those, entries for the process's user first."""
    return sorted(matches, key=lambda m: (not m.exact, user is not None and m.entry.user != user))


def _start_vs_schedule(proc: Proc, entry: CronEntry, ctx: ResolveContext) -> str | None:
    """Say how the process start time relates to the entry's last fire time."""
    if entry.expression is None:
        return None
    start_s = ctx.table.start_time_s(proc.start_ticks)
    if start_s is None:
        return None
    try:
        started = datetime.fromtimestamp(start_s, _zone(ctx))
        fired = next(CronSim(entry.expression, started, reverse=True))
    except (ValueError, OSError, StopIteration, CronSimError):
        return None
    lag_s = (started - fired).total_seconds()
    if lag_s <= 300:
        return f"it started {lag_s:.0f} s after the entry fired at {fired.isoformat()}"
    return (
        f"it started {lag_s:.0f} s after the entry's last fire time {fired.isoformat()}: "
        "a weaker match"
    )


# -- files cron reads (and some it does not) --------------------------------------------


def _read_tab(
    ctx: ResolveContext,
    path: str,
    *,
    system: bool,
    owner: str | None,
    anacron: bool = False,
    problems: list[tuple[str, str]] | None = None,
) -> Crontab | None:
    """Parse one crontab (cached by mtime and size), or None.

    A missing file is silently None (cron reads nothing there either). Anything else
    not read (not a regular file, over 1 MiB, no permission) is appended to
    ``problems`` as ``could not read PATH (REASON)``, the reason in
    :func:`watchdog.safeio.unread_reason`'s words.
    """

    def refuse(exc: OSError | ValueError) -> None:
        if problems is not None:
            problems.append(
                (path, f"could not read {plain_or_code(path)} ({safeio.unread_reason(exc)})")
            )

    key = f"cron:file:{path}"
    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size, system, owner, anacron)
        hit = ctx.persistent.get(key)
        if stat.S_ISREG(st.st_mode) and isinstance(hit, tuple) and hit[0] == stamp:
            tab = hit[1]
            return tab if isinstance(tab, Crontab) else None
        # Regular files only, size-capped, never blocking: a FIFO swapped in cannot hang.
        data = safeio.read_regular(path, _MAX_FILE_BYTES)
    except FileNotFoundError:
        return None  # cron reads nothing there either
    except (OSError, ValueError) as exc:
        refuse(exc)
        return None
    text = data.decode("utf-8", "surrogateescape")
    if anacron:
        tab = parse_anacrontab(text, path)
    else:
        tab = parse_crontab(text, path, system=system, owner=owner)
    ctx.persistent[key] = (stamp, tab)
    return tab


def _cached_tab(ctx: ResolveContext, path: str) -> Crontab | None:
    hit = ctx.persistent.get(f"cron:file:{path}")
    if isinstance(hit, tuple) and isinstance(hit[1], Crontab):
        return hit[1]
    return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _cron_view(daemon: Proc, ctx: ResolveContext) -> tuple[ResolveContext, str] | None:
    """The crontabs a cron daemon in another mount namespace reads, when they are not
    the files this context names; None when they are (or it cannot be told).

    cron(8) reads fixed paths (``/etc/crontab``, ``/etc/cron.d``, the spool) as *it*
    sees them. A cron in a container or in a private mount namespace (``unshare -m``
    with its own files bound over those paths) reads other files than the host's, and
    judging its job against the host's crontabs says "entry removed" of a line that
    runs every minute. Its view is reachable here under ``/proc/PID/root``
    (proc_pid_root(5)). Per file: where cron's ``/etc/cron.d``, ``/etc/crontab`` or
    spool is the very file this context names (bound over cron's path, or a daemon in a
    container given the host's files under ``/host``), the configured path stays, so a
    rule naming it still matches; only the files cron reads and we were not told of are
    read under ``/proc/PID/root``.

    Returns:
        The context with the cron paths under ``/proc/PID/root``, and the evidence
        sentence that says so; or None.
    """
    proc_root = getattr(ctx.table, "proc_root", None)
    if not isinstance(proc_root, str) or not proc_root:
        return None
    theirs, ours = (
        _identity(f"{proc_root}/{daemon.pid}/ns/mnt"),
        _identity(f"{proc_root}/self/ns/mnt"),
    )
    if theirs is None or ours is None or theirs == ours:
        return None
    root = f"{proc_root}/{daemon.pid}/root"

    def theirs_if_other(cron_paths: Sequence[str], ours: Sequence[str]) -> tuple[str, ...]:
        # Per file: ours where it is the very file cron reads (a bind mount, a daemon
        # given the host's files under /host) or cron's cannot be seen; else cron's own.
        # A sanctioned line keeps the path its rule names whenever cron reads that file.
        seen = {i for i in (_identity(root + c) for c in cron_paths) if i is not None}
        if not seen or seen & {_identity(o) for o in ours}:
            return tuple(ours)
        return tuple(root + c for c in cron_paths)

    cron_d = theirs_if_other([hostpaths.CRON_D], [ctx.cron_d_dir])[0]
    files = theirs_if_other([hostpaths.CRONTAB], list(ctx.cron_files[:1]))
    spools = theirs_if_other(hostpaths.CRON_SPOOL_DIRS, ctx.cron_spool_dirs)
    changed = [p for p, o in ((cron_d, ctx.cron_d_dir),) if p != o]
    changed += [p for p, o in zip(files, ctx.cron_files[:1], strict=False) if p != o]
    changed += [spools[0]] if tuple(spools) != tuple(ctx.cron_spool_dirs) else []
    if not changed:
        return None
    view = replace(
        ctx,
        cron_files=(*files, *ctx.cron_files[1:]) if files else ctx.cron_files,
        cron_d_dir=cron_d,
        cron_spool_dirs=spools,
    )
    said = (
        f"the cron daemon (PID {daemon.pid}) runs in another mount namespace and reads "
        f"other crontabs than the configured ones: "
        f"{', '.join(map(plain_or_code, changed))} read as it sees them"
    )
    return view, said


def _live_crontabs(ctx: ResolveContext) -> _Tabs:
    """Every crontab cron reads, in the order cron(8) loads them, and those not read."""
    listing = list_crontabs(ctx.cron_files, ctx.cron_d_dir, ctx.cron_spool_dirs)
    out = _Tabs(
        problems=[(p, f"could not read {plain_or_code(p)} ({why})") for p, why in listing.problems]
    )
    for f in listing.files:
        tab = _read_tab(ctx, f.path, system=f.system, owner=f.owner, problems=out.problems)
        if tab is not None:
            out.tabs.append(tab)
    return out


def _anacrontabs(ctx: ResolveContext) -> _Tabs:
    base = os.path.dirname(ctx.cron_files[0]) if ctx.cron_files else "/etc"
    out = _Tabs()
    path = f"{base}/anacrontab"
    tab = _read_tab(ctx, path, system=True, owner=None, anacron=True, problems=out.problems)
    if tab is not None:
        out.tabs.append(tab)
    return out


def _unread_notes(read: _Tabs) -> list[str]:
    """Evidence lines for candidates not read: the entry (or another) may be there."""
    notes = []
    for _, note in read.problems:
        hint = "; run as root" if "permission denied" in note else ""
        notes.append(f"{note}: the entry may be there{hint}")
    return notes


def _inspect_command(paths: Sequence[str], proc: Proc) -> str:
    """``grep`` (as root) for the job's distinctive word in the files that went unread."""
    needle = _needle(proc)
    return command("sudo", "grep", "-rnF", "--", needle, *dict.fromkeys(paths))


def _needle(proc: Proc) -> str:
    # The script for interpreters (python3 /opt/x/train.py -> /opt/x/train.py), else argv[0].
    if not proc.cmdline:
        return proc.comm
    return script_argument(proc.cmdline) or proc.cmdline[0]


def _dead_crontabs(ctx: ResolveContext) -> Iterator[tuple[Crontab, str]]:
    """Crontab-looking files cron ignores, with the reason."""
    for name in _listdir(ctx.cron_d_dir):
        if not cron_d_name_ok(name) and name != ".placeholder":
            tab = _read_tab(ctx, f"{ctx.cron_d_dir}/{name}", system=True, owner=None)
            if tab is not None:
                yield tab, "its name has characters other than letters, digits, _ and -"
    for path in ctx.cron_files:
        folder, base = os.path.split(path)
        for name in _listdir(folder or "."):
            if name != base and name.startswith(base):
                tab = _read_tab(ctx, f"{folder}/{name}", system=True, owner=None)
                if tab is not None:
                    yield tab, "it is not a file cron reads"


def _dead_notes(ctx: ResolveContext, cmd: str | None, procs: Sequence[Proc]) -> list[str]:
    notes = []
    for tab, why in _dead_crontabs(ctx):
        exact = (
            [] if cmd is None else [e for e in tab.entries if _norm(e.run_command) == _norm(cmd)]
        )
        found = exact or [m.entry for m in _contained(procs, tab.entries)]
        for e in found:
            notes.append(f"also matches {_at(e.file, e.line)}, which cron does not read ({why})")
    return notes


# -- which line fired, and lines that no longer fire ------------------------------------


def _entry_zone(entry: CronEntry, ctx: ResolveContext) -> tzinfo:
    tz_name = entry.env.get("CRON_TZ")
    if tz_name:
        try:
            return ZoneInfo(tz_name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return _zone(ctx)


# cron forks the job within a second or two of the minute; start times (btime + ticks)
# are exact to about a second. A busy host may lag, so up to a minute counts.
_TICK_SLACK_S = 59.0
# cron runs @reboot entries right after it starts.
_REBOOT_SLACK_S = 120.0


def _fired_before(entry: CronEntry, start_s: float, ctx: ResolveContext) -> float | None:
    """Seconds between the entry's last fire time and ``start_s``, or None."""
    if entry.expression is None:
        return None
    zone = _entry_zone(entry, ctx)
    # One answer per schedule and start time in a scan: the jobs below one parent share
    # the ancestor that is matched against every entry (issue 34, item 3).
    memo = cast(dict[tuple[str, tzinfo, float], float | None], ctx.cache.setdefault(_FIRED, {}))
    key = (entry.expression, zone, start_s)
    if key in memo:
        return memo[key]
    lag: float | None
    try:
        started = datetime.fromtimestamp(start_s, zone)
        fired = next(CronSim(entry.expression, started + timedelta(seconds=2), reverse=True))
        lag = (started - fired).total_seconds()
    except (ValueError, OSError, OverflowError, StopIteration, CronSimError):
        lag = None
    memo[key] = lag
    return lag


_FIRED = "cron.fired_before"  # ResolveContext.cache key of _fired_before's answers


@dataclass(frozen=True)
class _Retired:
    """A commented-out line whose entry ran the job's command.

    Attributes:
        entry: The entry as it was (parsed from the comment).
        comment: The line as it is now.
    """

    entry: CronEntry
    comment: str


def _retired_entry(ctx: ResolveContext, read: _Tabs, cmd: str, user: str | None) -> _Retired | None:
    """The commented-out line (``disable-source``'s marker, ``sed``'s prefix, or a
    person's ``#``) whose entry runs exactly ``cmd``, in the crontabs cron reads."""
    wanted = _norm(cmd)
    found: list[_Retired] = []
    for tab in read.tabs:
        try:
            text = safeio.read_regular(tab.path, _MAX_FILE_BYTES).decode("utf-8", "surrogateescape")
        except (OSError, safeio.NotRegularFileError, safeio.FileTooLargeError):
            continue
        for lineno, raw in enumerate(text.split("\n"), start=1):
            body = raw.strip()
            if not body.startswith("#") or wanted not in _norm(body):
                continue
            entry = _entry_in_comment(body, tab, lineno, wanted)
            if entry is not None:
                found.append(_Retired(entry, raw.removesuffix("\r")))
    found.sort(key=lambda r: user is not None and r.entry.user != user)
    return found[0] if found else None


def _entry_in_comment(body: str, tab: Crontab, lineno: int, wanted: str) -> CronEntry | None:
    words = body.split()
    for k in range(len(words)):
        candidate = " ".join(words[k:])
        if candidate.startswith("#"):
            continue
        parsed = parse_crontab(candidate, tab.path, system=tab.system, owner=tab.owner)
        for e in parsed.entries:
            if _norm(e.run_command) == wanted:
                return CronEntry(
                    tab.path, lineno, candidate, e.schedule, e.expression, e.user, e.command
                )
    return None


def _retired_origin(
    retired: _Retired,
    lineage: Sequence[Proc],
    evidence: list[str],
    others: list[_Match],
    ctx: ResolveContext,
    cmd: str,
) -> Origin:
    entry = retired.entry
    evidence.append(
        f"started by {_at(entry.file, entry.line)}, entry since disabled: the line is now "
        f"{_cmd(retired.comment.strip())}; cron will not start it again from there, but this "
        "running copy must still be stopped"
    )
    evidence.extend(_not_its_entry(others, cmd))
    evidence.extend(_dead_notes(ctx, cmd, lineage[:1]))
    return CronOrigin(
        evidence=tuple(evidence),
        remediation=None,
        file=entry.file,
        line=entry.line,
        entry=entry.raw,
        user=entry.user,
        schedule=entry.schedule,
        next_run=None,
        entry_state="disabled",
    )


def _not_its_entry(others: Sequence[_Match], cmd: str | None) -> list[str]:
    return [
        f"not {_at(m.entry.file, m.entry.line)}: its command runs the same program, but "
        f"cron ran {_cmd(str(cmd))}, not that line's command"
        for m in others
    ]


def entry_state(origin: CronOrigin, ctx: ResolveContext) -> str | None:
    """Whether a cron origin's line still runs: ``live``, ``disabled`` or ``removed``.

    Args:
        origin: A ``cron`` origin with ``file``, ``line`` and ``entry``.
        ctx: Paths and the parse cache.

    Returns:
        ``live`` when the file still has that entry at that line, ``disabled`` when the
        line is now a comment holding it, ``ignored`` when cron no longer loads the file
        (:func:`~watchdog.lineage.cronfiles.cron_skips`), ``removed`` otherwise; None when
        the origin names no line or its file could not be read (nothing can be said).
    """
    path, line, raw = origin.file, origin.line, origin.entry
    if path is None or line is None or raw is None:
        return None
    system = path in ctx.cron_files or os.path.dirname(path) == ctx.cron_d_dir
    if cron_skips(path, system, None if system else os.path.basename(path)) is not None:
        return "ignored"
    try:
        text = safeio.read_regular(path, _MAX_FILE_BYTES).decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return "removed"
    except (OSError, safeio.NotRegularFileError, safeio.FileTooLargeError):
        return None
    lines = text.split("\n")
    current = lines[line - 1].removesuffix("\r") if 1 <= line <= len(lines) else ""
    if current == raw:
        return "live"
    body = current.strip()
    if body.startswith("#") and _norm(body).endswith(_norm(raw)):
        return "disabled"
    return "removed"


def with_entry_state(origin: CronOrigin, state: str) -> CronOrigin:
    """``origin`` marked as no longer live (``disabled`` or ``removed``): no next run, no
    remediation (the line already cannot start anything), evidence saying so."""
    where = _at(str(origin.file), origin.line)
    note = (
        f"started by {where}, entry since {state}: cron will not start it again from "
        "there, but this running copy must still be stopped"
    )
    evidence = (note, *(e for e in origin.evidence if not e.startswith("started by ")))
    return replace(origin, evidence=evidence, remediation=None, entry_state=state, next_run=None)


def live_again(origin: CronOrigin, ctx: ResolveContext) -> CronOrigin:
    """``origin``, once marked no longer live, as its line stands again (re-enabled by
    ``rogue-watchdog undo`` or by hand): its next run and the command that disables it
    back, the evidence saying it was off for a while (history, not the state now).

    Args:
        origin: A cron origin whose ``entry_state`` is ``disabled``, ``removed`` or
            ``ignored`` and whose line reads as it was first seen again.
        ctx: Paths and the parse cache.
    """
    path, line = origin.file, origin.line
    if path is None or line is None:
        return origin
    system = path in ctx.cron_files or os.path.dirname(path) == ctx.cron_d_dir
    owner = None if system else os.path.basename(path)
    tab = _read_tab(ctx, path, system=system, owner=owner)
    entry = next(
        (e for e in (tab.entries if tab else ()) if e.line == line and e.raw == origin.entry),
        None,
    )
    if entry is None:
        return origin
    was = origin.entry_state
    note = (
        f"started by {_at(path, line)}; the line was {was} while this process ran and is "
        "live again now: cron starts it on its schedule"
    )
    evidence = (note, *(e for e in origin.evidence if not e.startswith("started by ")))
    remediation = (
        command("chmod", "-x", origin.script) if origin.script else _disable_command(entry, ctx)
    )
    return replace(
        origin,
        evidence=evidence,
        remediation=remediation,
        entry_state=None,
        next_run=next_run(entry, ctx.now, _zone(ctx)),
    )


# -- daemonised by a script that a crontab line runs ------------------------------------

# A job daemonised from a script started at most this long after the line fired.
_SCRIPT_LAG_S = 60.0
# ... and this close, with cron's environment, counts as "high" confidence.
_SCRIPT_LAG_SURE_S = 10.0
_MAX_SCRIPT_BYTES = 256 * 1024
# Variables a login, ssh or terminal session sets and cron never does (cron(8) sets
# SHELL, HOME, LOGNAME, PATH and the crontab's own NAME=value lines).
_SESSION_VARS = ("TERM", "SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY", "TMUX", "STY", "DISPLAY")
_CRON_DEFAULT_PATH = "/usr/bin:/bin"


def _scripts_of(entry: CronEntry) -> list[str]:
    """Absolute paths among the words of the entry's command (the scripts it runs)."""
    return list(dict.fromkeys(w for w in _entry_tokens(entry.run_command) if w.startswith("/")))


def _script_mentions(path: str, program: str, ctx: ResolveContext) -> int | None:
    """Line number of ``path`` (a text script) where ``program`` is a shell word."""
    key = f"cron:script:{path}"
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_SCRIPT_BYTES:
        return None
    stamp = (st.st_mtime_ns, st.st_size)
    hit = ctx.persistent.get(key)
    if isinstance(hit, tuple) and hit[0] == stamp:
        words_by_line = hit[1]
    else:
        try:
            data = safeio.read_regular(path, _MAX_SCRIPT_BYTES)
        except (OSError, safeio.NotRegularFileError, safeio.FileTooLargeError):
            return None
        if b"\0" in data[:4096]:
            return None  # a binary, not a script
        words_by_line = []
        for raw in data.decode("utf-8", "surrogateescape").split("\n"):
            body = raw.strip()
            words_by_line.append([] if body.startswith("#") else _tokens(body))
        ctx.persistent[key] = (stamp, words_by_line)
    want = os.path.basename(program)
    for lineno, words in enumerate(words_by_line, start=1):
        for w in words:
            if w == program or (os.path.basename(w) == want and not program.startswith("/")):
                return lineno
            if program.startswith("/") and w.endswith("/" + want) and "$" in w:
                return lineno  # "$DIR/train_job.py": the same file through a variable
    return None


def _cron_env_note(env: dict[str, str] | None, entry: CronEntry) -> tuple[bool | None, str]:
    """Whether the environment is the one cron gives its jobs: (verdict, why)."""
    if env is None:
        return None, "its environment could not be read"
    session = [k for k in _SESSION_VARS if k in env]
    if session:
        return False, f"its environment has {', '.join(session)}, which cron never sets"
    path = entry.env.get("PATH", _CRON_DEFAULT_PATH)
    if env.get("PATH") != path:
        return None, (
            f"its PATH is {plain_or_code(str(env.get('PATH')))}, not cron's {plain_or_code(path)}"
        )
    user = env.get("LOGNAME") or env.get("USER")
    if user is not None and user != entry.user:
        return False, f"its LOGNAME is {plain_or_code(user)}, the line runs as {entry.user}"
    return True, (
        f"its environment is cron's (PATH={plain_or_code(path)}, "
        f"LOGNAME={plain_or_code(str(user))}, no terminal)"
    )


def _from_script(
    top: Proc,
    lineage: Sequence[Proc],
    entries: Sequence[CronEntry],
    read: _Tabs,
    ctx: ResolveContext,
    in_cron_unit: bool,
) -> Origin | None:
    """A re-parented process whose program appears in a script a crontab line runs.

    ``* * * * * root /root/x/launch_bg.sh`` where the script runs
    ``setsid python3 /root/x/train_job.py &`` and exits: the trainer's command line is in
    no crontab, only in the script. It is attributed to the line when it started within
    a minute after the line fired, its program is a word of that script, and its
    environment is not a terminal session's; how sure, and why, goes into evidence and
    ``confidence``.
    """
    if not top.cmdline:
        return None
    program = _needle(top)
    start_s = ctx.table.start_time_s(top.start_ticks)
    if start_s is None or len(os.path.basename(program)) < 3:
        return None
    env = ctx.table.environ(top.pid)
    found: list[tuple[CronEntry, str, int, float, bool | None, str]] = []
    for entry in entries:
        lag = _fired_before(entry, start_s, ctx)
        if lag is None or lag > _SCRIPT_LAG_S:
            continue
        if runs_as(top, entry.user) is False:
            continue  # cron runs the line, and so its script, as the line's user
        for script in _scripts_of(entry):
            lineno = _script_mentions(script, program, ctx)
            if lineno is None:
                continue
            env_ok, env_why = _cron_env_note(env, entry)
            if env_ok is False:
                continue  # someone ran it from a terminal in the same minute
            found.append((entry, script, lineno, lag, env_ok, env_why))
            break
    if not found:
        return None
    found.sort(key=lambda f: (f[4] is not True, f[3], f[0].user != (top.user or f[0].user)))
    entry, script, lineno, lag, env_ok, env_why = found[0]
    sure = env_ok is True and lag <= _SCRIPT_LAG_SURE_S and len(found) == 1
    confidence = "high" if sure else "medium"
    how = "re-parented to PID 1" if lineage[-1].pid == 1 else "re-parented"
    if in_cron_unit:
        how += " (in cron's cgroup)"
    evidence = [
        f"PID {top.pid} was {how}: its starter exited; its command line is in no crontab",
        f"attributed to {_at(entry.file, entry.line)} with {confidence} confidence: it "
        f"started {lag:.0f} s after that line fired, {env_why}, and its program "
        f"{plain_or_code(program)} appears in {plain_or_code(script)} (line {lineno}), which "
        "that line runs",
    ]
    for other in found[1:]:
        evidence.append(
            f"ambiguous: {_at(other[0].file, other[0].line)} also runs a script naming it "
            f"({plain_or_code(other[1])} line {other[2]}) and fired {other[3]:.0f} s before it "
            "started"
        )
    evidence.extend(_unread_notes(read))
    # Not "script" (a run-parts script, which disable-source renames): here the line
    # itself is the source, and commenting it out stops the launches.
    return replace(
        _fields(entry, entry.user, ctx),
        evidence=tuple(evidence),
        remediation=_disable_command(entry, ctx),
        launch_script=script,
        confidence=confidence,
    )

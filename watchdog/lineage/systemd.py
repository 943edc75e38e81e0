"""Origin resolver for processes that run inside a systemd unit (system or user manager).

The unit comes from ``/proc/PID/cgroup`` (:mod:`watchdog.lineage.cgroup`). When the host's
systemd is reachable (``/run/systemd/system`` exists, sd_booted(3)) and the context allows
it, ``systemctl show`` supplies the unit file, ``Restart=``, ``TriggeredBy=`` and the
timer's next elapse; otherwise the unit and timer files are read from the unit search path
(:mod:`watchdog.lineage.unitfile`) and a calendar timer's next elapse is computed with
``systemd-analyze calendar`` when that program exists.

Passes (returns None) for: no cgroup, the root or ``init.scope``, login sessions
(``session-N.scope``: the shell resolver's), container and Slurm cgroups (their resolvers
run first), the user manager itself, and the cron/at daemons' units. Cron's unit is left
alone on purpose: the cron resolver runs before this one, and when it could not match a
line, naming ``cron.service`` would hide that fact; the orphan/unknown resolvers say more.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from .. import hostpaths
from ..hosttext import clip, code_span, own_code, plain_or_code
from ..model import Origin, Proc, SystemdOrigin
from .base import (
    ResolveContext,
    command,
    exe_name,
    quote_arg,
    script_argument,
)
from .cgroup import CgroupInfo, parse_cgroup
from .cronfiles import list_crontabs
from .shell import tmux_session
from .unitfile import UnitFile, find_timers, load_unit, read_text_or_reason

# Units whose processes other resolvers own or that say nothing about a job's source.
PASS_UNITS = frozenset(
    ("init.scope", "cron.service", "crond.service", "cronie.service", "atd.service")
)
MASK_DIR = hostpaths.MASK_DIR
RESTARTING = frozenset(
    ("always", "on-success", "on-failure", "on-abnormal", "on-watchdog", "on-abort")
)
# When each Restart= value starts the service again (systemd.service(5), "Restart=";
# the clean signals are SIGHUP, SIGINT, SIGTERM and SIGPIPE).
RESTART_WHEN = {
    "always": "systemd starts it again whenever the process exits, however it ends",
    "on-success": (
        "systemd starts it again only when it exits cleanly (exit code 0, or SIGHUP, "
        "SIGINT, SIGTERM or SIGPIPE)"
    ),
    "on-failure": (
        "systemd starts it again when it exits non-zero, is killed by a signal other than "
        "SIGHUP, SIGINT, SIGTERM or SIGPIPE (SIGKILL included), or times out; not after a "
        "clean exit or SIGTERM"
    ),
    "on-abnormal": (
        "systemd starts it again when it is killed by a signal other than SIGHUP, SIGINT, "
        "SIGTERM or SIGPIPE (SIGKILL included), or times out; not after any exit code"
    ),
    "on-watchdog": "systemd starts it again only when its watchdog timeout passes",
    "on-abort": (
        "systemd starts it again when an uncaught signal other than SIGHUP, SIGINT, "
        "SIGTERM or SIGPIPE ends it (SIGKILL included)"
    ),
}
DEFAULT_USER_UNIT_DIRS = (
    "{home}/.config/systemd/user",
    "/etc/systemd/user",
    "/run/user/{uid}/systemd/user",
    "/run/systemd/user",
    "{home}/.local/share/systemd/user",
    "/usr/local/lib/systemd/user",
    "/usr/lib/systemd/user",
    "/lib/systemd/user",
)  # systemd.unit(5) "User Unit Search Path", without the transient/generator dirs
SHOW_SERVICE = ("Id", "FragmentPath", "DropInPaths", "Restart", "MainPID", "TriggeredBy")
SHOW_TIMER = (
    "Id",
    "FragmentPath",
    "Unit",
    "TimersCalendar",
    "TimersMonotonic",
    "NextElapseUSecRealtime",
)
_CMD_TIMEOUT_S = 5.0
_TS = re.compile(r"(?:[A-Za-z]{3} )?(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?: (\S+))?")
_SPAN_UNITS = {
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "month": 2629800.0,
    "y": 31557600.0,
}  # time-util.c: a month is 30.44 days, a year 365.25 days
_SPAN = re.compile(r"([\d.]+)\s*(us|ms|min|month|s|h|d|w|y)")


# -- systemctl output -------------------------------------------------------------------


def parse_show(text: str) -> dict[str, list[str]]:
    """Parse ``systemctl show -p ...`` output into ``key -> values`` (repeats kept).

    Args:
        text: ``KEY=VALUE`` lines as printed by ``systemctl show``.
    """
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out.setdefault(key, []).append(value)
    return out


def parse_timestamp(text: str, now: datetime) -> datetime | None:
    """Parse a systemd timestamp such as ``Sun 2026-12-06 02:00:00 UTC``.

    systemd prints local time with the zone abbreviation (systemd.time(7)). ``UTC`` is
    taken literally; any other abbreviation is read as the local zone.

    Args:
        text: The timestamp; empty or ``n/a`` means none.
        now: Only its tzinfo is used when the text names no zone.

    Returns:
        A timezone-aware datetime, or None.
    """
    m = _TS.fullmatch(text.strip())
    if not m:
        return None
    naive = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    if m.group(2) in ("UTC", "GMT", "Z"):
        return naive.replace(tzinfo=UTC)
    return naive.astimezone()  # local time → aware


def parse_timespan_s(text: str) -> float | None:
    """Seconds in a systemd timespan such as ``6min 54.866838s`` (systemd.time(7))."""
    parts = _SPAN.findall(text)
    if not parts:
        return None
    return sum(float(num) * _SPAN_UNITS[unit] for num, unit in parts)


def _timer_entries(values: Sequence[str]) -> list[dict[str, str]]:
    # "{ OnCalendar=Sun *-*-* 02:00:00 ; next_elapse=Sun 2026-12-06 02:00:00 UTC }"
    out = []
    for v in values:
        body = v.strip().removeprefix("{").removesuffix("}")
        entry: dict[str, str] = {}
        for item in body.split(" ; "):
            k, sep, val = item.strip().partition("=")
            if sep:
                entry[k] = val
        if entry:
            out.append(entry)
    return out


# -- results --------------------------------------------------------------------------


@dataclass
class TimerFacts:
    """What is known about the timer that starts a unit."""

    name: str
    unit_file: str | None = None
    schedule: list[str] = field(default_factory=list)
    next_run: datetime | None = None
    next_source: str = ""


@dataclass
class UnitFacts:
    """What is known about a unit, from systemctl and/or its files."""

    name: str
    unit_file: str | None = None
    dropins: list[str] = field(default_factory=list)
    exec_start: list[str] = field(default_factory=list)
    restart: str | None = None
    main_pid: int | None = None
    timers: list[TimerFacts] = field(default_factory=list)
    other_triggers: list[str] = field(default_factory=list)
    live: bool = False
    skipped: list[str] = field(default_factory=list)


def _owner_uid(info: CgroupInfo) -> int | None:
    if info.user_uid is not None:
        return info.user_uid
    m = re.search(r"/user@(\d+)\.service(?:/|$)", info.path)
    return int(m.group(1)) if m else None


def _script_token(proc: Proc) -> str | None:
    # The distinctive word a crontab line would contain: the script for interpreters.
    if not proc.cmdline:
        return None
    return script_argument(proc.cmdline) or proc.cmdline[0]


class SystemdResolver:
    """Names the systemd unit (and its timer) a process runs in.

    Args:
        systemd_run_dir: Exists only when systemd is the running init (sd_booted(3));
            tests point it elsewhere.
        user_unit_dirs: User unit search path; ``{home}`` and ``{uid}`` are replaced with
            the unit owner's home and UID.
        systemctl: The ``systemctl`` program.
        systemd_analyze: The ``systemd-analyze`` program, for calendar next-elapse times.
    """

    name = "systemd"

    def __init__(
        self,
        *,
        systemd_run_dir: str = "/run/systemd/system",
        user_unit_dirs: Sequence[str] = DEFAULT_USER_UNIT_DIRS,
        systemctl: str = "systemctl",
        systemd_analyze: str = "systemd-analyze",
    ) -> None:
        self.systemd_run_dir = systemd_run_dir
        self.user_unit_dirs = tuple(user_unit_dirs)
        self.systemctl = systemctl
        self.systemd_analyze = systemd_analyze

    # -- protocol ------------------------------------------------------------------

    def resolve(self, lineage: Sequence[Proc], ctx: ResolveContext) -> Origin | None:
        """Name the unit of ``lineage[0]``; see the module docstring for when it passes.

        Args:
            lineage: The process and its ancestors, nearest first.
            ctx: Context; ``unit_dirs``, ``use_systemctl``, ``run_cmd``, ``now`` and the
                cron paths (for the "no crontab entry" check) are read.

        Returns:
            A ``systemd`` origin, or None.
        """
        if not lineage:
            return None
        proc = lineage[0]
        info = parse_cgroup(proc.cgroup)
        if info is None or info.path in ("", "/"):
            return None
        if info.container_id or info.pod_uid or info.slurm_job_id is not None:
            return None
        unit = info.unit
        if unit is None or unit in PASS_UNITS or info.session is not None:
            return None
        try:
            if unit.startswith("user@"):
                if info.user_unit is None or info.user_unit in PASS_UNITS:
                    return None  # the user manager itself
                return self._resolve_user(lineage, info, info.user_unit, ctx)
            return self._resolve_system(lineage, info, unit, ctx)
        except (OSError, ValueError, UnicodeError):
            return None  # resolvers pass rather than raise

    # -- system units --------------------------------------------------------------

    def _reachable(self, ctx: ResolveContext) -> bool:
        return ctx.use_systemctl and os.path.isdir(self.systemd_run_dir)

    def _show(self, ctx: ResolveContext, unit: str, props: Sequence[str]) -> dict[str, list[str]]:
        key = f"systemd:show:{unit}"
        cached = ctx.cache.get(key)
        if isinstance(cached, dict):
            return cached
        argv = [self.systemctl, "show", "--no-pager"]
        for p in props:
            argv += ["-p", p]
        argv.append(unit)
        res = ctx.run_cmd(argv, _CMD_TIMEOUT_S)
        parsed = parse_show(res.stdout) if res.ok else {}
        ctx.cache[key] = parsed
        return parsed

    def system_facts(self, unit: str, ctx: ResolveContext) -> UnitFacts:
        """Collect facts about a system unit: systemctl first, unit files to fill gaps.

        Args:
            unit: Unit name, e.g. ``nightly.service``.
            ctx: Context (``use_systemctl``, ``run_cmd``, ``unit_dirs``, ``now``).

        Returns:
            The facts; fields stay None/empty where nothing could be learned.
        """
        facts = UnitFacts(name=unit)
        timer_names: list[str] = []
        live_timers: dict[str, dict[str, list[str]]] = {}
        if self._reachable(ctx):
            show = self._show(ctx, unit, SHOW_SERVICE)
            if show.get("Id"):
                facts.live = True
                facts.unit_file = (show.get("FragmentPath") or [""])[-1] or None
                facts.dropins = " ".join(show.get("DropInPaths", [])).split()
                facts.restart = (show.get("Restart") or [""])[-1] or None
                pid = (show.get("MainPID") or ["0"])[-1]
                facts.main_pid = int(pid) if pid.isdigit() and int(pid) > 0 else None
                trig = " ".join(show.get("TriggeredBy", [])).split()
                timer_names = [t for t in trig if t.endswith(".timer")]
                facts.other_triggers = [t for t in trig if not t.endswith(".timer")]
                for t in timer_names:
                    live_timers[t] = self._show(ctx, t, SHOW_TIMER)
        uf = load_unit(unit, ctx.unit_dirs, facts.skipped)
        if uf is not None:
            facts.unit_file = facts.unit_file or uf.path
            facts.dropins = facts.dropins or uf.dropins
            facts.exec_start = uf.exec_start()
            facts.restart = facts.restart or uf.restart()
        elif facts.live and facts.unit_file:
            # systemctl named a file outside unit_dirs (e.g. SYSTEMD_UNIT_PATH): read it.
            uf = load_unit(unit, [os.path.dirname(facts.unit_file)], facts.skipped)
            if uf is not None:
                facts.exec_start = uf.exec_start()
        file_timers = [] if facts.live else find_timers(unit, ctx.unit_dirs, facts.skipped)
        if not facts.live:
            timer_names = [t.name for t in file_timers]
        for t in timer_names:
            tuf = next((x for x in file_timers if x.name == t), None)
            facts.timers.append(self._timer_facts(t, tuf, live_timers.get(t), ctx, facts.skipped))
        return facts

    def _timer_facts(
        self,
        name: str,
        tuf: UnitFile | None,
        show: dict[str, list[str]] | None,
        ctx: ResolveContext,
        skipped: list[str],
    ) -> TimerFacts:
        tf = TimerFacts(name=name)
        if show:
            tf.unit_file = (show.get("FragmentPath") or [""])[-1] or None
        if tuf is None:
            dirs = list(ctx.unit_dirs)
            if tf.unit_file:
                dirs.append(os.path.dirname(tf.unit_file))
            tuf = load_unit(name, dirs, skipped)
        if tuf is not None:
            tf.unit_file = tf.unit_file or tuf.path
            tf.schedule = tuf.timer_schedule()
        if show:
            cal = _timer_entries(show.get("TimersCalendar", []))
            mono = _timer_entries(show.get("TimersMonotonic", []))
            if not tf.schedule:
                tf.schedule = [
                    f"{k}={v}" for e in cal + mono for k, v in e.items() if k != "next_elapse"
                ]
            tf.next_run = self._live_next(cal, mono, show, ctx.now)
            if tf.next_run is not None:
                tf.next_source = "systemctl show"
        if tf.next_run is None and tuf is not None:
            tf.next_run = self._analyze_next(tuf.values("Timer", "OnCalendar"), ctx)
            if tf.next_run is not None:
                tf.next_source = "systemd-analyze calendar"
        return tf

    @staticmethod
    def _live_next(
        cal: list[dict[str, str]],
        mono: list[dict[str, str]],
        show: dict[str, list[str]],
        now: datetime,
    ) -> datetime | None:
        cands: list[datetime] = []
        for e in cal:
            ts = parse_timestamp(e.get("next_elapse", ""), now)
            if ts is not None:
                cands.append(ts)
        for v in show.get("NextElapseUSecRealtime", []):
            ts = parse_timestamp(v, now)
            if ts is not None:
                cands.append(ts)
        mono_now = time.clock_gettime(time.CLOCK_MONOTONIC)
        for e in mono:
            at_s = parse_timespan_s(e.get("next_elapse", ""))
            # An elapsed one-shot (OnActiveSec after it fired) keeps its past time.
            if at_s is not None and at_s > mono_now:
                cands.append(now + timedelta(seconds=at_s - mono_now))
        future = [c for c in cands if c > now]
        return min(future) if future else None

    def _analyze_next(self, calendars: Sequence[str], ctx: ResolveContext) -> datetime | None:
        if not calendars or shutil.which(self.systemd_analyze) is None:
            return None
        best: datetime | None = None
        for expr in calendars:
            argv = [
                self.systemd_analyze,
                "calendar",
                "--iterations=1",
                f"--base-time=@{int(ctx.now.timestamp())}",
                expr,
            ]
            res = ctx.run_cmd(argv, _CMD_TIMEOUT_S)
            if not res.ok:
                continue
            ts = _analyze_output(res.stdout, ctx.now)
            if ts is not None and (best is None or ts < best):
                best = ts
        return best

    def _resolve_system(
        self, lineage: Sequence[Proc], info: CgroupInfo, unit: str, ctx: ResolveContext
    ) -> Origin:
        facts = self.system_facts(unit, ctx)
        evidence = [f"cgroup {plain_or_code(info.path)}: system unit {plain_or_code(unit)}"]
        return self._origin(lineage, info, unit, facts, evidence, ctx, user=None)

    # -- user units ----------------------------------------------------------------

    def _user_dirs(self, uid: int | None) -> list[str]:
        home: str | None = None
        if uid is not None:
            try:
                home = pwd.getpwuid(uid).pw_dir
            except KeyError:
                home = None
        out = []
        for d in self.user_unit_dirs:
            if "{home}" in d and home is None:
                continue
            if "{uid}" in d and uid is None:
                continue
            out.append(d.replace("{home}", home or "").replace("{uid}", str(uid)))
        return out

    def _resolve_user(
        self, lineage: Sequence[Proc], info: CgroupInfo, unit: str, ctx: ResolveContext
    ) -> Origin:
        uid = _owner_uid(info)
        user = ctx.table.user_name(uid) if uid is not None else None
        dirs = self._user_dirs(uid)
        # The user manager's bus is not reachable as root without machined: files only.
        facts = UnitFacts(name=unit)
        uf = load_unit(unit, dirs, facts.skipped)
        if uf is not None:
            facts.unit_file = uf.path
            facts.dropins = uf.dropins
            facts.exec_start = uf.exec_start()
            facts.restart = uf.restart()
        for tuf in find_timers(unit, dirs, facts.skipped):
            facts.timers.append(self._timer_facts(tuf.name, tuf, None, ctx, facts.skipped))
        evidence = [
            f"cgroup {plain_or_code(info.path)}: user unit {plain_or_code(unit)} of "
            f"user@{uid}.service (uid {uid})"
        ]
        return self._origin(lineage, info, unit, facts, evidence, ctx, user=(user, uid))

    # -- common --------------------------------------------------------------------

    def _origin(
        self,
        lineage: Sequence[Proc],
        info: CgroupInfo,
        unit: str,
        facts: UnitFacts,
        evidence: list[str],
        ctx: ResolveContext,
        user: tuple[str | None, int | None] | None,
    ) -> Origin:
        if facts.unit_file:
            line = f"unit file {plain_or_code(facts.unit_file)}"
            if facts.exec_start:
                line += f": ExecStart={code_span(clip(facts.exec_start[0], 200))}"
            evidence.append(line)
        elif not unit.endswith(".scope"):
            evidence.append(
                f"no unit file for {plain_or_code(unit)} found (transient unit, or not on the path)"
            )
        if facts.dropins:
            evidence.append("drop-ins: " + ", ".join(map(plain_or_code, facts.dropins)))
        # Files refused (FIFO, device, oversized, unreadable): what they say is unknown.
        evidence.extend(dict.fromkeys(facts.skipped))
        spawner = _unit_top(lineage, info)
        tmux = tmux_session(lineage, ctx) if _has_tmux(lineage, ctx) else None
        if tmux is not None:
            server = command(*tmux.server.cmdline) if tmux.server is not None else "tmux"
            made = (
                "which the unit's own ExecStart created"
                if tmux.created_by_server
                else "on a tmux server that lives in this unit"
            )
            evidence.append(f"runs in {tmux.describe()}, {made} ({code_span(clip(server, 200))})")
        elif spawner is not None and spawner.pid != lineage[0].pid:
            evidence.append(
                f"spawned inside {plain_or_code(unit)} by PID {spawner.pid} "
                f"({code_span(clip(spawner.args_text, 200))}), the "
                "unit's own process: an in-process scheduler or launcher, not a timer or cron"
            )
        timer = facts.timers[0] if facts.timers else None
        if timer is not None:
            how = "TriggeredBy (systemctl show)" if facts.live else "timer file"
            sched = "; ".join(map(plain_or_code, timer.schedule)) or "no schedule found"
            evidence.append(f"started by {plain_or_code(timer.name)} [{how}]: {sched}")
            for extra in facts.timers[1:]:
                evidence.append(f"also triggered by {plain_or_code(extra.name)}")
            if timer.next_run is None:
                evidence.append("next elapse unknown")
            else:
                evidence.append(f"next elapse {timer.next_run.isoformat()} ({timer.next_source})")
        else:
            evidence.append(f"no timer starts {plain_or_code(unit)}")
        for trig in facts.other_triggers:
            evidence.append(f"also triggered by {plain_or_code(trig)} (TriggeredBy)")
        restart = facts.restart
        if restart in RESTARTING:
            evidence.append(
                f"Restart={restart}: {RESTART_WHEN[restart]}; "
                f"stop the unit, and {own_code('systemctl mask')} keeps anything from starting it"
            )
        evidence.append(_cron_check(lineage[0], ctx))
        return SystemdOrigin(
            evidence=tuple(evidence),
            remediation=_remediation(
                unit, timer.name if timer else None, restart, user, facts.unit_file
            ),
            unit=unit,
            unit_file=facts.unit_file,
            timer=timer.name if timer else None,
            timer_schedule="; ".join(timer.schedule) if timer and timer.schedule else None,
            next_run=timer.next_run.isoformat() if timer and timer.next_run else None,
            restart=restart,
            # A user manager's unit even when its owner's uid is unknown: never the
            # system manager's unit of the same name.
            user_unit=user is not None,
            user=user[0] if user is not None else None,
            uid=user[1] if user is not None else None,
            in_tmux=tmux is not None,
            tmux_socket=tmux.socket if tmux else None,
            tmux_session=tmux.name if tmux else None,
            tmux_session_id=tmux.session_id if tmux else None,
        )

    def recheck(self, origin: Origin, ctx: ResolveContext) -> Origin | None:
        """None: a unit's kept origin is not read again."""
        return None

    def gone_now(self, origin: Origin, ctx: ResolveContext) -> str | None:
        """``its unit file F is gone`` when its recorded unit file no longer exists."""
        path = origin.unit_file if isinstance(origin, SystemdOrigin) else None
        return f"its unit file {path} is gone" if path and not os.path.lexists(path) else None


def _has_tmux(lineage: Sequence[Proc], ctx: ResolveContext) -> bool:
    if any("tmux" in exe_name(p) for p in lineage[1:]):
        return True
    env = ctx.table.environ(lineage[0].pid) if lineage else None
    return bool(env and env.get("TMUX"))


def _unit_top(lineage: Sequence[Proc], info: CgroupInfo) -> Proc | None:
    # Highest ancestor still in the same unit: the unit's main (or first) process.
    key = (info.unit, info.user_unit)
    top: Proc | None = None
    for p in lineage:
        other = parse_cgroup(p.cgroup)
        if other is None or (other.unit, other.user_unit) != key:
            break
        top = p
    return top


def _remediation(
    unit: str,
    timer: str | None,
    restart: str | None,
    user: tuple[str | None, int | None] | None,
    unit_file: str | None = None,
) -> str:
    ctl = "systemctl"
    if user is not None:
        who = user[0] if user[0] is not None else str(user[1])
        ctl = f"systemctl --user -M {quote_arg(who + '@')}"
    u = quote_arg(unit)
    if unit.endswith(".scope") or (unit_file or "").startswith("/run/systemd/transient/"):
        # A scope or a transient (systemd-run) unit: once stopped it is gone; a mask
        # would only leave a link for a unit that no longer exists.
        return f"{ctl} stop {u}"
    if timer is not None:
        cmd = f"{ctl} disable --now {quote_arg(timer)} && {ctl} stop {u}"
    else:
        cmd = f"{ctl} disable --now {u}"
    if restart in RESTARTING:
        if user is None and unit_file is not None and os.path.dirname(unit_file) == MASK_DIR:
            # `systemctl mask` cannot replace a unit file that lives where its link goes
            # ("already exists", systemd #27965): move the file aside first.
            f = quote_arg(unit_file)
            cmd += f" && mv {f} {f}.rogue-watchdog-disabled && {ctl} mask {u}"
        else:
            cmd += f" && {ctl} mask {u}"
    return cmd


def _analyze_output(text: str, now: datetime) -> datetime | None:
    # "    Next elapse: Sun 2026-12-06 02:00:00 UTC" and, off UTC, "(in UTC): ...".
    utc = nxt = None
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if not sep:
            continue
        if key.strip() == "(in UTC)":
            utc = parse_timestamp(value, now)
        elif key.strip() == "Next elapse":
            nxt = parse_timestamp(value, now)
    return utc or nxt


def _cron_check(proc: Proc, ctx: ResolveContext) -> str:
    token = _script_token(proc)
    if token is None:
        return "no crontab entry checked: the process has no command line"
    # Read once per scan: every systemd-resolved job checks the same files.
    cached = ctx.cache.get("systemd:cron-lines")
    files: list[tuple[str, list[str]]] = []
    refused: list[str] = []
    if isinstance(cached, tuple):
        files, refused = cached
    else:
        # The files cron itself reads: a backup in cron.d (foo.dpkg-old) starts nothing.
        listing = list_crontabs(ctx.cron_files, ctx.cron_d_dir, ctx.cron_spool_dirs)
        refused = [f"{plain_or_code(path)} ({why})" for path, why in listing.problems]
        for f in listing.files:
            # Regular files only, size-capped, never blocking (a FIFO in a spool dir).
            text, why = read_text_or_reason(f.path)
            if text is not None:
                files.append((f.path, text.splitlines()))
            elif why is not None:
                refused.append(f"{plain_or_code(f.path)} ({why})")
        ctx.cache["systemd:cron-lines"] = (files, refused)
    for path, lines in files:
        for n, line in enumerate(lines, 1):
            if token in line and not line.lstrip().startswith("#"):
                return f"crontab {plain_or_code(path)}:{n} also mentions {plain_or_code(token)}"
    out = f"no crontab entry mentions {plain_or_code(token)} ({len(files)} crontab files read)"
    if refused:
        out += "; not read: " + ", ".join(refused)
    return out

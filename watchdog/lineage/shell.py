"""Shell origin: a person started the job by hand from a login session.

Only a login or interactive clue counts, never a shell by itself (a ``bash -c`` under a
systemd service or cron is not a person at a keyboard):

* an ``sshd`` (or dropbear, mosh-server) ancestor, with the client address from
  ``SSH_CONNECTION`` ("client-ip client-port server-ip server-port") or ``SSH_CLIENT``
  ("client-ip client-port server-port") in the environment where readable (ssh(1)
  "ENVIRONMENT");
* a tmux or screen session: ``TMUX`` ("socket,server-pid,session-index", tmux(1)) or
  ``STY`` ("pid.tty.host", screen(1)) in the environment, or their server as ancestor;
* a ``login`` ancestor (console or serial login);
* a controlling terminal: ``tty_nr`` of ``/proc/PID/stat`` (proc(5)) or fd 0 on a
  ``/dev/pts/N`` or ``/dev/ttyN``;
* a logind session cgroup ``session-N.scope``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..command import CommandResult
from ..hosttext import clip, code_span, plain_or_code
from ..model import Origin, Proc, ShellOrigin
from .base import ResolveContext, exe_name
from .cgroup import parse_cgroup

_REMOTE = frozenset({"sshd", "dropbear", "mosh-server"})
_TMUX = frozenset({"tmux", "tmux: server"})
_SCREEN = frozenset({"screen", "SCREEN"})


def tty_name(tty_nr: int) -> str | None:
    """Device name of a ``tty_nr`` as encoded in ``/proc/PID/stat`` field 7.

    The kernel packs ``major`` in bits 8-19 and ``minor`` in bits 0-7 and 20-31
    (``new_encode_dev``); majors 136-143 are Unix98 ptys (``/dev/pts/N``), major 4 is
    virtual consoles (minor < 64) and serial ports (``ttyS``), per the kernel's
    Documentation/admin-guide/devices.txt.

    Args:
        tty_nr: The raw field; 0 means no controlling terminal.

    Returns:
        ``/dev/pts/3``, ``/dev/tty1``, ``/dev/ttyS0``; None for no terminal or a device
        that is not a login terminal (``/dev/console`` and others).
    """
    if tty_nr <= 0:
        return None
    major = (tty_nr >> 8) & 0xFFF
    minor = (tty_nr & 0xFF) | ((tty_nr >> 12) & 0xFFF00)
    if 136 <= major <= 143:
        return f"/dev/pts/{(major - 136) * 256 + minor}"
    if major == 4 and 1 <= minor < 64:
        return f"/dev/tty{minor}"
    if major == 4 and minor >= 64:
        return f"/dev/ttyS{minor - 64}"
    return None


def _read_tty_nr(proc_root: str, pid: int) -> int:
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as fh:
            text = fh.read().decode("utf-8", "surrogateescape")
        return int(text[text.rfind(")") + 2 :].split()[4])  # field 7 (tty_nr)
    except (OSError, ValueError, IndexError):
        return 0


def controlling_tty(proc_root: str, pid: int) -> str | None:
    """The login terminal of ``pid``: its controlling tty, else what fd 0 points at.

    Args:
        proc_root: procfs mount (fixture trees pass their own).
        pid: Process to inspect.

    Returns:
        ``/dev/pts/N``, ``/dev/ttyN`` or ``/dev/ttySN``, or None.
    """
    name = tty_name(_read_tty_nr(proc_root, pid))
    if name is not None:
        return name
    try:
        target = os.readlink(f"{proc_root}/{pid}/fd/0")
    except OSError:
        return None
    if target.startswith("/dev/pts/") or (
        target.startswith("/dev/tty") and target[len("/dev/tty") :][:1].isalnum()
    ):
        return target
    return None


@dataclass
class _Clues:
    remote: list[str] = field(default_factory=list)
    mux: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    client: str | None = None
    login: Proc | None = None
    tmux: TmuxSession | None = None


@dataclass(frozen=True)
class TmuxSession:
    """The tmux session a process runs in.

    Attributes:
        socket: Server socket path (``TMUX``'s first part, the server's ``-S``, or the
            default ``/tmp/tmux-UID/default``).
        session_id: tmux's session id, ``$0``; ids are never reused by a server.
        name: The session name (``-s NAME``; tmux names unnamed sessions ``0``, ``1``...
            so a name can look like another session's id); None when tmux did not answer.
        server: The tmux server process, when it is an ancestor.
        created_by_server: True when this is the session the server's own command line
            created (the first session, ``$0``, of a server started by ``new-session``).
    """

    socket: str | None
    session_id: str | None
    name: str | None
    server: Proc | None
    created_by_server: bool

    def describe(self) -> str:
        """``tmux session `train` ($0) on `/tmp/tmux-0/default```: the name and the
        socket path are chosen by the session's user (``tmux -S PATH new -s NAME``), so
        both are quoted (:func:`~watchdog.hosttext.code_span`): unquoted, a path such as
        ``/tmp/s, from cron /etc/cron.d/x:1`` read as the product naming another origin."""
        if self.name is not None:
            text = f"tmux session {code_span(clip(self.name, 80))}"
            if self.session_id:
                text += f" ({self.session_id})"
        elif self.session_id:
            text = f"tmux session {self.session_id} (name unknown)"
        else:
            text = "tmux session (unknown)"
        if self.socket:
            text += f" on {code_span(clip(self.socket, 160))}"
        return text


_TMUX_FORMAT = "#{pane_pid}\t#{session_id}\t#{session_name}"
#: A tmux session id as tmux writes it (``$0``): anything else from the server is refused.
_SESSION_ID = re.compile(r"\$[0-9]{1,9}")


def _server_socket(server: Proc) -> str | None:
    argv = list(server.cmdline)
    for i, arg in enumerate(argv[:-1]):
        if arg == "-S":
            return argv[i + 1]
        if arg == "-L" and server.uid is not None:
            return f"/tmp/tmux-{server.uid}/{argv[i + 1]}"
    if server.uid is not None:
        return f"/tmp/tmux-{server.uid}/default"
    return None


def _server_created_first(server: Proc) -> bool:
    """The server was started by a command that creates a session (``new-session``)."""
    return any(a in ("new-session", "new") for a in server.cmdline[1:])


def tmux_session(lineage: Sequence[Proc], ctx: ResolveContext) -> TmuxSession | None:
    """The tmux session ``lineage[0]`` runs in: socket, session id and name.

    The ``TMUX`` variable (tmux(1): ``socket,server-pid,session-id``) carries the
    session's *id* number, not its name; the name comes from the server itself:
    ``tmux -S SOCKET list-panes -a -F '#{pane_pid} #{session_id} #{session_name}'``,
    matching a pane's process against the lineage (exact even when a session is
    literally named like another's id).

    Args:
        lineage: The process and its ancestors, nearest first.
        ctx: Context (``run_cmd`` runs tmux; the environment is read through the table).

    Returns:
        The session, or None when there is no tmux clue.
    """
    socket: str | None = None
    id_num: str | None = None
    for proc in lineage:
        env = ctx.table.environ(proc.pid) or {}
        if env.get("TMUX"):
            parts = env["TMUX"].split(",")
            socket = parts[0] or None
            id_num = parts[2] if len(parts) >= 3 else None
            break
    server_idx = next((i for i, p in enumerate(lineage) if i > 0 and _names(p) & _TMUX), None)
    server = lineage[server_idx] if server_idx is not None else None
    if socket is None and server is not None:
        socket = _server_socket(server)
    if socket is None and id_num is None:
        return None
    session_id = f"${id_num}" if id_num is not None and id_num.isdigit() else None
    name: str | None = None
    res: CommandResult | None = None
    if socket is not None:
        key = f"tmux:panes:{socket}"
        cached = ctx.cache.get(key)
        if isinstance(cached, CommandResult):
            res = cached
        elif key not in ctx.cache:
            argv = ["tmux", "-S", socket, "list-panes", "-a", "-F", _TMUX_FORMAT]
            res = ctx.run_cmd(argv, 5.0)
            ctx.cache[key] = res
    if res is not None and res.ok:
        panes = {}
        for line in str(res.stdout).splitlines():
            pid_text, _, rest = line.partition("\t")
            sid, _, sname = rest.partition("\t")
            if pid_text.isdigit():
                panes[int(pid_text)] = (sid, sname)
        pane = next((panes[p.pid] for p in lineage if p.pid in panes), None)
        if pane is not None:
            sid, name = pane
            # The answer comes from whatever serves the socket (the job owner's own tmux
            # build): an id that is not tmux's ``$N`` is not shown, unquoted, as one.
            session_id = sid if _SESSION_ID.fullmatch(sid) else None
        elif session_id is not None:
            name = next((n for s, n in panes.values() if s == session_id), None)
    created = server is not None and session_id == "$0" and _server_created_first(server)
    return TmuxSession(socket, session_id, name, server, created)


def _names(proc: Proc) -> set[str]:
    names = {exe_name(proc)}
    if proc.cmdline:
        names.add(proc.cmdline[0].rsplit("/", 1)[-1])
        names.add(proc.cmdline[0].split(":", 1)[0])  # "sshd: alice@pts/0", "tmux: server"
    return names


_ADDRESS = re.compile(r"[0-9A-Za-z.:%_-]{1,64}")


def _address(text: str) -> str:
    """An address or port from the environment (which its user may set to anything):
    as it is when it looks like one, else quoted."""
    return text if _ADDRESS.fullmatch(text) else code_span(clip(text, 64))


def _env(value: str) -> str:
    # A variable's value in evidence: its user may set it to anything, so it is quoted
    # unless it is one plain word.
    return plain_or_code(value, 120)


def _env_clues(lineage: Sequence[Proc], ctx: ResolveContext, clues: _Clues) -> None:
    found: set[str] = set()
    for proc in lineage:
        env = ctx.table.environ(proc.pid)
        if not env:
            continue
        if "ssh" not in found and (env.get("SSH_CONNECTION") or env.get("SSH_CLIENT")):
            found.add("ssh")
            key = "SSH_CONNECTION" if env.get("SSH_CONNECTION") else "SSH_CLIENT"
            parts = env[key].split()
            if len(parts) >= 2:
                clues.client = parts[0]
                clues.remote.append(f"ssh from {_address(parts[0])} port {_address(parts[1])}")
                clues.evidence.append(
                    f"{key}={_env(env[key])} in the environment of PID {proc.pid}"
                )
        if "tmux" not in found and env.get("TMUX"):
            found.add("tmux")
            clues.mux.append("tmux")  # named below, from the server
            clues.evidence.append(f"TMUX={_env(env['TMUX'])} in the environment of PID {proc.pid}")
        if "screen" not in found and env.get("STY"):
            found.add("screen")
            clues.mux.append(f"screen session {code_span(clip(env['STY'], 80))}")
            clues.evidence.append(f"STY={_env(env['STY'])} in the environment of PID {proc.pid}")


def _ancestor_clues(lineage: Sequence[Proc], clues: _Clues) -> None:
    for proc in lineage[1:]:
        names = _names(proc)
        if names & _REMOTE:
            clues.evidence.append(
                f"ancestor PID {proc.pid} is {code_span(clip(proc.args_text, 200))}"
            )
            if not clues.remote:
                clues.remote.append(f"ssh session ({code_span(clip(proc.args_text, 80))})")
        elif names & _TMUX:
            clues.evidence.append(f"ancestor PID {proc.pid} is the tmux server")
            if not any(m.startswith("tmux") for m in clues.mux):
                clues.mux.append("tmux")
        elif names & _SCREEN:
            clues.evidence.append(f"ancestor PID {proc.pid} is screen")
            if not any(m.startswith("screen") for m in clues.mux):
                clues.mux.append(f"screen PID {proc.pid}")
        elif "login" in names and clues.login is None:
            clues.login = proc
            clues.evidence.append(f"ancestor PID {proc.pid} is login")


def _in_service(proc: Proc | None) -> bool:
    """True when ``proc`` lives in a service unit's cgroup (not a login session)."""
    if proc is None:
        return False
    info = parse_cgroup(proc.cgroup)
    if info is None or info.session is not None or info.unit is None:
        return False
    unit = info.user_unit or info.unit
    return unit.endswith(".service") and not unit.startswith("user@")


class ShellResolver:
    """Names the login session a job was started from by hand.

    Origin fields: ``session`` (summary such as ``ssh from 10.0.0.5 port 51234, tmux
    session 0``, or ``session-4.scope``), ``user``, ``client`` (ssh client address),
    ``tty``, ``login_session`` (logind scope). Remediation ``kill -TERM -- -PGID`` for
    the job's own process group, else ``kill -TERM PID``.
    """

    name = "shell"

    def resolve(self, lineage: Sequence[Proc], ctx: ResolveContext) -> Origin | None:
        """See :class:`~watchdog.lineage.base.OriginResolver`."""
        if not lineage:
            return None
        proc = lineage[0]
        clues = _Clues()
        _env_clues(lineage, ctx, clues)
        _ancestor_clues(lineage, clues)
        if "tmux" in clues.mux:
            tmux = tmux_session(lineage, ctx)
            if tmux is not None and tmux.created_by_server and _in_service(tmux.server):
                # A unit's ExecStart created this session: the unit starts it again
                # (the systemd resolver names it, with the session as detail).
                return None
            clues.tmux = tmux
            text = tmux.describe() if tmux is not None else "tmux session (unknown)"
            clues.mux[clues.mux.index("tmux")] = text
        tty = controlling_tty(ctx.table.proc_root, proc.pid)
        info = parse_cgroup(proc.cgroup)
        scope = info.session if info is not None else None
        if tty is not None:
            clues.evidence.append(f"PID {proc.pid} has terminal {plain_or_code(tty)}")
        if scope is not None:
            clues.evidence.append(
                f"cgroup of PID {proc.pid} is login session {plain_or_code(scope)}"
            )
        parts = clues.remote + clues.mux
        if not parts and clues.login is not None:
            parts.append(f"login on {tty}" if tty else "console login")
        if not parts and tty is not None:
            parts.append(f"terminal {tty}")
        if not parts and scope is not None:
            parts.append(scope)
        if not parts:
            return None
        session = ", ".join(parts)
        user = proc.user or "the owner"
        ask = f"ask {user}; the job was started by hand from {session}"
        clues.evidence.append(ask)
        if proc.pgid > 1 and (proc.pgid != proc.sid or proc.pgid == proc.pid):
            remediation = f"kill -TERM -- -{proc.pgid}"
        else:
            # The job shares the session leader's group: killing the group would end
            # the person's login shell too.
            remediation = f"kill -TERM {proc.pid}"
        return ShellOrigin(
            evidence=tuple(clues.evidence),
            remediation=remediation,
            session=session,
            user=proc.user,
            client=clues.client,
            tty=tty,
            login_session=scope,
            tmux_socket=clues.tmux.socket if clues.tmux else None,
            tmux_session=clues.tmux.name if clues.tmux else None,
            tmux_session_id=clues.tmux.session_id if clues.tmux else None,
        )

"""The origin-resolver protocol and the context every resolver reads from.

A resolver looks at a process and its ancestors (the lineage) and answers "I know who
started this" with an :class:`~watchdog.model.Origin`, or None to pass; an answer that
also carries notes for whichever origin wins is a :class:`Resolved`. Resolvers run in
registry order; the first answer wins, so more specific spawners (Slurm, containers, cron)
come before generic ones (systemd unit, orphan).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .. import hostpaths
from ..command import CommandRunner, run
from ..hosttext import plain_or_code
from ..model import Origin, Proc
from ..sources.procfs import ProcessTable

if TYPE_CHECKING:
    from ..config import Paths


@dataclass
class ResolveContext:
    """Everything a resolver may read, injected so fixture trees can stand in.

    Attributes:
        table: The refreshed process table.
        now: Wall-clock time used for ``next_run`` computations (timezone-aware).
        cron_files: ``/etc/crontab`` and its kin; see :mod:`watchdog.lineage.cron`.
        cron_d_dir: Directory of system crontab fragments (``/etc/cron.d``).
        cron_spool_dirs: User crontab directories, Debian's first.
        unit_dirs: systemd unit search path for reading unit and timer files.
        run_cmd: Runs helper commands (systemctl, squeue, scontrol):
            :func:`watchdog.command.run`; tests pass a
            :class:`~watchdog.command.RecordingRunner`.
        use_systemctl: Ask a running systemd via ``systemctl show`` when True.
        use_slurm_cli: Ask Slurm via ``squeue``/``scontrol`` when True.
        cache: Scratch space for one scan (answers of ``squeue``, ``systemctl``).
        persistent: Kept across scans by a :class:`~watchdog.scan.Scanner`; only for
            entries validated on use (parsed files keyed by mtime and size).
        exe_owner: Owner UID of a process's executable file, or None when it cannot be
            read; None here stats ``/proc/PID/exe`` under the table's ``proc_root``
            (see :func:`exe_owner`). Fixture trees pass their own.
    """

    table: ProcessTable
    now: datetime
    cron_files: Sequence[str] = (hostpaths.CRONTAB,)
    cron_d_dir: str = hostpaths.CRON_D
    cron_spool_dirs: Sequence[str] = hostpaths.CRON_SPOOL_DIRS
    unit_dirs: Sequence[str] = hostpaths.UNIT_DIRS
    run_cmd: CommandRunner = run
    use_systemctl: bool = True
    use_slurm_cli: bool = True
    cache: dict[str, object] = field(default_factory=dict)
    persistent: dict[str, object] = field(default_factory=dict)
    exe_owner: Callable[[Proc], int | None] | None = None

    @classmethod
    def on_host(cls, paths: Paths, table: ProcessTable, now: datetime, **kw: Any) -> ResolveContext:
        """A context that reads crontabs and units where a configuration's ``paths``
        say (``paths.crontab``, ``cron_d``, ``cron_spool``, ``unit_dirs``): the daemon's
        scans and the commands that read a recorded origin again use the same ones.

        Args:
            paths: The configuration's host paths.
            table: The process table to resolve in.
            now: The time resolvers judge at.
            **kw: Any other field (``persistent``...).
        """
        return cls(
            table=table, now=now, cron_files=(paths.crontab,), cron_d_dir=paths.cron_d,
            cron_spool_dirs=paths.cron_spool, unit_dirs=paths.unit_dirs, **kw,
        )  # fmt: skip


@dataclass(frozen=True)
class Resolved:
    """A resolver's answer with the notes it leaves for whichever origin wins: what it
    refused to believe (a Slurm job id only the environment claims, a process that only
    looks like cron), so a person reading the winning origin sees the doubt.

    Attributes:
        origin: The origin, or None when this resolver passes.
        notes: Evidence lines, in the order found.
    """

    origin: Origin | None
    notes: tuple[str, ...] = ()


#: What :meth:`OriginResolver.resolve` answers: an origin, a pass (None), or either with
#: notes (:class:`Resolved`).
Answer = Origin | Resolved | None


def with_notes(answer: Answer, notes: Sequence[str]) -> Answer:
    """``answer`` with ``notes`` before the notes it already carries (the order they
    were found in); ``answer`` itself when there are none."""
    if not notes:
        return answer
    if isinstance(answer, Resolved):
        return Resolved(answer.origin, (*notes, *answer.notes))
    return Resolved(answer, tuple(notes))


def split_answer(answer: Answer) -> tuple[Origin | None, tuple[str, ...]]:
    """The origin (or None) and the notes of a resolver's answer."""
    if isinstance(answer, Resolved):
        return answer.origin, answer.notes
    return answer, ()


def exe_owner(proc: Proc, ctx: ResolveContext) -> int | None:
    """Owner UID of the file ``proc`` executes.

    ``stat`` of the ``/proc/PID/exe`` magic link reaches the very inode the process runs
    (in any mount namespace, even deleted), so a binary that merely carries a system
    daemon's name or path in another namespace shows its real owner (proc(5)).

    Args:
        proc: The process.
        ctx: Gives ``exe_owner`` (fixtures) or the table's ``proc_root``.

    Returns:
        The UID, or None when the link cannot be followed (permission, exited process).
    """
    if ctx.exe_owner is not None:
        return ctx.exe_owner(proc)
    try:
        return os.stat(f"{ctx.table.proc_root}/{proc.pid}/exe").st_uid
    except OSError:
        return None


def exe_path(proc: Proc) -> str | None:
    """The resolved executable path, without the kernel's `` (deleted)`` suffix."""
    return proc.exe.removesuffix(" (deleted)") if proc.exe else None


def system_daemon(proc: Proc, ctx: ResolveContext, known: Callable[[str], bool]) -> str | None:
    """Why ``proc`` is not a system daemon whose binary ``known`` accepts; None when it is.

    A daemon is recognised by the executable the kernel runs (``/proc/PID/exe``), never
    by ``argv[0]`` or ``comm``, which any process sets (``exec -a``, prctl(PR_SET_NAME)):
    its resolved path must be accepted by ``known``, the file must belong to root (no
    one else can place a file there) and the process must run as root.

    Args:
        proc: The candidate ancestor.
        ctx: Resolve context (for the executable's owner).
        known: Predicate over the resolved executable path.

    Returns:
        None when all three hold, else a phrase such as
        ``its executable /tmp/x/cron is not a known cron binary``.
    """
    path = exe_path(proc)
    if path is None:
        return "its executable could not be read"
    if not known(path):
        return f"its executable {_path(path)} is not a known binary of that daemon"
    owner = exe_owner(proc, ctx)
    if owner != 0:
        who = "could not be checked" if owner is None else f"is UID {owner}, not root"
        return f"the owner of its executable {_path(path)} {who}"
    if proc.uid != 0:
        return (
            f"it runs as {'an unknown user' if proc.uid is None else f'UID {proc.uid}'}, not root"
        )
    return None


class OriginResolver(Protocol):
    """A pluggable origin resolver.

    Attributes:
        name: Short identifier used in logs and ``explain``.
    """

    name: str

    def resolve(self, lineage: Sequence[Proc], ctx: ResolveContext) -> Answer:
        """Name the origin of ``lineage[0]``.

        Args:
            lineage: The process and its ancestors, nearest first, ending at the
                namespace's PID 1 (or earlier where a parent is not visible).
            ctx: Shared read-only context.

        Returns:
            The origin, or None when this resolver does not recognise the lineage;
            either as a :class:`Resolved` when it leaves notes for whichever origin wins.

        Resolvers must not raise for unreadable files or vanished processes; they pass.
        """
        ...


@runtime_checkable
class Rechecks(Protocol):
    """A resolver that can read its kind's source again for an origin found earlier (a
    running job's kept origin, a recorded run's): the kind's own host reads, asked of
    every resolver so that no caller names a kind."""

    def recheck(self, origin: Origin, ctx: ResolveContext) -> Origin | None:
        """``origin`` as its source stands now (a crontab line since commented out, an at
        queue read again), or None when ``origin`` is not this resolver's kind."""
        ...

    def gone_now(self, origin: Origin, ctx: ResolveContext) -> str | None:
        """Why a recorded origin's source no longer exists (``its crontab entry is
        removed now``, ``its unit file F is gone``), or None."""
        ...


def recheck(origin: Origin, ctx: ResolveContext, resolvers: Sequence[object]) -> Origin:
    """``origin`` as its kind's resolver among ``resolvers`` reads it now; unchanged when
    none rechecks its kind."""
    for resolver in resolvers:
        if isinstance(resolver, Rechecks):
            now = resolver.recheck(origin, ctx)
            if now is not None:
                return now
    return origin


def gone_now(origin: Origin, ctx: ResolveContext, resolvers: Sequence[object]) -> str | None:
    """Why ``origin``'s source no longer exists, as its kind's resolver among
    ``resolvers`` reads it now, or None."""
    for resolver in resolvers:
        if isinstance(resolver, Rechecks):
            why = resolver.gone_now(origin, ctx)
            if why is not None:
                return why
    return None


# Programs that run another command and keep its command line in their own: shells
# (`sh -c CMD`), terminal multiplexers (the tmux server keeps `new-session CMD`), privilege
# and scheduling wrappers, remote and container clients. They are lineage, never the
# training process itself, and a command line match on them says nothing.
WRAPPERS = frozenset(
    {
        # shells
        "sh", "dash", "bash", "zsh", "ksh", "mksh", "busybox", "fish", "csh", "tcsh",
        # multiplexers and terminals
        "tmux", "screen", "SCREEN", "script", "dtach", "abduco",
        # privilege, scheduling and process wrappers
        "sudo", "su", "runuser", "setpriv", "doas", "timeout", "nohup", "env", "setsid",
        "nice", "ionice", "taskset", "numactl", "chrt", "stdbuf", "flock", "xargs",
        "watch", "time", "strace", "ltrace", "unbuffer", "systemd-run", "run-parts",
        # schedulers' clients and remote or container clients
        "at", "batch", "sbatch", "srun", "salloc", "ssh", "docker", "podman", "nerdctl",
        "kubectl", "crictl",
    }
)  # fmt: skip


# Programs that run a script named on their command line (``python3 /opt/x/train.py``):
# the script, not the interpreter, is what identifies the job, what a crontab line or
# unit file mentions, and what can be quarantined. Versioned names count too
# (``python3.11``, ``pypy3``, ``perl5.36``, ``ruby3.1``), as Debian installs them.
INTERPRETER = re.compile(
    r"^(python[0-9.]*|pypy[0-9.]*|bash|sh|dash|zsh|ksh|perl[0-9.]*|ruby[0-9.]*|node|Rscript)$"
)


def is_interpreter(path: str) -> bool:
    """True when the program at ``path`` (or of that basename) runs a script file.

    Args:
        path: An executable path or ``argv[0]``, e.g. ``/usr/bin/python3.11``.
    """
    return bool(INTERPRETER.match(path.rsplit("/", 1)[-1]))


def script_argument(argv: Sequence[str]) -> str | None:
    """The script an interpreter runs: its first argument that is not an option.

    Args:
        argv: A command line, e.g. ``("python3", "-u", "/opt/x/train.py", "--lr", "1")``.

    Returns:
        ``/opt/x/train.py`` for the example; None when ``argv[0]`` is not an
        interpreter (:data:`INTERPRETER`) or no argument follows it. For
        ``python3 -m pkg`` this is the module name, which is still the word a crontab
        line or unit file would contain.
    """
    if not argv or not is_interpreter(argv[0]):
        return None
    return next((arg for arg in argv[1:] if not arg.startswith("-")), None)


# Interpreter options that take the next argument as their value (python(1), perl(1),
# ruby(1), node(1)): that value is not the program. ``-c``/``-e``/``-m`` take the code
# or module, which is.
_OPTION_VALUES = frozenset({"-W", "-X", "-Q", "--check-hash-based-pycs", "-I", "-r", "--require"})
_CODE_OPTIONS = frozenset({"-c", "-m", "-e", "-E", "--eval"})


def program_span(argv: Sequence[str]) -> int:
    """How many characters of the space-joined command line name what runs.

    For an interpreter (:data:`INTERPRETER`): ``argv[0]``, its options and its program
    argument (the script, or the module after ``-m``, the code after ``-c``); for any
    other program, ``argv[0]``. What follows is the program's arguments: data, which
    may name a script without running it (``tail -f train.py``, ``vim train.py``,
    ``pgrep -f train.py``, ``python3 eval.py --from train.py``).

    ``-c CODE``, ``-e CODE`` and ``--eval=CODE`` end the span at the option: the code is
    what runs, and a script name inside it (``python3 -c "print(1)  # train.py"``) is
    text; ``-`` (a program on stdin) ends it before.

    Args:
        argv: A command line.

    Returns:
        A length into ``" ".join(argv)``; 0 for an empty command line.
    """
    if not argv:
        return 0
    end = 1
    if is_interpreter(argv[0]):
        i = 1
        while i < len(argv):
            arg = argv[i]
            if arg == "-":
                end = i  # the program comes on stdin: nothing here names it
                break
            if arg == "-m" or (arg.startswith("-m") and len(arg) > 2 and arg[1] == "m"):
                end = min(len(argv), i + (2 if arg == "-m" else 1))  # the module runs
                break
            if arg in _CODE_OPTIONS or arg.startswith(("--eval=", "-c", "-e")):
                end = i + 1  # code follows (or is attached): a name inside it is data
                break
            if not arg.startswith("-"):
                end = i + 1
                break
            i += 2 if arg in _OPTION_VALUES else 1
            end = min(len(argv), i)
    return len(" ".join(argv[:end]))


class Searcher(Protocol):
    """A compiled pattern: :class:`re.Pattern` or the configuration's RE2 ``Regex``."""

    def search(self, text: str) -> Any:
        """The leftmost match (with ``start()``), or None."""
        ...


def runs_program(argv: Sequence[str], pattern: Searcher) -> bool:
    """True when ``pattern`` matches the space-joined command line at a place that names
    what runs (:func:`program_span`), not only at an argument: the leftmost match must
    start there."""
    m = pattern.search(" ".join(argv))
    return m is not None and int(m.start()) < program_span(argv)


def program_of(cmdline: Sequence[str]) -> tuple[str, ...]:
    """What a command line runs, for telling two processes run the same program: the
    part :func:`program_span` covers (interpreter, its options and its program
    argument; or the program), argv[0] by its basename.

    ``python3 /srv/train.py --rank 3`` and ``/usr/bin/python3 -u /srv/train.py`` run the
    same program; ``python3 /srv/check_train.py`` and ``python3 /srv/webapp`` do not.
    """
    if not cmdline:
        return ()
    span = program_span(cmdline)
    words: list[str] = []
    used = 0
    for arg in cmdline:
        if used >= span:
            break
        words.append(arg)
        used += len(arg) + 1
    rest = [w for w in words[1:] if w == "-m" or not w.startswith("-")]
    rest += [w for w in words[1:] if w.startswith(("-m", "-c", "-e", "--eval")) and w != "-m"]
    return (words[0].rsplit("/", 1)[-1], *rest)


def mentions(text: str, key: str) -> bool:
    """True when ``key`` (a script or program name) appears in ``text`` as a whole path
    component: ``train.py`` in ``sh -c 'python3 /srv/train.py'``, never in
    ``retrain.py`` or ``train.py.bak``."""
    pattern = r"(?:^|[\s/'\"=;&|(])" + re.escape(key) + r"(?:$|[\s'\";&|)])"
    return re.search(pattern, text) is not None


def command_key(cmdline: Sequence[str]) -> str | None:
    """What a wrapper's command line must contain to be running this command: the script
    (the first argument naming a file with a suffix), else the program's basename.

    Args:
        cmdline: A job root's argv, e.g. ``("python3", "/srv/x/train.py", "--lr", "1")``.

    Returns:
        ``train.py`` for the example; None for an empty command line.
    """
    for arg in cmdline[1:]:
        if not arg.startswith("-") and "." in os.path.basename(arg):
            return os.path.basename(arg)
    return os.path.basename(cmdline[0]) if cmdline else None


def is_wrapper(proc: Proc) -> bool:
    """True when ``proc`` only wraps another command (see :data:`WRAPPERS`)."""
    return exe_name(proc) in WRAPPERS


def exe_name(proc: Proc) -> str:
    """Basename of the executable, falling back to argv[0], then ``comm``.

    ``comm`` is the last resort only: it is truncated to 15 characters and can be
    renamed by the process itself.
    """
    if proc.exe:
        return proc.exe.rsplit("/", 1)[-1].removesuffix(" (deleted)")
    if proc.cmdline:
        return proc.cmdline[0].rsplit("/", 1)[-1]
    return proc.comm


def _is_control(ch: str) -> bool:
    code = ord(ch)
    return (
        code < 0x20
        or code == 0x7F
        or 0x80 <= code < 0xA0
        or code in (0x2028, 0x2029)
        or 0xD800 <= code < 0xE000  # lone surrogates: undecodable bytes from the host
    )


def _escape(ch: str) -> str:
    code = ord(ch)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch)
    if named is not None:
        return named
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape'd byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def quote_arg(arg: str) -> str:
    """One argument, quoted for a shell and kept on one line.

    Plain text gets ``shlex.quote``. An argument holding a control character (a newline
    in a supervisor group name, an ESC) gets bash/zsh/ksh ANSI-C quoting ``$'...'`` with
    the character escaped, so the pasted line is still one command with that exact
    argument instead of a second line.
    """
    if not any(_is_control(ch) for ch in arg):
        return shlex.quote(arg)
    body = []
    for ch in arg:
        if ch in "\\'":
            body.append("\\" + ch)
        elif _is_control(ch):
            body.append(_escape(ch))
        else:
            body.append(ch)
    return "$'" + "".join(body) + "'"


def command(*argv: object) -> str:
    """One shell command line a person can paste: every argument quoted.

    Values from the host (program names, paths, users, container namespaces) are
    hostile text: quoting keeps ``; touch /tmp/x #`` one argument, and control
    characters never break the line (see :func:`quote_arg`).

    Args:
        argv: Program and arguments; non-strings are converted with ``str``.

    Returns:
        The command on one line, e.g. ``supervisorctl stop 'grp:x; touch /tmp/x #'``.
    """
    return " ".join(quote_arg(str(a)) for a in argv)


def _path(path: str) -> str:
    # An executable's path in a refusal note (evidence): inert and quoted unless it is
    # one plain word, so no file name reads as the product's own words.
    return plain_or_code(comment(path))


def comment(text: str) -> str:
    """Text safe to put after ``#`` on a pasted command line: one line, no controls.

    Control characters (a newline would end the comment and run the rest) are shown as
    ``\\n``-style escapes; everything else is kept for people to read.
    """
    return "".join(_escape(ch) if _is_control(ch) else ch for ch in text)

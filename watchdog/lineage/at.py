"""at(1) origin: a process started by ``atd`` from a queued at/batch job.

atd (at 3.x, ``atd.c`` run_file) forks a child per job; the child runs ``/bin/sh`` with
the job file as stdin, so the tree is ``atd`` → ``atd`` → ``sh`` → the job, and the
shell's fd 0 points at the job file: ``<spool>/atjobs/QNNNNNMMMMMMMM`` (queue letter,
job number in 5 hex digits, scheduled minute since the epoch in 8 hex digits), shown as
deleted because atd renames a running job to ``=NNNNNMMMMMMMM``. The job output file in
``atspool`` carries the same name, a fallback when fd 0 is unreadable.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime

from .. import safeio
from ..hosttext import plain_or_code
from ..model import AtOrigin, Origin, Proc
from .base import _CODE_OPTIONS, _OPTION_VALUES, ResolveContext, exe_name, is_interpreter

#: at(1) spool directories (Debian's, and the upstream default): where a run whose own job
#: file is gone looks for its queued copies, and the only spools disable-source touches.
AT_SPOOLS: tuple[str, ...] = ("/var/spool/cron/atjobs", "/var/spool/at")
_JOB_NAME = re.compile(r"([A-Za-z=])([0-9a-f]{5})([0-9a-f]{8})")
_MAX_JOB_BYTES = 1 << 20


def parse_job_name(name: str) -> tuple[str, int, datetime] | None:
    """Split an at spool file name.

    Args:
        name: Base name such as ``a0000101c8be6a`` (a trailing `` (deleted)`` is ignored).

    Returns:
        ``(queue letter, job number, scheduled time in UTC)``, or None when the name is
        not an at job file. Source: at 3.x ``at.c`` (``"%c%5lx%8lx"``).
    """
    m = _JOB_NAME.fullmatch(name.removesuffix(" (deleted)"))
    if m is None:
        return None
    when = datetime.fromtimestamp(int(m.group(3), 16) * 60, UTC)
    return m.group(1), int(m.group(2), 16), when


def job_commands(text: str) -> str:
    """The user's commands in an at job file: what follows atd's ``cd DIR || {...}`` block.

    One pass over the lines (a job file is host text up to 1 MiB: a crafted one with many
    ``cd a || {`` lines and no ``}`` made the search quadratic, hostile tester i).

    Args:
        text: The job file (a shell script written by at(1)).

    Returns:
        The commands, stripped; the whole text when the block is not found. A job file
        whose commands are a whole saved job file (``#!/bin/sh`` then ``# atrun``) gives
        the commands of that one.
    """
    lines = text.splitlines()
    start = 0  # where the commands begin: after the last preamble found
    i = 0
    while i < len(lines):
        line = lines[i]
        if not (line.startswith("cd ") and line.rstrip().endswith("|| {")):
            i += 1
            continue
        # The first `}` after the first preamble line closes it; a later `cd … || {`
        # line cannot find one further on if this one found none.
        close = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "}"), None)
        if close is None:
            break
        start = close + 1
        k = start
        while k < len(lines) and not lines[k].strip():
            k += 1
        # A saved job file queued again whole (disable-source's undo): its own preamble
        # restores its environment and directory; the commands are the ones inside it.
        if (
            k + 1 < len(lines)
            and lines[k].lstrip() == "#!/bin/sh"
            and lines[k + 1].startswith("# atrun ")
        ):
            i = k
            continue
        return "\n".join(lines[start:]).strip()
    return "\n".join(lines[start:]).strip() if start else text.strip()


class AtResolver:
    """Resolve processes started by atd to their at job.

    Attributes:
        name: ``at``.
    """

    name = "at"

    def resolve(self, lineage: Sequence[Proc], ctx: ResolveContext) -> Origin | None:
        """Name the at job that started ``lineage[0]``.

        Args:
            lineage: The process and its ancestors, nearest first.
            ctx: Process table (for ``/proc`` reads).

        Returns:
            An origin of kind ``at`` with ``job``, ``queue``, ``user``, ``scheduled``
            (ISO 8601), ``command``, ``file`` and ``pending_same_command`` (numbers of
            queued jobs with the same commands, the usual self-rescheduling pattern), or
            None when no ancestor is atd. ``job`` is None when the spool is unreadable.
        """
        idx = next((i for i in range(1, len(lineage)) if exe_name(lineage[i]) == "atd"), None)
        if idx is None:
            return None
        child = lineage[idx]
        shell = lineage[idx - 1]
        ran = plain_or_code(child.exe) if child.exe else _shown(child.args_text[:200])
        evidence = [f"ancestor PID {child.pid} is atd ({ran})"]
        found = _job_file(ctx, shell.pid) or _job_file(ctx, child.pid)
        if found is None:
            evidence.append("job file not visible in /proc fds (permission or it exited)")
            return _unread_job(shell, lineage[: idx - 1], shell.user, evidence)
        spool, name = found
        queue, job, when = parse_job_name(name) or ("?", 0, datetime.fromtimestamp(0, UTC))
        running = f"{spool}/={name[1:]}"
        text = _read(running) or _read(f"{spool}/{name}")
        command = job_commands(text) if text is not None else None
        evidence.append(f"job shell PID {shell.pid} reads at job {job} (queue {queue})")
        pending = _pending_same(spool, command) if command else []
        if pending:
            evidence.append(_queued(pending))
        # atrm of a RUNNING job only warns ("deleting running job") and leaves the run:
        # it is named for the queued copies alone; the run is terminate's.
        remediation = "atrm " + " ".join(map(str, pending)) if pending else None
        return AtOrigin(
            evidence=tuple(evidence),
            remediation=remediation,
            job=job,
            queue=queue,
            user=shell.user,
            scheduled=when.astimezone(ctx.now.tzinfo).isoformat(),
            command=command,
            file=running,
            pending_same_command=tuple(pending),
        )

    def recheck(self, origin: Origin, ctx: ResolveContext) -> Origin | None:
        """A kept at origin with its queue read live (issue 31, case 3), also once its
        shell has ended (trust simulator, seed 6502: a kept origin still named a removed
        job); None for other kinds."""
        return with_live_queue(origin) if isinstance(origin, AtOrigin) else None

    def gone_now(self, origin: Origin, ctx: ResolveContext) -> str | None:
        """Never: an at job's record answers for itself."""
        return None


def _unread_job(
    shell: Proc, below: Sequence[Proc], user: str | None, evidence: list[str]
) -> AtOrigin:
    """The origin of a run whose job file was not read (the run ended and atd removed
    it, seen only at its exec; or its fds are not ours to read): its queued copies are
    the queued jobs of the same owner that run the same program (simulator seed 67601: a
    run that exited was terminated with ``ok`` while the next run of its job was queued).

    The program is what the job's shell runs (its child, ``below[-1]``, or the shell
    itself when the job's commands ``exec`` it): what a copy's command line names. A
    job of another user, or one that only mentions the name (``echo train.py``), or runs
    another program through the same interpreter, is no copy (hostile tester i). Jobs of
    the same owner that are neither proven copies nor ruled out (unreadable, unparsed,
    a program given by a variable) are ``queued_unsure``: the run may come back.
    """
    run = below[-1] if below else shell
    uid = shell.uid if shell.uid is not None else run.uid
    program = program_of(run.cmdline)
    match = _match_text(program)
    if uid is None:
        evidence.append("the run's owner is unknown: no queued job is matched to it")
    scan = _scan_queue(uid, program)
    if scan is None:
        evidence.append("atd's queue was not read: whether it runs this again is unknown")
        return AtOrigin(
            evidence=tuple(evidence), user=user, uid=uid, queued_match=match, queue_read=False
        )
    pending, unsure = scan
    evidence.extend(_queue_lines(pending, unsure, match))
    return AtOrigin(
        evidence=tuple(evidence),
        remediation="atrm " + " ".join(map(str, pending)) if pending else None,
        user=user,
        pending_same_command=tuple(pending),
        queued_match=match,
        uid=uid,
        queued_unsure=tuple(unsure),
        queue_read=True,
    )


def _queue_lines(pending: Sequence[int], unsure: Sequence[int], match: str | None) -> list[str]:
    what = _shown(match) if match else "this run's program"
    lines = []
    if pending:
        lines.append(
            f"queued jobs {', '.join(map(str, pending))} of the same user run {what}: the "
            "job re-schedules itself (its own job file was not read, so matched by "
            "program, not by the whole job)"
        )
    if unsure:
        lines.append(
            f"queued jobs {', '.join(map(str, unsure))} of the same user may run {what}: "
            "not read or not parsed far enough to rule it out"
        )
    return lines


def _shown(text: str) -> str:
    # Host text in the product's sentence: quoted, so a path cannot read as its words.
    return "`" + text.replace("`", "\\x60") + "`"


# -- what a command runs ------------------------------------------------------------------

#: What a run or a queued command runs: ``("path", "/abs/script")``, ``("module",
#: "python3 -m pkg")`` (interpreter base name and module), or ``("name", "train.py")``
#: (a base name only: a relative path with no known directory, or a program found on
#: PATH), which never proves a copy.
Program = tuple[str, str]

# Programs that run another command given in their arguments, with options of their
# own: what they run is not read here (a same-owner job running one is not ruled out).
_WRAPPED = frozenset(
    {
        "sudo", "su", "runuser", "setpriv", "doas", "timeout", "env", "setsid", "nice",
        "ionice", "taskset", "numactl", "chrt", "stdbuf", "flock", "xargs", "watch",
        "strace", "ltrace", "unbuffer", "systemd-run", "srun", "script", "tmux", "screen",
        "dtach", "abduco", "run-parts", "eval", "source", ".",
    }
)  # fmt: skip
# Words a command may start with before the program it runs (sh(1) reserved words and
# builtins that run the rest as the command).
_PREFIX = frozenset({"!", "{", "(", "if", "then", "else", "elif", "do", "while", "until",
                     "time", "exec", "nohup", "command", "builtin"})  # fmt: skip
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"(python|pypy)[0-9.]*")
_MODULE_TEXT = re.compile(r"(\S+) -m (.+)")
_HEADER = re.compile(r"#!/bin/sh\n# atrun uid=([0-9]+) gid=[0-9]+\n")
# Tokens of sh(1) (POSIX 2.3): blanks, newline, control operators, redirections (an
# IO number before them), quotes, escapes, comments and plain word characters.
_TOKEN = re.compile(
    r"""(?P<blank>[ \t\r]+)|(?P<nl>\n)|(?P<op>[;&|()])
    |(?P<redir>[0-9]*(?:<<-|<<<|<<|<>|<&|>&|>>|>\||[<>]))
    |(?P<sq>'[^']*')|(?P<dq>"(?:[^"\\]|\\.)*")|(?P<esc>\\.)|(?P<hash>\#)
    |(?P<plain>[^\s'"\\;&|()<>#]+)""",
    re.X | re.S,
)
_DQ_ESCAPE = re.compile(r'\\([$`"\\\n])')
_DYNAMIC = re.compile(r"[$`*?\[]")
# Tokens read from all queued job files for one run's origin: a crafted queue costs a
# bounded time; the jobs left are not ruled out.
_TOKEN_BUDGET = 50_000


def program_of(argv: Sequence[str], cwd: str | None = None) -> Program | None:
    """What a command line runs: its script or module, else its program.

    Args:
        argv: The words of a command, e.g. ``("python3", "-u", "/srv/train.py")``.
        cwd: The directory a relative script is resolved against; None when unknown.

    Returns:
        A :data:`Program`; None when nothing on the command line names it (``python3``
        alone or with ``-c CODE``, ``sh -c ...``, a program read from stdin).
    """
    return _program(argv, (False,) * len(argv), cwd)


def _program(words: Sequence[str], dynamic: Sequence[bool], cwd: str | None) -> Program | None:
    if not words or dynamic[0]:
        return None
    first = words[0]
    base = os.path.basename(first)
    if base in _WRAPPED:
        return None
    if not is_interpreter(first):
        if first.startswith("/"):
            return ("path", os.path.normpath(first))
        if "/" in first and cwd is not None:
            return ("path", os.path.normpath(os.path.join(cwd, first)))
        return ("name", base)
    i = 1
    while i < len(words):
        arg = words[i]
        if dynamic[i]:
            return None
        if arg.startswith("-m") and _PYTHON.fullmatch(base):
            module = arg[2:] or (words[i + 1] if i + 1 < len(words) else "")
            dyn = False if arg[2:] else (i + 1 < len(words) and dynamic[i + 1])
            return ("module", f"{base} -m {module}") if module and not dyn else None
        if arg == "--":
            i += 1
            continue
        if base in _SHELLS and arg.startswith(("-", "+")) and "c" not in arg and arg != "-":
            i += 2 if arg in ("-o", "+o") else 1  # sh(1) flags (`bash -e x.sh`): no code
            continue
        if arg == "-" or arg in _CODE_OPTIONS or arg.startswith(("--eval=", "-c", "-e", "-m")):
            return None  # the program is code on the line or stdin: not named
        if not arg.startswith("-"):
            if arg.startswith("/"):
                return ("path", os.path.normpath(arg))
            if cwd is not None:
                return ("path", os.path.normpath(os.path.join(cwd, arg)))
            return ("name", os.path.basename(arg))
        i += 2 if arg in _OPTION_VALUES else 1
    return None  # the interpreter reads its program from stdin


def _match_text(program: Program | None) -> str | None:
    if program is None:
        return None
    kind, text = program
    # A base name that would read back as a path or module is not kept (never proves).
    if kind == "name" and (text.startswith("/") or _MODULE_TEXT.fullmatch(text)):
        return None
    return text


def _program_of_match(text: str | None) -> Program | None:
    """:func:`_match_text` read back (an origin kept and its queue read again live)."""
    if not text:
        return None
    if text.startswith("/"):
        return ("path", text)
    m = _MODULE_TEXT.fullmatch(text)
    if m and _PYTHON.fullmatch(m.group(1)):
        return ("module", text)
    return ("name", text)


def _compare(run: Program | None, queued: Program | None) -> str:
    """``copy`` (the same script path, or interpreter and module), ``unsure`` (not
    proven, not ruled out) or ``no``."""
    if run is None or queued is None:
        return "unsure"
    if run == queued and run[0] != "name":
        return "copy"
    if "module" in (run[0], queued[0]):
        if run[0] != queued[0]:
            return "no"
        return "unsure" if run[1].split(" -m ", 1)[1] == queued[1].split(" -m ", 1)[1] else "no"
    # Two paths, or a base name: the same base name may be the same file (a link, a
    # directory not known); another base name is another program.
    same = os.path.basename(run[1]) == os.path.basename(queued[1])
    return "unsure" if same else "no"


def _after_heredocs(
    text: str, pos: int, heredocs: Sequence[tuple[str, bool]], budget: list[int]
) -> int | None:
    """Where the script goes on after the here-document bodies that start at ``pos``
    (each body's lines up to its delimiter's, ``<<-`` stripping leading tabs: sh(1),
    "Here-Documents"); ``len(text)`` when a body runs to the end (nothing after it is a
    command); None when ``budget`` (tokens left, one a line) runs out."""
    for delimiter, tabs in heredocs:
        while True:
            budget[0] -= 1
            if budget[0] < 0:
                return None
            if pos >= len(text):
                return len(text)
            nl = text.find("\n", pos)
            line = text[pos:] if nl < 0 else text[pos:nl]
            pos = len(text) if nl < 0 else nl + 1
            if (line.lstrip("\t") if tabs else line) == delimiter:
                break
    return pos


def _commands(text: str, budget: list[int]) -> list[list[tuple[str, bool]]] | None:
    """The simple commands of a shell script, each as its words (text, and whether the
    shell would expand it: ``$``, a backquote, a glob, a leading ``~``), in one pass.

    Quotes and escapes are removed as sh(1) does, comments (``#`` starting a word) and
    here-document bodies are skipped, redirections and their targets dropped; every
    control operator and newline ends a command. None when the text does not parse
    (an unterminated quote) or ``budget`` (tokens left) runs out.
    """
    out: list[list[tuple[str, bool]]] = []
    command: list[tuple[str, bool]] = []
    word: list[str] | None = None
    dyn = False
    skip_word = False  # the next word is a redirection's target
    heredocs: list[tuple[str, bool]] = []  # (delimiter, tabs stripped) to skip at newline
    want_delimiter: bool | None = None
    pos = 0

    def end_word() -> None:
        nonlocal word, dyn, skip_word, want_delimiter
        if word is None:
            return
        text_ = "".join(word)
        if want_delimiter is not None:
            heredocs.append((text_, want_delimiter))
            want_delimiter = None
        elif not skip_word:
            command.append((text_, dyn))
        skip_word = False
        word, dyn = None, False

    def end_command() -> None:
        nonlocal command
        end_word()
        if command:
            out.append(command)
        command = []

    while pos < len(text):
        budget[0] -= 1
        if budget[0] < 0:
            return None
        m = _TOKEN.match(text, pos)
        if m is None:
            return None  # an unterminated quote, or a lone backslash at the end
        kind = m.lastgroup
        tok = m.group()
        pos = m.end()
        if kind == "blank":
            end_word()
        elif kind == "nl":
            end_command()
            after = _after_heredocs(text, pos, heredocs, budget)
            if after is None:
                return None
            pos = after
            heredocs.clear()
        elif kind == "op":
            end_command()
        elif kind == "redir":
            op = tok.lstrip("0123456789")
            digits = tok[: len(tok) - len(op)]
            if digits and word is not None:
                word.append(digits)  # `'x'2>f`: part of the word, not an IO number
            end_word()
            if op in ("<<", "<<-"):
                want_delimiter = op == "<<-"
            else:
                skip_word = True
        elif kind == "hash":
            if word is None:
                nl = text.find("\n", pos)
                pos = len(text) if nl < 0 else nl
            else:
                word.append("#")
        elif kind == "esc" and tok == "\\\n":
            pass  # a line continuation: no character, and no word started
        else:
            if word is None:
                word = []
                if kind == "plain" and tok.startswith("~"):
                    dyn = True
            if kind == "sq":
                word.append(tok[1:-1])
            elif kind == "dq":
                inner = tok[1:-1]
                dyn = dyn or "$" in inner or "`" in inner
                word.append(
                    _DQ_ESCAPE.sub(lambda e: "" if e.group(1) == "\n" else e.group(1), inner)
                )
            elif kind == "esc":
                word.append(tok[1])
            else:
                dyn = dyn or _DYNAMIC.search(tok) is not None
                word.append(tok)
    end_command()
    return out


def _unescape(m: re.Match[str]) -> str:
    return "" if m.group(1) == "\n" else m.group(1)  # backslash-newline: a continuation


def _job_programs(text: str, budget: list[int]) -> list[Program | None] | None:
    """What each command of an at job file runs, relative paths resolved against the
    directory the job is in at that point (at(1)'s preamble ``cd DIR``, then the job's
    own ``cd``); None when the file does not parse."""
    commands = _commands(text, budget)
    if commands is None:
        return None
    out: list[Program | None] = []
    cwd: str | None = None
    for command in commands:
        i = 0
        while i < len(command) and (command[i][0] in _PREFIX or _ASSIGN.match(command[i][0])):
            if command[i][1]:
                break
            i += 1
        rest = command[i:]
        if not rest:
            continue
        if rest[0] == ("cd", False):
            args = [w for w in rest[1:] if not w[0].startswith("-")]
            where = args[0] if len(args) == 1 and not args[0][1] else None
            if where is not None and where[0].startswith("/"):
                cwd = os.path.normpath(where[0])
            elif where is not None and cwd is not None and where[0]:
                cwd = os.path.normpath(os.path.join(cwd, where[0]))
            else:
                cwd = None  # `cd`, `cd -`, `cd $X`: the directory is not known
            continue
        out.append(_program([w for w, _ in rest], [d for _, d in rest], cwd))
    return out


def _judge(path: str, uid: int | None, program: Program | None, budget: list[int]) -> str:
    """Whether the queued job at ``path`` is a copy of a run of ``uid`` running
    ``program``: ``copy``, ``unsure`` or ``no`` (see :func:`_compare`)."""
    text = _read(path)
    if text is None:
        # Not read (over the cap, not a regular file): atd runs it as the file's owner.
        try:
            owner: int | None = os.stat(path).st_uid
        except OSError:
            owner = None
        return "no" if uid is not None and owner is not None and owner != uid else "unsure"
    header = _HEADER.match(text)
    if header is None:
        return "no"  # atd refuses a job file without its header ("wrong format")
    if uid is not None and int(header.group(1)) != uid:
        return "no"  # another user's job: never this run's copy
    if program is not None and _needle(program) not in text:
        # Neither a command nor a variable of the file names it (at(1) writes the
        # environment into the file): the job runs it only through another file, which
        # is not followed (as `bash other.sh` is ruled out). Most jobs end here, unparsed.
        return "no"
    programs = _job_programs(text, budget)
    if programs is None:
        return "unsure"
    verdicts = {_compare(program, p) for p in programs}
    if "copy" in verdicts:
        return "copy" if uid is not None else "unsure"
    return "unsure" if "unsure" in verdicts else "no"


def _needle(program: Program) -> str:
    """The text any job file that runs ``program`` holds: its base name, or module."""
    kind, text = program
    return text.split(" -m ", 1)[1] if kind == "module" else os.path.basename(text)


def _scan_queue(uid: int | None, program: Program | None) -> tuple[list[int], list[int]] | None:
    """The queued jobs in :data:`AT_SPOOLS` that are copies of a run of ``uid`` running
    ``program`` and those not ruled out, each sorted; None when no spool could be
    listed (atd's queue is unknown)."""
    copies: list[int] = []
    unsure: list[int] = []
    listed = False
    budget = [_TOKEN_BUDGET]
    for spool in AT_SPOOLS:
        try:
            names = sorted(os.listdir(spool))
        except OSError:
            continue
        listed = True
        for name in names:
            parsed = parse_job_name(name)
            if parsed is None or parsed[0] == "=":
                continue
            verdict = _judge(f"{spool}/{name}", uid, program, budget)
            if verdict == "copy":
                copies.append(parsed[1])
            elif verdict == "unsure":
                unsure.append(parsed[1])
    return (copies, unsure) if listed else None


def _queued(pending: Sequence[int]) -> str:
    return (
        f"queued jobs {', '.join(map(str, pending))} run the same commands: "
        "the job re-schedules itself"
    )


def with_live_queue(origin: AtOrigin) -> AtOrigin:
    """``origin`` with its queued jobs of the same commands read again from the spool
    now (issue 31, case 3: advice is read live, never frozen), for an origin kept for a
    running job whose lineage no longer reaches atd (its shell or atd's child ended).

    Args:
        origin: The at origin found when the job's lineage still reached atd.

    Returns:
        The same origin when the queue is as it was (or its job file or commands are
        unknown and its own job file was read, or the spools are unreadable now); else
        one with ``pending_same_command`` (and, for a run whose job file was not read,
        ``queued_unsure``), the evidence lines and the ``atrm`` remediation of the queue
        as it is now.
    """
    unsure: tuple[int, ...] = ()
    if origin.file and origin.command:
        pending = tuple(_pending_same(os.path.dirname(origin.file), origin.command))
        lines = [_queued(pending)] if pending else []
    elif origin.queue_read is not None:
        scan = _scan_queue(origin.uid, _program_of_match(origin.queued_match))
        if scan is None:
            return origin  # the queue is unreadable now: what was read stands
        pending, unsure = tuple(scan[0]), tuple(scan[1])
        lines = _queue_lines(pending, unsure, origin.queued_match)
    else:
        return origin
    if (pending, unsure) == (origin.pending_same_command, origin.queued_unsure) and (
        origin.queue_read is not False
    ):
        return origin
    evidence = tuple(
        e for e in origin.evidence if not e.startswith(("queued jobs ", "atd's queue was not read"))
    )
    evidence = (*evidence, *lines)
    remediation = "atrm " + " ".join(map(str, pending)) if pending else None
    return dataclasses.replace(
        origin,
        evidence=evidence,
        remediation=remediation,
        pending_same_command=pending,
        queued_unsure=unsure,
        queue_read=True if origin.queue_read is not None else None,
    )


def _job_file(ctx: ResolveContext, pid: int) -> tuple[str, str] | None:
    base = f"{ctx.table.proc_root}/{pid}/fd"
    try:
        fds = sorted(os.listdir(base), key=lambda n: int(n) if n.isdigit() else 1 << 30)
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(f"{base}/{fd}").removesuffix(" (deleted)")
        except OSError:
            continue
        folder, name = os.path.split(target)
        if parse_job_name(name) is None:
            continue
        if folder.endswith("/atspool"):  # output file: the jobs live next door
            folder = folder[: -len("atspool")] + "atjobs"
        return folder, name
    return None


def _read(path: str) -> str | None:
    # Through the safe reader: a FIFO in the spool would block a plain open(2) forever.
    # A job file over the cap is refused, not truncated (a cut script misnames the job).
    try:
        return safeio.read_regular(path, _MAX_JOB_BYTES).decode("utf-8", "surrogateescape")
    except (OSError, ValueError):
        return None


def _pending_same(spool: str, command: str) -> list[int]:
    try:
        names = sorted(os.listdir(spool))
    except OSError:
        return []
    out = []
    for name in names:
        parsed = parse_job_name(name)
        if parsed is None or parsed[0] == "=":
            continue
        text = _read(f"{spool}/{name}")
        if text is not None and job_commands(text) == command:
            out.append(parsed[1])
    return out

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
from ..model import AtOrigin, Origin, Proc
from .base import ResolveContext, command_key, exe_name, mentions

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

    Args:
        text: The job file (a shell script written by at(1)).

    Returns:
        The commands, stripped; the whole text when the block is not found. A job file
        whose commands are a whole saved job file (``#!/bin/sh`` then ``# atrun``) gives
        the commands of that one.
    """
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("cd ") and line.rstrip().endswith("|| {"):
            for j in range(i + 1, len(lines)):
                if lines[j].strip() == "}":
                    rest = "\n".join(lines[j + 1 :]).strip()
                    # A saved job file queued again whole (disable-source's undo): its own
                    # preamble restores its environment and directory; the commands are
                    # the ones inside it.
                    if rest.startswith("#!/bin/sh\n# atrun "):
                        return job_commands(rest)
                    return rest
    return text.strip()


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
        evidence = [f"ancestor PID {child.pid} is atd ({child.exe or child.args_text})"]
        found = _job_file(ctx, shell.pid) or _job_file(ctx, child.pid)
        if found is None:
            evidence.append("job file not visible in /proc fds (permission or it exited)")
            return _unread_job(lineage[: idx - 1], shell.user, evidence)
        spool, name = found
        queue, job, when = parse_job_name(name) or ("?", 0, datetime.fromtimestamp(0, UTC))
        running = f"{spool}/={name[1:]}"
        text = _read(running) or _read(f"{spool}/{name}")
        command = job_commands(text) if text is not None else None
        evidence.append(f"job shell PID {shell.pid} reads at job {job} (queue {queue})")
        pending = _pending_same(spool, command) if command else []
        if pending:
            evidence.append(_queued(pending))
        remediation = "atrm " + " ".join(str(n) for n in [job, *pending])
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


def _unread_job(below: Sequence[Proc], user: str | None, evidence: list[str]) -> AtOrigin:
    """The origin of a run whose job file was not read (the run ended and atd removed
    it, seen only at its exec; or its fds are not ours to read): its queued copies are
    the queued jobs that run its command (simulator seed 67601: a run that exited was
    terminated with ``ok`` while the next run of its job was queued).

    ``below`` are the processes under the job's shell, nearest the job first: the
    shell's own child runs what the job's commands name (``bash train.sh``), the job
    itself may be what that runs (``python3 train.py``); a copy naming either is one.
    """
    named = (command_key(p.cmdline) for p in [*below[-1:], *below[:1]])
    keys = list(dict.fromkeys(k for k in named if k))
    pending = _pending_running(keys[0]) if keys else None
    if pending is None:
        # No command under the shell to match a copy by, or no spool could be listed.
        evidence.append("atd's queue was not read: whether it runs this again is unknown")
        return AtOrigin(evidence=tuple(evidence), user=user)
    key = keys[0]
    for other in keys[1:]:
        if pending:
            break
        key, pending = other, _pending_running(other) or []
    if pending:
        evidence.append(_queued_running(pending, key))
    else:
        key = keys[0]  # read again live by what the job's commands name
    return AtOrigin(
        evidence=tuple(evidence),
        remediation="atrm " + " ".join(map(str, pending)) if pending else None,
        user=user,
        pending_same_command=tuple(pending),
        queued_match=key,
    )


def _queued_running(pending: Sequence[int], key: str) -> str:
    return (
        f"queued jobs {', '.join(map(str, pending))} run {key}: the job re-schedules itself "
        "(its own job file was not read, so matched by command, not by the whole job)"
    )


def _pending_running(key: str) -> list[int] | None:
    """Queued jobs of the spools in :data:`AT_SPOOLS` whose commands run ``key`` (a
    script or program name, :func:`~.base.mentions`); None when no spool could be
    listed (atd's queue is unknown)."""
    out: list[int] = []
    listed = False
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
            text = _read(f"{spool}/{name}")
            if text is not None and mentions(job_commands(text), key):
                out.append(parsed[1])
    return out if listed else None


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
        unknown and no command was matched instead, or the spools are unreadable now);
        else one with ``pending_same_command``, the evidence line and the
        ``atrm`` remediation of the queue as it is now.
    """
    if origin.file and origin.command:
        pending = tuple(_pending_same(os.path.dirname(origin.file), origin.command))
        line = _queued(pending)
    elif origin.queued_match:
        found = _pending_running(origin.queued_match)
        if found is None:
            return origin  # the queue is unreadable now: what was read stands
        pending = tuple(found)
        line = _queued_running(pending, origin.queued_match)
    else:
        return origin
    if pending == origin.pending_same_command:
        return origin
    evidence = tuple(e for e in origin.evidence if not e.startswith("queued jobs "))
    if pending:
        evidence = (*evidence, line)
    jobs = [origin.job] if origin.job is not None else []
    remediation = "atrm " + " ".join(str(n) for n in [*jobs, *pending]) if jobs or pending else None
    return dataclasses.replace(
        origin, evidence=evidence, remediation=remediation, pending_same_command=pending
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

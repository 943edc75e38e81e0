"""Orphan origin: the process was re-parented; whatever started it has exited.

When a parent exits, the kernel hands its children to the nearest ancestor marked
``PR_SET_CHILD_SUBREAPER`` or, failing that, to PID 1 of the PID namespace
(prctl(2), "PR_SET_CHILD_SUBREAPER"). So the parent of an orphan is not what started
it: PID 1 (of the host or of a nested PID namespace), or a known subreaper such as
``systemd --user``. This resolver runs last, after systemd, and keeps whatever clue is
left (a Slurm job id from the job cgroup, a supervisord program name, the cgroup path)
in fields and evidence: a worker of an ended Slurm job that still holds GPU memory is an
orphan with ``slurm_job_id`` set. ``SLURM_JOB_ID`` in its environment is only a claim
(evidence says ``claims Slurm job N in its environment, not confirmed``), never a field.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..hosttext import plain_or_code
from ..model import Origin, OrphanOrigin, Proc
from .base import ResolveContext, exe_name, is_wrapper
from .cgroup import parse_cgroup, systemd_path
from .slurm import cgroup_clue, environ_clue, query_job, unconfirmed_text
from .supervisor import command_names

MESSAGE = "orphan (parent exited)"
# Processes that set PR_SET_CHILD_SUBREAPER and so adopt orphans below them.
_SUBREAPERS = frozenset({"tini", "catatonit", "dumb-init", "s6-svscan"})


def adopter(proc: Proc, ctx: ResolveContext) -> str | None:
    """Describe the process that adopted ``proc``, if its parent is an adopter.

    Args:
        proc: The process in question.
        ctx: Gives the process table (for the parent's names and NSpid).

    Returns:
        A phrase such as ``PID 1 (process_api)`` or ``subreaper PID 812 (systemd --user)``,
        or None when the parent is an ordinary process (not an orphan).
    """
    if proc.pid <= 1 or proc.ppid <= 0:
        return None
    parent = ctx.table.get(proc.ppid)
    label = plain_or_code(exe_name(parent)) if parent is not None else "not visible"
    if proc.ppid == 1:
        return f"PID 1 ({label})"
    if parent is None:
        return None
    if len(parent.nspid) > 1 and parent.nspid[-1] == 1:
        return f"PID 1 of a nested PID namespace (host PID {parent.pid}, {label})"
    names = command_names(parent)
    if "systemd" in names and "--user" in parent.cmdline:
        return f"subreaper PID {parent.pid} (systemd --user)"
    if names & _SUBREAPERS:
        return f"subreaper PID {parent.pid} ({label})"
    return None


class OrphanResolver:
    """Reports a re-parented process, keeping any clue to what started it.

    Origin fields: ``message`` (``orphan (parent exited)``), ``parent_pid``, ``cgroup``
    (systemd-hierarchy path), ``slurm_job_id`` and ``slurm_job_state`` (when a Slurm job
    clue remains), ``supervisor_program`` (``SUPERVISOR_PROCESS_NAME``), ``unit`` and
    ``session`` (from the cgroup, when named). ``parent_pid`` is the adopter of the
    process that was adopted: the job's root, or the wrapper above it whose parent exited
    (then the message says so: the root's own parent is alive). Remediation ``kill -TERM
    PID``: nothing will restart it from here, the starter is gone; the guard widens it
    to the job's processes and the wrappers that exist only for it.
    """

    name = "orphan"

    def resolve(self, lineage: Sequence[Proc], ctx: ResolveContext) -> Origin | None:
        """See :class:`~watchdog.lineage.base.OriginResolver`."""
        if not lineage:
            return None
        proc = lineage[0]
        by = adopter(proc, ctx)
        evidence = [MESSAGE]
        if by is None:
            # A wrapper between the job and its adopter (`bash -c 'train.py; echo done' &`
            # whose starter exited) makes the wrapper the orphan; the job is still one.
            for wrapper in lineage[1:]:
                if not is_wrapper(wrapper):
                    return None
                by = adopter(wrapper, ctx)
                if by is not None:
                    # Its own parent is alive: what exited is the wrapper's parent.
                    evidence[0] = (
                        f"orphan: its wrapper {plain_or_code(exe_name(wrapper))} (PID "
                        f"{wrapper.pid}) was "
                        "adopted (the wrapper's parent exited)"
                    )
                    evidence.append(
                        f"its wrapper {plain_or_code(exe_name(wrapper))} (PID {wrapper.pid}) "
                        f"was adopted by {by}"
                    )
                    return self._origin(proc, ctx, evidence, wrapper)
            return None
        evidence.append(f"PID {proc.pid} was adopted by {by}")
        return self._origin(proc, ctx, evidence, proc)

    def _origin(
        self, proc: Proc, ctx: ResolveContext, evidence: list[str], adopted: Proc
    ) -> Origin:
        info = parse_cgroup(proc.cgroup)
        if info is not None:
            evidence.append(f"cgroup {plain_or_code(info.path)}")
        slurm_id, slurm_state, slurm_said = self._slurm(proc, ctx, evidence)
        env = ctx.table.environ(proc.pid) or {}
        program = env.get("SUPERVISOR_PROCESS_NAME") or None
        if program:
            evidence.append(
                f"SUPERVISOR_PROCESS_NAME={plain_or_code(program)} in its environment: a "
                "supervisord that "
                "is gone started it; a restarted supervisord runs another copy"
            )
        # The one-line message carries what the fields know (tables and findings show it).
        message = evidence[0]
        if slurm_id is not None:
            message = f"orphan of Slurm job {slurm_id} ({slurm_said})"
        elif program:
            message = f"orphan of supervisor program {plain_or_code(program)} (parent exited)"
        evidence[0] = message
        return OrphanOrigin(
            evidence=tuple(evidence),
            # Stopped by signals only: which processes is the guard's to say
            # (watchdog.policy.guard: the job's own and its exclusive wrappers).
            remediation=f"kill -TERM {proc.pid}",
            message=message,
            parent_pid=adopted.ppid,
            cgroup=systemd_path(proc.cgroup),
            slurm_job_id=slurm_id,
            slurm_job_state=slurm_state,
            supervisor_program=program,
            unit=info.unit if info is not None else None,
            session=info.session if info is not None else None,
        )

    @staticmethod
    def _slurm(
        proc: Proc, ctx: ResolveContext, evidence: list[str]
    ) -> tuple[int | None, str | None, str | None]:
        """The Slurm job its cgroup names: ``(job id, Slurm's state, the state in a word
        or two for the message)``; all None when the cgroup names no job."""
        clue = cgroup_clue(proc)
        if clue is None:
            # An environment only claims a job (anyone can export SLURM_JOB_ID): say so,
            # and name no job in the fields or the message.
            found = environ_clue([proc], ctx)
            if found is not None:
                evidence.append(unconfirmed_text(found[0]))
            return None, None, None
        where = "cgroup"
        job = query_job(clue.job_id, ctx)
        if job.status == "gone":
            said = f"{job.via} no longer knows job {clue.job_id}: the job has ended"
        elif job.status == "found":
            said = f"{job.via}: job {clue.job_id} is {job.state}"
        else:
            said = f"Slurm not asked ({job.via})"
        evidence.append(
            f"{where} names Slurm job {clue.job_id} ({plain_or_code(clue.text)}); {said}"
        )
        if job.status == "found" and job.state:
            return clue.job_id, job.state, str(job.state)
        return clue.job_id, job.state, "ended" if job.status == "gone" else "state unknown"

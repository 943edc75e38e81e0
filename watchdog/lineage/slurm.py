"""Slurm origin: the process belongs to a Slurm job step.

A Slurm origin must be proven by something the job's user cannot forge:

1. a ``slurmstepd`` ancestor. slurmstepd renames itself with setproctitle to
   ``slurmstepd: [JOBID.STEP]`` (STEP is ``batch``, ``extern``, ``interactive`` or a
   number), so the job id is read from its command line. Any process can set such a
   title (``exec -a``), so it only counts when the executable the kernel runs
   (``/proc/PID/exe``) is named ``slurmstepd*`` (Debian's binary is
   ``/usr/sbin/slurmstepd-wlm``), belongs to root, and the process runs as root
   (slurmstepd runs as SlurmdUser, root);
2. a job cgroup, anchored at the hierarchy's root: cgroup v1 ``/slurm/uid_UID/job_JOBID/
   step_STEP`` (proctrack/cgroup, task/cgroup; ``UID`` must be the process's) or cgroup
   v2 ``/system.slice/slurmstepd.scope/job_JOBID/step_STEP/...`` (Slurm's cgroup/v2
   plugin; ``NODE_slurmstepd.scope`` with several slurmd per host). Only root creates
   those; a user's delegated subtree that merely contains such names does not count.

``SLURM_JOB_ID`` in ``/proc/PID/environ`` is only a claim (anyone can export it): alone
it never makes a Slurm origin, and the evidence of whatever origin wins says
``claims Slurm job N in its environment, not confirmed``.

Job name, account, user and partition come from ``squeue --json -j ID`` or, where that
fails, ``scontrol show job ID -o``; when Slurm answers, the job's user must be the
process's user. When Slurm cannot be asked the account is unknown: ``SLURM_JOB_ACCOUNT``
in the environment is the user's to set and never reaches a rule. Without a live
slurmstepd ancestor the resolver only claims a job Slurm still runs: a process whose job
has ended (or that Slurm cannot be asked about while it hangs off PID 1) is left to the
orphan resolver, which keeps the job id as a clue.

A task of a job array (``sbatch --array``) is asked about once more: which tasks of its
array wait to start (``squeue --json -j ARRAY``, else ``scontrol show job ARRAY -o``),
since those run the same batch script after a ``scancel`` of the task's own job id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..command import TIMED_OUT, CommandResult
from ..hosttext import clip, code_span, plain_or_code
from ..model import Origin, Proc, SlurmOrigin, array_stop
from ..sources.procfs import ProcessTable
from .base import Answer, ResolveContext, exe_name, exe_path, system_daemon, with_notes
from .cgroup import parse_cgroup

_STEPD_TITLE = re.compile(r"^slurmstepd:\s*\[(?P<job>\d+)(?:\.(?P<step>[^\]\s]+))?\]")
_STEP_AFTER_JOB = r"/job_{job}/step_(?P<step>[^/]+)"
# Job states after which no process of the job should exist (squeue(1) "JOB STATE CODES").
TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)
_CLI_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SlurmClue:
    """Where a Slurm job id was found.

    Attributes:
        job_id: The numeric job id.
        step: Step name (``batch``, ``0``...) when known.
        source: ``slurmstepd``, ``cgroup`` or ``environ``.
        pid: PID whose command line, cgroup or environment held the clue.
        text: The line or variable that held it, for evidence.
    """

    job_id: int
    step: str | None
    source: Literal["slurmstepd", "cgroup", "environ"]
    pid: int
    text: str


@dataclass(frozen=True)
class SlurmJob:
    """What Slurm said about one job.

    Attributes:
        job_id: The job asked about.
        status: ``found`` (Slurm knows the job), ``gone`` (Slurm says the id is invalid,
            i.e. the job ended more than MinJobAge ago), or ``unavailable`` (no CLI, no
            controller, unparsable answer).
        job_name: ``JobName`` / ``name``.
        account: ``Account``; None when unset (``(null)``) or unknown.
        user: Owner's user name.
        partition: Partition name.
        state: Base job state such as ``RUNNING``, ``PENDING``, ``COMPLETED``.
        via: The command that answered (``squeue --json`` or ``scontrol``), or a reason.
        array_job_id: The job array the job is a task of (squeue ``array_job_id``,
            scontrol ``ArrayJobId``); None for a job of no array.
        array_task_id: Its task id in that array (``array_task_id``, ``ArrayTaskId``);
            None when not an array task or Slurm gave none.
    """

    job_id: int
    status: Literal["found", "gone", "unavailable"]
    job_name: str | None = None
    account: str | None = None
    user: str | None = None
    partition: str | None = None
    state: str | None = None
    via: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None

    @property
    def ended(self) -> bool:
        """True when Slurm no longer runs the job (gone, or in a terminal state)."""
        return self.status == "gone" or (
            self.status == "found" and self.state is not None and self.state in TERMINAL_STATES
        )


def stepd_clue(proc: Proc) -> SlurmClue | None:
    """Read ``slurmstepd: [JOBID.STEP]`` from a process title.

    Args:
        proc: Any process; only slurmstepd processes yield a clue.

    Returns:
        The clue, or None when ``proc`` is not a slurmstepd with a parsable title.
    """
    title = " ".join(proc.cmdline)
    m = _STEPD_TITLE.match(title)
    if m is None:
        return None
    return SlurmClue(int(m["job"]), m["step"], "slurmstepd", proc.pid, title)


def is_slurmstepd(proc: Proc) -> bool:
    """True for a process that looks like slurmstepd, by exe name or by its set title.

    A look only (anyone can set the title): use :func:`not_slurmstepd` before believing
    a job id from it.
    """
    return exe_name(proc).startswith("slurmstepd") or bool(
        proc.cmdline and proc.cmdline[0].startswith("slurmstepd:")
    )


def _stepd_binary(path: str) -> bool:
    return path.rsplit("/", 1)[-1].startswith("slurmstepd")


def not_slurmstepd(proc: Proc, ctx: ResolveContext) -> str | None:
    """Why ``proc`` is not a real slurmstepd; None when it is.

    Real means: the executable the kernel runs is named ``slurmstepd*`` (``/usr/sbin/
    slurmstepd``, Debian's ``slurmstepd-wlm``, a source build's ``/usr/local/sbin/
    slurmstepd``), that file belongs to root, and the process runs as root.

    Args:
        proc: A process :func:`is_slurmstepd` accepted.
        ctx: Resolve context (for the executable's owner).

    Returns:
        None, or a phrase for evidence.
    """
    return system_daemon(proc, ctx, _stepd_binary)


def stepd_candidates(table: ProcessTable, only: Iterable[int] | None = None) -> list[int]:
    """The PIDs that may be a slurmstepd: a substring test on what ``exe_name`` reads
    (exe, argv[0], comm) passes every slurmstepd and drops the rest cheaply. A record's
    answer changes only when it is read again (``ProcessTable.read_since``).

    Args:
        table: A refreshed process table.
        only: Test just these PIDs (those absent from the table are left out); None
            tests every record.
    """
    procs = table.procs
    among = procs.values() if only is None else (procs[p] for p in only if p in procs)
    return [
        p.pid
        for p in among
        if "slurmstepd" in (p.exe or "")
        or (p.cmdline and "slurmstepd" in p.cmdline[0])
        or "slurmstepd" in p.comm
    ]


def stepd_members(
    table: ProcessTable, ctx: ResolveContext, maybe: Iterable[int] | None = None
) -> dict[tuple[int, int], tuple[int, int | None]]:
    """Every process running below a real slurmstepd now, with its job: what proves,
    after the job ended, that a re-parented process was the job's (its environment only
    claims it; anyone can export ``SLURM_JOB_ID``).

    Args:
        table: A refreshed process table.
        ctx: For checking the slurmstepd is real (:func:`not_slurmstepd`).
        maybe: :func:`stepd_candidates` of ``table`` when the caller kept it (the
            daemon, every tick: issue 34); None computes it.

    Returns:
        ``(PID, start ticks) -> (job id, uid)``.
    """
    out: dict[tuple[int, int], tuple[int, int | None]] = {}
    for pid in stepd_candidates(table) if maybe is None else maybe:
        proc = table.get(pid)
        if proc is None:
            continue
        if not is_slurmstepd(proc) or not_slurmstepd(proc, ctx) is not None:
            continue
        clue = stepd_clue(proc)
        if clue is None:
            continue
        for pid in table.descendants(proc.pid):
            member = table.get(pid)
            if member is not None and not member.is_zombie:
                out[(pid, member.start_ticks)] = (clue.job_id, member.uid)
    return out


def cgroup_clue(proc: Proc) -> SlurmClue | None:
    """Find a Slurm job cgroup among the lines of ``/proc/PID/cgroup``.

    The layouts (v1 ``/slurm/uid_N/job_N/step_S``, v2 ``slurmstepd.scope/job_N/step_S``)
    are parsed by :func:`watchdog.lineage.cgroup.parse_cgroup`; the step is read here.

    Args:
        proc: The process whose ``cgroup`` lines are searched.

    Returns:
        The clue, or None when no line names a Slurm job.
    """
    info = parse_cgroup(proc.cgroup)
    if info is None or info.slurm_job_id is None:
        return None
    if info.slurm_uid is not None and proc.uid is not None and info.slurm_uid != proc.uid:
        return None  # v1 uid_N names the job's owner: another user's job is not this one's
    job = info.slurm_job_id
    line = next((ln for ln in proc.cgroup if f"/job_{job}" in ln), info.path)
    m = re.search(_STEP_AFTER_JOB.format(job=job), line)
    return SlurmClue(job, m["step"] if m else None, "cgroup", proc.pid, line)


def environ_clue(
    procs: Iterable[Proc], ctx: ResolveContext
) -> tuple[SlurmClue, dict[str, str]] | None:
    """Find ``SLURM_JOB_ID`` (or the older ``SLURM_JOBID``) in the environment.

    Args:
        procs: Processes to read, nearest first.
        ctx: Gives the process table's ``environ`` reader.

    Returns:
        The clue and the whole environment it came from, or None.
    """
    for proc in procs:
        env = ctx.table.environ(proc.pid)
        if not env:
            continue
        for key in ("SLURM_JOB_ID", "SLURM_JOBID"):
            value = env.get(key, "")
            if value.isdigit():
                step = env.get("SLURM_STEP_ID")
                clue = SlurmClue(int(value), step, "environ", proc.pid, f"{key}={value}")
                return clue, env
    return None


# -- asking Slurm ------------------------------------------------------------------------


def _state_text(value: Any) -> str | None:
    # 22.05 gives "RUNNING"; 23.02+ gives ["RUNNING", "COMPLETING"...], base state first.
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, str) and value else None


def _job_id_of(value: Any) -> int | None:
    # 23.02+ wraps numbers as {"set": true, "infinite": false, "number": N}.
    if isinstance(value, dict):
        value = value.get("number")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value and value != "(null)" else None


# Slurm's NO_VAL and INFINITE of a 32-bit field: a cancelled array's meta record says
# ArrayTaskId=4294967294 (recorded: tests/fixtures/slurm/scontrol-22.05-array-pending-
# cancelled.txt); never a task id.
_NO_VAL32 = (0xFFFFFFFE, 0xFFFFFFFF)


def _set_number(value: Any) -> int | None:
    # 23.02+ {"set": false, ...} is "not set" whatever its number says; 22.05 gives null
    # for a job of no array's array_task_id and 0 for its array_job_id.
    if isinstance(value, dict) and (value.get("set") is False or value.get("infinite") is True):
        return None
    number = _job_id_of(value)
    return None if number is None or number in _NO_VAL32 else number


def _array_ids(job_id: Any, task_id: Any) -> tuple[int | None, int | None]:
    """``(array job id, task id)`` of a record; ``(None, None)`` for a job of no array
    (array job id 0 or unset)."""
    array = _set_number(job_id)
    if not array:
        return None, None
    return array, _set_number(task_id)


def _squeue_jobs(text: str) -> list[Any] | None:
    """The ``jobs`` list of an ``squeue --json`` document, or None when the text is not
    one or Slurm reports errors in it (:func:`squeue_refused`)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list) or squeue_refused(text) is not None:
        return None
    return jobs


def parse_squeue_json(text: str, job_id: int) -> SlurmJob | None:
    """Pick one job out of ``squeue --json`` output.

    Slurm 22.05's squeue ignores ``-j`` when ``--json`` is given and lists every job,
    so the job is looked up by ``job_id`` here rather than taken as the first entry.

    Args:
        text: The command's stdout (the OpenAPI ``{"meta", "errors", "jobs"}`` document).
        job_id: The job wanted.

    Returns:
        ``found`` with the job's fields, ``gone`` when the listing lacks the job, or None
        when the text is not such a document or it reports errors.
    """
    jobs = _squeue_jobs(text)
    if jobs is None:
        return None
    for job in jobs:
        if isinstance(job, dict) and _job_id_of(job.get("job_id")) == job_id:
            array, task = _array_ids(job.get("array_job_id"), job.get("array_task_id"))
            return SlurmJob(
                job_id=job_id,
                status="found",
                job_name=_text(job.get("name")),
                account=_text(job.get("account")),
                user=_text(job.get("user_name")),
                partition=_text(job.get("partition")),
                state=_state_text(job.get("job_state")),
                via="squeue --json",
                array_job_id=array,
                array_task_id=task,
            )
    return SlurmJob(job_id, "gone", via="squeue --json")


def squeue_errors(text: str) -> list[str]:
    """The ``errors`` of a ``squeue --json`` document (their descriptions), if any.

    Args:
        text: The command's stdout.

    Returns:
        One line per error, its ``description`` and ``error`` joined (``Failed while
        looking for jobs: Unable to contact slurm controller (connect failure)``); empty
        when there are none or the text is not such a document.
    """
    try:
        doc = json.loads(text)
    except ValueError:
        return []
    errors = doc.get("errors") if isinstance(doc, dict) else None
    out = []
    for err in errors if isinstance(errors, list) else ():
        words = [err] if isinstance(err, str) else []
        if isinstance(err, dict):
            words = [v for k in ("description", "error") if isinstance(v := err.get(k), str) and v]
        out.append(": ".join(words) or "error")
    return out


def squeue_refused(text: str) -> str | None:
    """Why a ``squeue --json`` document is no answer although squeue exited 0.

    Slurm 22.05 exits 0 with ``{"errors": [...], "jobs": []}`` when slurmctld cannot be
    reached (tests/fixtures/slurm/squeue-22.05-controller-down.json): an empty listing
    then says nothing about any job. The one reading of that case, for the sweep's job
    lookups and the queue check alike.

    Args:
        text: The command's stdout.

    Returns:
        ``reported errors: `Failed while looking for jobs: Unspecified error``` (the
        errors joined, at most 120 characters of them, quoted: host text); None when it
        reports none.
    """
    errors = squeue_errors(text)
    return f"reported errors: {code_span(clip('; '.join(errors), 120))}" if errors else None


_SCONTROL_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")
# The keys scontrol prints before JobName (slurm_sprint_job_info): never user text.
_BEFORE_NAME = frozenset(
    {"JobId", "ArrayJobId", "ArrayTaskId", "ArrayTaskThrottle", "HetJobId", "HetJobIdSet"}
)


def parse_scontrol_record(text: str) -> dict[str, str]:
    """Split one ``scontrol show job -o`` line into its ``Key=Value`` pairs.

    Values may contain spaces (``Comment``, ``Command``), so each value runs to the next
    whitespace-preceded ``Key=``; values holding ``=`` without a space before
    (``TRES=cpu=1,node=1``) stay whole.

    Args:
        text: One record (the first line is used).

    Returns:
        Mapping key → value with surrounding whitespace stripped; without a key said
        twice, and without ``JobName`` when its end is unsure (user text can hold
        ``Key=``: see below).
    """
    line = text.strip().splitlines()[0] if text.strip() else ""
    keys = list(_SCONTROL_KEY.finditer(line))
    # A job's name, comment, command, work dir and output paths are its user's text and
    # may hold " Key=": `--comment 'x Account=ml-sanctioned'` read as the job's Account,
    # a name `x ArrayJobId=777` made it a task of another user's array. scontrol prints
    # each key once, JobId and the array ids before JobName (the first user text), and
    # UserId right after it: a key said twice is no answer, an id after the name is the
    # user's text, and a name not followed by the one UserId has no known end.
    name = next((i for i, m in enumerate(keys) if m.group(1) == "JobName"), len(keys))
    out: dict[str, str] = {}
    twice: set[str] = set()
    for i, m in enumerate(keys):
        key = m.group(1)
        if key in _BEFORE_NAME and i > name:
            continue
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        if key in out:
            twice.add(key)
        out[key] = line[m.end() : end].strip()
    for key in twice:
        del out[key]
    follows = keys[name + 1].group(1) if name + 1 < len(keys) else None
    if "UserId" in twice or (any(m.group(1) == "UserId" for m in keys) and follows != "UserId"):
        out.pop("JobName", None)
    return out


def parse_scontrol_job(text: str, job_id: int) -> SlurmJob | None:
    """Read a job from ``scontrol show job ID -o`` output.

    Args:
        text: The command's stdout.
        job_id: The job asked about.

    Returns:
        ``found`` with the job's fields, or None when the record has no matching ``JobId``.
    """
    rec = parse_scontrol_record(text)
    if rec.get("JobId") != str(job_id):
        return None
    user = rec.get("UserId", "")
    array, task = _array_ids(rec.get("ArrayJobId"), rec.get("ArrayTaskId"))
    return SlurmJob(
        job_id=job_id,
        status="found",
        job_name=_text(rec.get("JobName")),
        account=_text(rec.get("Account")),
        user=_text(user.split("(", 1)[0]),  # "root(0)"
        partition=_text(rec.get("Partition")),
        state=_text(rec.get("JobState")),
        via="scontrol",
        array_job_id=array,
        array_task_id=task,
    )


def _invalid_id(stderr: str) -> bool:
    # slurm_load_jobs error: Invalid job id specified (ESLURM_INVALID_JOB_ID)
    return "invalid job id" in stderr.lower()


def query_job(job_id: int, ctx: ResolveContext, timeout_s: float = _CLI_TIMEOUT_S) -> SlurmJob:
    """Ask Slurm about a job, once per scan (cached in ``ctx.cache``).

    Tries ``squeue --json -j ID`` first, then ``scontrol show job ID -o`` (Slurm
    builds without the JSON plugin, or a failing controller query).

    Args:
        job_id: Numeric Slurm job id.
        ctx: Provides ``run_cmd``, ``use_slurm_cli`` and the cache.
        timeout_s: Limit for each command, seconds.

    Returns:
        The answer; ``status="unavailable"`` when the CLI is disabled or absent, or the
        controller did not answer, with ``via`` saying what each command did (did not
        run, timed out, failed, reported errors).
    """
    key = f"slurm:job:{job_id}"
    cached = ctx.cache.get(key)
    if isinstance(cached, SlurmJob):
        return cached
    if not ctx.use_slurm_cli:
        answer = SlurmJob(job_id, "unavailable", via="Slurm CLI disabled (use_slurm_cli)")
    else:
        answer = _ask(job_id, ctx, timeout_s)
    ctx.cache[key] = answer
    return answer


def _failed(name: str, res: CommandResult) -> str:
    """What a command that gave no answer did: ``squeue timed out after 10 s``,
    ``scontrol did not run (No such file or directory)``, ``scontrol failed: ...``."""
    if not res.ran:
        detail = (res.reason or "").split(": ", 1)[-1]
        if res.returncode == TIMED_OUT:
            return f"{name} {detail}"
        return f"{name} did not run ({detail})"
    refused = squeue_refused(res.stdout) if res.returncode == 0 else None
    if refused is not None:
        return f"{name} {refused}"
    why = (res.stderr or res.stdout).strip().splitlines()
    # Quoted: Slurm's errors echo job, user and node names.
    return f"{name} failed: {code_span(why[0][:160]) if why else f'exit {res.returncode}'}"


def _ask(job_id: int, ctx: ResolveContext, timeout_s: float) -> SlurmJob:
    res = ctx.run_cmd(["squeue", "--json", "-j", str(job_id)], timeout_s)
    if res.ran:
        if res.returncode == 0:
            parsed = parse_squeue_json(res.stdout, job_id)
            if parsed is not None:
                return parsed
        elif _invalid_id(res.stderr):
            return SlurmJob(job_id, "gone", via="squeue")
    first = _failed("squeue", res)
    res = ctx.run_cmd(["scontrol", "show", "job", str(job_id), "-o"], timeout_s)
    if res.returncode == 0 and res.ran:
        parsed = parse_scontrol_job(res.stdout, job_id)
        if parsed is not None:
            return parsed
    elif res.ran and _invalid_id(res.stderr + res.stdout):
        return SlurmJob(job_id, "gone", via="scontrol")
    return SlurmJob(job_id, "unavailable", via=f"{first}; {_failed('scontrol', res)}")


# -- a job array's pending tasks ----------------------------------------------------------

# States of an array's record whose tasks Slurm has yet to start (again): squeue(1) "JOB
# STATE CODES"; a requeued task runs the same script once more.
_WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
# Task ids are 32-bit: a longer run of digits is no task id (and int() refuses past 4300).
_TASK_RANGE = re.compile(r"(\d{1,10})(?:-(\d{1,10})(?::(\d{1,10}))?)?")


@dataclass(frozen=True)
class ArrayPending:
    """What Slurm said about the tasks of a job array it has yet to start.

    Attributes:
        array_id: The array job id asked about.
        status: ``pending`` (tasks wait to start), ``none`` (a listing of the whole array
            holds no waiting task) or ``unknown`` (Slurm not asked, no answer, or an
            answer that does not cover the array).
        tasks: The waiting task ids as Slurm prints them (``1-9``, ``3,5-7%2``), the
            records' joined with commas; empty when none or not given.
        count: How many tasks ``tasks`` names; None when not known.
        via: The command that answered, or what each did.
    """

    array_id: int
    status: Literal["pending", "none", "unknown"]
    tasks: str = ""
    count: int | None = None
    via: str = ""


def task_count(text: str) -> int | None:
    """How many task ids an array expression names (``1-9`` is 9, ``0-8:2`` is 5,
    ``1,3%2`` is 2: ``%N`` is a throttle, sbatch(1) ``--array``).

    Args:
        text: Task ids as Slurm prints them.

    Returns:
        The count, or None when the text is not such an expression.
    """
    total = 0
    for part in text.split("%", 1)[0].split(","):
        m = _TASK_RANGE.fullmatch(part)
        if m is None:
            return None
        low = int(m[1])
        high, step = int(m[2] or low), int(m[3] or 1)
        if high < low or step < 1:
            return None
        total += (high - low) // step + 1
    return total


def _pending(array_id: int, records: list[tuple[str | None, str]], via: str) -> ArrayPending:
    """Fold ``(state, task ids)`` of an array's records into one answer."""
    waiting = [tasks for state, tasks in records if state in _WAITING]
    if not waiting:
        return ArrayPending(array_id, "none", via=via)
    counts = [task_count(t) if t else None for t in waiting]
    known = None if None in counts else sum(c for c in counts if c is not None)
    return ArrayPending(array_id, "pending", ",".join(t for t in waiting if t), known, via)


def parse_array_squeue(text: str, array_id: int, job_id: int) -> ArrayPending | None:
    """The waiting tasks of array ``array_id`` in a ``squeue --json`` document.

    22.05 lists every job whatever ``-j`` says; later versions list the array's records
    for ``-j ARRAY``. Either way a listing that lacks the task ``job_id`` (one of the
    array's, running) or the array's own record (job id ``array_id``: the waiting tasks
    until the last one starts, then that task) does not cover the array and is no
    answer: "none pending" is only said from a listing that holds the whole array.

    Args:
        text: The command's stdout.
        array_id: The array job id.
        job_id: The job id of a task of the array that runs now.

    Returns:
        The answer (``pending`` with the waiting records' ``array_task_string``, or their
        ``array_task_id`` for a task split off alone; ``none``), or None when the text is
        no such document, reports errors, or lacks ``job_id`` or ``array_id``.
    """
    jobs = _squeue_jobs(text)
    if jobs is None:
        return None
    records: list[tuple[str | None, str]] = []
    seen: set[int | None] = set()
    for job in jobs:
        if not isinstance(job, dict) or _set_number(job.get("array_job_id")) != array_id:
            continue
        seen.add(_job_id_of(job.get("job_id")))
        task = _set_number(job.get("array_task_id"))
        tasks = _text(job.get("array_task_string")) or ("" if task is None else str(task))
        records.append((_state_text(job.get("job_state")), tasks))
    return _pending(array_id, records, "squeue --json") if {job_id, array_id} <= seen else None


def parse_array_scontrol(text: str, array_id: int, job_id: int) -> ArrayPending | None:
    """The waiting tasks of array ``array_id`` in ``scontrol show job ARRAY -o`` output:
    one line per record of the array (the waiting ones say ``ArrayTaskId=1-9
    JobState=PENDING``; tests/fixtures/slurm/scontrol-22.05-array-with-pending.txt).

    Args:
        text: The command's stdout.
        array_id: The array job id.
        job_id: The job id of a task of the array that runs now.

    Returns:
        The answer, or None when no line is the task ``job_id`` or the array's own record
        (the output does not cover the array: ``scontrol show job TASK`` prints the
        task's line alone).
    """
    records: list[tuple[str | None, str]] = []
    seen: set[str | None] = set()
    for line in text.splitlines():
        rec = parse_scontrol_record(line)
        if rec.get("ArrayJobId") != str(array_id):
            continue
        seen.add(rec.get("JobId"))
        records.append((_text(rec.get("JobState")), rec.get("ArrayTaskId", "")))
    return _pending(array_id, records, "scontrol") if {str(job_id), str(array_id)} <= seen else None


def query_array(
    array_id: int, job_id: int, ctx: ResolveContext, timeout_s: float = _CLI_TIMEOUT_S
) -> ArrayPending:
    """Ask Slurm which tasks of a job array wait to start, once per scan (cached).

    ``squeue --json -j ARRAY`` first, then ``scontrol show job ARRAY -o``; an answer
    that does not list the running task ``job_id`` is none (see
    :func:`parse_array_squeue`).

    Args:
        array_id: The array job id (``array_job_id`` of the task's record).
        job_id: The running task's own job id.
        ctx: Provides ``run_cmd``, ``use_slurm_cli`` and the cache.
        timeout_s: Limit for each command, seconds.

    Returns:
        The answer; ``unknown`` with ``via`` saying why when none came.
    """
    key = f"slurm:array:{array_id}:{job_id}"
    cached = ctx.cache.get(key)
    if isinstance(cached, ArrayPending):
        return cached
    if not ctx.use_slurm_cli:
        answer = ArrayPending(array_id, "unknown", via="Slurm CLI disabled (use_slurm_cli)")
    else:
        answer = _ask_array(array_id, job_id, ctx, timeout_s)
    ctx.cache[key] = answer
    return answer


def _ask_array(array_id: int, job_id: int, ctx: ResolveContext, timeout_s: float) -> ArrayPending:
    arg = str(array_id)
    res = ctx.run_cmd(["squeue", "--json", "-j", arg], timeout_s)
    said = [_failed("squeue", res)]
    if res.ran and res.returncode == 0:
        found = parse_array_squeue(res.stdout, array_id, job_id)
        if found is not None:
            return found
        if squeue_refused(res.stdout) is None:
            said = [f"squeue did not list task job {job_id}"]
    res = ctx.run_cmd(["scontrol", "show", "job", arg, "-o"], timeout_s)
    if res.ran and res.returncode == 0:
        found = parse_array_scontrol(res.stdout, array_id, job_id)
        if found is not None:
            return found
        said.append(f"scontrol did not list task job {job_id}")
    else:
        said.append(_failed("scontrol", res))
    return ArrayPending(array_id, "unknown", via="; ".join(said))


# -- the resolver ------------------------------------------------------------------------


def parent_is_init(proc: Proc, ctx: ResolveContext) -> bool:
    """True when ``proc`` hangs off PID 1 of the host or of a nested PID namespace."""
    if proc.ppid == 1:
        return True
    parent = ctx.table.get(proc.ppid)
    return parent is not None and len(parent.nspid) > 1 and parent.nspid[-1] == 1


class SlurmResolver:
    """Names the Slurm job a process runs in.

    Origin fields: ``job_id`` (int), ``job_name``, ``account``, ``user``, ``partition``,
    ``step``, ``state`` (each None when unknown); for a task of a job array, as Slurm
    said, ``array_job_id``, ``array_task_id`` and whether tasks of the array wait to start
    (:func:`query_array`). Remediation: ``scancel JOBID``, after ``scancel
    --state=PENDING ARRAY`` for an array task unless Slurm listed no task waiting.
    """

    name = "slurm"

    def resolve(self, lineage: Sequence[Proc], ctx: ResolveContext) -> Answer:
        """See :class:`~watchdog.lineage.base.OriginResolver`; with notes for an
        ancestor that only looks like one of its kind, or a claim it does not confirm."""
        notes: list[str] = []
        return with_notes(self._resolve(lineage, ctx, notes), notes)

    def _resolve(
        self, lineage: Sequence[Proc], ctx: ResolveContext, notes: list[str]
    ) -> Origin | None:
        if not lineage:
            return None
        stepd: Proc | None = None
        for p in lineage[1:]:
            if not is_slurmstepd(p):
                continue
            why = not_slurmstepd(p, ctx)
            if why is None:
                stepd = p
                break
            notes.append(
                f"ancestor PID {p.pid} looks like slurmstepd ({_title(p)}) but is not: {why}"
            )
        below = lineage if stepd is None else lineage[: lineage.index(stepd)]
        clue = stepd_clue(stepd) if stepd is not None else None
        clue = clue or cgroup_clue(lineage[0])
        env_found = environ_clue(below, ctx)
        if clue is None:
            if env_found is not None:
                notes.append(unconfirmed_text(env_found[0]))
            return None
        # The environment only describes the job when it names the proven job.
        env = env_found[1] if env_found and env_found[0].job_id == clue.job_id else {}
        job = query_job(clue.job_id, ctx)
        evidence = [_clue_text(clue)]
        if stepd is None:
            # Without a live slurmstepd only a job Slurm still runs is a Slurm origin;
            # the rest is an orphan of an ended job (see watchdog.lineage.orphan).
            if job.ended:
                return None
            if job.status == "unavailable" and parent_is_init(lineage[0], ctx):
                return None
        elif clue.source != "slurmstepd":
            evidence.append(f"ancestor PID {stepd.pid} is {plain_or_code(exe_name(stepd))}")
        proc = lineage[0]
        if job.status == "found" and job.user and proc.user and job.user != proc.user:
            notes.append(
                f"{_clue_text(clue)}, but {job.via} says job {clue.job_id} belongs to "
                f"{plain_or_code(job.user)} and PID {proc.pid} runs as "
                f"{plain_or_code(proc.user)}: not Slurm job "
                f"{clue.job_id}'s, not confirmed"
            )
            return None
        if stepd is not None:
            evidence.append(
                f"slurmstepd PID {stepd.pid} runs {exe_path(stepd)} (owned by root, as root)"
            )
        evidence.append(_job_text(job, env))
        origin = _fields(clue, job, env, proc)
        stop = f"scancel {clue.job_id}"
        if job.status == "found" and job.array_job_id is not None:
            pending = query_array(job.array_job_id, clue.job_id, ctx)
            evidence.append(_array_text(pending))
            origin = _with_array(origin, job, pending)
            if pending.status != "none":
                # The task's own scancel leaves the array's waiting tasks to start it again.
                stop = f"{array_stop(job.array_job_id)} && {stop}"
        elif job.status != "found" and env.get("SLURM_ARRAY_JOB_ID", "").isdigit():
            # Slurm not asked: whether it comes back is not known; the claim names no
            # array to act on (the job's user sets its own environment).
            origin = replace(origin, array_claimed=int(env["SLURM_ARRAY_JOB_ID"]))
        return replace(origin, evidence=tuple(evidence), remediation=stop)


def unconfirmed_text(clue: SlurmClue) -> str:
    """Evidence for a job id only an environment names: a claim, never proof."""
    return (
        f"claims Slurm job {clue.job_id} in its environment, not confirmed "
        f"({plain_or_code(clue.text)} in the environment of PID {clue.pid}; no slurmstepd "
        "ancestor and "
        "no Slurm job cgroup)"
    )


def _title(proc: Proc) -> str:
    # The title is the process's own (``exec -a``): quoted, never the product's words.
    return code_span(clip(" ".join(proc.cmdline) if proc.cmdline else proc.comm, 200))


def _said(value: str | None) -> str:
    # A job's name, account or user as Slurm (or the job's own environment) gives it: the
    # job's user picks its name, so it is quoted unless it is one plain word.
    return "unknown" if value is None else plain_or_code(value)


def _clue_text(clue: SlurmClue) -> str:
    if clue.source == "slurmstepd":
        return f"ancestor PID {clue.pid} is {plain_or_code(clue.text)}"
    if clue.source == "cgroup":
        return f"cgroup of PID {clue.pid} is a Slurm job cgroup: {plain_or_code(clue.text)}"
    return f"{plain_or_code(clue.text)} in the environment of PID {clue.pid}"


def _fields(clue: SlurmClue, job: SlurmJob, env: dict[str, str], proc: Proc) -> SlurmOrigin:
    if job.status == "found":
        name, account, user, partition = job.job_name, job.account, job.user, job.partition
    else:
        # Slurm could not be asked. The job's user sets its own environment, so its
        # SLURM_JOB_ACCOUNT is no proof of an account (a rule pinned to one must not
        # match on it); name and partition are only labels.
        name = env.get("SLURM_JOB_NAME") or None
        account = None
        user = proc.user
        partition = env.get("SLURM_JOB_PARTITION") or None
    return SlurmOrigin(
        job_id=clue.job_id,
        job_name=name,
        account=account,
        user=user,
        partition=partition,
        step=clue.step,
        state=job.state,
    )


def _with_array(origin: SlurmOrigin, job: SlurmJob, pending: ArrayPending) -> SlurmOrigin:
    return replace(
        origin,
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id,
        array_pending={"pending": True, "none": False}.get(pending.status),
        array_pending_tasks=pending.tasks or None,
        array_pending_count=pending.count,
    )


def _array_text(pending: ArrayPending) -> str:
    """Evidence: what Slurm said of the array's waiting tasks."""
    array = pending.array_id
    if pending.status == "none":
        return f"{pending.via}: no task of array {array} waits to start"
    if pending.status == "unknown":
        return f"whether tasks of array {array} wait to start could not be told ({pending.via})"
    tasks = f" {plain_or_code(pending.tasks)}" if pending.tasks else ""
    return f"{pending.via}: tasks{tasks} of array {array} wait to start"


def _job_text(job: SlurmJob, env: dict[str, str]) -> str:
    if job.status == "found":
        return (
            f"{job.via}: job {job.job_id} name {_said(job.job_name)} account "
            f"{_said(job.account)} user {_said(job.user)} is {plain_or_code(str(job.state))}"
        )
    claimed = env.get("SLURM_JOB_ACCOUNT")
    said = (
        f"; SLURM_JOB_ACCOUNT={plain_or_code(claimed)} in the job's environment is not "
        "trusted (the "
        "job's user can set it)"
        if claimed
        else ""
    )
    return f"Slurm not asked ({job.via}); account unknown{said}"

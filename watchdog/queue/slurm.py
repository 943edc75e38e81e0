"""Slurm's queue through its CLI: ``squeue --json``, formatted ``squeue``, ``scontrol``.

``squeue --json`` (Slurm 22.05, OpenAPI plugin v0.0.38) lists every job the controller
still remembers, including finished ones (squeue ignores ``-t``/``-j`` with ``--json``
there); numbers are plain and ``job_state`` a string. Slurm 23.02+ wraps numbers as
``{"set": true, "infinite": false, "number": N}`` and gives ``job_state`` as a list;
both are read. Builds without the JSON plugin (or older versions) get
``squeue -h -a -o FORMAT`` (squeue(1) "-o <output_format>"), with the job name last
so a ``|`` in a name does not shift the fields. ``scontrol show job -o ID`` (one record
per line, ``Key=Value``) gives one job's details and is the re-check before acting.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime
from typing import Any

from ..command import CommandResult, CommandRunner, run
from ..hosttext import clip, code_span
from ..lineage.slurm import parse_scontrol_record, squeue_refused
from .model import QueueEntry, gpu_requested

SQUEUE_FORMAT = "%i|%u|%a|%P|%T|%V|%S|%Q|%r|%j"
# squeue --json keys of what a job asked for (--gres, --gpus, --gpus-per-*, its TRES).
_REQUEST_KEYS = (
    "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket", "tres_req_str",
)  # fmt: skip
_FIELDS = 10


class QueueError(RuntimeError):
    """The queue could not be read (no controller, command failed, unparsable output)."""


def _number(value: Any) -> int | None:
    # 23.02+: {"set": bool, "infinite": bool, "number": N}; unset or infinite → None.
    if isinstance(value, dict):
        if value.get("set") is False or value.get("infinite") is True:
            return None
        value = value.get("number")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _time(value: Any) -> float | None:
    n = _number(value)
    return float(n) if n else None  # 0 means "not set" in Slurm's JSON


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value and value not in ("(null)", "N/A") else None


def _reason(value: Any) -> str | None:
    text = _text(value)
    return None if text == "None" else text  # Slurm's word for "no reason"


def _state(value: Any) -> str:
    if isinstance(value, list):  # 23.02+: base state first, then flags
        value = value[0] if value else None
    return value if isinstance(value, str) and value else "UNKNOWN"


def parse_squeue_json(text: str) -> list[QueueEntry]:
    """Every job of a ``squeue --json`` document.

    Args:
        text: The command's stdout (``{"meta", "errors", "jobs": [...]}``).

    Returns:
        One entry per job with a numeric ``job_id``, in the document's order.

    Raises:
        QueueError: Not JSON, no ``jobs`` list, or a document that reports errors:
            22.05 exits 0 with an ``errors`` list and no jobs when slurmctld cannot be
            reached, which is no answer, never an empty queue
            (:func:`watchdog.lineage.slurm.squeue_refused`).
    """
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise QueueError(f"squeue --json: not JSON: {exc}") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise QueueError("squeue --json: no 'jobs' list")
    refused = squeue_refused(text)
    if refused is not None:
        raise QueueError(f"squeue --json {refused}")
    out = []
    for job in jobs:
        if not isinstance(job, dict):
            continue
        job_id = _number(job.get("job_id"))
        if job_id is None:
            continue
        extra: dict[str, Any] = {}
        for key, name in (
            ("command", "command"),
            ("current_working_directory", "work_dir"),
            ("nodes", "nodes"),
            ("tres_req_str", "tres"),
        ):
            val = _text(job.get(key))
            if val is not None:
                extra[name] = val
        # What the job asked for; None when this squeue names none of the request keys.
        asked = [job[k] for k in _REQUEST_KEYS if k in job]
        array_job = _number(job.get("array_job_id"))
        array_task = _number(job.get("array_task_id"))
        if array_job and array_task is not None:
            extra["array"] = f"{array_job}_{array_task}"
        out.append(
            QueueEntry(
                queue="slurm",
                job_id=str(job_id),
                user=_text(job.get("user_name")),
                account=_text(job.get("account")),
                partition=_text(job.get("partition")),
                name=_text(job.get("name")),
                state=_state(job.get("job_state")),
                reason=_reason(job.get("state_reason")),
                submit_time=_time(job.get("submit_time")),
                start_time=_time(job.get("start_time")),
                priority=_number(job.get("priority")),
                extra=extra,
                requests_gpu=gpu_requested(asked) if asked else None,
            )
        )
    return out


def _iso(text: str) -> float | None:
    # squeue/scontrol print local time without a zone: 2026-11-29T22:00:44.
    if not text or text in ("N/A", "Unknown", "None"):
        return None
    try:
        return datetime.fromisoformat(text).astimezone().timestamp()
    except ValueError:
        return None


def parse_squeue_formatted(text: str) -> list[QueueEntry]:
    """Jobs from ``squeue -h -a -o`` with :data:`SQUEUE_FORMAT`.

    Args:
        text: One job per line, ``|``-separated, the job name last.

    Returns:
        One entry per well-formed line.
    """
    out = []
    for line in text.splitlines():
        cols = line.split("|", _FIELDS - 1)
        if len(cols) != _FIELDS or not cols[0].strip():
            continue
        job_id, user, account, partition, state, submit, start, prio, reason, name = cols
        out.append(
            QueueEntry(
                queue="slurm",
                job_id=job_id.strip(),
                user=_text(user.strip()),
                account=_text(account.strip()),
                partition=_text(partition.strip()),
                name=_text(name),
                state=state.strip() or "UNKNOWN",
                reason=_reason(reason.strip()),
                submit_time=_iso(submit.strip()),
                start_time=_iso(start.strip()),
                priority=_number(prio.strip()),
            )
        )
    return out


def entry_from_scontrol(text: str) -> QueueEntry | None:
    """The job of one ``scontrol show job -o ID`` record, or None when there is none.

    Args:
        text: The command's stdout.

    Returns:
        The entry (``extra`` holds ``command`` and ``work_dir``), or None.
    """
    rec = parse_scontrol_record(text)
    job_id = rec.get("JobId")
    if not job_id:
        return None
    extra = {
        k: v
        for k, v in (("command", rec.get("Command")), ("work_dir", rec.get("WorkDir")))
        if _text(v)
    }
    return QueueEntry(
        queue="slurm",
        job_id=job_id,
        user=_text(rec.get("UserId", "").split("(", 1)[0]),
        account=_text(rec.get("Account")),
        partition=_text(rec.get("Partition")),
        name=_text(rec.get("JobName")),
        state=rec.get("JobState") or "UNKNOWN",
        reason=_reason(rec.get("Reason")),
        submit_time=_iso(rec.get("SubmitTime", "")),
        start_time=_iso(rec.get("StartTime", "")),
        priority=_number(rec.get("Priority")),
        extra=extra,
    )


class SlurmQueue:
    """Reads the Slurm queue.

    Args:
        run_cmd: Runs ``squeue``/``scontrol`` (tests may record or replace it).
        timeout_s: Per-command wall-clock limit.
    """

    name = "slurm"

    def __init__(self, run_cmd: CommandRunner = run, timeout_s: float = 10.0) -> None:
        self.run_cmd = run_cmd
        self.timeout_s = timeout_s
        self.json_ok: bool | None = None  # learned: does this squeue speak JSON?
        self.via = ""

    @staticmethod
    def available() -> bool:
        """True when ``squeue`` is on PATH and Slurm is configured here
        (``$SLURM_CONF`` or ``/etc/slurm/slurm.conf``): ``queue.slurm: auto``.

        A host with the client installed but no configuration is not a Slurm node; asking
        its absent controller every tick would only produce a standing warning.
        """
        if shutil.which("squeue") is None:
            return False
        conf = os.environ.get("SLURM_CONF")
        candidates = [conf] if conf else ["/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf"]
        return any(os.path.isfile(c) for c in candidates)

    def entries(self) -> list[QueueEntry]:
        """Every job the controller lists.

        Returns:
            Entries of all users and states (filter on :attr:`QueueEntry.phase`).

        Raises:
            QueueError: Neither ``squeue --json`` nor formatted ``squeue`` answered.
        """
        errors = []
        if self.json_ok is not False:
            res = self.run_cmd(["squeue", "--json"], self.timeout_s)
            if res.ok:
                try:
                    out = parse_squeue_json(res.stdout)
                except QueueError as exc:
                    errors.append(str(exc))
                else:
                    self.json_ok, self.via = True, "squeue --json"
                    return out
            else:
                errors.append(_why("squeue --json", res))
            if res.ran and "unrecognized option" in res.stderr:
                self.json_ok = False  # an old squeue: never ask again
        res = self.run_cmd(["squeue", "-h", "-a", "-o", SQUEUE_FORMAT], self.timeout_s)
        if res.ok:
            self.via = "squeue -o"
            return parse_squeue_formatted(res.stdout)
        errors.append(_why("squeue -o", res))
        raise QueueError("; ".join(errors))

    def show(self, job_id: str) -> QueueEntry | None:
        """``scontrol show job -o ID``: the job now, or None when Slurm no longer has it.

        Raises:
            QueueError: scontrol failed for another reason than an invalid job id.
        """
        res = self.run_cmd(["scontrol", "show", "job", "-o", job_id], self.timeout_s)
        if res.ok:
            return entry_from_scontrol(res.stdout)
        if res.ran and "invalid job id" in (res.stderr + res.stdout).lower():
            return None
        raise QueueError(_why("scontrol show job", res))


def _why(what: str, res: CommandResult) -> str:
    if not res.ran:
        return f"{what}: not runnable or timed out"
    lines = (res.stderr or res.stdout).strip().splitlines()
    if not lines:
        return f"{what}: exit {res.returncode}"
    # Quoted: Slurm's errors echo job, user and node names.
    return f"{what}: exit {res.returncode}: {code_span(clip(lines[0], 200))}"

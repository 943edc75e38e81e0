"""One-line, human descriptions of origins for tables, findings and ``explain``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from watchdog.model import Origin


def describe_origin(origin: Origin) -> str:
    """Summarise an origin in one line, e.g. ``cron /etc/cron.d/retrain:7 (0 2 * * 0)``.

    Args:
        origin: A resolved origin.

    Returns:
        Text naming the spawner and where it is configured; never empty.
    """
    f = origin.fields
    if origin.kind == "cron":
        text = f"cron {f.get('file')}:{f.get('line')}"
        if f.get("schedule"):
            text += f" ({f['schedule']})"
        if f.get("script"):
            text += f" via {f['script']}"
        return text
    if origin.kind == "systemd":
        scope = "user unit" if f.get("user_unit") or f.get("uid") is not None else "unit"
        text = f"systemd {scope} {f.get('unit')}"
        if f.get("timer"):
            text += f" via {f['timer']}"
            if f.get("timer_schedule"):
                text += f" ({f['timer_schedule']})"
        return text
    if origin.kind == "slurm":
        text = f"Slurm job {f.get('job_id')}"
        if f.get("job_name"):
            text += f" {f['job_name']!r}"
        if f.get("account"):
            text += f" account {f['account']}"
        return text
    if origin.kind == "container":
        cid = str(f.get("container_id") or "?")[:12]
        return f"container {cid}" + (f" pod {f['pod_uid']}" if f.get("pod_uid") else "")
    if origin.kind == "shell":
        return f"shell {f.get('session') or ''}".strip()
    if origin.kind == "at":
        return f"at job {f.get('job') or f.get('job_id') or '?'}"
    if origin.kind == "supervisor":
        return f"supervisor program {f.get('program') or '?'}"
    if origin.kind == "orphan":
        return "orphan (parent exited)"
    return "unknown origin"


def next_run_text(origin: Origin) -> str | None:
    """``next run <when>`` for scheduled origins, or None."""
    nxt = origin.fields.get("next_run")
    return f"next run {nxt}" if nxt else None


# Longest origin label kept (a unit or file name is host text of any length; a label
# value that long would only be a way to grow a time-series database).
MAX_ORIGIN_LABEL_CHARS = 120


def origin_label(kind: str, fields: Mapping[str, Any]) -> str:
    """A short, bounded name of the spawner, fit for a metric or alert label.

    Only what names the *source* and stays the same when it starts the job again: the
    cron file and line, the systemd unit, the Slurm account, the container image, the
    supervisor program. Never a PID, a job or container id, a session or a command line,
    so the number of distinct values stays bounded however many processes come and go.

    Args:
        kind: The origin kind (``cron``, ``systemd``, ``slurm``...).
        fields: The origin's kind-specific fields (``Origin.fields``, or the ``origin``
            object of the scan JSON).

    Returns:
        E.g. ``/etc/cron.d/retrain:7``, ``nightly-retrain.service``, ``ml-research``;
        empty when the kind has no bounded name (shell, at, orphan, unknown).
    """
    value: Any = None
    if kind == "cron":
        if fields.get("file"):
            value = f"{fields['file']}:{fields.get('line')}"
    elif kind == "systemd":
        value = fields.get("unit")
    elif kind == "slurm":
        value = fields.get("account")
    elif kind == "container":
        value = fields.get("image")
    elif kind == "supervisor":
        value = fields.get("program")
    text = "" if value is None else str(value)
    if len(text) > MAX_ORIGIN_LABEL_CHARS:
        text = text[: MAX_ORIGIN_LABEL_CHARS - 1] + "…"
    return text

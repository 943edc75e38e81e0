"""One-line, human descriptions of origins for tables, findings and ``explain``."""

from __future__ import annotations

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
    if origin.kind == "kubernetes":
        if f.get("pod") is None:
            return f"Kubernetes pod {f.get('pod_uid')} (API: {f.get('api')})"
        text = f"Kubernetes pod {f.get('namespace')}/{f.get('pod')}"
        if f.get("owner_kind") not in (None, "Pod"):
            text += f" of {f['owner_kind']} {f.get('owner_name')}"
        if f.get("schedule"):
            text += f" ({f['schedule']})"
        return text
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

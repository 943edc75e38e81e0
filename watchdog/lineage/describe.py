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
        if not f.get("file"):
            # Never "cron None:None": say the line is gone, or that it was not found
            # because some crontabs could not be read.
            if f.get("entry_state") == "removed":
                return "cron, entry gone (no crontab line runs this command now)"
            if f.get("entry_state") == "unattributed":
                return "cron, no entry can have started it (wrong user or time)"
            return "cron, entry not found (some crontabs could not be read)"
        text = f"cron {f.get('file')}:{f.get('line')}"
        if f.get("schedule"):
            text += f" ({f['schedule']})"
        if f.get("script"):
            text += f" via {f['script']}"
        if f.get("launch_script"):
            text += f" via {f['launch_script']} ({f.get('confidence')} confidence)"
        state = f.get("entry_state")
        if state in ("disabled", "removed"):
            text += f", entry since {state}"
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
        return str(f.get("message") or "orphan (parent exited)")
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


# The fields that name *which* source an origin is, per kind: two origins with the same
# key point at the same thing that would start the job again.
_SOURCE_KEYS: dict[str, tuple[str, ...]] = {
    "cron": ("file", "line"),
    "systemd": ("unit", "user_unit", "uid"),
    "slurm": ("job_id",),
    "container": ("container_id",),
    "shell": ("session",),
    "at": ("job",),
    "supervisor": ("supervisor", "program"),
}


def names_source(origin: Origin) -> bool:
    """True when the origin names a definite source (not unknown, orphan, or a cron
    job whose line could not be found)."""
    keys = _SOURCE_KEYS.get(origin.kind)
    if keys is None:
        return False
    return any(origin.fields.get(k) is not None for k in keys)


def same_source(a: Origin, b: Origin) -> bool:
    """True when both origins name the same source (same kind and key fields)."""
    if a.kind != b.kind:
        return False
    keys = _SOURCE_KEYS.get(a.kind, ())
    return all(a.fields.get(k) == b.fields.get(k) for k in keys)


def stop_source_text(origin: Origin, target: int | str) -> str | None:
    """What to run to stop the source, best way first.

    Where ``rogue-watchdog disable-source`` handles the source (a live crontab line, a
    run-parts script, a system unit), it comes first: it backs up what it changes and
    ``rogue-watchdog undo`` restores it. The origin's by-hand command follows.

    Args:
        origin: The job's origin.
        target: What names the job to the CLI: its root PID, or ``F12`` for a finding.

    Returns:
        One line, or None when no remediation is known.
    """
    by_hand = origin.remediation
    if not by_hand:
        return None
    f = origin.fields
    handled = (origin.kind == "cron" and f.get("file") and f.get("line")) or (
        origin.kind == "systemd"
        and f.get("unit")
        and not f.get("user_unit")
        and f.get("uid") is None
    )
    if not handled:
        return by_hand
    what = "the crontab" if origin.kind == "cron" else "the unit states"
    return (
        f"rogue-watchdog disable-source {target} (backs up {what}; `rogue-watchdog undo` "
        f"restores it), or by hand: {by_hand}"
    )


def remediation_text(origin: Origin, target: int | str | None = None) -> str:
    """The remediation line of ``explain``: the command, or why there is none."""
    if origin.remediation:
        if target is not None:
            return stop_source_text(origin, target) or origin.remediation
        return origin.remediation
    state = origin.fields.get("entry_state")
    if origin.kind == "cron" and state in ("disabled", "removed"):
        text = (
            f"none needed for the source (its crontab entry was {state}); "
            "the running job must still be stopped"
        )
        if target is not None:
            text += f": rogue-watchdog terminate {target}"
        return text
    return "none known: the origin could not be named"

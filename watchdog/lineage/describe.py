"""One-line, human descriptions of origins for tables, findings and ``explain``."""

from __future__ import annotations

import re

from watchdog.model import (
    AtOrigin,
    ContainerOrigin,
    CronOrigin,
    KubernetesOrigin,
    Origin,
    OrphanOrigin,
    ShellOrigin,
    SlurmOrigin,
    SupervisorOrigin,
    SystemdOrigin,
)


def describe_origin(origin: Origin) -> str:
    """Summarise an origin in one line, e.g. ``cron /etc/cron.d/retrain:7 (0 2 * * 0)``.

    Args:
        origin: A resolved origin.

    Returns:
        Text naming the spawner and where it is configured; never empty.
    """
    o = origin
    if isinstance(o, CronOrigin):
        if not o.file:
            # Never "cron None:None": say the line is gone, or that it was not found
            # because some crontabs could not be read.
            if o.entry_state == "removed":
                return "cron, entry gone (no crontab line runs this command now)"
            if o.entry_state == "unattributed":
                return "cron, no entry can have started it (wrong user or time)"
            return "cron, entry not found (some crontabs could not be read)"
        text = f"cron {o.file}:{o.line}"
        if o.schedule:
            text += f" ({o.schedule})"
        if o.script:
            text += f" via {o.script}"
        if o.launch_script:
            text += f" via {o.launch_script} ({o.confidence} confidence)"
        if o.entry_state in ("disabled", "removed"):
            text += f", entry since {o.entry_state}"
        return text
    if isinstance(o, SystemdOrigin):
        text = f"systemd {'user unit' if o.user_unit else 'unit'} {o.unit}"
        if o.timer:
            text += f" via {o.timer}"
            if o.timer_schedule:
                text += f" ({o.timer_schedule})"
        return text
    if isinstance(o, SlurmOrigin):
        text = f"Slurm job {o.job_id}"
        if o.job_name:
            text += f" {o.job_name!r}"
        if o.account:
            text += f" account {o.account}"
        return text
    if isinstance(o, ContainerOrigin):
        cid = str(o.container_id or "?")[:12]
        return f"container {cid}" + (f" pod {o.pod_uid}" if o.pod_uid else "")
    if isinstance(o, KubernetesOrigin):
        if o.pod is None:
            return f"Kubernetes pod {o.pod_uid} (API: {o.api})"
        text = f"Kubernetes pod {o.namespace}/{o.pod}"
        if o.owner_kind not in (None, "Pod"):
            text += f" of {o.owner_kind} {o.owner_name}"
        if o.schedule:
            text += f" ({o.schedule})"
        return text
    if isinstance(o, ShellOrigin):
        return f"shell {o.session or ''}".strip()
    if isinstance(o, AtOrigin):
        return f"at job {o.job or '?'}"
    if isinstance(o, SupervisorOrigin):
        return f"supervisor program {o.program or '?'}"
    if isinstance(o, OrphanOrigin):
        return o.message or "orphan (parent exited)"
    return "unknown origin"


def next_run_text(origin: Origin) -> str | None:
    """``next run <when>`` for scheduled origins, or None."""
    nxt = next_run_of(origin)
    return f"next run {nxt}" if nxt else None


def next_run_of(origin: Origin) -> str | None:
    """The origin's next scheduled start (ISO 8601 or words), for the kinds that have one."""
    if isinstance(origin, CronOrigin | SystemdOrigin | KubernetesOrigin):
        return origin.next_run
    return None


# Longest origin label kept (a unit or file name is host text of any length; a label
# value that long would only be a way to grow a time-series database).
MAX_ORIGIN_LABEL_CHARS = 120
# Transient units systemd-run names for one run (``run-u812.service``, ``run-r0a1b...``,
# ``run-p4242-i4243.service``): each run a new name, and nothing starts them again.
_TRANSIENT_UNIT = re.compile(r"run-[a-z0-9-]+(\.[a-z]+)")


def unit_label(unit: str) -> str:
    """The name of what starts ``unit`` again, bounded however many instances run.

    An instance of a template (``train@4242.service``) is labelled with its template
    (``train@.service``: the one unit file every instance is started from, systemd.unit(5),
    DESCRIPTION); a transient ``systemd-run`` unit with ``run-*.service`` (systemd-run(1):
    a generated name per run). Any other unit is its own name.
    """
    name, at, rest = unit.partition("@")
    if at:
        return f"{name}@{rest[rest.rfind('.') :]}" if "." in rest else f"{name}@"
    m = _TRANSIENT_UNIT.fullmatch(unit)
    return f"run-*{m.group(1)}" if m else unit


def origin_label(origin: Origin) -> str:
    """A short, bounded name of the spawner, fit for a metric or alert label.

    Only what names the *source* and stays the same when it starts the job again: the
    cron file and line, the systemd unit, the Slurm account, the container image, the
    supervisor program. Never a PID, a job or container id, a session or a command line,
    so the number of distinct values stays bounded however many processes come and go.

    Args:
        origin: The origin (an alert payload's ``origin`` object parsed with
            :meth:`Origin.from_json`).

    Returns:
        E.g. ``/etc/cron.d/retrain:7``, ``nightly-retrain.service``, ``ml-research``;
        empty when the kind has no bounded name (shell, at, orphan, unknown).
    """
    value: object = None
    o = origin
    if isinstance(o, CronOrigin):
        if o.file:
            value = f"{o.file}:{o.line}"
    elif isinstance(o, SystemdOrigin):
        value = unit_label(o.unit) if o.unit else None
    elif isinstance(o, SlurmOrigin):
        value = o.account
    elif isinstance(o, ContainerOrigin):
        value = o.image
    elif isinstance(o, SupervisorOrigin):
        value = o.program
    text = "" if value is None else str(value)
    if len(text) > MAX_ORIGIN_LABEL_CHARS:
        text = text[: MAX_ORIGIN_LABEL_CHARS - 1] + "…"
    return text


def _source_key(origin: Origin) -> tuple[object, ...] | None:
    """The fields that name *which* source an origin is (None for kinds that name none:
    kubernetes, orphan, unknown): two origins with equal keys point at the same thing
    that would start the job again. A None member is a field that is not known."""
    o = origin
    if isinstance(o, CronOrigin):
        return (o.file, o.line)
    if isinstance(o, SystemdOrigin):
        # A user manager's unit is never the system unit of the same name.
        return (o.unit, True if o.user_unit else None, o.uid)
    if isinstance(o, SlurmOrigin):
        return (o.job_id,)
    if isinstance(o, ContainerOrigin):
        return (o.container_id,)
    if isinstance(o, ShellOrigin):
        return (o.session,)
    if isinstance(o, AtOrigin):
        return (o.job,)
    if isinstance(o, SupervisorOrigin):
        return (o.supervisor, o.program)
    return None


def names_source(origin: Origin) -> bool:
    """True when the origin names a definite source (not unknown, orphan, or a cron
    job whose line could not be found)."""
    key = _source_key(origin)
    return key is not None and any(v is not None for v in key)


def same_source(a: Origin, b: Origin) -> bool:
    """True when both origins name the same source (same kind and key fields)."""
    return a.kind == b.kind and _source_key(a) == _source_key(b)


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
    o = origin
    handled = (isinstance(o, CronOrigin) and o.file and o.line) or (
        isinstance(o, SystemdOrigin) and o.unit and not o.user_unit and o.uid is None
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
    state = origin.entry_state if isinstance(origin, CronOrigin) else None
    if state in ("disabled", "removed"):
        text = (
            f"none needed for the source (its crontab entry was {state}); "
            "the running job must still be stopped"
        )
        if target is not None:
            text += f": rogue-watchdog terminate {target}"
        return text
    return "none known: the origin could not be named"

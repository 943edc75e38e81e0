"""What starts a job again once it ends, per origin kind (issue 31: "name what brings a
rogue back"). Each function answers for its kind from what its resolver read, and is
named by the kind's ``restarts`` entry in :data:`watchdog.model.ORIGIN_KINDS`
(:meth:`watchdog.model.Origin.restarts` calls it). What only the lineage shows (a shell
loop above the job, a service's own launcher) is the guard's
(:func:`watchdog.policy.guard.advise`).

Each answer is a :class:`~watchdog.model.Restarts`: when (at once, on schedule, on boot,
on failure, on demand, unknown), how, and what stops it (``disable-source first`` where
``disable-source`` acts on the kind, else the by-hand step). None: nothing starts it.
"""

from __future__ import annotations

from ..model import (
    NOT_LIVE,
    AtOrigin,
    ContainerOrigin,
    CronOrigin,
    KubernetesOrigin,
    Origin,
    Restarts,
    SupervisorOrigin,
    SystemdOrigin,
)
from .supervisorconf import FALSY, TRUTHY

#: The step that stops a source ``disable-source`` acts on.
DISABLE_FIRST = "disable-source first"
# When each systemd Restart= value starts the service again (systemd.service(5)), and
# whether the SIGTERM a terminate sends first is among them (on-success: a clean signal).
_SYSTEMD_WHEN = {
    "always": ("at once", True),
    "on-success": ("at once after a clean exit or SIGTERM", True),
    "on-failure": ("on failure (not after a clean exit or SIGTERM)", False),
    "on-abnormal": ("on a signal other than SIGTERM, or a timeout", False),
    "on-abort": ("on an uncaught signal other than SIGTERM", False),
    "on-watchdog": ("on a watchdog timeout", False),
}
_ENGINES = {"docker": "Docker", "podman": "Podman"}


def cron(origin: Origin) -> Restarts | None:
    """A live crontab line starts it on its schedule (``@reboot``: on boot)."""
    assert isinstance(origin, CronOrigin)
    if origin.entry_state in NOT_LIVE:
        return None
    if not origin.file:
        return Restarts("unknown", "cron (the line that started it was not found)")
    where = f"its cron line ({origin.schedule})"
    if origin.schedule == "@reboot":
        return Restarts("on boot", where, DISABLE_FIRST)
    # No next run time: a finding's message outlives it (explain gives it, as of its look).
    return Restarts("on schedule", where, DISABLE_FIRST)


def systemd(origin: Origin) -> Restarts | None:
    """``Restart=`` starts the unit's main process again; a timer starts the unit on
    its schedule; a socket or path unit on demand (systemd.service(5), .timer(5))."""
    assert isinstance(origin, SystemdOrigin)
    if not origin.unit:
        return None
    stops = DISABLE_FIRST if not origin.user_unit else f"stop it first: {origin.remediation}"
    parts: list[str] = []
    when: str | None = None
    again = False
    if origin.restart in _SYSTEMD_WHEN:
        when, again = _SYSTEMD_WHEN[origin.restart]
        parts.append(f"systemd Restart={origin.restart}")
    if origin.timer:
        sched = f" ({origin.timer_schedule})" if origin.timer_schedule else ""
        parts.append(f"timer {origin.timer}{sched}")
        when = when or "on schedule"
        again = True
    triggers = [
        e.removeprefix("also triggered by ").removesuffix(" (TriggeredBy)")
        for e in origin.evidence
        if e.startswith("also triggered by ") and e.endswith("(TriggeredBy)")
    ]
    if triggers:
        parts.append(f"{', '.join(triggers)} (on demand)")
        when = when or "on demand"
        again = True
    if when is None:
        return None
    return Restarts(when, "; ".join(parts), stops, again)


def container(origin: Origin) -> Restarts | None:
    """The engine's restart policy (Docker, Podman: ``docker inspect``); ``unknown``
    when the engine could not be asked."""
    assert isinstance(origin, ContainerOrigin)
    if origin.pod_uid is not None or not origin.container_id:
        return None  # a pod's container: the Kubernetes origin answers for its owner
    engine = _ENGINES.get(origin.runtime or "", origin.runtime or "the engine")
    policy = origin.restart_policy
    cid = origin.container_id[:12]
    if policy is None:
        return Restarts(
            "unknown",
            f"{engine} restart policy unknown (the engine did not answer for {cid})",
            f"stop it and remove the policy first: {origin.remediation}",
        )
    if policy == "no":
        return None
    stops = (
        DISABLE_FIRST
        if origin.runtime in ("docker", "podman")
        else f"stop it and remove the policy first: {origin.remediation}"
    )
    # A main process ended by a signal exits 128+N, non-zero: on-failure starts it again
    # after terminate's SIGTERM as always does (only the engine's own `stop` is exempt).
    when = {"always": "at once", "unless-stopped": "at once (until stopped by hand)"}.get(
        policy,
        "on failure (a non-zero exit; a kill by a signal is one)"
        if policy.startswith("on-failure")
        else "unknown",
    )
    return Restarts(when, f"{engine} restart policy {policy} of container {cid}", stops)


def kubernetes(origin: Origin) -> Restarts | None:
    """A pod's owner recreates it: a Deployment/ReplicaSet/StatefulSet/DaemonSet at once,
    a Job on failure, a CronJob on its schedule."""
    assert isinstance(origin, KubernetesOrigin)
    kind, name = origin.owner_kind, origin.owner_name
    if kind in (None, "Pod"):
        return None
    stops = "scale down or delete its owner first: " + (origin.remediation or "kubectl")
    if kind == "CronJob":
        if origin.suspended:
            return None
        return Restarts("on schedule", f"Kubernetes CronJob {name} ({origin.schedule})", stops)
    if kind == "Job":
        return Restarts("on failure", f"Kubernetes Job {name} retries a failed pod", stops, False)
    return Restarts("at once", f"Kubernetes {kind} {name} recreates the pod", stops)


def supervisor(origin: Origin) -> Restarts | None:
    """supervisord: the program's ``autorestart`` (and ``autostart``, ``exitcodes``) as
    its configuration says (supervisord docs, "[program:x] Section Settings"):

    * ``true``: started again at once whenever it exits;
    * ``unexpected`` (the default): at once after an exit code not in ``exitcodes``, or
      a signal (supervisord counts a death by signal as unexpected, so the SIGTERM of a
      ``terminate`` brings it back);
    * ``false``: not after it ends; ``autostart=true`` starts it when supervisord starts.

    Other supervisors (runit, s6, PM2...) and an unreadable configuration: ``unknown``.
    """
    assert isinstance(origin, SupervisorOrigin)
    who = origin.supervisor or "supervisor"
    stops = f"stop it in the supervisor first: {origin.remediation}"
    if who == "supervisord" and origin.autorestart is not None:
        stops = DISABLE_FIRST
        src = f"supervisord {origin.section or 'program:' + str(origin.program)}"
        setting = f"autorestart={origin.autorestart}"
        at = f"{src}, {origin.autorestart_at}"
        value = origin.autorestart
        if value in TRUTHY:
            return Restarts("at once", f"will return: {setting} ({at})", stops)
        if value in FALSY:
            if origin.autostart in TRUTHY:
                return Restarts(
                    "when supervisord starts (not after it ends)",
                    f"won't return: {setting} ({at}); autostart={origin.autostart} "
                    f"({origin.autostart_at}) starts it when supervisord starts",
                    stops,
                    False,
                )
            return None
        if value == "unexpected":
            codes = origin.exitcodes or "0"
            return Restarts(
                f"at once after a signal or an exit code not in exitcodes={codes}",
                f"will return: {setting} ({at})",
                stops,
            )
        return Restarts("unknown", f"{src}: autorestart={value!r} is not a value it takes", stops)
    if who == "supervisord":
        why = origin.settings_unread or "its configuration was not read"
        return Restarts(
            "unknown",
            f"supervisord program {origin.program} (autorestart unknown: {why}; "
            "autorestart=unexpected, the default, restarts it after a signal)",
            stops,
        )
    return Restarts(
        "unknown",
        f"{who} program {origin.program} (its autorestart is not read; supervisors "
        "restart their programs by default)",
        stops,
    )


def at(origin: Origin) -> Restarts | None:
    """An at job that queued another run of the same commands (it re-queues itself)."""
    assert isinstance(origin, AtOrigin)
    if not origin.pending_same_command:
        return None
    jobs = ", ".join(str(j) for j in origin.pending_same_command)
    return Restarts(
        "on schedule",
        f"at job(s) {jobs} queued with the same commands (it re-queues itself)",
        DISABLE_FIRST,
    )

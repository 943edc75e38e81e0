"""The typed list of ``disable-source`` planners: each origin kind's record class → the
function that plans disabling a source of that kind (docs/architecture.md, "Origin
kinds"). A kind not listed is refused with its by-hand remediation.

It lives in its own module, with :func:`plan_disable` that looks it up, because the
planners of ``sources.py`` build on ``disable.py``'s plan types: above both, nothing
imports back (no cycle, not even a lazy one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import hostpaths
from ..model import (
    AtOrigin,
    ContainerOrigin,
    CronOrigin,
    Origin,
    OrphanOrigin,
    SupervisorOrigin,
    SystemdOrigin,
)
from .disable import (
    DisablePlan,
    Planner,
    PlanRequest,
    plan_cron,
    plan_quarantine,
    plan_systemd,
)
from .effects import Effects
from .sources import plan_at, plan_container, plan_supervisor

#: Record class → planner (``(origin, PlanRequest) -> DisablePlan``).
PLANNERS: Mapping[type[Origin], Planner] = {
    ContainerOrigin: plan_container,
    CronOrigin: plan_cron,
    AtOrigin: plan_at,
    SupervisorOrigin: plan_supervisor,
    SystemdOrigin: plan_systemd,
    OrphanOrigin: plan_quarantine,
    Origin: plan_quarantine,
}


def plan_disable(
    origin: Origin,
    *,
    reason: str,
    now: float,
    backup_dir: str,
    effects: Effects,
    spool_dirs: Sequence[str] = hostpaths.CRON_SPOOL_DIRS,
    crontab: str = hostpaths.CRONTAB,
    cron_d: str = hostpaths.CRON_D,
    quarantine_unknown_exe: bool = False,
    cmdline: Sequence[str] = (),
    exe: str | None = None,
) -> DisablePlan:
    """Plan how to disable the source named by ``origin``.

    Args:
        origin: The job's origin (:func:`~watchdog.model.origin_from_json` of a recorded one).
        reason: Why (goes into markers and records), e.g. ``rogue-job finding 12``.
        now: POSIX time for markers and backup names.
        backup_dir: Where backups go.
        effects: Used for read-only queries (``systemctl is-enabled``).
        spool_dirs: User crontab directories (``paths.cron_spool``).
        crontab: The system crontab (``paths.crontab``).
        cron_d: The crontab directory (``paths.cron_d``). A recorded cron line is only
            ever edited in ``crontab``, a cron-readable file directly in ``cron_d`` or a
            file directly in a spool directory; a run-parts script only in a
            ``cron.hourly``/``daily``/``weekly``/``monthly``/``yearly`` directory.
        quarantine_unknown_exe: Allow renaming the script/executable of an orphan or
            unknown-origin job.
        cmdline: The job root's argv (for quarantine).
        exe: The job root's executable (for quarantine).

    Returns:
        A plan; ``refused`` says why when nothing can be done.
    """
    if not origin.READABLE:
        return DisablePlan("none", "-", refused="; ".join(origin.evidence))
    planner = PLANNERS.get(type(origin))
    if planner is None:
        return DisablePlan(
            "none",
            "-",
            refused=f"disabling a {origin.kind} source is not supported; run the remediation "
            f"by hand: {origin.remediation or 'none known'}",
        )
    return planner(
        origin,
        PlanRequest(
            reason,
            now,
            backup_dir,
            effects,
            (crontab, cron_d, spool_dirs),
            quarantine_unknown_exe,
            tuple(cmdline),
            exe,
        ),
    )

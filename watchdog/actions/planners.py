"""The typed list of ``disable-source`` planners: each origin kind's record class → the
function that plans disabling a source of that kind (docs/architecture.md, "Origin
kinds"). A kind not listed is refused with its by-hand remediation.

It lives in its own module because the planners of ``sources.py`` build on
``disable.py``'s plan types: ``plan_disable`` looks this list up when it plans.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..model import (
    AtOrigin,
    ContainerOrigin,
    CronOrigin,
    Origin,
    OrphanOrigin,
    SupervisorOrigin,
    SystemdOrigin,
)
from .disable import Planner, plan_cron, plan_quarantine, plan_systemd
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

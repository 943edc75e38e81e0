"""Origin resolution: who started a process, from its lineage and cgroup.

:func:`default_resolvers` is the registry: resolvers in priority order, the first answer
wins. More specific spawners come first: a Slurm job inside a systemd unit is a Slurm
job; a cron job living on in ``cron.service``'s cgroup is a cron job.
"""

from __future__ import annotations

from watchdog.lineage.base import OriginResolver


def default_resolvers() -> list[OriginResolver]:
    """The built-in resolvers in priority order.

    slurm, kubernetes, container, cron, at, supervisor, shell, systemd, orphan.
    """
    from watchdog.lineage.at import AtResolver
    from watchdog.lineage.container import ContainerResolver
    from watchdog.lineage.cron import CronResolver
    from watchdog.lineage.kubernetes import KubernetesResolver
    from watchdog.lineage.orphan import OrphanResolver
    from watchdog.lineage.shell import ShellResolver
    from watchdog.lineage.slurm import SlurmResolver
    from watchdog.lineage.supervisor import SupervisorResolver
    from watchdog.lineage.systemd import SystemdResolver

    return [
        SlurmResolver(),
        KubernetesResolver(),
        ContainerResolver(),
        CronResolver(),
        AtResolver(),
        SupervisorResolver(),
        ShellResolver(),
        SystemdResolver(),
        OrphanResolver(),
    ]

"""Origin resolution: who started a process, from its lineage and cgroup.

:data:`RESOLVERS` is the typed list of every origin kind's resolver, in priority order:
the first answer wins. More specific spawners come first: a Slurm job inside a systemd
unit is a Slurm job; a cron job living on in ``cron.service``'s cgroup is a cron job.
"""

from __future__ import annotations

from collections.abc import Sequence

from .at import AtResolver
from .base import OriginResolver
from .container import ContainerResolver
from .cron import CronResolver
from .kubernetes import KubernetesResolver
from .orphan import OrphanResolver
from .shell import ShellResolver
from .slurm import SlurmResolver
from .supervisor import SupervisorResolver
from .systemd import SystemdResolver

#: Every origin kind's resolver, once, in the priority order of
#: :data:`watchdog.model.ORIGIN_KINDS` (the ``unknown`` kind has none), each built with no
#: arguments.
RESOLVERS: tuple[type[OriginResolver], ...] = (
    SlurmResolver,
    KubernetesResolver,
    ContainerResolver,
    CronResolver,
    AtResolver,
    SupervisorResolver,
    ShellResolver,
    SystemdResolver,
    OrphanResolver,
)


def default_resolvers(kinds: Sequence[type[OriginResolver]] | None = None) -> list[OriginResolver]:
    """One resolver of each kind in ``kinds`` (default :data:`RESOLVERS`), in order.

    Built in: slurm, kubernetes, container, cron, at, supervisor, shell, systemd, orphan.
    """
    return [cls() for cls in (RESOLVERS if kinds is None else kinds)]

"""Origin resolution: who started a process, from its lineage and cgroup.

:func:`default_resolvers` builds one resolver per origin kind registered in
:data:`watchdog.model.ORIGIN_KINDS`, in its priority order: the first answer wins. More
specific spawners come first: a Slurm job inside a systemd unit is a Slurm job; a cron
job living on in ``cron.service``'s cgroup is a cron job.
"""

from __future__ import annotations

from ..model import ORIGIN_KINDS, load_ref
from .base import OriginResolver


def default_resolvers() -> list[OriginResolver]:
    """The registered resolvers in priority order, each built with no arguments.

    Built in: slurm, kubernetes, container, cron, at, supervisor, shell, systemd, orphan.

    Raises:
        ImportError, AttributeError: A registration names a module or class that does not
            exist (a programming error, found by the registry's tests).
    """
    return [load_ref(kind.resolver)() for kind in ORIGIN_KINDS if kind.resolver is not None]

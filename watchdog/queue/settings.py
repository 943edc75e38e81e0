"""``queue:`` configuration section (docs/config.md). Owned by the queue work."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from watchdog.configbase import NodeReader


@dataclass(frozen=True)
class QueueSettings:
    """Which GPU queues to watch.

    Attributes:
        slurm: Watch Slurm's queue (``squeue``); None means when ``squeue`` is on PATH.
    """

    slurm: bool | None = None


def parse_queue(r: NodeReader, node: yaml.Node) -> QueueSettings:
    """Validate the ``queue:`` section.

    Raises:
        ConfigError: Unknown keys or wrong types.
    """
    m = r.mapping(node, "queue", ("slurm",))
    vals: dict[str, object] = {}
    if "slurm" in m:
        vals["slurm"] = r.boolean(m["slurm"][1], "queue.slurm")
    return QueueSettings(**vals)  # type: ignore[arg-type]

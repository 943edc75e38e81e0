"""``slurm:`` configuration section (docs/slurm.md): drain this node while its GPU is taken."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

import yaml

from watchdog.config.base import NodeReader

DRAIN_VERDICTS = ("rogue", "excess")


@dataclass(frozen=True)
class SlurmNodeSettings:
    """The ``slurm:`` section.

    Attributes:
        drain_on: Job verdicts that drain the node (``rogue``, ``excess``); empty: never.
        node_name: This node's Slurm NodeName; None uses the short host name (slurmd's
            own default, ``hostname -s``).
        sweep_grace_s: Seconds between SIGTERM and SIGKILL in the job-end sweep.
        command_timeout_s: Limit for each ``scontrol``/``sinfo``/``squeue`` call.
    """

    drain_on: tuple[str, ...] = ()
    node_name: str | None = None
    sweep_grace_s: float = 5.0
    command_timeout_s: float = 10.0

    @property
    def node(self) -> str:
        """The NodeName to drain: ``node_name`` or the short host name."""
        return self.node_name or socket.gethostname().split(".", 1)[0]


def parse_slurm(r: NodeReader, node: yaml.Node) -> SlurmNodeSettings:
    """Validate the ``slurm:`` section.

    Raises:
        ConfigError: Unknown keys, a verdict other than ``rogue``/``excess``, a
            non-positive timeout.
    """
    m = r.mapping(node, "slurm", ("drain_on", "node_name", "sweep_grace_s", "command_timeout_s"))
    vals: dict[str, Any] = {}
    if "drain_on" in m:
        items = r.sequence(m["drain_on"][1], "slurm.drain_on")
        verdicts = []
        for i, item in enumerate(items):
            v = r.string(item, f"slurm.drain_on[{i}]")
            if v not in DRAIN_VERDICTS:
                raise r.err(item, f"slurm.drain_on[{i}]", f"expected one of {DRAIN_VERDICTS}")
            verdicts.append(v)
        vals["drain_on"] = tuple(dict.fromkeys(verdicts))
    if "node_name" in m:
        vals["node_name"] = r.string(m["node_name"][1], "slurm.node_name")
    for key in ("sweep_grace_s", "command_timeout_s"):
        if key in m:
            value = r.number(m[key][1], f"slurm.{key}")
            if not value > 0:
                raise r.err(m[key][1], f"slurm.{key}", "must be greater than 0")
            vals[key] = value
    return SlurmNodeSettings(**vals)

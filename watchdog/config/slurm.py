"""``slurm:`` configuration section (docs/slurm.md): drain this node while its GPU is taken.

Example::

    slurm:
      drain_on: [rogue, excess]   # job verdicts that drain the node; empty: never
      node_name: gpu01            # default: the short host name, as slurmd uses
      sweep_grace_s: 5
      command_timeout_s: 10
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import yaml

from . import datatypes
from .base import NodeReader, build, keys, setting

DRAIN_VERDICTS = ("rogue", "excess")


def _drain_on(r: NodeReader, node: yaml.Node, key: str) -> tuple[str, ...]:
    """Verdicts from :data:`DRAIN_VERDICTS`, each kept once, in the order written."""
    verdict = datatypes.choice(DRAIN_VERDICTS, f"expected one of {DRAIN_VERDICTS}")
    return tuple(dict.fromkeys(datatypes.tuple_of(verdict)(r, node, key)))


_positive = datatypes.positive_s(too_low="must be greater than 0")


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

    drain_on: tuple[str, ...] = setting((), _drain_on)
    node_name: str | None = setting(None, datatypes.text)
    sweep_grace_s: float = setting(5.0, _positive)
    command_timeout_s: float = setting(10.0, _positive)

    @property
    def node(self) -> str:
        """The NodeName to drain: ``node_name`` or the short host name."""
        # gethostname(2) is uname(2)'s nodename on Linux (no socket import at start-up).
        return self.node_name or os.uname().nodename.split(".", 1)[0]


def parse_slurm(r: NodeReader, node: yaml.Node) -> SlurmNodeSettings:
    """Validate the ``slurm:`` section.

    Raises:
        ConfigError: Unknown keys, a verdict other than ``rogue``/``excess``, a
            non-positive timeout.
    """
    return build(SlurmNodeSettings, r, node, "slurm", order=keys(SlurmNodeSettings))

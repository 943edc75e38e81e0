"""``enforcement:`` configuration section (docs/config.md). Owned by the enforcement work."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import yaml

from watchdog.configbase import NodeReader


@dataclass(frozen=True)
class EnforcementSettings:
    """What the daemon may do about rogue jobs.

    Attributes:
        mode: ``observe`` (alert only) or ``terminate``.
        grace_s: Seconds between SIGTERM and SIGKILL.
    """

    mode: Literal["observe", "terminate"] = "observe"
    grace_s: float = 10.0


def parse_enforcement(r: NodeReader, node: yaml.Node) -> EnforcementSettings:
    """Validate the ``enforcement:`` section.

    Raises:
        ConfigError: Unknown keys or wrong types.
    """
    m = r.mapping(node, "enforcement", ("mode", "grace_s"))
    vals: dict[str, object] = {}
    if "mode" in m:
        mode = r.string(m["mode"][1], "enforcement.mode")
        if mode not in ("observe", "terminate"):
            raise r.err(m["mode"][1], "enforcement.mode", "must be observe or terminate")
        vals["mode"] = mode
    if "grace_s" in m:
        vals["grace_s"] = r.number(m["grace_s"][1], "enforcement.grace_s")
    return EnforcementSettings(**vals)  # type: ignore[arg-type]

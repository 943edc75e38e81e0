"""``ship_gates:`` configuration section (docs/config.md). Owned by the ship-gate work."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from watchdog.configbase import NodeReader


@dataclass(frozen=True)
class ShipGate:
    """A deploy directory whose weights the daemon verifies.

    Attributes:
        name: Gate name shown in findings.
        deploy_dir: Directory models are shipped into.
    """

    name: str
    deploy_dir: str


def parse_ship_gates(r: NodeReader, node: yaml.Node) -> tuple[ShipGate, ...]:
    """Validate the ``ship_gates:`` list.

    Raises:
        ConfigError: Unknown keys, wrong types, missing keys.
    """
    gates = []
    for i, item in enumerate(r.sequence(node, "ship_gates")):
        key = f"ship_gates[{i}]"
        m = r.mapping(item, key, ("name", "deploy_dir"))
        for required in ("name", "deploy_dir"):
            if required not in m:
                raise r.err(item, f"{key}.{required}", "required key missing")
        gates.append(
            ShipGate(
                name=r.string(m["name"][1], f"{key}.name"),
                deploy_dir=r.string(m["deploy_dir"][1], f"{key}.deploy_dir"),
            )
        )
    return tuple(gates)

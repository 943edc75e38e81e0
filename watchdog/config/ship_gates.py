"""``ship_gates:`` configuration section (docs/weights.md, "Ship gates in the daemon").

Owned by the ship-gate work. Each list entry is one deploy directory the daemon watches
(:mod:`watchdog.weights.shipwatch`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial

import yaml

from watchdog.config.base import NodeReader
from watchdog.model import INDEX_SUFFIX, UNVERIFIABLE_SUFFIXES, WEIGHT_SUFFIXES

#: Name of the default quarantine folder, created inside the deploy directory so that a
#: rename into it never crosses a file system (``rename(2)`` fails with ``EXDEV`` there).
QUARANTINE_DIRNAME = ".rogue-watchdog-quarantine"

#: Default globs: every suffix ``verify`` walks in a model directory (verifiable formats
#: and weights formats it reports "not verified", so those fail closed) plus shard indexes.
DEFAULT_PATTERNS: tuple[str, ...] = (
    *(f"*{s}" for s in sorted(WEIGHT_SUFFIXES)),
    *(f"*{s}" for s in sorted(UNVERIFIABLE_SUFFIXES)),
    f"*{INDEX_SUFFIX}",
)

_KEYS = (
    "name",
    "deploy_dir",
    "train_dir",
    "stale_after_s",
    "quarantine",
    "quarantine_dir",
    "patterns",
    "settle_s",
)


@dataclass(frozen=True)
class ShipGate:
    """A deploy directory whose weights the daemon verifies.

    Attributes:
        name: Gate name shown in findings (unique among gates).
        deploy_dir: Absolute directory models are shipped into (walked recursively).
        train_dir: Absolute training output directory for the freshness rule, or None
            to skip it.
        stale_after_s: How long (seconds) the newest finite training output may wait
            undeployed before ``deploy-stale`` opens. Default 24 h.
        quarantine: Move non-finite files aside (atomic rename) instead of only alerting.
        quarantine_dir: Where quarantined files go; None means
            ``<deploy_dir>/.rogue-watchdog-quarantine``. Must be on the deploy
            directory's file system.
        patterns: File-name globs (case-insensitive) of files to verify; a glob
            containing ``/`` is matched against the path relative to ``deploy_dir``.
        settle_s: Minimum seconds between the two polls that must see a file's size
            and mtime unchanged before it is verified (0: any two consecutive ticks).
    """

    name: str
    deploy_dir: str
    train_dir: str | None = None
    stale_after_s: float = 86400.0
    quarantine: bool = False
    quarantine_dir: str | None = None
    patterns: tuple[str, ...] = DEFAULT_PATTERNS
    settle_s: float = 0.0

    @property
    def quarantine_path(self) -> str:
        """The effective quarantine directory."""
        return self.quarantine_dir or os.path.join(self.deploy_dir, QUARANTINE_DIRNAME)


def _absolute(r: NodeReader, node: yaml.Node, key: str) -> str:
    path = r.string(node, key)
    if not os.path.isabs(path):
        raise r.err(node, key, f"must be an absolute path, got {path!r}")
    return os.path.normpath(path)


def _nonneg(r: NodeReader, node: yaml.Node, key: str) -> float:
    value = r.number(node, key)
    if value < 0:
        raise r.err(node, key, f"must be >= 0, got {node.value}")
    return value


def _gate(r: NodeReader, item: yaml.Node, key: str) -> ShipGate:
    m = r.mapping(item, key, _KEYS)
    for required in ("name", "deploy_dir"):
        if required not in m:
            raise r.err(item, f"{key}.{required}", "required key missing")
    vals: dict[str, object] = {
        "name": r.string(m["name"][1], f"{key}.name"),
        "deploy_dir": _absolute(r, m["deploy_dir"][1], f"{key}.deploy_dir"),
    }
    if "train_dir" in m:
        vals["train_dir"] = _absolute(r, m["train_dir"][1], f"{key}.train_dir")
    if "stale_after_s" in m:
        if "train_dir" not in m:
            raise r.err(m["stale_after_s"][0], f"{key}.stale_after_s", "needs train_dir beside it")
        vals["stale_after_s"] = _nonneg(r, m["stale_after_s"][1], f"{key}.stale_after_s")
    if "quarantine" in m:
        vals["quarantine"] = r.boolean(m["quarantine"][1], f"{key}.quarantine")
    if "quarantine_dir" in m:
        if not vals.get("quarantine"):
            raise r.err(
                m["quarantine_dir"][0],
                f"{key}.quarantine_dir",
                "has no effect without 'quarantine: true'",
            )
        qdir = _absolute(r, m["quarantine_dir"][1], f"{key}.quarantine_dir")
        if qdir == vals["deploy_dir"]:
            raise r.err(m["quarantine_dir"][1], f"{key}.quarantine_dir", "must not be deploy_dir")
        vals["quarantine_dir"] = qdir
    if "patterns" in m:
        patterns = r.globs(m["patterns"][1], f"{key}.patterns")
        if not patterns:
            raise r.err(m["patterns"][1], f"{key}.patterns", "must name at least one glob")
        vals["patterns"] = patterns
    if "settle_s" in m:
        vals["settle_s"] = _nonneg(r, m["settle_s"][1], f"{key}.settle_s")
    return ShipGate(**vals)  # type: ignore[arg-type]


def parse_ship_gates(r: NodeReader, node: yaml.Node) -> tuple[ShipGate, ...]:
    """Validate the ``ship_gates:`` list.

    Raises:
        ConfigError: Unknown keys, wrong types, missing keys, relative paths, duplicate
            gate names, ``stale_after_s`` without ``train_dir``, ``quarantine_dir``
            without ``quarantine: true``.
    """
    gates: list[ShipGate] = []
    for i, item in enumerate(r.sequence(node, "ship_gates")):
        gate = r.attempt(partial(_gate, r, item, f"ship_gates[{i}]"))
        if gate is None:  # recorded; the other gates are still checked
            continue
        if any(g.name == gate.name for g in gates):
            raise r.err(item, f"ship_gates[{i}].name", f"duplicate gate name {gate.name!r}")
        gates.append(gate)
    return tuple(gates)

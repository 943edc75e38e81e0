"""``ship_gates:`` configuration section (docs/weights.md, "Ship gates in the daemon").

Owned by the ship-gate work. Each list entry is one deploy directory the daemon watches
(:mod:`watchdog.weights.shipwatch`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import partial

import yaml

from ..model import INDEX_SUFFIX, UNVERIFIABLE_SUFFIXES, WEIGHT_SUFFIXES
from . import datatypes
from .base import (
    NodeReader,
    construct,
    keys,
    read,
    require,
    required,
    setting,
)

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

_non_negative = datatypes.non_negative_s(too_low="must be >= 0, got {text}")

#: Default ``settle_s``: a file must stay unchanged this long (wall-clock seconds) before
#: it is judged. Ticks can come milliseconds apart (process events ask for early ones),
#: so "two polls" alone judged a file still being written (issue 32, case 10b); a writer
#: that writes at least every 10 s looks unsettled.
DEFAULT_SETTLE_S = 10.0

#: ``enforce:`` values: the after-the-fact gate only, refusal at open, or report only.
ENFORCE_MODES = ("off", "open", "audit")


def _patterns(r: NodeReader, node: yaml.Node, key: str) -> tuple[str, ...]:
    patterns = datatypes.globs(r, node, key)
    if not patterns:
        raise r.err(node, key, "must name at least one glob")
    return patterns


@dataclass(frozen=True)
class ShipGate:
    """A deploy directory whose weights the daemon verifies.

    Attributes:
        name: Gate name shown in findings (unique among gates).
        deploy_dir: Absolute directory models are shipped into (walked recursively).
        train_dir: Absolute training output directory for the freshness rule, or None
            to skip it.
        stale_after_s: How long (seconds) the newest finite training output may wait
            undeployed before ``deploy-stale`` opens. Default 24 h. Needs ``train_dir``.
        quarantine: Move non-finite files aside (atomic rename) instead of only alerting.
        quarantine_dir: Where quarantined files go; None means
            ``<deploy_dir>/.rogue-watchdog-quarantine``. Must be on the deploy
            directory's file system; needs ``quarantine: true``.
        patterns: File-name globs (case-insensitive) of files to verify; a glob
            containing ``/`` is matched against the path relative to ``deploy_dir``.
        settle_s: Seconds a file's identity (size, mtime, ctime, inode) must stay
            unchanged, seen at two polls at least that far apart on the wall clock,
            before it is verified (default :data:`DEFAULT_SETTLE_S`; 0: any two polls,
            however close).
        enforce: ``off`` (default: the after-the-fact gate only), ``open`` (refuse a
            read ``open(2)`` of a version not verified finite, EPERM, through fanotify)
            or ``audit`` (report each open that would have been refused).
        open_timeout_s: Longest an opener waits while an unverified version is
            verified at open; past it the open is refused (``enforce: open``).
        quarantine_dir_line: Line of ``quarantine_dir`` in the file, for checks of the
            host (``check-config``); None when it is not given.
    """

    name: str = required(datatypes.text)
    deploy_dir: str = required(datatypes.normalized_path)
    train_dir: str | None = setting(None, datatypes.normalized_path)
    stale_after_s: float = setting(86400.0, _non_negative)
    quarantine: bool = setting(False, datatypes.boolean)
    quarantine_dir: str | None = setting(None, datatypes.normalized_path)
    patterns: tuple[str, ...] = setting(DEFAULT_PATTERNS, _patterns)
    settle_s: float = setting(DEFAULT_SETTLE_S, _non_negative)
    enforce: str = setting("off", datatypes.choice(ENFORCE_MODES, "must be off, open or audit"))
    open_timeout_s: float = setting(5.0, datatypes.positive_s(maximum=600.0))
    quarantine_dir_line: int | None = field(default=None, compare=False)

    @property
    def quarantine_path(self) -> str:
        """The effective quarantine directory."""
        return self.quarantine_dir or os.path.join(self.deploy_dir, QUARANTINE_DIRNAME)


def _gate(r: NodeReader, item: yaml.Node, key: str) -> ShipGate:
    m = r.mapping(item, key, keys(ShipGate))
    if r.collect and not ("name" in m and "deploy_dir" in m):
        # No gate to build, but each value given is still checked in the same run.
        read(ShipGate, r, m, key, keep_going=True)
    require(r, item, key, m, "name", "deploy_dir")
    vals: dict[str, object] = {}

    def take(*names: str) -> None:
        vals.update(read(ShipGate, r, m, key, order=names))

    # Each cross-key check sits where it needs what it checks: the first error is the
    # one the keys before it did not already raise.
    take("name", "deploy_dir", "train_dir")
    # A check that a key is absent (or unset) defers to an unknown key that looks like it.
    if "stale_after_s" in m and "train_dir" not in m:
        needs = r.err(m["stale_after_s"][0], f"{key}.stale_after_s", "needs train_dir beside it")
        raise r.misspelt(key, "train_dir") or needs
    take("stale_after_s", "quarantine")
    if "quarantine_dir" in m and not vals.get("quarantine"):
        raise r.misspelt(key, "quarantine") or r.err(
            m["quarantine_dir"][0],
            f"{key}.quarantine_dir",
            "has no effect without 'quarantine: true'",
        )
    take("quarantine_dir")
    if "quarantine_dir" in vals and vals["quarantine_dir"] == vals["deploy_dir"]:
        raise r.err(m["quarantine_dir"][1], f"{key}.quarantine_dir", "must not be deploy_dir")
    take("patterns", "settle_s", "enforce")
    if "open_timeout_s" in m and vals.get("enforce", "off") == "off":
        raise r.misspelt(key, "enforce") or r.err(
            m["open_timeout_s"][0],
            f"{key}.open_timeout_s",
            "has no effect without 'enforce: open' or 'enforce: audit'",
        )
    take("open_timeout_s")
    if "quarantine_dir" in m:
        vals["quarantine_dir_line"] = m["quarantine_dir"][1].start_mark.line + 1
    return construct(ShipGate, vals)


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

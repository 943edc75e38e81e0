"""Origin pins: where a sanctioned job must come from (``sanctioned[].origin``), and which
origins ``enforcement.protect`` keeps from every action (docs/config.md).

Each key names one field of one origin kind; the kind answers for itself which keys it
has (:meth:`watchdog.model.Origin.pin_values`), so a new origin kind brings its keys with
it and this module lists none by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from watchdog.config import datatypes
from watchdog.config.base import NodeReader, build, keys, setting
from watchdog.model import ORIGIN_CLASSES

# Unit types (systemd.unit(5)): a pin without one of these suffixes names no unit.
UNIT_SUFFIXES = (
    ".service", ".socket", ".device", ".mount", ".automount", ".swap", ".target", ".path",
    ".timer", ".slice", ".scope",
)  # fmt: skip

# Pin key -> the origin kind whose field it names, as each record class declares it.
PIN_KINDS: dict[str, str] = {
    key: cls.kind for cls in ORIGIN_CLASSES.values() for key in cls().pin_values()
}


def _unit_pin(r: NodeReader, node: yaml.Node, key: str) -> str:
    """A glob over a unit name; it must be able to match a unit type suffix."""
    text = datatypes.glob(r, node, key)
    if not text.endswith(("*", *UNIT_SUFFIXES)):
        raise r.err(
            node,
            key,
            f"{text!r} has no unit type suffix, so it never matches a unit (units are "
            f"named with their type: {text}.service); known types: {', '.join(UNIT_SUFFIXES)}",
        )
    return text


def _timer_pin(r: NodeReader, node: yaml.Node, key: str) -> str:
    """A glob over a timer unit's name: it must be able to match ``*.timer``."""
    text = datatypes.glob(r, node, key)
    if not text.endswith(("*", ".timer")):
        raise r.err(node, key, f"{text!r} is not a timer unit (timers are named NAME.timer)")
    return text


@dataclass(frozen=True)
class OriginPin:
    """Where a job must come from; every set field must match (fnmatch globs, except
    ``cron_line``). ``any: true`` alone matches every origin."""

    any: bool = setting(False, datatypes.boolean)
    systemd_unit: str | None = setting(None, _unit_pin)
    systemd_timer: str | None = setting(None, _timer_pin)
    cron_file: str | None = setting(None, datatypes.glob)
    cron_line: int | None = setting(None, datatypes.integer(1))
    slurm_account: str | None = setting(None, datatypes.glob)
    slurm_job_name: str | None = setting(None, datatypes.glob)
    container_image: str | None = setting(None, datatypes.glob)
    container_image_digest: str | None = setting(None, datatypes.glob)
    k8s_namespace: str | None = setting(None, datatypes.glob)
    k8s_owner: str | None = setting(None, datatypes.glob)
    k8s_service_account: str | None = setting(None, datatypes.glob)

    def set_keys(self) -> dict[str, object]:
        """The keys that are set, in declaration order (``any`` left out)."""
        return {k: getattr(self, k) for k in ORIGIN_KEYS if k != "any" and getattr(self, k)}

    def text(self) -> str:
        """The pin as written, e.g. ``cron_file=/etc/cron.d/pipeline, cron_line=2``."""
        if self.any:
            return "any: true"
        return ", ".join(f"{k}={v}" for k, v in self.set_keys().items())


ORIGIN_KEYS = keys(OriginPin)
assert set(ORIGIN_KEYS) - {"any"} == set(PIN_KINDS), "OriginPin and the origin records disagree"


def parse_origin_pin(r: NodeReader, node: yaml.Node, key: str) -> OriginPin:
    """An origin pin: keys of one origin kind, or ``any: true`` alone.

    Raises:
        ConfigError: An empty mapping, ``cron_line`` without ``cron_file``, keys of two
            kinds (no origin has both), ``any`` beside other keys, or ``any: false``.
    """
    m = r.mapping(node, key, ORIGIN_KEYS)
    if not m:
        raise r.err(
            node, key, f"needs one of {', '.join(k for k in ORIGIN_KEYS if k != 'cron_line')}"
        )
    pin = build(OriginPin, r, node, key)
    if "cron_line" in m and "cron_file" not in m:
        raise r.err(m["cron_line"][0], f"{key}.cron_line", "needs cron_file beside it")
    kinds = {PIN_KINDS[k] for k in m if k != "any"}
    if len(kinds) > 1:
        raise r.err(
            node,
            key,
            f"keys of different origin kinds can never all match: {', '.join(sorted(m))}",
        )
    if pin.any and len(m) > 1:
        raise r.err(node, key, "'any: true' cannot be combined with other origin keys")
    if "any" in m and not pin.any:
        raise r.err(m["any"][1], f"{key}.any", "only 'any: true' makes sense; remove the key")
    return pin

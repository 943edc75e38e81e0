"""Origin pins: where a sanctioned job must come from (``sanctioned[].origin``), and which
origins ``enforcement.protect`` keeps from every action (docs/config.md).

Each key names one field of one origin kind; the kind answers for itself which keys it
has (:meth:`watchdog.model.Origin.pin_values`) and how each is read
(:attr:`~watchdog.model.Origin.PINS`), so
a kind listed in :data:`watchdog.model.ORIGIN_KINDS` brings its keys with it and this
module lists none by hand.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import yaml

from ..model import Origin, origin_kinds
from . import datatypes
from .base import Converter, NodeReader

# Unit types (systemd.unit(5)): a pin without one of these suffixes names no unit.
UNIT_SUFFIXES = (
    ".service", ".socket", ".device", ".mount", ".automount", ".swap", ".target", ".path",
    ".timer", ".slice", ".scope",
)  # fmt: skip


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


def pin_keys() -> dict[str, type[Origin]]:
    """Every origin key → the record class of the kind whose field it names, in the
    kinds' order (:func:`watchdog.model.origin_kinds`) and each kind's own key order.

    Raises:
        ValueError: Two kinds claim one key (a rule could never tell which kind it
            names).
    """
    # Asked for every job and rule of every scan (origin_mismatch): derived once per
    # tuple of kinds (a tuple of classes is its own cache key), not per call.
    return dict(_pin_keys(origin_kinds()))


@functools.lru_cache(maxsize=4)
def _pin_keys(kinds: tuple[type[Origin], ...]) -> dict[str, type[Origin]]:
    out: dict[str, type[Origin]] = {}
    for cls in kinds:
        for key in cls.PINS:
            if out.setdefault(key, cls) is not cls:
                raise ValueError(f"origin key {key!r} is claimed by {out[key].kind} and {cls.kind}")
    return out


# How each PinKey.type is read.
_READERS: dict[str, Converter[object]] = {
    "glob": datatypes.glob,
    "unit": _unit_pin,
    "timer": _timer_pin,
    "line": datatypes.integer(1),
}


def _in_key_order(values: dict[str, object]) -> tuple[tuple[str, object], ...]:
    order = list(pin_keys())
    return tuple(sorted(values.items(), key=lambda kv: order.index(kv[0])))


@dataclass(frozen=True)
class OriginPin:
    """Where a job must come from; every set key must match (fnmatch globs, except a
    ``line`` key such as ``cron_line``). ``any: true`` alone matches every origin.

    Attributes:
        any: ``any: true`` was written.
        values: ``(key, value)`` of each set origin key, in :func:`pin_keys` order.
    """

    any: bool = False
    values: tuple[tuple[str, object], ...] = ()

    @classmethod
    def of(cls, **values: object) -> OriginPin:
        """A pin of these keys, e.g. ``OriginPin.of(cron_file="/etc/cron.d/x",
        cron_line=2)`` (values as :func:`parse_origin_pin` would give them)."""
        return cls(values=_in_key_order(values))

    def set_keys(self) -> dict[str, object]:
        """The keys that are set, in :func:`pin_keys` order (``any`` left out)."""
        return dict(self.values)

    def get(self, key: str) -> object | None:
        """The value set for ``key``, or None."""
        return self.set_keys().get(key)

    def text(self) -> str:
        """The pin as written, e.g. ``cron_file=/etc/cron.d/pipeline, cron_line=2``."""
        if self.any:
            return "any: true"
        return ", ".join(f"{k}={v}" for k, v in self.values)


def parse_origin_pin(r: NodeReader, node: yaml.Node, key: str) -> OriginPin:
    """An origin pin: keys of one origin kind, or ``any: true`` alone.

    Raises:
        ConfigError: An empty mapping, a key its kind says needs another beside it
            (``cron_line`` without ``cron_file``), keys of two kinds (no origin has
            both), ``any`` beside other keys, ``any: false``, or a value its key's type
            refuses.
    """
    owners = pin_keys()
    m = r.mapping(node, key, ("any", *owners))
    if not m:
        alone = [k for k, cls in owners.items() if cls.PINS[k].needs is None]
        needs = r.err(node, key, f"needs one of {', '.join(('any', *alone))}")
        raise r.misspelt(key) or needs  # emptied by unknown keys: their errors say it
    for k in m:
        need = owners[k].PINS[k].needs if k != "any" else None
        if need is not None and need not in m:
            beside = r.err(m[k][0], f"{key}.{k}", f"needs {need} beside it")
            raise r.misspelt(key, need) or beside
    kinds = {owners[k].kind for k in m if k != "any"}
    if len(kinds) > 1:
        raise r.err(
            node,
            key,
            f"keys of different origin kinds can never all match: {', '.join(sorted(m))}",
        )
    if "any" in m:
        if not datatypes.boolean(r, m["any"][1], f"{key}.any"):
            raise r.err(m["any"][1], f"{key}.any", "only 'any: true' makes sense; remove the key")
        if len(m) > 1:
            raise r.err(node, key, "'any: true' cannot be combined with other origin keys")
        return OriginPin(any=True)
    values: dict[str, object] = {}
    for k, (_, v) in m.items():
        # Every bad value is reported in one pass (collect mode), not only the first.
        read = r.attempt(functools.partial(_READERS[owners[k].PINS[k].type], r, v, f"{key}.{k}"))
        if read is not None:
            values[k] = read
    return OriginPin(values=_in_key_order(values))

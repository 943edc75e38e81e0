"""Shared plumbing for configuration sections: the error type and a YAML node reader.

Every section parser (core, daemon, alerts, enforcement, queue, ship gates) reads YAML
nodes through :class:`NodeReader`, so each error names the file, the line and the key
path the same way.
"""

from __future__ import annotations

import re

import yaml


class ConfigError(ValueError):
    """The configuration is invalid.

    Attributes:
        path: File the error is in.
        line: 1-based line, or None when the error is about the whole file.
        key: Dotted key path such as ``sanctioned[0].origin.systemd_unit``.
    """

    def __init__(self, path: str, line: int | None, key: str, message: str) -> None:
        self.path = path
        self.line = line
        self.key = key
        self.message = message
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {key}: {message}" if key else f"{where}: {message}")


_CONSTRUCTOR = yaml.SafeLoader("")  # its construct_object turns a checked scalar into a value


class NodeReader:
    """Typed access to YAML nodes; every failure is a :class:`ConfigError`."""

    def __init__(self, path: str) -> None:
        self.path = path

    def err(self, node: yaml.Node | None, key: str, msg: str) -> ConfigError:
        line = node.start_mark.line + 1 if node is not None else None
        return ConfigError(self.path, line, key, msg)

    def mapping(
        self, node: yaml.Node, key: str, allowed: tuple[str, ...]
    ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise self.err(node, key, f"expected a mapping, got {_kind(node)}")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for knode, vnode in node.value:
            name = knode.value if isinstance(knode, yaml.ScalarNode) else None
            sub = f"{key}.{name}" if key else str(name)
            if name not in allowed:
                hint = f"; allowed: {', '.join(allowed)}"
                raise self.err(knode, sub, f"unknown key {name!r}{hint}")
            if name in out:
                raise self.err(knode, sub, "duplicate key")
            out[name] = (knode, vnode)
        return out

    def sequence(self, node: yaml.Node, key: str) -> list[yaml.Node]:
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
            return []
        if not isinstance(node, yaml.SequenceNode):
            raise self.err(node, key, f"expected a list, got {_kind(node)}")
        return list(node.value)

    def string(self, node: yaml.Node, key: str) -> str:
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:str":
            raise self.err(node, key, f"expected a string, got {_kind(node)}")
        if not node.value:
            raise self.err(node, key, "must not be empty")
        text = str(node.value)
        if "\0" in text:
            raise self.err(node, key, "must not contain a NUL character")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise self.err(node, key, "must not contain lone surrogate escapes") from None
        return text

    def _construct(self, node: yaml.Node, key: str, what: str) -> object:
        # YAML 1.1 as PyYAML reads it: 0o17, 0x1F, 1_000, sexagesimal 1:30, yes/no...
        try:
            return _CONSTRUCTOR.construct_object(node, deep=True)
        except (ValueError, KeyError, OverflowError, yaml.YAMLError):
            raise self.err(node, key, f"expected {what}, got {node.value!r}") from None

    def integer(self, node: yaml.Node, key: str, minimum: int) -> int:
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:int":
            raise self.err(node, key, f"expected an integer, got {_kind(node)}")
        if len(node.value) > 30:
            raise self.err(node, key, "integer too large")
        value = self._construct(node, key, "an integer")
        assert isinstance(value, int)
        if value < minimum:
            raise self.err(node, key, f"must be at least {minimum}, got {value}")
        return value

    def number(self, node: yaml.Node, key: str) -> float:
        if not isinstance(node, yaml.ScalarNode) or node.tag not in (
            "tag:yaml.org,2002:int",
            "tag:yaml.org,2002:float",
        ):
            raise self.err(node, key, f"expected a number, got {_kind(node)}")
        if len(node.value) > 30:
            raise self.err(node, key, "number too large")
        raw = self._construct(node, key, "a number")
        assert isinstance(raw, int | float)
        value = float(raw)
        if value != value or value in (float("inf"), float("-inf")):
            raise self.err(node, key, f"must be a finite number, got {node.value}")
        return value

    def boolean(self, node: yaml.Node, key: str) -> bool:
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:bool":
            raise self.err(node, key, f"expected true or false, got {_kind(node)}")
        value = self._construct(node, key, "true or false")
        assert isinstance(value, bool)
        return value

    def regex(self, node: yaml.Node, key: str) -> re.Pattern[str]:
        text = self.string(node, key)
        try:
            return re.compile(text)
        except (re.error, OverflowError, RecursionError, ValueError) as exc:
            raise self.err(node, key, f"invalid regular expression: {exc}") from None

    def strings(self, node: yaml.Node, key: str) -> tuple[str, ...]:
        return tuple(
            self.string(item, f"{key}[{i}]") for i, item in enumerate(self.sequence(node, key))
        )


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    tag = node.tag.rsplit(":", 1)[-1]
    return {"str": "a string", "int": "an integer", "bool": "a boolean", "null": "nothing"}.get(
        tag, tag
    ) + (f" ({node.value!r})" if tag != "null" else "")

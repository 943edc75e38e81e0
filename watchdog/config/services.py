"""``services:`` configuration section (docs/services.md): ports a job may listen on.

Example::

    services:
      enabled: true
      sanctioned_ports:
        - {name: metrics, port: 9100}
        - {name: tensorboard, port: 6006, address: "127.0.0.1", proto: tcp}
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Literal, Protocol

import yaml

from watchdog.config.base import NodeReader

Proto = Literal["tcp", "udp"]


class Listening(Protocol):
    """What :meth:`SanctionedPort.matches` reads of a listening socket
    (``watchdog.actions.services.Listen``)."""

    @property
    def proto(self) -> Proto: ...

    @property
    def address(self) -> str: ...

    @property
    def port(self) -> int: ...


@dataclass(frozen=True)
class SanctionedPort:
    """A listening socket that is expected.

    Attributes:
        name: Shown in docs and ``explain``-style output.
        port: Local port (1-65535).
        address: fnmatch glob over the local address text (``0.0.0.0``, ``::1``);
            None for any address.
        proto: ``tcp`` or ``udp``; None for both.
    """

    name: str
    port: int
    address: str | None = None
    proto: Literal["tcp", "udp"] | None = None

    def matches(self, listen: Listening) -> bool:
        """True when ``listen`` is this sanctioned socket."""
        if listen.port != self.port:
            return False
        if self.proto is not None and listen.proto != self.proto:
            return False
        return self.address is None or fnmatch.fnmatchcase(listen.address, self.address)


@dataclass(frozen=True)
class ServiceSettings:
    """Rogue-service detection.

    Attributes:
        enabled: Report ``rogue-service`` findings.
        sanctioned_ports: Sockets never reported.
    """

    enabled: bool = True
    sanctioned_ports: tuple[SanctionedPort, ...] = ()

    def sanctioned(self, listen: Listening) -> SanctionedPort | None:
        """The first entry that sanctions ``listen``, or None."""
        return next((p for p in self.sanctioned_ports if p.matches(listen)), None)


def _port(r: NodeReader, node: yaml.Node, key: str) -> SanctionedPort:
    m = r.mapping(node, key, ("name", "port", "address", "proto"))
    for required in ("name", "port"):
        if required not in m:
            raise r.err(node, f"{key}.{required}", "required key missing")
    port = r.integer(m["port"][1], f"{key}.port", 1)
    if port > 65535:
        raise r.err(m["port"][1], f"{key}.port", f"must be at most 65535, got {port}")
    proto: Literal["tcp", "udp"] | None = None
    if "proto" in m:
        text = r.string(m["proto"][1], f"{key}.proto")
        if text not in ("tcp", "udp"):
            raise r.err(m["proto"][1], f"{key}.proto", "must be tcp or udp")
        proto = "tcp" if text == "tcp" else "udp"
    return SanctionedPort(
        name=r.string(m["name"][1], f"{key}.name"),
        port=port,
        address=r.glob(m["address"][1], f"{key}.address") if "address" in m else None,
        proto=proto,
    )


def parse_services(r: NodeReader, node: yaml.Node) -> ServiceSettings:
    """Validate the ``services:`` section.

    Raises:
        ConfigError: Unknown keys, wrong types, a port outside 1-65535, a missing name.
    """
    m = r.mapping(node, "services", ("enabled", "sanctioned_ports"))
    enabled = r.boolean(m["enabled"][1], "services.enabled") if "enabled" in m else True
    ports: tuple[SanctionedPort, ...] = ()
    if "sanctioned_ports" in m:
        key = "services.sanctioned_ports"
        ports = tuple(r.each(m["sanctioned_ports"][1], key, lambda n, k: _port(r, n, k)))
    return ServiceSettings(enabled=enabled, sanctioned_ports=ports)

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
from typing import Literal, Protocol, get_args

import yaml

from . import datatypes
from .base import NodeReader, build, keys, required, setting

Proto = Literal["tcp", "udp"]
PROTOS: tuple[Proto, ...] = get_args(Proto)


class Listening(Protocol):
    """What :meth:`SanctionedPort.matches` reads of a listening socket
    (``watchdog.sources.sockets.Listen``)."""

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

    name: str = required(datatypes.text)
    port: int = required(
        datatypes.integer(1, 65535, too_high="must be at most {maximum}, got {value}")
    )
    address: str | None = setting(None, datatypes.glob)
    proto: Proto | None = setting(None, datatypes.choice(PROTOS, "must be tcp or udp"))

    def matches(self, listen: Listening) -> bool:
        """True when ``listen`` is this sanctioned socket."""
        if listen.port != self.port:
            return False
        if self.proto is not None and listen.proto != self.proto:
            return False
        return self.address is None or fnmatch.fnmatchcase(listen.address, self.address)


def _port(r: NodeReader, node: yaml.Node, key: str) -> SanctionedPort:
    return build(SanctionedPort, r, node, key, order=("port", "proto", "name", "address"))


@dataclass(frozen=True)
class ServiceSettings:
    """Rogue-service detection.

    Attributes:
        enabled: Report ``rogue-service`` findings.
        sanctioned_ports: Sockets never reported.
    """

    enabled: bool = setting(True, datatypes.boolean)
    sanctioned_ports: tuple[SanctionedPort, ...] = setting((), datatypes.each_of(_port))

    def sanctioned(self, listen: Listening) -> SanctionedPort | None:
        """The first entry that sanctions ``listen``, or None."""
        return next((p for p in self.sanctioned_ports if p.matches(listen)), None)


def parse_services(r: NodeReader, node: yaml.Node) -> ServiceSettings:
    """Validate the ``services:`` section.

    Raises:
        ConfigError: Unknown keys, wrong types, a port outside 1-65535, a missing name.
    """
    return build(ServiceSettings, r, node, "services", order=keys(ServiceSettings))

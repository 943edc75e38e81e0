"""Parsing /proc/PID/net/{tcp,tcp6,udp,udp6} and the services: config section."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

import pytest

from rogue_watchdog.config import ConfigError
from rogue_watchdog.config.base import NodeReader
from rogue_watchdog.config.services import SanctionedPort, ServiceSettings
from rogue_watchdog.sources.sockets import (
    Listen,
    decode_address,
    listening_for,
    parse_socket_table,
    scan_listening,
)

HEADER = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt"
    "   uid  timeout inode\n"
)


def _hex4(addr: str) -> str:
    # The kernel prints the __be32 as a native integer with %08X.
    return f"{struct.unpack('=I', socket.inet_pton(socket.AF_INET, addr))[0]:08X}"


def _hex6(addr: str) -> str:
    raw = socket.inet_pton(socket.AF_INET6, addr)
    return "".join(f"{struct.unpack('=I', raw[i : i + 4])[0]:08X}" for i in range(0, 16, 4))


def row(local: str, remote: str, st: str, inode: int) -> str:
    queues = "00000000:00000000 00:00000000 00000000     0        0"
    return f"   0: {local} {remote} {st} {queues} {inode} 1 0000000000000000 100 0 0 10 0\n"


def test_decode_address_round_trips_v4_and_v6() -> None:
    assert decode_address(_hex4("127.0.0.1"), socket.AF_INET) == "127.0.0.1"
    assert decode_address(_hex4("10.1.2.3"), socket.AF_INET) == "10.1.2.3"
    assert decode_address("00000000", socket.AF_INET) == "0.0.0.0"
    assert decode_address(_hex6("::1"), socket.AF_INET6) == "::1"
    assert decode_address(_hex6("fe80::1:2"), socket.AF_INET6) == "fe80::1:2"
    with pytest.raises(ValueError):
        decode_address("0100", socket.AF_INET)


def test_tables_families_are_the_socket_modules() -> None:
    # sockets.py spells the families out to import socket late; they must be its values,
    # and the hostname the scan names must be gethostname()'s.
    from rogue_watchdog.sources import sockets

    assert {f for _, _, f in sockets._TABLES} == {socket.AF_INET, socket.AF_INET6}
    assert (sockets._AF_INET, sockets._AF_INET6) == (socket.AF_INET, socket.AF_INET6)
    assert os.uname().nodename == socket.gethostname()


def test_tcp_table_keeps_only_listen_state() -> None:
    text = HEADER + "".join(
        [
            row(f"{_hex4('0.0.0.0')}:1F90", "00000000:0000", "0A", 111),  # LISTEN :8080
            row(f"{_hex4('127.0.0.1')}:1F90", f"{_hex4('127.0.0.1')}:D431", "01", 112),  # ESTAB
            row(f"{_hex4('127.0.0.1')}:0016", "00000000:0000", "06", 113),  # TIME_WAIT
            "garbage line\n",
        ]
    )
    assert parse_socket_table(text, "tcp", socket.AF_INET) == {111: ("0.0.0.0", 8080)}


def test_udp_table_keeps_bound_unconnected_sockets() -> None:
    zero6 = "0" * 32 + ":0000"
    text = HEADER + "".join(
        [
            row(f"{_hex6('::')}:14E9", zero6, "07", 201),  # bound [::]:5353, waiting
            row(f"{_hex6('::1')}:D000", f"{_hex6('::1')}:0035", "01", 202),  # connected
            row(f"{_hex6('::')}:0000", zero6, "07", 203),  # unbound
        ]
    )
    assert parse_socket_table(text, "udp", socket.AF_INET6) == {201: ("::", 5353)}


def test_scan_reads_fd_links_and_the_process_namespace_tables(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    fd = proc / "42" / "fd"
    net = proc / "42" / "net"
    fd.mkdir(parents=True)
    net.mkdir()
    os.symlink("socket:[111]", fd / "3")
    os.symlink("socket:[999]", fd / "4")  # a socket not listening
    os.symlink("/dev/null", fd / "0")
    (net / "tcp").write_text(HEADER + row(f"{_hex4('0.0.0.0')}:1F90", "00000000:0000", "0A", 111))
    (net / "tcp6").write_text(HEADER)
    (net / "udp").write_text(HEADER)
    # no udp6 file: an IPv6-less namespace
    got = scan_listening([42, 43], str(proc))  # 43 does not exist
    assert got.listening == [Listen(42, "tcp", "0.0.0.0", 8080, 111)]
    assert got.denied == []
    assert [x.to_json() for x in listening_for([42], str(proc))] == [
        {"proto": "tcp", "address": "0.0.0.0", "port": 8080, "pid": 42}
    ]
    assert got.listening[0].endpoint == "0.0.0.0:8080"
    assert Listen(1, "tcp", "::", 80).endpoint == "[::]:80"


def test_sanctioned_port_matching() -> None:
    s = ServiceSettings(
        sanctioned_ports=(
            SanctionedPort("metrics", 9100),
            SanctionedPort("tb", 6006, address="127.0.0.*", proto="tcp"),
        )
    )
    assert s.sanctioned(Listen(1, "udp", "::", 9100)) == s.sanctioned_ports[0]
    assert s.sanctioned(Listen(1, "tcp", "127.0.0.1", 6006)) == s.sanctioned_ports[1]
    assert s.sanctioned(Listen(1, "tcp", "0.0.0.0", 6006)) is None
    assert s.sanctioned(Listen(1, "udp", "127.0.0.1", 6006)) is None


def _parse(text: str) -> ServiceSettings:
    import yaml

    from rogue_watchdog.config.services import parse_services

    node = yaml.compose(text, Loader=yaml.SafeLoader)
    assert node is not None
    return parse_services(NodeReader("t.yaml"), node)


def test_services_section_parses_and_rejects_bad_ports() -> None:
    s = _parse(
        "enabled: true\nsanctioned_ports:\n"
        "  - {name: metrics, port: 9100}\n"
        "  - {name: tb, port: 6006, address: '127.0.0.1', proto: tcp}\n"
    )
    assert s.sanctioned_ports == (
        SanctionedPort("metrics", 9100),
        SanctionedPort("tb", 6006, "127.0.0.1", "tcp"),
    )
    with pytest.raises(ConfigError, match=r"t.yaml:2: services.sanctioned_ports\[0\].port"):
        _parse("sanctioned_ports:\n  - {name: x, port: 70000}\n")
    with pytest.raises(ConfigError, match=r"services.sanctioned_ports\[0\].name: required"):
        _parse("sanctioned_ports:\n  - {port: 80}\n")
    with pytest.raises(ConfigError, match=r"proto: must be tcp or udp"):
        _parse("sanctioned_ports:\n  - {name: x, port: 80, proto: sctp}\n")

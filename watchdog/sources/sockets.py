"""Listening sockets of processes: which ports a rogue job (or its siblings) serves.

A retired service that still listens on its own port and trains on its own is the
"rogue service" of the incident. For each process this module reads the socket inodes
among ``/proc/PID/fd`` (links ``socket:[INODE]``) and looks them up in the socket tables
of *that process's* network namespace, ``/proc/PID/net/{tcp,tcp6,udp,udp6}`` (proc(5)).

Why not ``psutil.Process.net_connections``: psutil reads ``/proc/net/*``, the tables of
the *watchdog's* namespace, so a containerised server's sockets would be missed; and
reading through a ``proc_root`` lets fixture trees stand in for tests.

Listening means: TCP state ``0A`` (LISTEN); UDP state ``07`` (unconnected) bound to a
non-zero local port with no remote address: a UDP socket that waits for datagrams.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

# /proc/net/tcp "st" column values (include/net/tcp_states.h).
_TCP_LISTEN = "0A"
_UDP_UNCONNECTED = "07"
# socket.AF_INET and AF_INET6 on Linux (include/linux/socket.h). Spelled out so that the
# socket module (its enums are ~2.5 ms of a one-shot scan's start-up) is imported only
# when an address is decoded: a job holding a socket.
_AF_INET, _AF_INET6 = 2, 10
_TABLES: tuple[tuple[str, Literal["tcp", "udp"], int], ...] = (
    ("tcp", "tcp", _AF_INET),
    ("tcp6", "tcp", _AF_INET6),
    ("udp", "udp", _AF_INET),
    ("udp6", "udp", _AF_INET6),
)


@dataclass(frozen=True, order=True)
class Listen:
    """One listening socket held by a process.

    Attributes:
        pid: Process holding the socket (one socket shared by several processes after a
            fork is listed once per holder).
        proto: ``tcp`` or ``udp``.
        address: Local address as text: ``0.0.0.0``, ``127.0.0.1``, ``::``, ``::1``.
        port: Local port number.
        inode: Socket inode (``socket:[INODE]``), to tell shared sockets apart.
    """

    pid: int
    proto: Literal["tcp", "udp"]
    address: str
    port: int
    inode: int = 0

    @property
    def endpoint(self) -> str:
        """``0.0.0.0:8080`` or ``[::]:8080``."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        """The ``jobs[].listening[]`` / finding ``details.listening[]`` entry."""
        return {"proto": self.proto, "address": self.address, "port": self.port, "pid": self.pid}


@dataclass
class ListenScan:
    """What :func:`scan_listening` found.

    Attributes:
        listening: Listening sockets, sorted by (pid, proto, address, port).
        denied: PIDs whose fd directory or socket tables could not be read (permission).
    """

    listening: list[Listen] = field(default_factory=list)
    denied: list[int] = field(default_factory=list)


def decode_address(hex_addr: str, family: int) -> str:
    """Decode the ``local_address`` host part of ``/proc/net/tcp{,6}``.

    The kernel prints the address as 32-bit words in host byte order (``%08X`` of each
    ``__be32`` read as a native integer), so each word is packed back natively.

    Args:
        hex_addr: ``0100007F`` (IPv4) or 32 hex digits (IPv6).
        family: ``socket.AF_INET`` or ``socket.AF_INET6``.

    Returns:
        The address in its usual text form.

    Raises:
        ValueError: Not hex, or the wrong length for ``family``.
    """
    import socket

    want = 8 if family == _AF_INET else 32
    if len(hex_addr) != want:
        raise ValueError(f"address {hex_addr!r} is not {want} hex digits")
    raw = b"".join(struct.pack("=I", int(hex_addr[i : i + 8], 16)) for i in range(0, want, 8))
    return socket.inet_ntop(family, raw)


def parse_socket_table(
    text: str, proto: Literal["tcp", "udp"], family: int
) -> dict[int, tuple[str, int]]:
    """Listening sockets of one ``/proc/PID/net/{tcp,tcp6,udp,udp6}`` table.

    Args:
        text: The file's content (header line first).
        proto: ``tcp`` or ``udp``: which state means listening.
        family: Address family of the table.

    Returns:
        Socket inode → (address, port), listening sockets only. Malformed lines are
        skipped.
    """
    out: dict[int, tuple[str, int]] = {}
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 10:
            continue
        local, remote, state, inode_text = cols[1], cols[2], cols[3], cols[9]
        try:
            addr_hex, port_hex = local.split(":")
            port = int(port_hex, 16)
            inode = int(inode_text)
            if proto == "tcp":
                if state != _TCP_LISTEN:
                    continue
            elif state != _UDP_UNCONNECTED or port == 0 or int(remote.replace(":", ""), 16):
                continue
            out[inode] = (decode_address(addr_hex, family), port)
        except ValueError:
            continue
    return out


def _socket_inodes(proc_root: str, pid: int) -> list[int] | None:
    """Socket inodes among ``/proc/PID/fd``; None when unreadable for permission.

    Each link is read relative to the open directory (``readlinkat``), not by its full
    path: a job of 4,096 processes has this read for each every tick, and resolving
    ``/proc/PID/fd/N`` from the root each time was most of its cost (issue 34, item 3).
    """
    try:
        fd = os.open(f"{proc_root}/{pid}/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except PermissionError:
        return None
    except OSError:  # exited
        return []
    out = []
    try:
        try:
            names = os.listdir(fd)
        except PermissionError:
            return None
        except OSError:  # exited
            return []
        for name in names:
            try:
                target = os.readlink(name, dir_fd=fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target.endswith("]"):
                try:
                    out.append(int(target[8:-1]))
                except ValueError:
                    continue
    finally:
        os.close(fd)
    return out


def _netns_key(proc_root: str, pid: int) -> str:
    try:
        return os.readlink(f"{proc_root}/{pid}/ns/net")
    except OSError:
        return f"pid:{pid}"  # unknown namespace: read this process's own tables


def _tables(proc_root: str, pid: int) -> dict[int, tuple[Literal["tcp", "udp"], str, int]] | None:
    out: dict[int, tuple[Literal["tcp", "udp"], str, int]] = {}
    for name, proto, family in _TABLES:
        try:
            with open(f"{proc_root}/{pid}/net/{name}", encoding="ascii", errors="replace") as fh:
                text = fh.read()
        except FileNotFoundError:
            continue  # no IPv6 in this kernel/namespace
        except PermissionError:
            return None
        except OSError:
            continue
        for inode, (addr, port) in parse_socket_table(text, proto, family).items():
            out[inode] = (proto, addr, port)
    return out


_UNREAD: list[int] = []  # SocketReads.inodes has no entry for the PID yet


@dataclass
class SocketReads:
    """What :func:`scan_listening` read, kept for later calls of the same moment (one
    scan's service scopes): a process's socket inodes and a namespace's socket tables.

    Attributes:
        inodes: PID -> its socket inodes; None when unreadable (permission).
        tables: Network namespace -> its listening sockets by inode; None when unreadable.
    """

    inodes: dict[int, list[int] | None] = field(default_factory=dict)
    tables: dict[str, dict[int, tuple[Literal["tcp", "udp"], str, int]] | None] = field(
        default_factory=dict
    )


def scan_listening(
    pids: Iterable[int], proc_root: str = "/proc", seen: SocketReads | None = None
) -> ListenScan:
    """Listening sockets held by ``pids``.

    Socket tables are read once per network namespace. Vanished processes are skipped;
    unreadable ones (not root, or another user's process) are listed in ``denied``.

    Args:
        pids: Processes to inspect (duplicates ignored).
        proc_root: procfs mount; fixture trees in tests pass their own.
        seen: What earlier calls of the same moment read (:class:`SocketReads`): jobs
            started by one parent share their origin's processes, whose fd tables and
            socket tables are then read once, not once per job (issue 34, item 3).

    Returns:
        The sockets found and the PIDs that could not be inspected.
    """
    result = ListenScan()
    seen = seen if seen is not None else SocketReads()
    by_ns = seen.tables
    found: set[Listen] = set()
    for pid in sorted(set(pids)):
        inodes = seen.inodes.get(pid, _UNREAD)
        if inodes is _UNREAD:
            inodes = seen.inodes[pid] = _socket_inodes(proc_root, pid)
        if inodes is None:
            result.denied.append(pid)
            continue
        if not inodes:
            continue
        key = _netns_key(proc_root, pid)
        if key not in by_ns:
            by_ns[key] = _tables(proc_root, pid)
        tables = by_ns[key]
        if tables is None:
            result.denied.append(pid)
            continue
        for inode in inodes:
            hit = tables.get(inode)
            if hit is not None:
                found.add(Listen(pid, hit[0], hit[1], hit[2], inode))
    result.listening = sorted(found)
    return result


def listening_for(pids: Iterable[int], proc_root: str = "/proc") -> list[Listen]:
    """Listening sockets held by ``pids`` (see :func:`scan_listening`), for ``scan --json``.

    Args:
        pids: Processes to inspect.
        proc_root: procfs mount.

    Returns:
        Sorted by (pid, proto, address, port); unreadable processes contribute nothing.
    """
    return scan_listening(pids, proc_root).listening

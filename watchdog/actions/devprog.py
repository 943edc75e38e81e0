"""The cgroup v2 device rule of a GPU denial: a ``BPF_PROG_TYPE_CGROUP_DEVICE`` program
(issue 36, item 2; watchdog/actions/gpudeny.py).

On cgroup v2 the device controller is a BPF program attached to a cgroup: the kernel
runs it at every ``open(2)`` and ``mknod(2)`` of a device node by a process in that
cgroup (or below) and refuses with ``EPERM`` when it returns 0. A denial's program
returns 0 for each GPU device node of ``enforcement.gpu_devices`` and 1 for everything
else; it is attached with ``BPF_F_ALLOW_MULTI`` to the denial's own child cgroup, so
every program the cgroups above attached (a container's device list, systemd's
``DeviceAllow=``) runs as well and each must allow.

The program is assembled here, a handful of instructions, and loaded through the
``bpf(2)`` system call as systemd does (src/core/bpf-devices.c): no compiler, no
libbpf, nothing to install. Python binding libraries for BPF (bcc, libbpf wrappers)
need a C compiler or a shared library on the host for what is six instructions plus five
per device node and a few ``bpf(2)`` commands here.

Liveness: the kernel keeps an attached program alive as long as it is attached (the
cgroup holds a reference), so the file descriptor is closed after the attach and
nothing is pinned. The program stays in force across a daemon restart; the action's
record names the cgroup and the program's id, and :func:`detach` finds it again by id
(``BPF_PROG_GET_FD_BY_ID``) after checking that the id is attached to that very cgroup.
Removing the denial's cgroup (``rmdir``) drops whatever is attached to it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Sequence

#: The program's name in ``bpftool prog`` (15 characters at most).
PROG_NAME = "rw_gpu_deny"

# bpf(2) commands, program and attach types, flags (include/uapi/linux/bpf.h).
_PROG_LOAD, _PROG_ATTACH, _PROG_DETACH = 5, 8, 9
_PROG_GET_FD_BY_ID, _OBJ_GET_INFO_BY_FD, _PROG_QUERY = 13, 15, 16
_PROG_TYPE_CGROUP_DEVICE = 15
_CGROUP_DEVICE = 6
_F_ALLOW_MULTI = 2
_F_QUERY_EFFECTIVE = 1
_DEV_BLOCK, _DEV_CHAR = 1, 2
_SYSCALL = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351, "riscv64": 280}
_LICENSE = b"Apache-2.0\0"  # the program calls no helper: no GPL-only ones either


class DeviceProgramError(OSError):
    """A ``bpf(2)`` call failed; ``errno`` is the kernel's."""


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


# Opcodes: load word (LDX|MEM|W), 32-bit and-immediate (ALU|AND|K), jump-if-not-equal
# immediate (JMP|JNE|K), move immediate (ALU64|MOV|K), exit.
_LDXW, _AND32, _JNE, _MOV, _EXIT = 0x61, 0x54, 0x55, 0xB7, 0x95


def parse_rule(rule: str) -> tuple[int, int, int | None]:
    """``(type, major, minor)`` of a ``devices.deny`` line (``c 195:0 rwm``; ``*`` minor
    gives None), type ``BPF_DEVCG_DEV_CHAR`` or ``_BLOCK``.

    Raises:
        ValueError: Not such a line (``a``, a ``*`` major, no numbers).
    """
    parts = rule.split()
    if len(parts) < 2 or parts[0] not in ("b", "c") or ":" not in parts[1]:
        raise ValueError(f"not a device rule: {rule!r}")
    major, _, minor = parts[1].partition(":")
    kind = _DEV_CHAR if parts[0] == "c" else _DEV_BLOCK
    return kind, int(major), None if minor == "*" else int(minor)


def assemble(rules: Sequence[str]) -> bytes:
    """The program denying every access (open for read or write, mknod) to the devices
    of ``rules`` (:func:`parse_rule`) and allowing everything else.

    Per rule: device type, major and minor compared, a match returns 0 (``EPERM``); the
    end returns 1. The access type is not looked at: all of ``rwm`` is denied.

    Raises:
        ValueError: A rule is no device rule, or the list is empty.
    """
    if not rules:
        raise ValueError("no device rule: the program would deny nothing")
    ctx_type, ctx_major, ctx_minor = 0, 4, 8  # struct bpf_cgroup_dev_ctx
    out = [
        _insn(_LDXW, dst=2, src=1, off=ctx_type),
        _insn(_AND32, dst=2, imm=0xFFFF),  # the low half: BPF_DEVCG_DEV_*
        _insn(_LDXW, dst=4, src=1, off=ctx_major),
        _insn(_LDXW, dst=5, src=1, off=ctx_minor),
    ]
    for rule in rules:
        kind, major, minor = parse_rule(rule)
        skip = 4 if minor is not None else 3  # past this rule's deny
        out.append(_insn(_JNE, dst=2, off=skip, imm=kind))
        out.append(_insn(_JNE, dst=4, off=skip - 1, imm=major))
        if minor is not None:
            out.append(_insn(_JNE, dst=5, off=1 + 1, imm=minor))
        out += [_insn(_MOV, dst=0, imm=0), _insn(_EXIT)]
    out += [_insn(_MOV, dst=0, imm=1), _insn(_EXIT)]
    return b"".join(out)


_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    nr = _SYSCALL.get(platform.machine())
    if nr is None:
        raise DeviceProgramError(errno.ENOSYS, f"bpf(2): unknown machine {platform.machine()}")
    ret = int(_libc.syscall(ctypes.c_long(nr), ctypes.c_int(cmd), attr, ctypes.c_uint(len(attr))))
    if ret < 0:
        err = ctypes.get_errno()
        raise DeviceProgramError(err, f"bpf(2) command {cmd}: {os.strerror(err)}")
    return ret


def _attr(*fields: tuple[int, str, int | bytes]) -> ctypes.Array[ctypes.c_char]:
    """A zeroed ``union bpf_attr`` with ``(offset, struct format, value)`` fields set."""
    buf = ctypes.create_string_buffer(128)
    for off, fmt, value in fields:
        struct.pack_into("<" + fmt, buf, off, value)
    return buf


def _addr(buf: ctypes.Array[ctypes.c_char]) -> int:
    return ctypes.addressof(buf)


def load(rules: Sequence[str]) -> int:
    """Load the program of ``rules`` (:func:`assemble`); returns its file descriptor.

    Raises:
        ValueError: A rule is no device rule, or none is given.
        DeviceProgramError: The kernel refused it (no ``CAP_SYS_ADMIN``/``CAP_BPF``,
            no ``CONFIG_CGROUP_BPF``): the verifier's words are in the message.
    """
    return _load(assemble(rules))


def _load(code: bytes, name_text: str = PROG_NAME) -> int:
    insns = ctypes.create_string_buffer(code, len(code))
    lic = ctypes.create_string_buffer(_LICENSE, len(_LICENSE))
    log = ctypes.create_string_buffer(4096)
    name = name_text.encode()[:15]
    fields: list[tuple[int, str, int | bytes]] = [
        (0, "I", _PROG_TYPE_CGROUP_DEVICE), (4, "I", len(code) // 8), (8, "Q", _addr(insns)),
        (16, "Q", _addr(lic)), (48, "16s", name),
    ]  # fmt: skip
    attr = _attr(*fields)
    try:
        return _bpf(_PROG_LOAD, attr)
    except DeviceProgramError as exc:
        if exc.errno not in (errno.EINVAL, errno.EACCES):
            raise
    # Load again with the verifier's log, to say why.
    attr = _attr(*fields, (24, "I", 1), (28, "I", len(log)), (32, "Q", _addr(log)))
    try:
        return _bpf(_PROG_LOAD, attr)
    except DeviceProgramError as exc:
        said = log.value.decode(errors="replace").strip().splitlines()[-3:]
        raise DeviceProgramError(exc.errno, f"{exc.strerror}: {' / '.join(said)}") from None


def supported() -> str | None:
    """None when this process can load a device program here, else why not (a program
    that allows everything is loaded and dropped, as systemd checks)."""
    try:
        os.close(_load(_insn(_MOV, dst=0, imm=1) + _insn(_EXIT), "rw_probe"))
    except OSError as exc:
        return f"cannot load a BPF_CGROUP_DEVICE program: {exc.strerror or exc}"
    return None


def info(prog_fd: int) -> tuple[int, str, str]:
    """``(id, tag, name)`` of a loaded program (``bpftool prog`` shows the same).

    Raises:
        DeviceProgramError: Not a program's descriptor.
    """
    out = ctypes.create_string_buffer(80)
    _bpf(_OBJ_GET_INFO_BY_FD, _attr((0, "I", prog_fd), (4, "I", len(out)), (8, "Q", _addr(out))))
    prog_id = struct.unpack_from("<I", out, 4)[0]
    tag = out.raw[8:16].hex()
    name = out.raw[64:80].split(b"\0", 1)[0].decode(errors="replace")
    return prog_id, tag, name


def query(cgroup: str, effective: bool = False) -> list[int]:
    """Ids of the device programs attached to ``cgroup`` itself, or (``effective``) of
    all that run for a process in it, ancestors' included.

    Raises:
        OSError: ``cgroup`` is no cgroup v2 directory, or the kernel refused.
    """
    fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        ids = ctypes.create_string_buffer(4 * 64)
        flags = _F_QUERY_EFFECTIVE if effective else 0
        attr = _attr(
            (0, "I", fd), (4, "I", _CGROUP_DEVICE), (8, "I", flags), (16, "Q", _addr(ids)),
            (24, "I", 64),
        )  # fmt: skip
        _bpf(_PROG_QUERY, attr)
        count = struct.unpack_from("<I", attr, 24)[0]
        return list(struct.unpack_from(f"<{count}I", ids))
    finally:
        os.close(fd)


def attach(cgroup: str, rules: Sequence[str]) -> int:
    """Load the program of ``rules`` and attach it (``BPF_F_ALLOW_MULTI``) to
    ``cgroup``; returns its id.

    The attach is kept only when every program that ran for the cgroup before still
    runs after: a cgroup above that attached its own without ``BPF_F_ALLOW_MULTI``
    (``BPF_F_ALLOW_OVERRIDE``) would otherwise be overridden for this child, lifting a
    container's device list. Then this program is detached again and it is an error.

    Raises:
        ValueError: No rule, or one that is no device rule.
        DeviceProgramError: The kernel refused (``EPERM``: a cgroup above attached a
            program that allows no other), or the check above failed (nothing attached).
        OSError: ``cgroup`` is no cgroup v2 directory.
    """
    before = set(query(cgroup, effective=True))
    prog = load(rules)
    try:
        prog_id = info(prog)[0]
        fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
        try:
            attr = _attr(
                (0, "I", fd), (4, "I", prog), (8, "I", _CGROUP_DEVICE), (12, "I", _F_ALLOW_MULTI)
            )
            try:
                _bpf(_PROG_ATTACH, attr)
            except DeviceProgramError as exc:
                if exc.errno != errno.EPERM:
                    raise
                raise DeviceProgramError(
                    errno.EPERM,
                    f"the kernel refused to attach to {cgroup}: a cgroup above attached a "
                    "device program that allows no other (neither BPF_F_ALLOW_MULTI nor "
                    "BPF_F_ALLOW_OVERRIDE), or no CAP_SYS_ADMIN",
                ) from None
            after = set(query(cgroup, effective=True))
            if prog_id not in after or not before <= after:
                _bpf(_PROG_DETACH, _attr((0, "I", fd), (4, "I", prog), (8, "I", _CGROUP_DEVICE)))
                lost = ", ".join(str(i) for i in sorted(before - after))
                raise DeviceProgramError(
                    errno.EPERM,
                    f"attaching to {cgroup} would stop the device program(s) {lost} of a "
                    "cgroup above (attached without BPF_F_ALLOW_MULTI): not attached",
                )
        finally:
            os.close(fd)
    finally:
        os.close(prog)  # the attachment keeps it alive
    return prog_id


def detach(cgroup: str, prog_id: int) -> bool:
    """Detach the program ``prog_id`` from ``cgroup``, only when it is attached to that
    very cgroup and is a denial's (:data:`PROG_NAME`): never another's program.

    Returns:
        True when it was detached; False when it is not attached there (detached
        already, or the cgroup's programs went with it).

    Raises:
        DeviceProgramError: The id names a program that is not a denial's, or the
            kernel refused.
        OSError: ``cgroup`` is gone or no cgroup v2 directory.
    """
    if prog_id not in query(cgroup):
        return False
    prog = _bpf(_PROG_GET_FD_BY_ID, _attr((0, "I", prog_id)))
    try:
        name = info(prog)[2]
        if name != PROG_NAME:
            raise DeviceProgramError(
                errno.EPERM, f"program {prog_id} on {cgroup} is {name!r}, not a denial's: left"
            )
        fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _bpf(_PROG_DETACH, _attr((0, "I", fd), (4, "I", prog), (8, "I", _CGROUP_DEVICE)))
        finally:
            os.close(fd)
    finally:
        os.close(prog)
    return True

"""The daemon's copy of the configuration in force (daemon.inforce): written only when
it is that version, mode 0600, replaced whole, dropped when it cannot stand for it."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from rogue_watchdog.daemon.inforce import COPY_NAME, in_force_copy, keep_in_force_copy


def sha16(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def test_the_version_in_force_is_kept_and_found_by_its_checksum(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_bytes(b"nvml: {enabled: false}\n")
    state = tmp_path / "state"
    state.mkdir()
    first = sha16(config.read_bytes())
    assert keep_in_force_copy(state, str(config), first) is None
    copy = state / COPY_NAME
    assert copy.read_bytes() == config.read_bytes() and copy.stat().st_mode & 0o777 == 0o600
    assert in_force_copy(str(state), first) == str(copy)
    assert in_force_copy(str(state), "0" * 16) is None  # another version's: never used
    assert [p.name for p in state.iterdir()] == [COPY_NAME]  # no temporary left


def test_an_edit_between_load_and_copy_leaves_no_copy(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_bytes(b"a: 1\n")
    state = tmp_path / "state"
    state.mkdir()
    assert keep_in_force_copy(state, str(config), sha16(b"a: 1\n")) is None
    config.write_bytes(b"a: 2\n")  # the daemon loaded a: 1, the file says a: 2 now
    why = keep_in_force_copy(state, str(config), sha16(b"a: 1\n"))
    assert why == f"{config} changed while it was loaded"
    assert not (state / COPY_NAME).exists()  # the older copy does not stand for it
    # Built-in defaults: nothing to keep, and no copy of an earlier file stays.
    assert keep_in_force_copy(state, str(config), sha16(b"a: 2\n")) is None
    assert keep_in_force_copy(state, None, None) is None
    assert not (state / COPY_NAME).exists()


def test_a_state_directory_that_cannot_be_written_is_said(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_bytes(b"a: 1\n")
    missing = tmp_path / "no-such-dir"
    why = keep_in_force_copy(missing, str(config), sha16(b"a: 1\n"))
    assert why is not None and why.startswith(f"cannot write {missing / COPY_NAME}: ")


def test_what_is_planted_in_the_state_directory_neither_blocks_nor_becomes_the_copy(
    tmp_path: Path,
) -> None:
    # Before: the temporary had a fixed name (.config-in-force.yaml.PID) opened without
    # O_EXCL; a FIFO there blocked the daemon's open(2) forever (here a reader is held
    # open so that the old code fails instead of hanging the test), a symlink stopped
    # the copy.
    config = tmp_path / "config.yaml"
    config.write_bytes(b"a: 1\n")
    state = tmp_path / "state"
    state.mkdir()
    fifo = state / f".{COPY_NAME}.{os.getpid()}"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    link = state / f".{COPY_NAME}.{os.getpid() + 1}"
    link.symlink_to(tmp_path / "elsewhere")
    try:
        assert keep_in_force_copy(state, str(config), sha16(b"a: 1\n")) is None
    finally:
        os.close(reader)
    copy = state / COPY_NAME
    assert copy.is_file() and not copy.is_symlink() and copy.read_bytes() == b"a: 1\n"
    assert copy.stat().st_mode & 0o777 == 0o600
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink()  # left as found
    assert not (tmp_path / "elsewhere").exists()

"""The one safe reader every configuration, crontab, unit, secret and weights read uses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rogue_watchdog.safeio import (
    FileTooLargeError,
    NotRegularFileError,
    open_regular_fd,
    read_regular,
)


def test_reads_a_regular_file_and_follows_symlinks(tmp_path: Path) -> None:
    f = tmp_path / "a"
    f.write_bytes(b"x" * 10)
    link = tmp_path / "link"
    link.symlink_to(f)
    assert read_regular(link, 10) == b"x" * 10


def test_refuses_fifo_and_devices_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), (Path("/dev/zero"), "a character device")):
        with pytest.raises(NotRegularFileError) as info:
            read_regular(path, 100)
        assert info.value.strerror == f"not a regular file ({kind})"
    with pytest.raises(NotRegularFileError, match=r"\(a directory\)"):
        open_regular_fd(tmp_path)


def test_too_large_is_refused_not_truncated(tmp_path: Path) -> None:
    f = tmp_path / "big"
    f.write_bytes(b"y" * 11)
    with pytest.raises(FileTooLargeError) as info:
        read_regular(f, 10)
    assert (info.value.size_bytes, info.value.limit_bytes) == (11, 10)


def test_missing_file_is_the_usual_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "nope", 10)

"""The sanctioned identities kept beside the socket (watchdog/daemon/sanctionedfile.py):
read back for this boot only, and only from a file no one else can change (issue 32:
a restart during a storage outage lost what was sanctioned meanwhile)."""

from __future__ import annotations

import os
from pathlib import Path

from rogue_watchdog.daemon.sanctionedfile import read_sanctioned, sanctioned_path, write_sanctioned


def test_read_back_for_this_boot_only(tmp_path: Path) -> None:
    path = sanctioned_path(str(tmp_path / "status.sock"))
    assert path == str(tmp_path / "sanctioned.json")
    write_sanctioned(path, {(4242, 1000): "pipeline", (4243, 1001): "nightly"}, "boot-a")
    assert read_sanctioned(path, "boot-a") == {(4242, 1000): "pipeline", (4243, 1001): "nightly"}
    assert read_sanctioned(path, "boot-b") == {}  # start ticks of another boot name nothing
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["sanctioned.json"]  # no temp file left


def test_missing_damaged_or_untrusted_is_empty(tmp_path: Path) -> None:
    path = str(tmp_path / "sanctioned.json")
    assert read_sanctioned(path, None) == {}
    Path(path).write_text("{not json")
    assert read_sanctioned(path, None) == {}
    Path(path).write_text('{"boot_id": null, "procs": [[1, 2, "r"], ["x", 2, "r"], [3]]}')
    assert read_sanctioned(path, None) == {(1, 2): "r"}  # malformed entries are skipped
    for damaged in ("[" * 100_000, '{"boot_id": null, "procs": 5}'):  # raised before
        Path(path).write_text(damaged)
        assert read_sanctioned(path, None) == {}
    Path(path).write_text('{"boot_id": null, "procs": [[1, 2, "r"]]}')
    # A file others may change would let them sanction a rogue: ignored.
    os.chmod(path, 0o666)
    assert read_sanctioned(path, None) == {}

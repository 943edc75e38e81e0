"""The one listing of the files cron reads (Debian cron(8) naming rules)."""

from __future__ import annotations

import errno
from pathlib import Path

from rogue_watchdog.lineage.cronfiles import CrontabFile, list_crontabs
from rogue_watchdog.safeio import FileTooLargeError, NotRegularFileError, unread_reason


def test_listing_follows_cron_naming_rules(tmp_path: Path) -> None:
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir()
    for name in ("b-job", "a_job", "x.dpkg-old", "y.bak", "z~", ".placeholder"):
        (cron_d / name).write_text("")
    (cron_d / "sub").mkdir()
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "alice").write_text("")
    (spool / ".tmp.crontab").write_text("")
    (spool / "crontabs").mkdir()
    not_dir = tmp_path / "not-a-dir"
    not_dir.write_text("")
    out = list_crontabs(
        ["/etc/crontab"], str(cron_d), [str(spool), str(not_dir), str(tmp_path / "absent")]
    )
    assert out.files == [
        CrontabFile("/etc/crontab", True, None),
        CrontabFile(f"{cron_d}/a_job", True, None),
        CrontabFile(f"{cron_d}/b-job", True, None),
        CrontabFile(f"{spool}/alice", False, "alice"),
    ]
    assert out.problems == [(str(not_dir), "not a directory")]


def test_unread_reason_words() -> None:
    assert unread_reason(NotRegularFileError(errno.EINVAL, "x")) == "not a regular file"
    assert unread_reason(FileTooLargeError(2049, 2048)) == "too large: 2049 bytes, limit 2048"
    assert unread_reason(PermissionError(errno.EACCES, "Permission denied")) == (
        "permission denied"
    )
    assert unread_reason(ValueError("embedded null byte")) == "embedded null byte"

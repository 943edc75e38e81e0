"""Unit and timer file reading against the fixture tree in tests/fixtures/systemd.

Expected behaviour follows systemd.syntax(7), systemd.unit(5) (drop-ins, templates,
search-path order, specifiers) and systemd.timer(5) (``Unit=`` and the default target).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rogue_watchdog.lineage.unitfile import (
    MAX_UNIT_FILE_BYTES,
    find_dropins,
    find_fragment,
    find_timers,
    load_unit,
    parse_into,
    read_text_or_reason,
)

REPO = Path(__file__).resolve().parent.parent.parent

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "systemd"
SYSTEM = str(FIX / "system")


def test_syntax_sections_comments_continuation_and_reset() -> None:
    sections: dict[str, dict[str, list[str]]] = {}
    parse_into(
        "# comment\n"
        "; also a comment\n"
        "[Service]\n"
        "ExecStart=/bin/a \\\n"
        "# a comment inside a continuation is skipped\n"
        "  --flag\n"
        "ExecStart=/bin/b\n"
        "Environment=A=1 B=2\n"
        "orphan line without equals\n",
        sections,
    )
    assert sections["Service"]["ExecStart"] == ["/bin/a --flag", "/bin/b"]
    assert sections["Service"]["Environment"] == ["A=1 B=2"]
    parse_into("[Service]\nExecStart=\nExecStart=/bin/c\n", sections)
    assert sections["Service"]["ExecStart"] == ["/bin/c"]


def test_key_before_any_section_is_ignored() -> None:
    sections: dict[str, dict[str, list[str]]] = {}
    parse_into("Restart=always\n[Service]\nRestart=no\n", sections)
    assert sections == {"Service": {"Restart": ["no"]}}


def test_fragment_plus_dropins_in_name_order() -> None:
    unit = load_unit("nightly-retrain.service", [SYSTEM])
    assert unit is not None
    assert unit.path == f"{SYSTEM}/nightly-retrain.service"
    assert unit.dropins == [
        f"{SYSTEM}/nightly-retrain.service.d/10-epochs.conf",
        f"{SYSTEM}/nightly-retrain.service.d/20-restart.conf",
    ]
    # 10-epochs.conf resets ExecStart and replaces it; 20-restart.conf overrides Restart=no.
    assert unit.exec_start() == ["/usr/bin/python3 /opt/legacy/train_weekly.py --epochs 5"]
    assert unit.restart() == "on-failure"
    assert unit.get("Service", "User") == "ml"


def test_instance_uses_template_and_expands_specifiers() -> None:
    unit = load_unit("train@7.service", [SYSTEM])
    assert unit is not None
    assert unit.path == f"{SYSTEM}/train@.service"
    assert unit.instance == "7"
    assert unit.exec_start() == ["/usr/bin/python3 /srv/train_7.py --shard 7"]
    assert unit.restart() == "always"  # from train@.service.d/restart.conf
    assert unit.expand("%n %N %p 100%%") == "train@7.service train@7 train 100%"


def test_restart_defaults_to_no_and_missing_unit_is_none() -> None:
    unit = load_unit("shipper.service", [SYSTEM])
    assert unit is not None
    assert unit.restart() == "no"
    assert load_unit("absent.service", [SYSTEM]) is None


def test_search_path_priority_and_dropin_masking(tmp_path: Path) -> None:
    etc, lib = tmp_path / "etc", tmp_path / "lib"
    for d in (etc, lib):
        (d / "x.service.d").mkdir(parents=True)
    (etc / "x.service").write_text("[Service]\nExecStart=/etc/x\n")
    (lib / "x.service").write_text("[Service]\nExecStart=/lib/x\n")
    (etc / "x.service.d" / "a.conf").write_text("[Service]\nRestart=always\n")
    (lib / "x.service.d" / "a.conf").write_text("[Service]\nRestart=no\n")
    (lib / "x.service.d" / "b.conf").write_text("[Service]\nUser=bob\n")
    dirs = [str(etc), str(lib)]
    assert find_fragment("x.service", dirs) == str(etc / "x.service")
    assert find_dropins("x.service", dirs) == [
        str(etc / "x.service.d" / "a.conf"),
        str(lib / "x.service.d" / "b.conf"),
    ]
    unit = load_unit("x.service", dirs)
    assert unit is not None
    assert (unit.exec_start(), unit.restart(), unit.get("Service", "User")) == (
        ["/etc/x"],
        "always",
        "bob",
    )


def test_masked_unit(tmp_path: Path) -> None:
    os.symlink(os.devnull, tmp_path / "m.service")
    unit = load_unit("m.service", [str(tmp_path)])
    assert unit is not None
    assert unit.masked
    assert unit.exec_start() == []


def test_timer_schedule_and_default_unit() -> None:
    timer = load_unit("nightly-retrain.timer", [SYSTEM])
    assert timer is not None
    assert timer.timer_unit() == "nightly-retrain.service"
    assert timer.timer_schedule() == ["OnCalendar=Sun *-*-* 02:00:00"]


def test_timer_with_unit_setting_and_two_calendars() -> None:
    timers = find_timers("shipper.service", [SYSTEM])
    assert [t.name for t in timers] == ["ship-weights.timer"]
    assert timers[0].timer_schedule() == [
        "OnCalendar=*-*-* 04:30:00",
        "OnCalendar=*-*-* 16:30:00",
    ]


def test_find_timers_by_name_and_none() -> None:
    assert [t.name for t in find_timers("nightly-retrain.service", [SYSTEM])] == [
        "nightly-retrain.timer"
    ]
    assert find_timers("train@7.service", [SYSTEM]) == []
    mono = find_timers("hourly-eval.service", [SYSTEM])
    assert mono[0].timer_schedule() == ["OnBootSec=15min", "OnUnitActiveSec=1h"]


def test_instance_timer_from_template(tmp_path: Path) -> None:
    (tmp_path / "job@.service").write_text("[Service]\nExecStart=/bin/true %i\n")
    (tmp_path / "job@.timer").write_text("[Timer]\nOnCalendar=hourly\n")
    timers = find_timers("job@a.service", [str(tmp_path)])
    assert [(t.name, t.path) for t in timers] == [("job@a.timer", str(tmp_path / "job@.timer"))]


def _in_subprocess(code: str, timeout_s: float = 30.0) -> object:
    """Run ``code`` (which prints one JSON value) in a fresh interpreter with a timeout.

    A reader that opens a FIFO blocks forever and one that reads /dev/zero never ends;
    a child process turns either into a TimeoutExpired failure instead of a hung suite.
    """
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
    )
    return json.loads(res.stdout)


def test_fifo_timer_in_unit_dir_is_skipped_not_opened(tmp_path: Path) -> None:
    """Tester's case: a FIFO ``evil.timer`` in a user's unit dir blocked find_timers."""
    (tmp_path / "train.service").write_text("[Service]\nExecStart=/bin/true\n")
    (tmp_path / "train.timer").write_text("[Timer]\nOnCalendar=daily\n")
    os.mkfifo(tmp_path / "evil.timer")
    code = (
        "import json; from rogue_watchdog.lineage.unitfile import find_timers\n"
        "skipped = []\n"
        f"timers = find_timers('train.service', [{str(tmp_path)!r}], skipped)\n"
        "print(json.dumps([[t.name for t in timers], skipped]))\n"
    )
    assert _in_subprocess(code) == [
        ["train.timer"],
        [f"skipped {tmp_path}/evil.timer: not a regular file"],
    ]


def test_fifo_fragment_falls_through_to_the_next_dir(tmp_path: Path) -> None:
    """A FIFO ``train.service`` in a configured dir: systemd loads only regular files."""
    first, second = tmp_path / "etc", tmp_path / "lib"
    first.mkdir()
    second.mkdir()
    os.mkfifo(first / "train.service")
    (second / "train.service").write_text("[Service]\nExecStart=/lib/train\n")
    code = (
        "import json; from rogue_watchdog.lineage.unitfile import load_unit\n"
        f"u = load_unit('train.service', [{str(first)!r}, {str(second)!r}])\n"
        "print(json.dumps([u.path, u.exec_start(), u.skipped]))\n"
    )
    assert _in_subprocess(code) == [
        str(second / "train.service"),
        ["/lib/train"],
        [f"skipped {first}/train.service: not a regular file"],
    ]


def test_dropin_symlink_to_dev_zero_is_skipped(tmp_path: Path) -> None:
    """Tester's case: ``train.service.d/zz.conf -> /dev/zero`` read forever."""
    (tmp_path / "train.service").write_text("[Service]\nExecStart=/bin/train\nRestart=no\n")
    (tmp_path / "train.service.d").mkdir()
    (tmp_path / "train.service.d" / "aa.conf").write_text("[Service]\nRestart=always\n")
    os.symlink("/dev/zero", tmp_path / "train.service.d" / "zz.conf")
    code = (
        "import json; from rogue_watchdog.lineage.unitfile import load_unit\n"
        f"u = load_unit('train.service', [{str(tmp_path)!r}])\n"
        "print(json.dumps([u.dropins, u.restart(), u.skipped]))\n"
    )
    assert _in_subprocess(code) == [
        [str(tmp_path / "train.service.d" / "aa.conf")],
        "always",
        [f"skipped {tmp_path}/train.service.d/zz.conf: not a regular file"],
    ]


def test_read_regular_refuses_special_and_oversized_files(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    # Refused on the stat, before any open: safe to call in-process.
    assert read_text_or_reason(str(tmp_path / "fifo")) == (None, "not a regular file")
    assert read_text_or_reason("/dev/zero") == (None, "not a regular file")
    big = tmp_path / "big.service"
    with big.open("wb") as fh:
        fh.truncate(MAX_UNIT_FILE_BYTES + 1)  # sparse: no disk used
    assert read_text_or_reason(str(big)) == (
        None,
        f"too large: {MAX_UNIT_FILE_BYTES + 1} bytes, limit {MAX_UNIT_FILE_BYTES}",
    )
    assert read_text_or_reason(str(tmp_path / "absent")) == (None, None)
    os.symlink(os.devnull, tmp_path / "masked.service")
    assert read_text_or_reason(str(tmp_path / "masked.service")) == ("", None)
    (tmp_path / "bad.service").write_bytes(b"[Service]\nExecStart=/bin/\xff\n")
    assert read_text_or_reason(str(tmp_path / "bad.service")) == (
        "[Service]\nExecStart=/bin/\ufffd\n",
        None,
    )
    # An oversized unit is reported, and the rest of the unit still loads.
    (tmp_path / "big.service.d").mkdir()
    (tmp_path / "big.service.d" / "a.conf").write_text("[Service]\nRestart=always\n")
    unit = load_unit("big.service", [str(tmp_path)])
    assert unit is not None
    assert unit.restart() == "always"
    assert unit.skipped == [
        f"skipped {big}: too large: {MAX_UNIT_FILE_BYTES + 1} bytes, limit {MAX_UNIT_FILE_BYTES}"
    ]


def test_long_continuation_joins_every_piece() -> None:
    """Tester's case: 50000 continued lines (700 KB) took 3.8 s with quadratic joining."""
    n = 50_000
    sections: dict[str, dict[str, list[str]]] = {}
    parse_into("[Service]\n" + "ExecStart=a \\\n" * n + "--last\nRestart=always\n", sections)
    assert sections["Service"]["ExecStart"] == ["a " + "ExecStart=a " * (n - 1) + "--last"]
    assert sections["Service"]["Restart"] == ["always"]
    # A continuation still open at end of file is kept, as before.
    tail: dict[str, dict[str, list[str]]] = {}
    parse_into("[Service]\nExecStart=/bin/x \\\n  --y \\\n", tail)
    assert tail["Service"]["ExecStart"] == ["/bin/x --y"]

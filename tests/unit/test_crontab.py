"""Crontab parser and schedule tests over the fixture tree tests/fixtures/cron/host."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from rogue_watchdog.lineage.crontab import (
    REBOOT_NEXT_RUN,
    CronEntry,
    cron_d_name_ok,
    next_run,
    parse_anacrontab,
    parse_crontab,
    parse_env_line,
    split_percent,
)

HOST = Path(__file__).resolve().parent.parent / "fixtures" / "cron" / "host"
UTC = ZoneInfo("UTC")
# Sunday 2026-11-29 22:00 UTC: the motivating weekly job (Sun 02:00) last ran 20 h ago.
NOW = datetime(2026, 11, 29, 22, 0, 0, tzinfo=UTC)


def _system(rel: str) -> list[CronEntry]:
    path = HOST / rel
    return list(parse_crontab(path.read_text(), str(path), system=True).entries)


def _entry(expr: str, **env: str) -> CronEntry:
    return CronEntry("/x", 1, f"{expr} root true", expr, expr, "root", "true", env)


def test_system_format_user_field_env_and_line_numbers() -> None:
    (entry,) = _system("etc/cron.d/legacy-retrain")
    assert entry.line == 5
    assert entry.user == "mlops"
    assert entry.schedule == "0 2 * * 0"
    assert entry.command == (
        "/usr/bin/python3 /opt/legacy/train_weekly.py --epochs 5 >> /var/log/legacy.log 2>&1"
    )
    assert entry.raw.startswith("0 2 * * 0 mlops ")
    # `  SHELL = "/bin/sh"`: blanks around '=' and the quotes are not part of the value.
    assert dict(entry.env) == {"MAILTO": "ml-alerts@example.com", "SHELL": "/bin/sh"}


def test_etc_crontab_tabs_and_env() -> None:
    entries = _system("etc/crontab")
    assert [(e.line, e.schedule, e.user) for e in entries] == [
        (6, "17 * * * *", "root"),
        (7, "25 6 * * *", "root"),
    ]
    assert entries[0].command == "cd / && run-parts --report /etc/cron.hourly"
    assert entries[0].env["PATH"].startswith("/usr/local/sbin:")


def test_user_format_has_no_user_field_and_owner_is_file_name() -> None:
    path = HOST / "var/spool/cron/crontabs/alice"
    tab = parse_crontab(path.read_text(), str(path), system=False, owner="alice")
    (entry,) = tab.entries
    assert (entry.line, entry.user, entry.schedule) == (6, "alice", "@hourly")
    assert entry.expression == "0 * * * *"
    assert entry.command == "/usr/bin/python3 /home/alice/train_sweep.py --lr 3e-4"
    assert entry.env == {"MAILTO": ""}
    # crontab -l hides the 3 header lines crontab(1) wrote (not the user's own comment).
    assert tab.header_lines == 3


def test_header_lines_only_counts_leading_comments() -> None:
    tab = parse_crontab("# one\n* * * * * true\n# late\n", "/t", system=False, owner="u")
    assert tab.header_lines == 1
    assert parse_crontab("* * * * * true\n", "/t", system=False).header_lines == 0


def test_names_ranges_aliases_and_percent() -> None:
    entries = {e.line: e for e in _system("etc/cron.d/nightly_eval")}
    assert entries[3].schedule == "30 2 * jan-dec mon-fri"
    assert entries[3].env["CRON_TZ"] == "Europe/Berlin"
    assert entries[3].run_command == '/usr/local/bin/eval-nightly --tag "$(date +%F)" '
    assert entries[3].stdin == "from-stdin\nsecond line"
    assert entries[4].schedule == "@reboot"
    assert entries[4].is_reboot
    assert entries[5].expression == "0 0 * * 0"
    assert entries[6].schedule == "*/15 9-17 1,15 * 5"


def test_malformed_lines_are_skipped_with_a_warning_each() -> None:
    path = HOST / "etc/cron.d/broken"
    tab = parse_crontab(path.read_text(), str(path), system=True)
    assert [(e.line, e.command) for e in tab.entries] == [(9, "/bin/echo good-line")]
    assert [w.split(":", 2)[1] for w in tab.warnings] == ["2", "3", "4", "5", "6", "7", "8"]
    assert all(w.startswith(str(path) + ":") for w in tab.warnings)


@pytest.mark.parametrize(
    "command, expected",
    [
        ("echo hi", ("echo hi", None)),
        ("echo a%b%c", ("echo a", "b\nc")),
        (r"date +\%s", ("date +%s", None)),
        (r"echo \n\%x%in\%put", (r"echo \n%x", "in%put")),
        ("echo trailing%", ("echo trailing", "")),
        ("echo \\", ("echo \\", None)),
    ],
)
def test_split_percent(command: str, expected: tuple[str, str | None]) -> None:
    assert split_percent(command) == expected


@pytest.mark.parametrize(
    "line, expected",
    [
        ("MAILTO=ops@example.com", ("MAILTO", "ops@example.com")),
        ('SHELL = "/bin/bash"', ("SHELL", "/bin/bash")),
        ("  PATH= /usr/bin:/bin  ", ("PATH", "/usr/bin:/bin")),
        ("X='  padded  '", ("X", "  padded  ")),
        ("MAILTO=", ("MAILTO", "")),
        ("0 5 * * * cmd a=b", None),
        ("*/5 * * * * root x=1", None),
        ("@daily FOO=1 cmd", None),
    ],
)
def test_parse_env_line(line: str, expected: tuple[str, str] | None) -> None:
    assert parse_env_line(line) == expected


@pytest.mark.parametrize(
    "name, ok",
    [
        ("legacy-retrain", True),
        ("nightly_eval", True),
        ("Job2", True),
        ("legacy-retrain.dpkg-old", False),
        ("retrain~", False),
        (".placeholder", False),
        ("foo.bak", False),
        ("a b", False),
        ("job\n", False),  # once passed: `$` also matches before a final newline
    ],
)
def test_cron_d_names(name: str, ok: bool) -> None:
    assert cron_d_name_ok(name) is ok


@pytest.mark.parametrize("dow", ["0", "7", "SUN", "sun"])
def test_day_of_week_sunday_spellings(dow: str) -> None:
    assert next_run(_entry(f"0 2 * * {dow}"), NOW, UTC) == "2026-12-06T02:00:00+00:00"


def _series(expr: str, n: int, zone: ZoneInfo = UTC) -> list[str]:
    out, now = [], NOW
    for _ in range(n):
        text = next_run(_entry(expr), now, zone)
        assert text is not None
        out.append(text)
        now = datetime.fromisoformat(text)
    return out


def test_dom_and_dow_both_restricted_is_or() -> None:
    # crontab(5): "30 4 1,15 * 5" runs on the 1st and 15th plus every Friday.
    assert _series("30 4 1,15 * 5", 5) == [
        "2026-12-01T04:30:00+00:00",  # Tuesday the 1st
        "2026-12-04T04:30:00+00:00",  # Friday
        "2026-12-11T04:30:00+00:00",  # Friday
        "2026-12-15T04:30:00+00:00",  # Tuesday the 15th
        "2026-12-18T04:30:00+00:00",  # Friday
    ]


def test_star_prefixed_dom_makes_it_and() -> None:
    # Vixie cron: a field starting with '*' (here */2) sets DOM_STAR, so both must match:
    # odd days that are Fridays.
    assert _series("0 0 */2 * 5", 3) == [
        "2026-12-11T00:00:00+00:00",
        "2026-12-25T00:00:00+00:00",
        "2027-01-01T00:00:00+00:00",
    ]


def test_aliases_and_reboot() -> None:
    weekly = CronEntry("/x", 1, "", "@weekly", "0 0 * * 0", "root", "true")
    reboot = CronEntry("/x", 1, "", "@reboot", None, "root", "true")
    assert next_run(weekly, NOW, UTC) == "2026-12-06T00:00:00+00:00"
    assert next_run(reboot, NOW, UTC) == REBOOT_NEXT_RUN == "when cron starts"


def test_cron_tz_overrides_host_zone() -> None:
    entry = _entry("30 2 * * mon-fri", CRON_TZ="Europe/Berlin")
    # 22:00 UTC Sunday is 23:00 Monday-eve in Berlin: next is Monday 02:30 CET.
    assert next_run(entry, NOW, UTC) == "2026-11-30T02:30:00+01:00"
    assert next_run(_entry("30 2 * * mon-fri"), NOW, UTC) == "2026-11-30T02:30:00+00:00"


def test_host_zone_dst_gap_is_handled_like_debian_cron() -> None:
    # 02:30 does not exist on 2027-03-28 in Berlin; Debian cron runs it at 03:00 CEST.
    now = datetime(2027, 3, 27, 12, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    entry = _entry("30 2 * * *")
    assert next_run(entry, now, ZoneInfo("Europe/Berlin")) == "2027-03-28T03:00:00+02:00"


def test_anacrontab() -> None:
    text = "SHELL=/bin/sh\n# period delay id command\n1\t5\tcron.daily\trun-parts /etc/cron.daily\n"
    (entry,) = parse_anacrontab(text, "/etc/anacrontab").entries
    assert (entry.line, entry.command) == (3, "run-parts /etc/cron.daily")
    assert entry.schedule == "every 1 days, delay 5 min (anacron cron.daily)"
    assert next_run(entry, NOW, UTC) is None

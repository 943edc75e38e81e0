"""``enforcement:`` parsing, error locations and per-rule decisions."""

from __future__ import annotations

import pytest

from rogue_watchdog.config import ConfigError, parse_config

GOOD = """
enforcement:
  mode: observe
  grace_s: 5
  auto_disable_source: false
  quarantine_unknown_exe: true
  dry_run: false
  command_prefix: [nsenter, -t, "1234", -p, -m]
  backup_dir: /var/lib/rw/backups
  protect:
    - "*sanctioned_pipeline*"
    - {exe: /usr/bin/Xorg}
    - {user: postgres, cmdline_regex: "pg_.*"}
  rules:
    - {name: legacy, origin_kind: cron, cmdline: "*train_weekly*", mode: terminate,
       auto_disable_source: true}
    - {name: bob, user: bob, mode: terminate}
"""


def test_full_section_and_decisions() -> None:
    s = parse_config(GOOD, "c.yaml").enforcement
    assert (s.mode, s.grace_s, s.quarantine_unknown_exe) == ("observe", 5.0, True)
    assert s.command_prefix == ("nsenter", "-t", "1234", "-p", "-m")
    assert s.backup_dir == "/var/lib/rw/backups"
    assert [p.text for p in s.protect] == [
        "*sanctioned_pipeline*", "exe=/usr/bin/Xorg", "user=postgres, cmdline_regex=pg_.*",
    ]  # fmt: skip
    assert s.protect[2].matches(("pg_dump",), None, "postgres")
    assert not s.protect[2].matches(("pg_dump",), None, "alice")
    d = s.decide(("python3", "/opt/train_weekly.py"), "cron", "root")
    assert (d.mode, d.auto_disable_source, d.rule) == ("terminate", True, "legacy")
    d = s.decide(("python3", "/opt/train_weekly.py"), "systemd", "bob")
    assert (d.mode, d.auto_disable_source, d.rule) == ("terminate", False, "bob")
    d = s.decide(("python3", "x.py"), "shell", "alice")
    assert (d.mode, d.auto_disable_source, d.rule) == ("observe", False, None)


def test_defaults() -> None:
    s = parse_config("", "c.yaml").enforcement
    assert (s.mode, s.grace_s, s.protect, s.rules, s.dry_run) == ("observe", 10.0, (), (), False)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "enforcement: {mode: kill}",
            "c.yaml:1: enforcement.mode: must be observe or terminate, got 'kill'",
        ),
        ("enforcement: {grace_s: -1}", "c.yaml:1: enforcement.grace_s: must not be negative"),
        (
            "enforcement:\n  rules:\n    - {name: x, mode: terminate}",
            "c.yaml:3: enforcement.rules[0]: needs at least one of cmdline, cmdline_regex, "
            "origin_kind, user",
        ),
        (
            "enforcement:\n  rules:\n    - {name: x, user: bob}",
            "c.yaml:3: enforcement.rules[0]: needs mode, auto_disable_source or gpu_open "
            "(else it changes nothing)",
        ),
        (
            "enforcement:\n  rules:\n    - {name: x, origin_kind: cronn, mode: terminate}",
            "c.yaml:3: enforcement.rules[0].origin_kind: one of slurm, kubernetes, container, "
            "cron, at, supervisor, shell, systemd, orphan, unknown, got 'cronn'",
        ),
        (
            "enforcement:\n  protect:\n    - {pid: 1}",
            "c.yaml:3: enforcement.protect[0].pid: unknown key 'pid'; allowed: cmdline, "
            "cmdline_regex, exe, user, origin",
        ),
    ],
)
def test_errors_name_file_line_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(text, "c.yaml")
    assert str(exc.value) == message

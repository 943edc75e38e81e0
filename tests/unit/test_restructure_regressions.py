"""The hostile tester's cases against this round's restructuring, each at its exact value."""

from __future__ import annotations

import pytest

from rogue_watchdog.cli import build_parser, command_word
from rogue_watchdog.config import ConfigError, parse_config
from rogue_watchdog.model import CronOrigin

PIN = "sanctioned:\n  - name: a\n    cmdline: x\n    origin:\n"


@pytest.mark.parametrize(
    "argv",
    [["--he", "status"], ["--h", "scan"], ["--log-format", "json", "--hel", "top"], ["--vers"]],
)
def test_an_abbreviated_top_level_option_builds_the_whole_parser(argv: list[str]) -> None:
    # B1: --he is --help to argparse; its help must list every command, not one.
    assert command_word(argv) is None


def test_a_command_after_an_abbreviated_log_format_is_still_found() -> None:
    assert command_word(["--log", "json", "status"]) == "status"
    assert command_word(["--log-f=json", "top"]) == "top"
    args = build_parser(command_word(["--log", "json", "status"])).parse_args(
        ["--log", "json", "status"]
    )
    assert (args.command, args.log_format) == ("status", "json")


def test_every_bad_value_of_one_pin_is_reported_at_once() -> None:
    # B2
    with pytest.raises(ConfigError) as exc:
        parse_config(PIN + "      cron_file: 5\n      cron_line: zero\n", "f.yaml")
    assert str(exc.value) == (
        "f.yaml:5: sanctioned[0].origin.cron_file: expected a string, got an integer ('5')\n"
        "f.yaml:6: sanctioned[0].origin.cron_line: expected an integer, got a string ('zero')"
    )


def test_any_false_beside_a_key_names_the_any_key() -> None:
    # B3
    with pytest.raises(ConfigError) as exc:
        parse_config(PIN + "      cron_file: /etc/crontab\n      any: false\n", "f.yaml")
    assert str(exc.value) == (
        "f.yaml:6: sanctioned[0].origin.any: only 'any: true' makes sense; remove the key"
    )


def test_a_cron_origin_with_an_empty_file_names_no_file() -> None:
    # B4: suggest printed "file , last edit file gone" for it.
    origin = CronOrigin(file="", line=2)
    assert (origin.source_file(), origin.source_detail()) == (None, None)

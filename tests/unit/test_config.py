"""Configuration validation: every error names file, line and key; nothing is lost."""

from __future__ import annotations

import pwd
from pathlib import Path

import pytest

from rogue_watchdog.config import DEFAULT_LAUNCHERS, ConfigError, load_config, parse_config
from tests.conftest import REPO, run_cli


def error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "/etc/rw/config.yaml")
    return info.value


def test_example_config_is_valid_and_documents_every_top_level_key() -> None:
    cfg = load_config(REPO / "config" / "example.yaml")
    assert [r.name for r in cfg.sanctioned] == ["nightly-pipeline", "research-slurm"]
    assert cfg.sanctioned[0].origin.get("systemd_unit") == "train-pipeline.service"
    assert cfg.sanctioned[0].max_instances == 1
    assert cfg.sanctioned[0].user == "mlops"
    assert cfg.sanctioned[1].origin.get("slurm_account") == "research"
    assert tuple(p.pattern for p in cfg.training.launchers) == DEFAULT_LAUNCHERS
    text = (REPO / "config" / "example.yaml").read_text()
    for key in ("sanctioned:", "training:", "ignore:", "nvml:", "paths:", "cron_line", "any: true"):
        assert key in text


def test_empty_and_absent_config_sanction_nothing() -> None:
    assert parse_config("", "x").sanctioned == ()
    assert parse_config("# only a comment\n", "x").sanctioned == ()
    assert load_config(None).sanctioned == ()


def test_unknown_top_level_key_names_file_line_and_key() -> None:
    e = error("sanctioned: []\nsanctionned: []\n")
    assert (e.path, e.line, e.key) == ("/etc/rw/config.yaml", 2, "sanctionned")
    assert str(e).startswith("/etc/rw/config.yaml:2: sanctionned: unknown key 'sanctionned'")


def test_unknown_origin_key_has_full_key_path() -> None:
    e = error("sanctioned:\n  - name: a\n    cmdline: 'x'\n    origin:\n      systemd: a.service\n")
    assert (e.line, e.key) == (5, "sanctioned[0].origin.systemd")


def test_wrong_type_is_refused() -> None:
    e = error(
        "sanctioned:\n  - name: a\n    cmdline: x\n    origin: {any: true}\n"
        "    max_instances: two\n"
    )
    assert (e.line, e.key) == (5, "sanctioned[0].max_instances")
    assert "expected an integer, got a string ('two')" in e.message


def test_rule_without_origin_is_refused_with_the_reason() -> None:
    e = error("sanctioned:\n  - name: a\n    cmdline: x\n")
    assert (e.line, e.key) == (2, "sanctioned[0].origin")
    assert "ghost" in e.message


def test_cron_line_needs_cron_file_and_is_positive() -> None:
    e = error("sanctioned:\n  - name: a\n    cmdline: x\n    origin:\n      cron_line: 3\n")
    assert e.key == "sanctioned[0].origin.cron_line"
    e = error(
        "sanctioned:\n  - name: a\n    cmdline: x\n    origin:\n      cron_file: /etc/crontab\n"
        "      cron_line: 0\n"
    )
    assert (e.line, e.key) == (6, "sanctioned[0].origin.cron_line")


def test_bad_regex_and_duplicate_names_and_yaml_syntax() -> None:
    e = error("training:\n  launchers:\n    - 'torchrun('\n")
    assert (e.line, e.key) == (3, "training.launchers[0]")
    assert "invalid regular expression" in e.message
    e = error(
        "sanctioned:\n  - {name: a, cmdline: x, origin: {any: true}}\n"
        "  - {name: a, cmdline: y, origin: {any: true}}\n"
    )
    assert (e.line, e.key) == (3, "sanctioned[1].name")
    e = error("sanctioned:\n  - name: [unclosed\n")
    assert e.line == 3 and "YAML syntax error" in e.message


def test_cmdline_or_regex_exactly_one() -> None:
    e = error("sanctioned:\n  - name: a\n    origin: {any: true}\n")
    assert e.key == "sanctioned[0].cmdline"
    e = error("sanctioned:\n  - {name: a, cmdline: x, cmdline_regex: y, origin: {any: true}}\n")
    assert e.key == "sanctioned[0]"


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"sanctioned: []\n# caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(bad)


def test_check_config_cli_reports_and_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("ignore:\n  - name: x\n    exe: 3\n")
    done = run_cli("check-config", str(cfg))
    assert done.returncode == 2
    assert f"{cfg}:3: ignore[0].exe: expected a string, got an integer ('3')" in done.stderr
    example = REPO / "config" / "example.yaml"
    ok = run_cli("check-config", str(example))
    assert ok.returncode == 0, ok.stderr
    summary = f"{example}: OK: 2 sanctioned rules, 6 launcher patterns, 6 ignore entries"
    first, *effective = ok.stdout.splitlines()
    # The ignore list in force follows (the shipped defaults), and each class's severity.
    assert (
        effective[0] == "ignore (the shipped defaults kept; 'ignore_defaults: false' drops them):"
    )
    assert effective[1] == "  'xorg' (exe /usr/*/Xorg) (default)"
    assert len(effective) == 8
    try:
        pwd.getpwnam("mlops")
    except KeyError:  # the example's pipeline user does not exist here: a warning only
        assert first == f"{summary}, 1 warning"
        assert ok.stderr == (
            f"rogue-watchdog: config warning: {example}:16: sanctioned[0].user: user "
            "'mlops' is not on this host yet (passwd): this entry matches no job until that "
            "user exists\n"
        )
    else:
        assert (first, ok.stderr) == (summary, "")


def test_origin_keys_of_two_kinds_are_refused() -> None:
    e = error(
        "sanctioned:\n  - name: a\n    cmdline: x\n    origin:\n"
        "      systemd_unit: x.service\n      slurm_account: r\n"
    )
    assert (e.line, e.key) == (5, "sanctioned[0].origin")
    assert "can never all match: slurm_account, systemd_unit" in e.message


@pytest.mark.parametrize(
    ("written", "read"),
    [("off", "off"), ("Off", "off"), ("OFF", "off"), ("false", "off"), ("no", "off"),
     ('"off"', "off"), ("auto", "auto")],
)  # fmt: skip
def test_an_on_off_choice_takes_yaml_booleans_by_what_was_written(written: str, read: str) -> None:
    # YAML 1.1 reads unquoted off/no/false as a boolean; docs/events.md writes
    # `daemon.events: off`, which check-config once refused ("expected a string").
    assert parse_config(f"daemon:\n  events: {written}\n", "x").daemon.events == read


def test_a_boolean_that_is_no_choice_names_what_was_written() -> None:
    assert str(error("daemon:\n  events: on\n")) == (
        "/etc/rw/config.yaml:2: daemon.events: must be auto or off, got 'on'"
    )
    assert str(error("daemon:\n  events: yes\n")) == (
        "/etc/rw/config.yaml:2: daemon.events: must be auto or off, got 'yes'"
    )
    # A choice without on/off words: a boolean is refused in that choice's own words.
    assert str(error("enforcement:\n  mode: off\n")) == (
        "/etc/rw/config.yaml:2: enforcement.mode: must be observe or terminate, got 'off'"
    )


def test_the_example_ship_gates_entry_uncomments_in_place(tmp_path: Path) -> None:
    """Fresh user F (issue 33): the example shipped `ship_gates: []` with its entry
    commented out under it. Uncommented in place, that entry was a YAML syntax error
    (before, 132b2a1: `config/example.yaml:186: YAML syntax error: expected <block end>`);
    a `ship_gates:` block appended as docs/weights.md shows was `duplicate key`. Now the
    key is empty (no gates) and its entry uncomments into one gate."""
    lines = (REPO / "config" / "example.yaml").read_text().splitlines()
    at = lines.index("ship_gates:")
    body = []
    for line in lines[at + 1 :]:
        if not line.startswith("#  "):
            break
        body.append(line[1:])
    assert body and body[0].strip().startswith("- name: prod")
    assert load_config(REPO / "config" / "example.yaml").ship_gates == ()
    edited = tmp_path / "config.yaml"
    edited.write_text("\n".join([*lines[: at + 1], *body, *lines[at + 1 + len(body) :]]) + "\n")
    gates = load_config(edited).ship_gates
    assert [(g.name, g.deploy_dir) for g in gates] == [("prod", "/srv/models/prod")]


def test_check_config_names_the_ship_gates_in_force(tmp_path: Path) -> None:
    """Fresh user G (issue 33): after adding a ``ship_gates:`` entry, ``check-config``
    said only ``OK: 0 sanctioned rules, 6 launcher patterns, 6 ignore entries``; the
    gate was not named. Now each gate, its folder and what it does."""
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "ship_gates:\n"
        f"  - {{name: prod, deploy_dir: {deploy}, quarantine: true}}\n"
        f"  - {{name: staging, deploy_dir: {deploy}/staging}}\n"
    )
    ok = run_cli("check-config", str(cfg))
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    at = lines.index("ship_gates: 2")
    assert lines[at + 1 : at + 3] == [
        f"  prod: {deploy} (quarantine)",
        f"  staging: {deploy}/staging (alert only)",
    ]

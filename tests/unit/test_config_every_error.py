"""``check-config`` lists every error: an unknown key no longer stops the check of the
rest of its mapping, and a misspelt key is reported once, not also as the key it meant
being missing (first-day report: ``usr: root`` hid ``max_instances: one``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rogue_watchdog.config import ConfigError, errors_of, load_config, parse_config
from rogue_watchdog.daemon.loop import Daemon
from tests.unit.test_status import config_file

# The user's file: a typo of an optional key beside a bad value, and a bad regex in a
# second rule. Before: two errors (the max_instances one came only once usr was fixed).
USERS_FILE = """\
sanctioned:
  - name: nightly
    cmdline: "*/train.py *"
    usr: root
    max_instances: one
    origin: {any: true}
  - name: other
    cmdline_regex: "(a"
    origin: {any: true}
"""
RULE_KEYS = "allowed: name, cmdline, cmdline_regex, user, origin, max_instances"


def errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config(text, "c.yaml")
    return [str(e) for e in errors_of(exc.value)]


def test_the_users_file_lists_all_three_errors() -> None:
    assert errors(USERS_FILE) == [
        f"c.yaml:4: sanctioned[0].usr: unknown key 'usr' (did you mean 'user'?); {RULE_KEYS}",
        "c.yaml:5: sanctioned[0].max_instances: expected an integer, got a string ('one')",
        "c.yaml:8: sanctioned[1].cmdline_regex: invalid regular expression: missing ): (a",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (  # top level: the misspelt section and a bad value in another
            "sanctionned: []\ndaemon: {interval_s: -1}\n",
            [
                "c.yaml:1: sanctionned: unknown key 'sanctionned' (did you mean 'sanctioned'?)",
                "c.yaml:2: daemon.interval_s: must be greater than 0, got -1.0",
            ],
        ),
        (  # daemon: a typo, then a bad value after it in the same mapping
            "daemon:\n  intervl_s: 5\n  retention_jobs_s: -3\n",
            [
                "c.yaml:2: daemon.intervl_s: unknown key 'intervl_s' (did you mean 'interval_s'?)",
                "c.yaml:3: daemon.retention_jobs_s: must be 0 or more, got -3.0",
            ],
        ),
        (  # alerts and a sink: a misspelt url_file is not also "needs url_env or url_file"
            "alerts:\n  retry_bse_s: 1\n  sinks:\n    - {type: slack, url_fiel: /etc/x}\n"
            "    - {type: pager}\n",
            [
                "c.yaml:2: alerts.retry_bse_s: unknown key 'retry_bse_s' (did you mean "
                "'retry_base_s'?)",
                "c.yaml:4: alerts.sinks[0].url_fiel: unknown key 'url_fiel' (did you mean "
                "'url_file'?)",
                "c.yaml:5: alerts.sinks[1].type: unknown sink type 'pager'",
            ],
        ),
        (  # ship_gates: a misspelt required key is one error, and the next value is checked
            "ship_gates:\n  - name: g\n    deploy_dri: /srv/models\n    settle_s: -1\n",
            [
                "c.yaml:3: ship_gates[0].deploy_dri: unknown key 'deploy_dri' (did you mean "
                "'deploy_dir'?)",
                "c.yaml:4: ship_gates[0].settle_s: must be >= 0, got -1",
            ],
        ),
        (  # enforcement: a typo in the section and one in a rule, with a bad mode
            "enforcement:\n  mod: terminate\n  grace_s: -1\n  rules:\n"
            "    - {nme: r, user: bob, mode: terminate}\n",
            [
                "c.yaml:2: enforcement.mod: unknown key 'mod' (did you mean 'mode'?)",
                "c.yaml:3: enforcement.grace_s: must not be negative",
                "c.yaml:5: enforcement.rules[0].nme: unknown key 'nme' (did you mean 'name'?)",
            ],
        ),
    ],
)
def test_an_unknown_key_in_each_section_kind_stops_nothing(text: str, expected: list[str]) -> None:
    got = errors(text)
    assert len(got) == len(expected), got
    for line, want in zip(got, expected, strict=True):
        assert line.startswith(want), (line, want)


def test_a_misspelt_required_key_is_one_error_naming_it() -> None:
    # Before: the mapping stopped at the unknown key; after the change without the
    # did-you-mean link it would also have said "sanctioned[0].name: required key missing".
    text = "sanctioned:\n  - nmae: a\n    cmdline: '*/t.py'\n    origin: {any: true}\n"
    assert errors(text) == [
        f"c.yaml:2: sanctioned[0].nmae: unknown key 'nmae' (did you mean 'name'?); {RULE_KEYS}"
    ]


def test_a_missing_key_no_unknown_key_looks_like_is_still_said() -> None:
    text = "sanctioned:\n  - title: a\n    cmdline: '*/t.py'\n"
    assert errors(text) == [
        "c.yaml:2: sanctioned[0].title: unknown key 'title'; " + RULE_KEYS,
        "c.yaml:2: sanctioned[0].name: required key missing",
        "c.yaml:2: sanctioned[0].origin: required key missing (a rule without an origin would "
        "sanction a ghost running the same script; write 'origin: {any: true}' to allow any "
        "origin)",
    ]


def test_a_misspelt_user_is_not_a_rule_sanctioning_every_job() -> None:
    # cmdline '*' with origin any is refused unless a user pins it: `usr:` is the typo,
    # not a rule without a user.
    text = "sanctioned:\n  - {name: a, cmdline: '*', usr: bob, origin: {any: true}}\n"
    assert errors(text) == [
        f"c.yaml:2: sanctioned[0].usr: unknown key 'usr' (did you mean 'user'?); {RULE_KEYS}"
    ]


def test_origin_pin_emptied_by_an_unknown_key_is_one_error() -> None:
    text = "sanctioned:\n  - {name: a, cmdline: '*/t.py', origin: {cron_fiel: /etc/cron.d/x}}\n"
    (only,) = errors(text)
    assert only.startswith(
        "c.yaml:2: sanctioned[0].origin.cron_fiel: unknown key 'cron_fiel' (did you mean "
        "'cron_file'?)"
    )


def test_a_refused_reload_lists_every_error_and_keeps_the_old_config(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    d = Daemon(load_config(str(path)), str(path))
    try:
        d.tick(time.time())
        before = d.config
        path.write_text(path.read_text() + "  intervl_s: 2\n  retention_jobs_s: -3\n")
        assert d.reload() is False
        assert d.config is before
        why = d.degraded["config-reload"]
        assert "daemon.intervl_s: unknown key 'intervl_s' (did you mean 'interval_s'?)" in why
        assert "daemon.retention_jobs_s: must be 0 or more, got -3.0" in why
    finally:
        d.db.close()

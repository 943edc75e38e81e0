"""The alert spool's ``--config`` rewrite over configuration paths that need quoting
(hostile tester wt9-attack, session j).

1. A daemon whose configuration path holds an apostrophe (``/home/o'brien/rw.yaml``)
   prints ``--config '/home/o'"'"'brien/rw.yaml'`` (:func:`shlex.quote`). The rewrite's
   pattern took only the first quoted piece, ``'/home/o'``, for the path: every alert
   that daemon sent with a command was rewritten to a broken one and told that it was
   "written under the configuration /home/o".
2. A configuration path holding a backtick was written raw into the product's own
   command and into the note, adding a backtick: every code span after it flipped, and a
   command line quoted there read as the product's own words.
"""

from __future__ import annotations

from rogue_watchdog.daemon.alerts.adopt import adopted
from rogue_watchdog.daemon.alerts.alert import Alert, Outgoing
from rogue_watchdog.hostpaths import config_args
from rogue_watchdog.hosttext import code_span, outside_code, own_code

OTHER = "/srv/other/config.yaml"


def _out(message: str, config: str | None) -> Outgoing:
    doc = {"schema_version": 1, "event": "open", "host": "h", "time": None,
           "finding": {"id": 1, "message": message}, "config": config}  # fmt: skip
    return Outgoing(Alert.from_json(doc), "log", 1, 1.0)


def _message(config: str) -> str:
    return (
        f"job {code_span('python train.py')}; to stop it: "
        f"{own_code('rogue-watchdog disable-source' + config_args(config) + ' F7')} then "
        f"{code_span('EVIL; to stop it: rm -rf /srv')} end"
    )


def test_a_daemon_with_an_apostrophe_in_its_config_path_sends_its_alerts_as_written() -> None:
    ours = "/home/o'brien/rw.yaml"
    message = _message(ours)
    assert "--config '/home/o'\"'\"'brien/rw.yaml' F7``" in message
    assert adopted(_out(message, ours), ours).alert.finding.message == message
    assert adopted(_out(message, None), ours).alert.finding.message == message


def test_an_apostrophe_path_of_another_install_is_renamed_whole() -> None:
    other = "/home/o'brien/rw.yaml"
    got = adopted(_out(_message(other), None), OTHER).alert.finding.message
    assert f"``rogue-watchdog disable-source --config {OTHER} F7``" in got
    assert f"[written under the configuration {other} (" in got


def test_a_backtick_in_the_config_path_cannot_flip_the_spans_after_it() -> None:
    ours = "/srv/a`b/config.yaml"
    got = adopted(_out(_message(OTHER), OTHER), ours).alert.finding.message
    assert "EVIL" not in outside_code(got)
    assert "``rogue-watchdog disable-source --config '/srv/a\\x60b/config.yaml' F7``" in got
    assert "this daemon's configuration (/srv/a\\x60b/config.yaml)" in got
    # Sent again by the same daemon (a retry): nothing more to rename.
    again = adopted(_out(got.split("; [written")[0], ours), ours).alert.finding.message
    assert again == got.split("; [written")[0]

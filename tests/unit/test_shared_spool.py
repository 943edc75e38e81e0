"""A state directory shared by two installs (issue 33, fresh user E): the daemon started
last replays the alerts the other one queued, whose printed commands named the other's
``--config``. Pasted, `status --config /work/fresh-d/config/example.yaml` answered rc 4,
"the daemon answering on /run/rogue-watchdog/status.sock runs with
/work/fresh-e/config/example.yaml ... it is another daemon": a dead end."""

from __future__ import annotations

import json
from pathlib import Path

from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.alerts.adopt import adopted
from rogue_watchdog.daemon.alerts.alert import Alert, Outgoing
from rogue_watchdog.daemon.assemble import build_alert_workers
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.tracking.spool import deliveries

T0 = 3_000_000.0


def _daemon(tmp_path: Path, name: str) -> Daemon:
    path = tmp_path / name / "config.yaml"
    path.parent.mkdir()
    text = (
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/shared'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{tmp_path}/{name}/alerts.log'}}]}}\n"
    )
    path.write_text(text)
    return Daemon(parse_config(text, str(path)), None)


def _sent(tmp_path: Path, name: str) -> list[str]:
    log = tmp_path / name / "alerts.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line)["message"] for line in lines]


def test_alerts_queued_under_another_config_name_the_one_that_sends_them(
    tmp_path: Path,
) -> None:
    d = _daemon(tmp_path, "d")  # fresh user D's checkout, stopped with alerts queued
    cfg_d, cfg_e = tmp_path / "d/config.yaml", tmp_path / "e/config.yaml"
    hint = (
        f"rogue job PID 24609; to stop it: rogue-watchdog terminate --config {cfg_d} 24609; "
        f"(``rogue-watchdog status --config {cfg_d}``)"
    )
    fid = d.db.insert_finding("rogue-job:x", "rogue-job", "high", hint, 24609, {}, T0)
    d.db.resolve_finding(fid, T0 + 60)
    rec = d.db.finding(fid)
    assert rec is not None
    for sink, payload in deliveries("resolve", rec, "h", T0 + 60, d.config.alerts.sinks,
                                    None, str(cfg_d)):  # fmt: skip
        d.db.enqueue(fid, sink, "resolve", payload, T0 + 60)
        # A row an older version spooled: no configuration recorded, only the hint's.
        d.db.enqueue(fid, sink, "resolve", {k: v for k, v in payload.items() if k != "config"},
                     T0 + 61)  # fmt: skip
    d.db.close()
    e = _daemon(tmp_path, "e")  # fresh user E's checkout, the same state directory
    [worker, *_] = build_alert_workers(e)
    assert len(worker.deliver_due(T0 + 120).delivered) == 2  # type: ignore[attr-defined]
    sent = _sent(tmp_path, "e")
    # Before: both sent as spooled, `--config {cfg_d}` (the dead end).
    expected = (
        f"rogue job PID 24609; to stop it: rogue-watchdog terminate --config {cfg_e} 24609; "
        f"(``rogue-watchdog status --config {cfg_e}``); [written under the configuration "
        f"{cfg_d} (another install sharing this state directory, or this daemon before a "
        "reload): the commands in it name this daemon's configuration "
        f"({cfg_e}), which reads the same state database]"
    )
    assert sent == [expected, expected]
    assert str(cfg_d) not in expected.split("; [")[0]
    worker.stop()  # type: ignore[attr-defined]
    e.db.close()


def test_its_own_alerts_are_sent_as_spooled(tmp_path: Path) -> None:
    d = _daemon(tmp_path, "d")
    cfg_d = tmp_path / "d/config.yaml"
    hint = f"rogue job PID 7; to stop it: rogue-watchdog terminate --config {cfg_d} 7"
    fid = d.db.insert_finding("rogue-job:y", "rogue-job", "high", hint, 7, {}, T0)
    rec = d.db.finding(fid)
    assert rec is not None
    for sink, payload in deliveries("open", rec, "h", T0, d.config.alerts.sinks, None,
                                    str(cfg_d)):  # fmt: skip
        assert payload["config"] == str(cfg_d)
        d.db.enqueue(fid, sink, "open", payload, T0)
    [worker, *_] = build_alert_workers(d)
    assert len(worker.deliver_due(T0 + 1).delivered) == 1  # type: ignore[attr-defined]
    assert _sent(tmp_path, "d") == [hint]
    worker.stop()  # type: ignore[attr-defined]
    d.db.close()


def _out(message: str, config: str | None) -> Outgoing:
    doc = {"schema_version": 1, "event": "resolve", "host": "h", "time": None,
           "finding": {"id": 1, "message": message}}  # fmt: skip
    if config is not None:
        doc["config"] = config
    return Outgoing(Alert.from_json(doc), "log", 1, T0)


def test_which_commands_are_renamed() -> None:
    d, e = "/work/fresh-d/config/example.yaml", "/work/fresh-e/config/example.yaml"
    note = (
        f"; [written under the configuration {d} (another install sharing this state "
        "directory, or this daemon before a reload): the commands in it name this daemon's "
        f"configuration ({e}), which reads the same state database]"
    )
    # This daemon resolving a finding the other one opened: the message is the other's.
    msg = f"F3 ghost; to stop it: rogue-watchdog terminate --config {d} 24609"
    got = adopted(_out(msg, e), e).alert.finding.message
    assert got == f"F3 ghost; to stop it: rogue-watchdog terminate --config {e} 24609{note}"
    # A candidate of the operator's is never renamed; our own commands stay as they are.
    mine = (
        f"learning: ``rogue-watchdog allowlist diff --config /srv/candidate.yaml``, "
        f"``rogue-watchdog check-config --config /srv/candidate.yaml``, "
        f"``rogue-watchdog status --config {e}``"
    )
    assert adopted(_out(mine, e), e).alert.finding.message == mine
    assert adopted(_out(mine, None), e).alert.finding.message == mine
    # The other install ran with the default file (no --config in its commands).
    plain = "to stop it: rogue-watchdog terminate 24609 (``rogue-watchdog status``)"
    got = adopted(_out(plain, "/etc/rogue-watchdog/config.yaml"), e).alert.finding.message
    assert got.startswith(
        f"to stop it: rogue-watchdog terminate --config {e} 24609 "
        f"(``rogue-watchdog status --config {e}``); [written under the configuration "
        "/etc/rogue-watchdog/config.yaml "
    )
    # And the other way round: this daemon runs with the default file.
    got = adopted(_out(msg, d), "/etc/rogue-watchdog/config.yaml").alert.finding.message
    assert got.startswith("F3 ghost; to stop it: rogue-watchdog terminate 24609; [written")

"""Typed disable plans (issue 30) keep the stored JSON: a restore plan recorded by the
release before them (``actions.details_json`` ``restore``, written before the first
change) reads back, writes out unchanged and still undoes an interrupted
disable-source."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from rogue_watchdog.actions.disable import FileCopy, SystemdChange
from rogue_watchdog.actions.effects import RecordingEffects
from rogue_watchdog.actions.recovery import disable_undo
from rogue_watchdog.actions.remedy import restore_plan
from rogue_watchdog.actions.undo import ops_of, run_undo
from rogue_watchdog.records import ActionStep
from tests.unit.test_disable_systemd import STATES, plan

UNIT_TEXT = b"[Service]\nExecStart=/usr/bin/python3 /srv/retrain.py\nRestart=always\n"

# As b2ad21f recorded it for a timer-started unit whose file sat in the mask folder
# (moved aside before `systemctl mask`); {DIR} and {SHA} are filled in per test.
STORED = """{"systemd": {"unit": "retrain.service", "timer": "retrain.timer",
 "timers": ["retrain.timer"],
 "before": {"retrain.timer": {"enabled": "enabled", "active": "active"},
            "retrain.service": {"enabled": "static", "active": "active"}},
 "move": {"path": "{DIR}/retrain.service", "backup": "{DIR}/backup.retrain.service",
          "uid": 0, "gid": 0, "mode": 420, "sha256": "{SHA}",
          "mtime_ns": 1800000000000000000},
 "transient": false}}"""


def _stored(tmp_path: Path) -> dict[str, object]:
    (tmp_path / "backup.retrain.service").write_bytes(UNIT_TEXT)
    sha = hashlib.sha256(UNIT_TEXT).hexdigest()
    restore: dict[str, object] = json.loads(
        STORED.replace("{DIR}", str(tmp_path)).replace("{SHA}", sha)
    )
    return restore


def _run(n: int, argv: list[str], status: str = "done") -> ActionStep:
    return ActionStep(n, 1, 0.0, "run", status, {"argv": argv}, {"returncode": 0})


def test_a_stored_systemd_plan_round_trips(tmp_path: Path) -> None:
    restore = _stored(tmp_path)
    d = restore["systemd"]
    assert isinstance(d, dict)
    change = SystemdChange.from_json(d)
    assert change.timers == ("retrain.timer",) and change.move is not None
    assert change.to_json() == d
    assert json.dumps(change.to_json()) == json.dumps(d)  # the key order too


def test_a_stored_systemd_plan_still_undoes_an_interrupted_disable(tmp_path: Path) -> None:
    restore = _stored(tmp_path)
    made = [
        _run(1, ["systemctl", "disable", "--now", "retrain.timer"]),
        _run(2, ["systemctl", "stop", "retrain.service"]),
        ActionStep(3, 1, 0.0, "remove", "done", {"path": f"{tmp_path}/retrain.service"}, None),
        _run(4, ["systemctl", "mask", "retrain.service"], status="intent"),
    ]
    ops = disable_undo(restore, made)
    move = restore["systemd"]["move"]  # type: ignore[index]
    assert ops == [
        {"op": "systemctl", "argv": ["unmask", "retrain.service"]},
        {"op": "restore_file", **move},
        {"op": "systemctl", "argv": ["daemon-reload"]},
        {"op": "systemctl", "argv": ["enable", "retrain.timer"]},
        {"op": "systemctl", "argv": ["start", "retrain.timer"]},
        {"op": "systemctl", "argv": ["start", "retrain.service"]},
    ]
    fx = RecordingEffects()
    res = run_undo(ops_of(json.loads(json.dumps(ops))), fx)
    assert res.outcome == "ok", res.error
    assert ("write_file_atomic", f"{tmp_path}/retrain.service", UNIT_TEXT, 0, 0, 420) in fx.calls
    assert ("set_mtime", f"{tmp_path}/retrain.service", 1800000000000000000) in fx.calls


def test_a_stored_plan_with_only_timer_undoes() -> None:
    # Plans recorded before "timers" named the one timer.
    d = {
        "unit": "retrain.service", "timer": "retrain.timer",
        "before": {"retrain.timer": {"enabled": "enabled", "active": "inactive"},
                   "retrain.service": {"enabled": "enabled", "active": "active"}},
        "move": None, "transient": False,
    }  # fmt: skip
    made = [_run(1, ["systemctl", "disable", "--now", "retrain.timer"])]
    assert disable_undo({"systemd": d}, made) == [
        {"op": "systemctl", "argv": ["enable", "retrain.timer"]},
        {"op": "systemctl", "argv": ["enable", "retrain.service"]},
        {"op": "systemctl", "argv": ["start", "retrain.service"]},
    ]


def test_a_malformed_stored_plan_gives_no_undo_op() -> None:
    made = [_run(1, ["systemctl", "stop", "retrain.service"])]
    for bad in ({"unit": "x.service"}, {"unit": "x.service", "before": []}, "x"):
        assert disable_undo({"systemd": bad}, made) == []


def test_a_plan_made_now_records_the_same_json() -> None:
    p = plan(
        {"unit": "retrain.service", "timer": "retrain.timer", "restart": "always"},
        RecordingEffects(answers=STATES),
    )
    assert json.dumps(restore_plan(p)) == json.dumps(
        {
            "systemd": {
                "unit": "retrain.service", "timer": "retrain.timer",
                "timers": ["retrain.timer"],
                "before": {"retrain.timer": {"enabled": "enabled", "active": "active"},
                           "retrain.service": {"enabled": "static", "active": "active"}},
                "move": None, "transient": False,
            }
        }
    )  # fmt: skip


def test_a_file_copy_is_the_restore_file_op() -> None:
    copy = FileCopy("/etc/cron.d/x", "/b/x", 0, 0, 0o644, "ab" * 32)
    assert copy.restore_op() == {
        "op": "restore_file", "path": "/etc/cron.d/x", "backup": "/b/x",
        "uid": 0, "gid": 0, "mode": 0o644, "sha256": "ab" * 32,
    }  # fmt: skip
    assert FileCopy.from_json(copy.to_json()) == copy

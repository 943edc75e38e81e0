"""Recorded origins are read back, not trusted (state DB rows, IPC, alert payloads).

An origin of the wrong shape must never be acted on as if it named something: it reads as
an unreadable origin whose evidence says what was wrong, and disable-source refuses it.
"""

from __future__ import annotations

from typing import Any

import pytest

from rogue_watchdog.actions.effects import RecordingEffects
from rogue_watchdog.actions.planners import plan_disable
from rogue_watchdog.model import (
    CronOrigin,
    Origin,
    SystemdOrigin,
    UnreadableOrigin,
    origin_from_json,
)

CRON = "the recorded cron origin is unreadable: "
UNIT = "the recorded systemd origin is unreadable: "
SLURM = "the recorded slurm origin is unreadable: "


@pytest.mark.parametrize(
    ("doc", "evidence"),
    [
        # Before: TypeError deep in the planner (a traceback, exit 1).
        ({"kind": "cron", "script": 123}, CRON + "script is a number"),
        ({"kind": "systemd", "unit": ["x.service"]}, UNIT + "unit is a list"),
        ({"kind": "systemd", "unit": "u.service", "timer": 7}, UNIT + "timer is a number"),
        ({"kind": "slurm", "evidence": None}, SLURM + "evidence is null"),
        ({"kind": "cron", "line": True}, CRON + "line is a boolean"),
        # Before: ValueError (int() refuses more than 4300 digits).
        ({"kind": "cron", "line": "9" * 5000}, CRON + "line is a string"),
        ({"kind": "cron", "evidence": ["ok", 3]}, CRON + "evidence is a list"),
        # Before: AttributeError ('list' object has no attribute 'get').
        ([1, 2], "the recorded origin is not an object (a list)"),
        ("cron", "the recorded origin is not an object (a string)"),
        (5, "the recorded origin is not an object (a number)"),
    ],
)  # fmt: skip
def test_a_recorded_origin_of_the_wrong_shape_is_unreadable_and_refused(
    doc: Any, evidence: str
) -> None:
    origin = origin_from_json(doc)
    assert type(origin) is UnreadableOrigin
    assert (origin.kind, origin.evidence) == ("unknown", (evidence,))
    fx = RecordingEffects()
    plan = plan_disable(
        origin, reason="r", now=0.0, backup_dir="/nonexistent", effects=fx,
        quarantine_unknown_exe=True, cmdline=("/usr/bin/python3", "/srv/t.py"),
        exe="/usr/bin/python3",
    )  # fmt: skip
    assert (plan.kind, plan.refused) == ("none", evidence)
    assert fx.calls == []


def test_well_formed_records_read_back_as_written() -> None:
    cron = CronOrigin(file="/etc/cron.d/retrain", line=7, entry="0 2 * * 0 root x", user="root")
    assert origin_from_json(cron.to_json()) == cron
    unit = SystemdOrigin(unit="t.service", timer="t.timer", evidence=("cgroup",))
    assert origin_from_json(unit.to_json()) == unit
    assert type(origin_from_json({"kind": "no-such-kind"})) is Origin

"""systemd source disabling with recorded systemctl answers: exact commands and undo ops.
(The real manager is exercised in tests/system/test_enforce_systemd.py.)"""

from __future__ import annotations

from watchdog.actions.disable import plan_disable
from watchdog.actions.effects import CommandResult, RecordingEffects

STATES = {
    ("systemctl", "is-enabled", "retrain.timer"): CommandResult(0, "enabled\n", ""),
    ("systemctl", "is-active", "retrain.timer"): CommandResult(0, "active\n", ""),
    ("systemctl", "is-enabled", "retrain.service"): CommandResult(0, "static\n", ""),
    ("systemctl", "is-active", "retrain.service"): CommandResult(0, "active\n", ""),
}


def plan(fields: dict[str, object], fx: RecordingEffects):  # type: ignore[no-untyped-def]
    return plan_disable(
        {"kind": "systemd", **fields}, reason="r", now=0.0, backup_dir="/nonexistent", effects=fx
    )


def test_timer_and_restart_always_masks() -> None:
    fx = RecordingEffects(answers=STATES)
    p = plan({"unit": "retrain.service", "timer": "retrain.timer", "restart": "always"}, fx)
    assert p.steps == [
        "before: retrain.timer is-enabled=enabled is-active=active",
        "before: retrain.service is-enabled=static is-active=active",
        "systemctl disable --now retrain.timer",
        "systemctl stop retrain.service",
        "systemctl mask retrain.service",
        "(mask because Restart=always would start retrain.service again)",
    ]
    assert all(c[0] == "query" for c in fx.calls)  # planning changes nothing
    fx.calls.clear()
    res = p.execute(fx)
    assert [c[1] for c in fx.calls] == [
        ("systemctl", "disable", "--now", "retrain.timer"),
        ("systemctl", "stop", "retrain.service"),
        ("systemctl", "mask", "retrain.service"),
    ]
    assert res.outcome == "ok"
    assert res.undo == [
        {"op": "systemctl", "argv": ["unmask", "retrain.service"]},
        {"op": "systemctl", "argv": ["enable", "retrain.timer"]},
        {"op": "systemctl", "argv": ["start", "retrain.timer"]},
        {"op": "systemctl", "argv": ["start", "retrain.service"]},
    ]


def test_service_without_timer_no_restart() -> None:
    fx = RecordingEffects(
        answers={
            ("systemctl", "is-enabled", "svc.service"): CommandResult(0, "enabled\n", ""),
            ("systemctl", "is-active", "svc.service"): CommandResult(3, "inactive\n", ""),
        }
    )
    p = plan({"unit": "svc.service", "restart": "no"}, fx)
    res = p.execute(fx)
    assert [c[1] for c in fx.calls if c[0] == "run"] == [
        ("systemctl", "disable", "--now", "svc.service")
    ]
    assert res.undo == [{"op": "systemctl", "argv": ["enable", "svc.service"]}]


def test_failed_mask_is_partial_and_undo_covers_only_what_was_done() -> None:
    def answer(argv: tuple[str, ...]) -> CommandResult | None:
        if argv[1] == "mask":
            return CommandResult(1, "", "Failed to mask unit: File exists")
        return STATES.get(argv)

    fx = RecordingEffects(answer=answer)
    res = plan(
        {"unit": "retrain.service", "timer": "retrain.timer", "restart": "on-failure"}, fx
    ).execute(fx)
    assert res.outcome == "partial"
    assert res.error == "systemctl mask retrain.service exited 1: Failed to mask unit: File exists"
    assert {"op": "systemctl", "argv": ["unmask", "retrain.service"]} not in res.undo


def test_user_units_are_refused() -> None:
    fx = RecordingEffects()
    fields: dict[str, object] = {
        "unit": "sched.service",
        "user_unit": "sched.service",
        "uid": 1000,
        "remediation": "systemctl --user -M alice@ disable --now sched.service",
    }
    p = plan(fields, fx)
    assert p.refused == (
        "user units are not disabled automatically; run: "
        "systemctl --user -M alice@ disable --now sched.service"
    )
    assert fx.calls == []

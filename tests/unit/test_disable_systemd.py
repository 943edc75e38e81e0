"""systemd source disabling with recorded systemctl answers: exact commands and undo ops.
(The real manager is exercised in tests/system/test_enforce_systemd.py.)"""

from __future__ import annotations

from rogue_watchdog.actions.effects import RecordingEffects
from rogue_watchdog.actions.planners import plan_disable
from rogue_watchdog.command import CommandResult
from rogue_watchdog.model import SystemdOrigin, origin_from_json

STATES = {
    ("systemctl", "is-enabled", "retrain.timer"): CommandResult(0, "enabled\n", ""),
    ("systemctl", "is-active", "retrain.timer"): CommandResult(0, "active\n", ""),
    ("systemctl", "is-enabled", "retrain.service"): CommandResult(0, "static\n", ""),
    ("systemctl", "is-active", "retrain.service"): CommandResult(0, "active\n", ""),
    ("systemctl", "show", "-p", "LoadState", "retrain.service"): CommandResult(
        0, "LoadState=masked\n", ""
    ),
    (
        "systemctl",
        "show",
        "-p",
        "FragmentPath",
        "-p",
        "Transient",
        "-p",
        "TriggeredBy",
        "retrain.service",
    ): CommandResult(
        0,
        "FragmentPath=/lib/systemd/system/retrain.service\nTransient=no\n"
        "TriggeredBy=retrain.timer\n",
        "",
    ),
}


def plan(fields: dict[str, object], fx: RecordingEffects):  # type: ignore[no-untyped-def]
    return plan_disable(
        origin_from_json({"kind": "systemd", **fields}),
        reason="r",
        now=0.0,
        backup_dir="/nonexistent",
        effects=fx,
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
        "verify: systemctl show -p LoadState retrain.service says masked",
    ]
    assert all(c[0] == "query" for c in fx.calls)  # planning changes nothing
    fx.calls.clear()
    res = p.execute(fx)
    assert [c[1] for c in fx.calls] == [
        ("systemctl", "disable", "--now", "retrain.timer"),
        ("systemctl", "stop", "retrain.service"),
        ("systemctl", "mask", "retrain.service"),
        ("systemctl", "show", "-p", "LoadState", "retrain.service"),
    ]
    assert res.outcome == "ok"
    assert res.done[-1] == "verified: retrain.service LoadState=masked"
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
    assert res.error == (
        "systemctl mask retrain.service exited 1: `Failed to mask unit: File exists`"
    )
    assert {"op": "systemctl", "argv": ["unmask", "retrain.service"]} not in res.undo


def test_user_unit_of_unknown_uid_is_refused_not_disabled_system_wide() -> None:
    # A user unit whose owner's uid is unknown is written with "user" and "uid" keys set
    # to null. It was once judged by "uid" alone (and a "user_unit" key nobody wrote), so
    # `systemctl disable --now sched.service` would have hit the system manager's unit.
    fx = RecordingEffects()
    origin = origin_from_json(
        {"kind": "systemd", "unit": "sched.service", "user": None, "uid": None,
         "remediation": "systemctl --user -M 1000@ stop sched.service"}
    )  # fmt: skip
    assert isinstance(origin, SystemdOrigin) and origin.user_unit
    p = plan_disable(origin, reason="r", now=0.0, backup_dir="/nonexistent", effects=fx)
    assert p.refused == (
        "user units are not disabled automatically; run: "
        "systemctl --user -M 1000@ stop sched.service"
    )
    assert fx.calls == []
    assert origin.describe() == "systemd user unit sched.service"
    # Written back, it stays a user unit: the keys, not their values, say so.
    assert origin.to_json()["uid"] is None and "user" in origin.to_json()
    system = SystemdOrigin(unit="sched.service")
    assert "uid" not in system.to_json() and not origin_from_json(system.to_json()).user_unit


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


def test_mask_that_does_not_take_is_partial() -> None:
    """`systemctl mask` exits 0 but the unit does not read as masked: not `ok`."""

    def answer(argv: tuple[str, ...]) -> CommandResult | None:
        if argv[1] == "show" and "LoadState" in argv:
            return CommandResult(0, "LoadState=loaded\n", "")
        return STATES.get(argv)

    fx = RecordingEffects(answer=answer)
    res = plan(
        {"unit": "retrain.service", "timer": "retrain.timer", "restart": "always"}, fx
    ).execute(fx)
    assert res.outcome == "partial"
    assert res.error == "retrain.service LoadState=loaded after mask, not masked"


def test_active_timer_the_origin_did_not_name_is_disabled_before_the_mask() -> None:
    def answer(argv: tuple[str, ...]) -> CommandResult | None:
        if argv[:2] == ("systemctl", "show") and "TriggeredBy" in argv:
            return CommandResult(0, "FragmentPath=/lib/systemd/system/retrain.service\n"
                                    "Transient=no\nTriggeredBy=retrain.timer\n", "")  # fmt: skip
        return STATES.get(argv)

    fx = RecordingEffects(answer=answer)
    res = plan({"unit": "retrain.service", "restart": "always"}, fx).execute(fx)
    assert [c[1] for c in fx.calls if c[0] == "run"] == [
        ("systemctl", "disable", "--now", "retrain.timer"),
        ("systemctl", "stop", "retrain.service"),
        ("systemctl", "mask", "retrain.service"),
    ]
    assert res.outcome == "ok"


def test_transient_unit_is_stopped_and_undo_records_nothing_impossible() -> None:
    """A `systemd-run` unit: stopped (it is then gone), never masked, and undo does not
    record `systemctl start` of a unit that no longer exists."""

    def answer(argv: tuple[str, ...]) -> CommandResult | None:
        if argv[:2] == ("systemctl", "show"):
            return CommandResult(0, "FragmentPath=/run/systemd/transient/run-u7.service\n"
                                    "Transient=yes\nTriggeredBy=\n", "")  # fmt: skip
        if argv[1] == "is-enabled":
            return CommandResult(0, "transient\n", "")
        return CommandResult(0, "active\n", "")

    fx = RecordingEffects(answer=answer)
    p = plan({"unit": "run-u7.service", "restart": "always"}, fx)
    res = p.execute(fx)
    assert [c[1] for c in fx.calls if c[0] == "run"] == [("systemctl", "stop", "run-u7.service")]
    assert res.outcome == "ok"
    assert res.undo == []
    assert p.steps[-1] == (
        "(run-u7.service is a transient unit: once stopped it is gone, and undo cannot start "
        "it again; it is recorded without enable or start)"
    )


def test_recorded_user_unit_flag_is_honoured() -> None:
    # Before: from_json overwrote an explicit "user_unit": true with "has user/uid keys"
    # (false here), and disable-source planned `systemctl disable --now` on the system
    # manager's unit of that name.
    fx = RecordingEffects()
    origin = origin_from_json({"kind": "systemd", "unit": "rw-adv.service", "user_unit": True})
    assert isinstance(origin, SystemdOrigin) and origin.user_unit
    p = plan_disable(origin, reason="r", now=0.0, backup_dir="/nonexistent", effects=fx)
    assert p.refused == "user units are not disabled automatically"
    assert fx.calls == []


def test_a_recorded_unit_or_timer_is_checked_before_systemctl_sees_it() -> None:
    # Before: each of these planned `systemctl disable --now NAME` (and ran read-only
    # queries with it): a glob, an option, the root mount, a path, two words, and a timer
    # that is really another service.
    for fields, refused in [
        ({"unit": "ssh*", "restart": "always"},
         "the recorded origin names `ssh*`, which is not a valid unit name (systemd.unit(5))"),
        ({"unit": "--global"},
         "the recorded origin names `--global`, which is not a valid unit name (systemd.unit(5))"),
        ({"unit": "-.mount"},
         "the recorded origin names `-.mount`, which is not a valid unit name (systemd.unit(5))"),
        ({"unit": "../../etc/passwd"},
         "the recorded origin names `../../etc/passwd`, which is not a valid unit name"
         " (systemd.unit(5))"),
        ({"unit": "a b.service"},
         "the recorded origin names `a b.service`, which is not a valid unit name"
         " (systemd.unit(5))"),
        ({"unit": "sshd.socket"},
         "the recorded origin names `sshd.socket`, which is not a service or scope unit"),
        ({"unit": "retrain.service", "timer": "ssh.service"},
         "the recorded origin names `ssh.service`, which is not a timer unit"),
    ]:  # fmt: skip
        fx = RecordingEffects(answers=STATES)
        p = plan(fields, fx)
        assert (p.kind, p.refused) == ("none", refused)
        assert fx.calls == []
    fx = RecordingEffects(answers=STATES)
    p = plan({"unit": "retrain.service", "timer": "other.timer"}, fx)
    assert (
        p.refused == "other.timer does not trigger retrain.service (systemctl show -p TriggeredBy)"
    )
    assert all(c[0] == "query" for c in fx.calls)

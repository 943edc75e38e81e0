"""``enforcement.gpu_open``: who the guard lets a GPU denial move (never a sanctioned,
protected or ignored process, never a shared cgroup's other members), the records it
writes, the host's controller, the config keys and the undo op (issue 36, item 2).

Real processes this test started; the cgroup hierarchy is a temporary folder and the
effects are recorded (the real devices cgroup: tests/system/test_gpu_open.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rogue_watchdog.actions import devprog
from rogue_watchdog.actions.effects import RecordingEffects
from rogue_watchdog.actions.gpudeny import (
    DENY_PREFIX,
    GpuOpenGate,
    apply_deny,
    devices_cgroup,
    find_controller,
    plan_deny,
)
from rogue_watchdog.actions.guards import Expected, SignalGuard, read_live
from rogue_watchdog.actions.remedy import JobTarget
from rogue_watchdog.actions.undo import UndoError, check_op, ops_of
from rogue_watchdog.config import ConfigError, parse_config
from rogue_watchdog.config.enforcement import Protect
from rogue_watchdog.model import OrphanOrigin
from rogue_watchdog.state import StateDB
from tests.conftest import Spawned

PARENT = (
    "import subprocess, sys, time\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', 'gpu-deny-kid'])\n"
    "print(c.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def identity(pid: int) -> Expected:
    for _ in range(200):
        live = read_live(pid)
        if live is not None and live.cmdline[:1] == (sys.executable,):
            return Expected(pid, live.start_ticks, live.cmdline)
        time.sleep(0.02)
    raise AssertionError(f"PID {pid} did not start")


def my_devices_cgroup() -> str:
    return devices_cgroup(Path("/proc/self/cgroup").read_text().splitlines()) or "?"


def job(spawned: Spawned, marker: str = "train-rogue") -> tuple[Expected, Expected]:
    p = spawned.start([sys.executable, "-c", PARENT, marker], stdout=subprocess.PIPE)
    assert p.stdout is not None
    kid = int(p.stdout.readline())
    return identity(p.pid), identity(kid)


def target(
    members: list[Expected], verdict: str = "rogue", refused: str | None = None
) -> JobTarget:
    root = members[0]
    return JobTarget(
        signature="sig", finding_id=None, root_pid=root.pid, start_ticks=root.start_ticks,
        members=members, user="root", cmdline=tuple(root.cmdline or ()), exe=sys.executable,
        origin=OrphanOrigin(), verdict=verdict, refused=refused,
    )  # fmt: skip


def test_a_rogue_jobs_processes_are_planned_in_their_own_devices_cgroup(
    spawned: Spawned,
) -> None:
    root, kid = job(spawned)
    plan = plan_deny(target([root, kid]), SignalGuard())
    where = read_live(root.pid)
    assert where is not None
    cg = devices_cgroup(where.cgroup)
    assert plan.whole is None
    assert [(e.pid, w) for e, w in plan.procs] == [(root.pid, cg), (kid.pid, cg)]
    assert plan.refused == []


def test_a_sanctioned_member_is_never_planned(spawned: Spawned) -> None:
    root, kid = job(spawned)
    plan = plan_deny(target([root, kid]), SignalGuard(sanctioned_pids={kid.pid}))
    assert [e.pid for e, _w in plan.procs] == [root.pid]
    assert [(r["pid"], r["guard"]) for r in plan.refused] == [(kid.pid, "sanctioned")]


def test_a_sanctioned_or_ignored_root_means_nothing_is_denied(spawned: Spawned) -> None:
    root, kid = job(spawned)
    # The guard's sanctioned set holds the members of sanctioned and ignored jobs alike.
    plan = plan_deny(target([root, kid]), SignalGuard(sanctioned_pids={root.pid, kid.pid}))
    assert plan.procs == []
    assert plan.whole == f"PID {root.pid} belongs to a sanctioned job"


def test_a_protected_process_is_never_planned(spawned: Spawned) -> None:
    root, kid = job(spawned, "protected-by-entry")
    guard = SignalGuard(
        protect=(Protect(cmdline="*protected-by-entry*", text="*protected-by-entry*"),)
    )
    plan = plan_deny(target([root, kid]), guard)
    assert plan.procs == []
    assert plan.whole == (
        f"PID {root.pid} matches enforcement.protect entry '*protected-by-entry*'"
    )
    # The kid's command line does not carry the marker: alone it would be planned.
    alone = plan_deny(target([kid]), guard)
    assert [e.pid for e, _w in alone.procs] == [kid.pid]


def test_a_protected_origin_and_an_excess_run_are_never_denied(spawned: Spawned) -> None:
    root, kid = job(spawned)
    refused = plan_deny(target([root, kid], refused="its origin is protected"), SignalGuard())
    assert (refused.procs, refused.whole) == ([], "its origin is protected")
    excess = plan_deny(target([root, kid], verdict="excess"), SignalGuard())
    assert (excess.procs, excess.whole) == ([], "a excess job is never denied the GPU")
    sanctioned = plan_deny(target([root, kid], verdict="sanctioned"), SignalGuard())
    assert (sanctioned.procs, sanctioned.whole) == (
        [], "a sanctioned job is never denied the GPU"
    )  # fmt: skip


def test_the_other_members_of_a_shared_cgroup_are_never_moved(spawned: Spawned) -> None:
    """The bystander shares the job's devices cgroup (this test's own): only the job's
    PIDs are moved, each by its identity."""
    root, kid = job(spawned)
    bystander = spawned.start([sys.executable, "-c", "import time; time.sleep(60)", "bystander"])
    by = identity(bystander.pid)
    live = read_live(by.pid)
    assert live is not None and devices_cgroup(live.cgroup) == my_devices_cgroup()
    plan = plan_deny(target([root, kid]), SignalGuard())
    fx = RecordingEffects()
    out = apply_deny(plan, ["c 195:0 rwm"], "/h", "t1", SignalGuard(), fx)
    deny = f"/h/{my_devices_cgroup().strip('/')}/{DENY_PREFIX}.t1".replace("//", "/")
    assert fx.calls == [
        ("make_cgroup", deny),
        ("write_control", f"{deny}/devices.deny", "c 195:0 rwm"),
        ("move_to_cgroup", root.pid, root.start_ticks, deny),
        ("move_to_cgroup", kid.pid, kid.start_ticks, deny),
    ]
    assert [(p["pid"], p["result"]) for p in out.procs] == [
        (root.pid, "denied"), (kid.pid, "denied"),
    ]  # fmt: skip
    assert (out.outcome, out.undo()) == ("ok", [{"op": "cgroup_lift", "cgroup": deny}])


def test_the_guard_is_asked_again_right_before_each_move(spawned: Spawned) -> None:
    root, kid = job(spawned)
    plan = plan_deny(target([root, kid]), SignalGuard())
    fx = RecordingEffects()
    # Sanctioned between the plan and the move (a reload): the kid is not moved.
    out = apply_deny(plan, ["c 195:0 rwm"], "/h", "t2", SignalGuard(sanctioned_pids={kid.pid}), fx)
    moved = [c[1] for c in fx.calls if c[0] == "move_to_cgroup"]
    assert moved == [root.pid]
    assert [(p["pid"], p["result"]) for p in out.procs] == [
        (root.pid, "denied"), (kid.pid, "refused"),
    ]  # fmt: skip
    assert out.outcome == "partial"


def hierarchy(tmp_path: Path, kind: str) -> Path:
    root = tmp_path / "cgroup"
    if kind == "v1":
        (root / "devices").mkdir(parents=True)
        (root / "devices" / "devices.deny").write_text("")
    elif kind == "v2":
        root.mkdir(parents=True)
        (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    else:
        root.mkdir(parents=True)
    return root


def test_the_controller_says_what_the_host_offers(tmp_path: Path) -> None:
    v1 = find_controller(str(hierarchy(tmp_path / "a", "v1")))
    assert (v1.kind, v1.hierarchy, v1.why) == (
        "cgroup-v1", str(tmp_path / "a" / "cgroup" / "devices"), None,
    )  # fmt: skip
    v2 = find_controller(str(hierarchy(tmp_path / "b", "v2")), lambda: None)
    assert (v2.kind, v2.hierarchy, v2.why) == ("cgroup-v2", str(tmp_path / "b" / "cgroup"), None)
    cannot = find_controller(str(hierarchy(tmp_path / "d", "v2")), lambda: NO_BPF)
    assert (cannot.kind, cannot.why) == (
        "cgroup-v2", f"not enforcing: cgroup v2 and {NO_BPF} (needs CAP_SYS_ADMIN)",
    )  # fmt: skip
    none = find_controller(str(hierarchy(tmp_path / "c", "none")))
    assert (none.kind, none.why) == (
        "none", f"not enforcing: no device cgroup controller under {tmp_path / 'c' / 'cgroup'}",
    )  # fmt: skip


NO_BPF = "cannot load a BPF_CGROUP_DEVICE program: Operation not permitted"


def gate(
    tmp_path: Path, mode: str, kind: str = "v1", probe: str | None = None
) -> tuple[GpuOpenGate, StateDB]:
    cg = hierarchy(tmp_path, kind)
    config = parse_config(
        f"enforcement: {{gpu_open: {mode}, gpu_devices: ['{tmp_path}/nvidia[0-9]*']}}\n"
        f"paths: {{cgroup_root: '{cg}'}}\n",
        "c.yaml",
    )
    db = StateDB(str(tmp_path / "state"))
    g = GpuOpenGate(
        config.enforcement, config.paths.cgroup_root, db, RecordingEffects(), actor="test",
        clock=time.time, rules=lambda _globs: ["c 195:0 rwm"], probe=lambda: probe,
    )  # fmt: skip
    return g, db


class _Job:
    """The fields of a scan's Job that a denial reads."""

    def __init__(self, members: list[Expected], verdict: str = "rogue") -> None:
        self.root_pid = members[0].pid
        self.start_ticks = members[0].start_ticks
        self.pids = [m.pid for m in members]
        self.lineage: list[object] = []
        self.user = "root"
        self.cmdline = list(members[0].cmdline or ())
        self.origin = OrphanOrigin()
        self.verdict = verdict
        self.reason = "no rule matches"
        self.may_train = True

        class _Advice:
            refused = None
            stop_pids: tuple[int, ...] = ()
            restarts = None
            copies = None

        self.advice = _Advice()

    @property
    def unsanctioned(self) -> bool:
        return self.verdict in ("rogue", "excess")


def test_enforce_records_before_and_undo_ops_after(tmp_path: Path, spawned: Spawned) -> None:
    root, kid = job(spawned)
    g, db = gate(tmp_path, "enforce")
    assert g.state() == ("enforcing", None)
    aid = g.deny(_Job([root, kid]), SignalGuard(), {})  # type: ignore[arg-type]
    assert aid is not None
    rec = db.action(aid)
    assert rec is not None
    steps = [(s.op, s.status) for s in db.action_steps(aid)]
    assert steps == [
        ("cgroup-mkdir", "done"), ("cgroup-write", "done"),
        ("cgroup-move", "done"), ("cgroup-move", "done"),
    ]  # fmt: skip
    deny = f"{tmp_path}/cgroup/devices/{my_devices_cgroup().strip('/')}".rstrip("/")
    deny += f"/{DENY_PREFIX}.{db.session[:12]}.{aid}"
    assert (rec.kind, rec.outcome, rec.dry_run, rec.state) == ("gpu-deny", "ok", False, "done")
    assert rec.undo == [{"op": "cgroup_lift", "cgroup": deny}]
    assert rec.details["rules"] == ["c 195:0 rwm"]
    assert [(p["pid"], p["result"]) for p in rec.details["procs"]] == [
        (root.pid, "denied"), (kid.pid, "denied"),
    ]  # fmt: skip
    assert g.status()["denied"] == [
        {"action": aid, "job": rec.details["job"], "pids": [root.pid, kid.pid], "cgroups": [deny]}
    ]


def test_audit_records_each_would_be_denial_and_changes_nothing(
    tmp_path: Path, spawned: Spawned
) -> None:
    root, kid = job(spawned)
    g, db = gate(tmp_path, "audit")
    aid = g.deny(_Job([root, kid]), SignalGuard(), {})  # type: ignore[arg-type]
    assert aid is not None
    rec = db.action(aid)
    assert rec is not None
    assert (rec.kind, rec.outcome, rec.dry_run, rec.undo) == ("gpu-deny", "audit", True, None)
    assert [(p["pid"], p["result"]) for p in rec.details["procs"]] == [
        (root.pid, "would-deny"), (kid.pid, "would-deny"),
    ]  # fmt: skip
    assert isinstance(g.effects, RecordingEffects) and g.effects.calls == []
    assert g.status()["state"] == "auditing" and g.status()["denied"] == []


def test_v2_attaches_a_device_program_before_any_move_and_records_its_id(
    tmp_path: Path, spawned: Spawned
) -> None:
    root, kid = job(spawned)
    g, db = gate(tmp_path, "enforce", "v2")
    assert (g.state(), g.controller.kind) == (("enforcing", None), "cgroup-v2")
    aid = g.deny(_Job([root, kid]), SignalGuard(), {})  # type: ignore[arg-type]
    assert aid is not None
    rec = db.action(aid)
    assert rec is not None
    mine = devices_cgroup(Path("/proc/self/cgroup").read_text().splitlines(), "cgroup-v2")
    deny = f"{tmp_path}/cgroup/{(mine or '/').strip('/')}".rstrip("/")
    deny += f"/{DENY_PREFIX}.{db.session[:12]}.{aid}"
    assert isinstance(g.effects, RecordingEffects)
    assert g.effects.calls == [
        ("make_cgroup", deny),
        ("attach_device_program", deny, ("c 195:0 rwm",)),
        ("move_to_cgroup", root.pid, root.start_ticks, deny),
        ("move_to_cgroup", kid.pid, kid.start_ticks, deny),
    ]
    steps = [(s.op, s.status, s.result) for s in db.action_steps(aid)]
    assert steps[:2] == [
        ("cgroup-mkdir", "done", None), ("bpf-attach", "done", {"program": 4242}),
    ]  # fmt: skip
    assert (rec.outcome, rec.details["programs"]) == ("ok", {deny: 4242})
    assert rec.undo == [{"op": "cgroup_lift", "cgroup": deny, "programs": [4242]}]
    # The lift detaches that id first, then moves back and removes the cgroup.
    g.effects.calls.clear()
    g._lift(rec, [deny], "test")
    assert g.effects.calls == [
        ("detach_device_program", deny, 4242), ("cgroup_pids", deny), ("remove_cgroup", deny),
    ]  # fmt: skip


def test_a_v2_host_that_cannot_load_a_program_says_not_enforcing(
    tmp_path: Path, spawned: Spawned
) -> None:
    root, kid = job(spawned)
    g, db = gate(tmp_path, "enforce", "v2", probe=NO_BPF)
    state, why = g.state()
    assert (state, why) == (
        "not enforcing", f"not enforcing: cgroup v2 and {NO_BPF} (needs CAP_SYS_ADMIN)",
    )  # fmt: skip
    aid = g.deny(_Job([root, kid]), SignalGuard(), {})  # type: ignore[arg-type]
    rec = db.action(aid or 0)
    assert rec is not None and (rec.outcome, rec.dry_run) == ("not-enforcing", True)
    assert rec.details["why"] == why
    assert isinstance(g.effects, RecordingEffects) and g.effects.calls == []


def test_a_sanctioned_job_gets_no_record_at_all(tmp_path: Path, spawned: Spawned) -> None:
    root, kid = job(spawned)
    g, db = gate(tmp_path, "enforce")
    guard = SignalGuard(sanctioned_pids={root.pid, kid.pid})
    assert g.deny(_Job([root, kid]), guard, {}) is None  # type: ignore[arg-type]
    assert db.actions() == []
    assert isinstance(g.effects, RecordingEffects) and g.effects.calls == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "enforcement: {gpu_open: block}",
            "c.yaml:1: enforcement.gpu_open: must be off, audit or enforce, got 'block'",
        ),
        (
            "enforcement:\n  gpu_devices: [/dev/nvidiactl, nvidia0]",
            "c.yaml:2: enforcement.gpu_devices[1]: must be an absolute path or glob "
            "(/dev/nvidia0), got 'nvidia0'",
        ),
        (
            "enforcement:\n  gpu_devices: []",
            "c.yaml:2: enforcement.gpu_devices: must name at least one device node (an empty "
            "list denies nothing)",
        ),
        (
            "enforcement:\n  gpu_devices: ['/dev/nvidia[0-9']",
            "c.yaml:2: enforcement.gpu_devices[0]: bad glob '/dev/nvidia[0-9': unclosed '[' "
            "at offset 11: fnmatch would match a literal '[' there; write '[[]' for a literal '['",
        ),
    ],
)
def test_config_errors_name_file_line_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(text, "c.yaml")
    assert str(exc.value) == message


def test_config_defaults_and_off_as_written() -> None:
    s = parse_config("", "c.yaml").enforcement
    assert (s.gpu_open, s.gpu_devices) == (
        "off", ("/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-uvm"),
    )  # fmt: skip
    # YAML 1.1 reads an unquoted off as a boolean: it means the word.
    assert parse_config("enforcement: {gpu_open: off}", "c.yaml").enforcement.gpu_open == "off"
    assert parse_config("enforcement: {gpu_open: audit}", "c.yaml").enforcement.gpu_open == "audit"


def test_the_lift_op_refuses_a_cgroup_that_is_no_denials(tmp_path: Path) -> None:
    assert ops_of([{"op": "cgroup_lift", "cgroup": "/x/rogue-watchdog-gpu-deny.a.1"}]) == [
        {"op": "cgroup_lift", "cgroup": "/x/rogue-watchdog-gpu-deny.a.1"}
    ]
    with pytest.raises(UndoError, match="'cgroup' must be a non-empty string"):
        ops_of([{"op": "cgroup_lift", "cgroup": ""}])
    other = tmp_path / "docker"
    other.mkdir()
    with pytest.raises(OSError, match="is not a GPU denial's cgroup: left alone"):
        check_op({"op": "cgroup_lift", "cgroup": str(other)})
    gone = tmp_path / f"{DENY_PREFIX}.x.1"
    with pytest.raises(OSError, match="is gone: the denial was lifted already"):
        check_op({"op": "cgroup_lift", "cgroup": str(gone)})


def test_check_config_says_what_gpu_open_does_on_this_host(tmp_path: Path) -> None:
    from rogue_watchdog.cli.scan import gpu_open_lines

    cg = hierarchy(tmp_path, "v2")
    config = parse_config(
        "enforcement:\n  gpu_open: audit\n"
        f"  gpu_devices: ['{tmp_path}/nvidia[0-9]*']\n"
        "  rules:\n    - {name: legacy, cmdline: '*legacy*', gpu_open: enforce}\n"
        f"paths: {{cgroup_root: '{cg}'}}\n",
        "c.yaml",
    )
    # Whether this process can load a device program (root here; a CI user may not).
    cannot = devprog.supported()
    assert gpu_open_lines(config) == [
        "gpu_open: audit by default, enforce by rule 'legacy'",
        f"  devices {tmp_path}/nvidia[0-9]*: no device node matches on this host",
        "  this host: "
        + (
            f"can enforce (cgroup v2 device program, BPF_CGROUP_DEVICE under {cg})"
            if cannot is None
            else f"not enforcing: cgroup v2 and {cannot} (needs CAP_SYS_ADMIN)"
        ),
    ]
    assert gpu_open_lines(parse_config("", "c.yaml")) == []
    v1 = hierarchy(tmp_path / "v1", "v1")
    text = f"enforcement: {{gpu_open: enforce}}\npaths: {{cgroup_root: '{v1}'}}\n"
    assert gpu_open_lines(parse_config(text, "c.yaml"))[-1] == (
        f"  this host: can enforce (cgroup v1 devices controller under {v1}/devices)"
    )


def test_an_interrupted_denial_is_resolved_with_the_lift_of_what_it_made() -> None:
    from rogue_watchdog.actions.recovery import resolve
    from rogue_watchdog.records import ActionRecord, ActionStep

    rec = ActionRecord(
        7, 0.0, "daemon", "gpu-deny", "PID 42 (1 process(es))", None, "sig", False, "pending",
        {"root": [42, 1]}, None, None, state="pending",
    )  # fmt: skip
    made = f"/sys/fs/cgroup/devices/{DENY_PREFIX}.s.7"
    steps = [
        ActionStep(1, 7, 0.0, "cgroup-mkdir", "done", {"path": made}, None),
        ActionStep(2, 7, 0.0, "cgroup-write", "intent", {"path": f"{made}/devices.deny"}, None),
    ]
    got = resolve(rec, steps)
    assert (got.outcome, got.undo) == ("partial", [{"op": "cgroup_lift", "cgroup": made}])
    assert got.words == f"the denial may hold for the processes moved into {made}; undo lifts it"
    none = resolve(rec, [])
    assert (none.outcome, none.undo, none.words) == (
        "interrupted", None, "nothing was changed (no cgroup made)",
    )  # fmt: skip


def test_the_v2_cgroup_is_the_unified_line() -> None:
    lines = ["5:devices:/a", "1:name=systemd:/s", "0::/user.slice/x.scope"]
    assert devices_cgroup(lines, "cgroup-v2") == "/user.slice/x.scope"
    assert devices_cgroup(lines) == "/a"
    assert devices_cgroup(["5:devices:/a"], "cgroup-v2") is None


def test_the_device_program_denies_each_rule_and_allows_the_rest() -> None:
    """The exact instructions (struct bpf_insn, little-endian): ctx loads, one block per
    rule (a ``*`` minor compares no minor), allow at the end."""
    code = devprog.assemble(["c 195:0 rwm", "c 195:* rwm", "b 8:1 rwm"])
    insns = [code[i : i + 8].hex() for i in range(0, len(code), 8)]
    assert insns == [
        "6112000000000000", "54020000ffff0000", "6114040000000000", "6115080000000000",
        # c 195:0
        "5502040002000000", "55040300c3000000", "5505020000000000", "b700000000000000",
        "9500000000000000",
        # c 195:*
        "5502030002000000", "55040200c3000000", "b700000000000000", "9500000000000000",
        # b 8:1
        "5502040001000000", "5504030008000000", "5505020001000000", "b700000000000000",
        "9500000000000000",
        "b700000001000000", "9500000000000000",
    ]  # fmt: skip
    for bad in (["a *:* rwm"], ["c *:* rwm"], ["c 195 rwm"], []):
        with pytest.raises(ValueError):
            devprog.assemble(bad)


def test_an_interrupted_v2_denial_is_lifted_with_the_program_it_attached() -> None:
    from rogue_watchdog.actions.recovery import resolve
    from rogue_watchdog.records import ActionRecord, ActionStep

    rec = ActionRecord(
        8, 0.0, "daemon", "gpu-deny", "PID 42 (1 process(es))", None, "sig", False, "pending",
        {"root": [42, 1]}, None, None, state="pending",
    )  # fmt: skip
    made = f"/sys/fs/cgroup/{DENY_PREFIX}.s.8"
    steps = [
        ActionStep(1, 8, 0.0, "cgroup-mkdir", "done", {"path": made}, None),
        ActionStep(2, 8, 0.0, "bpf-attach", "done", {"cgroup": made}, {"program": 77}),
        ActionStep(3, 8, 0.0, "cgroup-move", "intent", {"pid": 42, "cgroup": made}, None),
    ]
    got = resolve(rec, steps)
    assert (got.outcome, got.undo) == (
        "partial", [{"op": "cgroup_lift", "cgroup": made, "programs": [77]}],
    )  # fmt: skip
    # Cut before the attach's result was written: no id; the rmdir drops the program.
    steps[1] = ActionStep(2, 8, 0.0, "bpf-attach", "intent", {"cgroup": made}, None)
    assert resolve(rec, steps).undo == [{"op": "cgroup_lift", "cgroup": made}]


def test_the_undo_op_detaches_the_recorded_program_first(tmp_path: Path) -> None:
    from rogue_watchdog.actions.undo import _run_op

    made = tmp_path / f"{DENY_PREFIX}.s.9"
    made.mkdir()
    fx = RecordingEffects()
    _run_op({"op": "cgroup_lift", "cgroup": str(made), "programs": [77]}, fx)
    assert fx.calls == [
        ("detach_device_program", str(made), 77), ("cgroup_pids", str(made)),
        ("remove_cgroup", str(made)),
    ]  # fmt: skip

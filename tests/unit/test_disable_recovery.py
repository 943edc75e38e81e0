"""disable-source and undo interrupted half-way (issue 32, case 4): each file change is
written before it is made; the next daemon start finds the row, says what changed, and
gives the action the undo ops of what changed (the restore plan was written first)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rogue_watchdog import faults
from rogue_watchdog.actions.effects import Effects, RecordingEffects
from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.actions.recovery import account, describe_step, resolve
from rogue_watchdog.actions.remedy import JobTarget, Remedy
from rogue_watchdog.actions.runner import InlineRunner
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.model import Restarts, SupervisorOrigin, origin_from_json
from rogue_watchdog.policy.guard import ScanProtection
from rogue_watchdog.state import ActionStep, StateDB
from tests.conftest import run_cli

ENTRY = "0 2 * * 0 root /usr/bin/python3 /opt/legacy/train_weekly.py"
TAB = f"SHELL=/bin/sh\n# weekly\n{ENTRY}\n".encode()


class Killed(BaseException):
    """The process died here."""


@pytest.fixture(autouse=True)
def no_hook() -> object:
    yield
    faults.set_hook(None)


def kill_at(point: str) -> None:
    def hook(name: str) -> None:
        if name == point:
            raise Killed(name)

    faults.set_hook(hook)


def config(tmp: Path) -> object:
    return parse_config(
        "nvml: {enabled: false}\n"
        f"paths: {{cron_d: '{tmp}/cron.d'}}\n"
        f"daemon: {{state_dir: '{tmp}/state'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{tmp}/alerts.log'}}]}}\n"
        f"enforcement: {{backup_dir: '{tmp}/bk'}}\n",
        "t.yaml",
    )


def disable(tmp: Path, db: StateDB) -> None:
    cfg = config(tmp)
    remedy = Remedy(
        cfg.enforcement, db, Effects(), actor="daemon", backup_dir=str(tmp / "bk"),  # type: ignore[attr-defined]
        cron_d=str(tmp / "cron.d"), protection=ScanProtection(),
    )  # fmt: skip
    origin = {"kind": "cron", "file": str(tmp / "cron.d" / "legacy"), "line": 3, "entry": ENTRY,
              "user": "root"}  # fmt: skip
    target = JobTarget(
        signature="sig", finding_id=None, root_pid=4242, start_ticks=7, members=[], user="root",
        cmdline=(), exe=None, origin=origin_from_json(origin), verdict="rogue", running=False,
    )  # fmt: skip
    remedy.disable_source(target, 1_800_000_000.0)


def restart(tmp: Path) -> Daemon:
    cfg = config(tmp)
    d = Daemon(cfg, None)  # type: ignore[arg-type]
    enf = Enforcer(cfg, d.db, runner=InlineRunner())  # type: ignore[arg-type]
    d.sources.append(enf)
    d.enforcers.append(enf)
    d.tick(2_000_000.0)
    return d


@pytest.mark.parametrize(
    ("point", "changed"),
    [
        ("disable-source:begun", False),
        ("effects:backup:done", False),
        ("effects:write:intent", True),  # written, maybe made: the undo restores the backup
        ("effects:write:done", True),
        ("effects:touch:intent", True),
    ],
)
def test_a_disable_source_killed_mid_way_gets_its_account_and_undo(
    tmp_path: Path, point: str, changed: bool
) -> None:
    (tmp_path / "cron.d").mkdir()
    tab = tmp_path / "cron.d" / "legacy"
    tab.write_bytes(TAB)
    db = StateDB(tmp_path / "state")
    kill_at(point)
    with pytest.raises(Killed):
        disable(tmp_path, db)
    faults.set_hook(None)
    db.close()
    d = restart(tmp_path)
    [act] = d.db.actions()
    [f] = [f for f in d.last.findings if f.kind == "action-interrupted"]  # type: ignore[union-attr]
    assert act.kind == "disable-source" and f.severity == "warning"
    if changed:
        assert act.undo is not None and act.undo[0]["op"] == "restore_file"  # type: ignore[index]
        cfg = os.path.abspath("t.yaml")  # not the default file: the pasted undo names it
        assert f"undo: rogue-watchdog undo --config {cfg} {act.id}" in f.message
        out = run_cli("undo", str(act.id), "--state-dir", str(tmp_path / "state"))
        assert out.returncode == 0, out.stdout + out.stderr
        assert tab.read_bytes() == TAB
    else:
        assert act.undo is None and tab.read_bytes() == TAB
        assert "nothing was changed" in f.message
    d.tick(2_000_005.0)
    assert [a.state for a in d.db.actions() if a.id == act.id] == ["interrupted"]


def test_an_undo_killed_mid_way_is_reported_with_what_it_restored(tmp_path: Path) -> None:
    (tmp_path / "cron.d").mkdir()
    tab = tmp_path / "cron.d" / "legacy"
    tab.write_bytes(TAB)
    db = StateDB(tmp_path / "state")
    disable(tmp_path, db)
    [act] = db.actions()
    assert tab.read_bytes() != TAB and act.state == "done"
    db.close()
    # `undo` in a process of its own, killed (SIGKILL, by its fault point) once the
    # file is restored and before its record is finished.
    out = run_cli(
        "undo", str(act.id), "--state-dir", str(tmp_path / "state"),
        env={"ROGUE_WATCHDOG_FAULT": "effects:touch:done", "PYTHONPATH": str(Path.cwd())},
    )  # fmt: skip
    assert out.returncode == -9, out.stdout + out.stderr
    assert tab.read_bytes() == TAB
    d = restart(tmp_path)
    undo = next(a for a in d.db.actions() if a.kind == "undo")
    assert undo.state == "recovering" and undo.undo is None
    [f] = [f for f in d.last.findings if f.kind == "action-interrupted"]  # type: ignore[union-attr]
    # Its steps are the side effects, in words: the file was rewritten (done), the
    # directory touched (done, not marked: the kill came first, so "may have been").
    assert f"done: rewrite {tab}" in f.message
    assert f"may have been done (recorded before, never repeated): touch {tab.parent}" in (
        f.message
    )
    assert "reported only" in f.message


SUP = (
    "[supervisord]\nnodaemon=true\n\n[program:trainer]\n"
    "command=/usr/bin/python3 /srv/train.py\nautostart=true\nautorestart=true\n"
)


def sup_target(conf: Path) -> JobTarget:
    # The program as a scan reads it once the file is rewritten: autostart and
    # autorestart false, so the origin's own answer is "nothing restarts it" (None).
    origin = SupervisorOrigin(
        program="trainer", supervisor="supervisord", config=str(conf), section="program:trainer",
        autostart="false", autorestart="false", remediation="supervisorctl stop trainer",
    )  # fmt: skip
    return JobTarget(
        signature="sig", finding_id=None, root_pid=4242, start_ticks=7, members=[], user="root",
        cmdline=("/usr/bin/python3", "/srv/train.py"), exe=None, origin=origin, verdict="rogue",
        restarts=origin.restarts(),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("point", "left"),
    [
        ("effects:write:done", ["reread", "update trainer"]),  # seed 69401's point
        # `reread` ran, not marked: it may have run, it is not called made.
        ("effects:run:done", ["reread", "update trainer"]),
        ("effects:run:intent#2", ["update trainer"]),  # `reread` made, `update` not begun
        (None, []),  # not killed: both ran, supervisord loaded the rewrite
    ],
)
def test_a_supervisord_rewrite_not_yet_loaded_is_said_and_never_called_stopped(
    tmp_path: Path, point: str | None, left: list[str]
) -> None:
    # Seed 69401 (I15): a disable-source killed after its rewrite of the program's
    # settings and before `supervisorctl reread`/`update`: the file says
    # autorestart=false, supervisord runs the configuration it had. BEFORE: not_done
    # empty, recovered `ok`, and the next terminate `ok` (the file's word); supervisord
    # started the job again.
    db, remedy, target = _sup_remedy(tmp_path)
    conf = tmp_path / "supervisord.conf"
    assert target.restarts is None  # the file's word, read after the rewrite
    if point is not None:
        name, _, nth = point.partition("#")
        seen: list[str] = []

        def hook(at: str) -> None:
            seen.append(at)
            if at == name and seen.count(at) == int(nth or 1):
                raise Killed(at)

        faults.set_hook(hook)
        with pytest.raises(Killed):
            remedy.disable_source(target, 1_800_000_000.0)
        faults.set_hook(None)
        [rec] = db.unfinished_actions()
        steps = db.action_steps(rec.id)
        said = ", ".join(f"supervisorctl -c {conf} {c}" for c in left) + (
            " not run: the file says autostart/autorestart=false, but supervisord still runs "
            "the configuration it had loaded (it may start the job again) until they run, or "
            "until the undo"
        )
        assert account(rec, steps).not_done == [said]
        resolved = resolve(rec, steps)
        assert resolved.outcome == "partial"
        assert resolved.words == f"{said}; the undo ops of what changed are recorded"
    else:
        _aid, _plan, done = remedy.disable_source(target, 1_800_000_000.0)
        assert done is not None and done.outcome == "ok"
        said = ""
    aid, _res = remedy.terminate(target, 1_800_000_010.0, dry_run=True)
    act = db.action(aid)
    assert act is not None
    if left:
        assert act.details["may_return"] == {
            "restarts": f"restarts it: unknown, disable-source 1 left {said}",
            "stops": "disable-source first",
        }
    else:
        assert "may_return" not in act.details and "will_return" not in act.details


def _sup_remedy(
    tmp_path: Path, effects: Effects | None = None
) -> tuple[StateDB, Remedy, JobTarget]:
    """The program's configuration (SUP), a state database and a Remedy over them, and
    the program's job as a scan reads it after the rewrite."""
    conf = tmp_path / "supervisord.conf"
    if not conf.exists():
        conf.write_text(SUP)
    db = StateDB(tmp_path / "state")
    remedy = Remedy(
        config(tmp_path).enforcement, db, effects or RecordingEffects(), actor="daemon",  # type: ignore[attr-defined]
        backup_dir=str(tmp_path / "bk"), protection=ScanProtection(),
    )  # fmt: skip
    return db, remedy, sup_target(conf)


def _killed_disable(remedy: Remedy, target: JobTarget, point: str, now: float) -> None:
    faults.set_hook(lambda at: (_ for _ in ()).throw(Killed(at)) if at == point else None)
    with pytest.raises(Killed):
        remedy.disable_source(target, now)
    faults.set_hook(None)


def test_a_stronger_answer_than_an_unloaded_rewrite_stays(tmp_path: Path) -> None:
    # The same interrupted rewrite, and a job that comes back anyway (a loop the
    # terminate leaves): the terminate still says it comes back (`will-return`, with
    # the loop's step), not the weaker "may" of the rewrite.
    db, remedy, target = _sup_remedy(tmp_path)
    _killed_disable(remedy, target, "effects:write:done", 1_800_000_000.0)
    target.restarts = Restarts(
        "at once", "shell loop `while true` (PID 77)", "stop the loop first: kill -TERM 77"
    )
    aid, _res = remedy.terminate(target, 1_800_000_010.0, dry_run=True)
    act = db.action(aid)
    assert act is not None and "may_return" not in act.details
    assert act.details["will_return"]["stops"] == "stop the loop first: kill -TERM 77"


@pytest.mark.parametrize(
    "second",
    [
        "disable-source:begun",  # killed before its first side effect
        "effects:backup:intent",  # killed before its rewrite (the backup begun)
    ],
)
def test_a_later_disable_source_that_wrote_nothing_never_hides_an_unloaded_rewrite(
    tmp_path: Path, second: str
) -> None:
    # A first disable-source killed between its rewrite and `reread` (seed 69401), then
    # a second one of the same program killed before it wrote anything: supervisord
    # still runs the settings it had. BEFORE: the second, latest record decided (no
    # write, nothing unloaded) and the terminate said nothing comes back (`ok`).
    db, remedy, target = _sup_remedy(tmp_path)
    _killed_disable(remedy, target, "effects:write:done", 1_800_000_000.0)
    _killed_disable(remedy, target, second, 1_800_000_005.0)
    assert [r.id for r in db.unfinished_actions()] == [1, 2]
    aid, _res = remedy.terminate(target, 1_800_000_010.0, dry_run=True)
    act = db.action(aid)
    assert act is not None
    assert act.details["may_return"]["stops"] == "disable-source first"
    assert act.details["may_return"]["restarts"].startswith(
        "restarts it: unknown, disable-source 1 left supervisorctl -c "
    )


def test_an_unloaded_rewrite_is_read_past_any_number_of_later_dry_runs(tmp_path: Path) -> None:
    # The interrupted rewrite, then 60 dry runs of disable-source (a daemon in dry-run
    # enforcement records one a scan): they changed nothing. BEFORE: only the latest 50
    # disable-source records were read, all dry runs, and the terminate said `ok`.
    db, remedy, target = _sup_remedy(tmp_path)
    _killed_disable(remedy, target, "effects:write:done", 1_800_000_000.0)
    for n in range(60):
        aid, _plan, _res = remedy.disable_source(target, 1_800_000_001.0 + n, dry_run=True)
        assert aid == n + 2  # recorded
    aid, _res = remedy.terminate(target, 1_800_000_100.0, dry_run=True)
    act = db.action(aid)
    assert act is not None
    assert act.details["may_return"]["restarts"].startswith(
        "restarts it: unknown, disable-source 1 left supervisorctl -c "
    )


def _edit_row(db: StateDB, table: str, where: str, edit: object) -> None:
    """Rewrite one JSON column as a hand-edited or damaged database may hold it."""
    column = "details_json" if table == "actions" else "detail_json"
    for rowid, text in db.conn.execute(f"SELECT id, {column} FROM {table} WHERE {where}"):
        value = json.loads(text)
        edit(value)  # type: ignore[operator]
        db.conn.execute(f"UPDATE {table} SET {column}=? WHERE id=?", (json.dumps(value), rowid))
    db.conn.commit()


@pytest.mark.parametrize(
    ("post", "shown"),
    [
        ([None], "None"),
        ([5], "5"),
        (7, "7"),
        ([["supervisorctl", None]], "supervisorctl None"),
        ([{"x": 1}], "'{'\"'\"'x'\"'\"': 1}'"),
    ],
)
def test_a_damaged_post_record_crashes_nothing_and_counts_as_not_run(
    tmp_path: Path, post: object, shown: str
) -> None:
    # BEFORE: `list(None)`/`list(5)` raised TypeError in the recovery's account and
    # resolve and in the terminate (the CLI's exit 70, the daemon's recovery crash);
    # a `post` not a list was read as "no post step" and the terminate said `ok`.
    db, remedy, target = _sup_remedy(tmp_path)
    _killed_disable(remedy, target, "effects:write:done", 1_800_000_000.0)
    _edit_row(db, "actions", "id=1", lambda d: d.__setitem__("post", post))
    rec = db.action(1)
    assert rec is not None
    steps = db.action_steps(1)
    said = f"{shown} not run: the file says autostart/autorestart=false"
    assert account(rec, steps).not_done[0].startswith(said)
    assert resolve(rec, steps).outcome == "partial"
    aid, _res = remedy.terminate(target, 1_800_000_010.0, dry_run=True)
    act = db.action(aid)
    assert act is not None
    assert act.details["may_return"]["restarts"].startswith(
        f"restarts it: unknown, disable-source 1 left {said}"
    )


def test_a_damaged_run_step_argv_crashes_no_recovery(tmp_path: Path) -> None:
    # BEFORE: a `run` step whose argv is not a list raised TypeError in account()
    # (describe_step) and resolve() (disable_undo): the daemon's start-up recovery.
    db, remedy, target = _sup_remedy(tmp_path)
    _killed_disable(remedy, target, "effects:run:done", 1_800_000_000.0)
    _edit_row(db, "action_steps", "op='run'", lambda d: d.__setitem__("argv", 5))
    rec = db.action(1)
    assert rec is not None
    steps = db.action_steps(1)
    assert account(rec, steps).unsure == ["5"]
    assert resolve(rec, steps).outcome == "partial"


def test_an_older_record_without_post_reads_its_restore_plan(tmp_path: Path) -> None:
    # A disable-source of a version before `details.post` was recorded, killed between
    # its rewrite and `reread`: its restore plan (recorded before the first change)
    # holds the same commands. BEFORE: no `post`, skipped, the terminate said `ok`.
    db, remedy, target = _sup_remedy(tmp_path)
    _killed_disable(remedy, target, "effects:write:done", 1_800_000_000.0)
    _edit_row(db, "actions", "id=1", lambda d: d.pop("post"))
    rec = db.action(1)
    assert rec is not None and "post" not in rec.details
    assert resolve(rec, db.action_steps(1)).outcome == "partial"
    aid, _res = remedy.terminate(target, 1_800_000_010.0, dry_run=True)
    act = db.action(aid)
    assert act is not None
    assert act.details["may_return"]["restarts"].startswith(
        "restarts it: unknown, disable-source 1 left supervisorctl -c "
    )


def test_an_undo_killed_before_it_restored_leaves_the_rewrite_unloaded(tmp_path: Path) -> None:
    # The rewrite killed before `reread` (seed 69401), recovered with its undo ops; then
    # `undo` in a process of its own, killed before its restore of the file: the file
    # still says autorestart=false and supervisord still runs autorestart=true. BEFORE:
    # `undo` marks the action undone before its first op, the kill leaves the mark, and
    # the terminate read it as "the files are back": `ok`.
    db, remedy, target = _sup_remedy(tmp_path, Effects())
    conf = tmp_path / "supervisord.conf"
    _killed_disable(remedy, target, "effects:write:done", 1_800_000_000.0)
    assert "autorestart=false" in conf.read_text()
    db.close()
    d = restart(tmp_path)
    [act] = d.db.actions()
    assert act.undo is not None and act.undo[0]["op"] == "restore_file"  # type: ignore[index]
    d.db.close()
    out = run_cli(
        "undo", str(act.id), "--state-dir", str(tmp_path / "state"),
        env={"ROGUE_WATCHDOG_FAULT": "effects:write:intent"},
    )  # fmt: skip
    assert out.returncode == -9, out.stdout + out.stderr
    assert "autorestart=false" in conf.read_text()  # not restored
    db, remedy, _target = _sup_remedy(tmp_path)  # the file as the killed undo left it
    aid, _res = remedy.terminate(target, 1_800_000_010.0, dry_run=True)
    done = db.action(aid)
    assert done is not None
    assert done.details["may_return"]["restarts"].startswith(
        "restarts it: unknown, disable-source 1 left supervisorctl -c "
    )


@pytest.mark.parametrize(("outcome", "back"), [("ok", True), ("partial", False), ("failed", False)])
def test_only_an_undo_that_finished_ok_puts_the_settings_back(
    tmp_path: Path, outcome: str, back: bool
) -> None:
    # The undo's row as `undo` finishes it (the action stays marked undone only when ok;
    # a row marked by an older version may keep the mark whatever the outcome).
    db, remedy, target = _sup_remedy(tmp_path)
    _killed_disable(remedy, target, "effects:write:done", 1_800_000_000.0)
    db.record_action("root", "undo", "action 1", outcome, {"undid": 1}, 1_800_000_005.0)
    db.mark_undone(1, 1_800_000_005.0)
    aid, _res = remedy.terminate(target, 1_800_000_010.0, dry_run=True)
    act = db.action(aid)
    assert act is not None
    assert ("may_return" not in act.details) is back


@pytest.mark.parametrize(
    ("op", "detail", "said"),
    [
        (
            "rename",
            {"from": "/etc/cron.d/a\nb", "to": "/x\x1b[2J"},
            "rename $'/etc/cron.d/a\\nb' to $'/x\\x1b[2J'",
        ),
        (
            "backup",
            {"from": "/etc/cron.d/x; rm -rf /", "to": "/b"},
            "back up '/etc/cron.d/x; rm -rf /' to /b",
        ),
        ("write", {"path": "/etc/sup.d/t\n.conf"}, "rewrite $'/etc/sup.d/t\\n.conf'"),
        ("remove", {"path": "/etc/cron.d/x y"}, "remove '/etc/cron.d/x y'"),
        ("touch", {}, "touch"),
    ],
)
def test_a_steps_paths_are_quoted_in_its_words(op: str, detail: dict[str, str], said: str) -> None:
    # A file name is host text: a newline or an escape in it never breaks the recovery's
    # line (`actions`, the interruption's finding) or reads as the product's own words.
    step = ActionStep(1, 1, 0.0, op, "done", detail, None)
    assert describe_step(step) == said

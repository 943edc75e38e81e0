"""``allowlist suggest`` and ``diff`` never propose silently what rogue-watchdog acted
against (issue 33, fresh user D item 1).

After `disable-source` (action 1), `terminate` (action 2) and `undo 1` (action 3),
`allowlist suggest --since 7d --output candidate.yaml` wrote the cron ghost as
`- name: cron-legacy-retrain-1` with no word of the three actions, and `allowlist diff`
listed its runs `rogue -> sanctioned` with no suspect line; a run seen before the
learning period began was counted among its runs.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest
import structlog

from rogue_watchdog.cli import main
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import LEARNING_STARTED
from rogue_watchdog.model import CronOrigin
from rogue_watchdog.policy.learn import acted_notes, candidate_count, group_runs, suggest
from rogue_watchdog.state import ActionRecord, RunRecord, StateDB


@pytest.fixture(autouse=True)
def _reset_logging() -> None:
    yield
    structlog.reset_defaults()


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def _ghost(tmp_path: Path) -> tuple[Path, str, CronOrigin, list[str], float]:
    """The sandbox's cron ghost, its line active again (the undo put it back), its four
    runs a minute apart, the first before the learning period began; and what
    rogue-watchdog did: A1 disable-source, A2 terminate, A3 undo of A1."""
    crond = tmp_path / "cron.d"
    crond.mkdir()
    script = str(tmp_path / "ghost" / "train_ghost.py")
    entry = f"* * * * * root /usr/bin/python3 {script} --epochs 40"
    (crond / "legacy-retrain").write_text(entry + "\n")
    origin = CronOrigin(
        file=str(crond / "legacy-retrain"), line=1, user="root", schedule="* * * * *", entry=entry
    )
    cmd = ["/usr/bin/python3", script, "--epochs", "40"]
    state = tmp_path / "state"
    db = StateDB(str(state))
    t0 = time.time() - 600
    for i in range(4):
        pid = 21178 + i
        rec = RunRecord(
            "sig-ghost", pid, pid * 10, "root", cmd, origin.to_json(), "rogue", None,
            t0 + 60 * i, t0 + 60 * i + 40,
        )  # fmt: skip
        db.record_run(rec, t0 + 60 * i + 40)
    details = {"root": [21179, 211790], "job": "train_ghost", "origin": origin.to_json()}
    db.record_action(
        "cli:root", "disable-source", f"{origin.file}:1", "ok", details, t0 + 70,
        signature="sig-ghost",
    )  # fmt: skip
    db.record_action(
        "cli:root", "terminate", "PID 21179 (1 process(es))", "ok", details, t0 + 75,
        signature="sig-ghost",
    )  # fmt: skip
    db.record_action("cli:root", "undo", "action 1", "ok", {"undid": 1}, t0 + 300)
    db.mark_undone(1, t0 + 300)
    # Learning began after the first run (the daemon started with this state dir then).
    db.set_meta(LEARNING_STARTED, repr(t0 + 60))
    db.close()
    return state, script, origin, cmd, t0


def test_suggest_does_not_propose_a_ghost_it_acted_against_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, script, origin, _cmd, t0 = _ghost(tmp_path)
    argv = ["allowlist", "suggest", "--state-dir", str(state), "--since", "7d"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    # Before: `sanctioned:` / `  - name: cron-legacy-retrain-1`, runs: 4, no action said.
    assert parse_config(out, "out.yaml").sanctioned == ()
    assert out.splitlines()[2] == (
        f"# the learning period began {_when(t0 + 60)}: 1 run(s) seen before it are not "
        "counted towards --min-runs"
    )
    assert (
        f"# seen, not proposed: `/usr/bin/python3 {script}` (user root, {origin.describe()}): "
        "rogue-watchdog disabled its source (action 1, undone by action 3) and terminated "
        "it (action 2); --include-acted proposes it all the same; runs: 3 (and 1 before "
        f"the learning period began, not counted), first seen {_when(t0 + 40)}, last seen "
        f"{_when(t0 + 220)}, GPU-hours 0.00, GPUs: none"
    ) in out.splitlines()
    # Asked for: proposed, the actions said above the rule.
    assert main([*argv, "--include-acted"]) == 0
    out = capsys.readouterr().out
    assert [r.name for r in parse_config(out, "out.yaml").sanctioned] == ["cron-legacy-retrain-1"]
    assert (
        "# suspect: rogue-watchdog disabled its source (action 1, undone by action 3) and "
        "terminated it (action 2); proposed by --include-acted"
    ) in out.splitlines()


def test_diff_marks_the_runs_of_a_job_it_acted_against_as_suspect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, _script, _origin, _cmd, _t0 = _ghost(tmp_path)
    argv = ["allowlist", "suggest", "--state-dir", str(state), "--since", "7d"]
    candidate = tmp_path / "candidate.yaml"
    assert main([*argv, "--include-acted", "--output", str(candidate)]) == 0
    capsys.readouterr()
    assert main(["allowlist", "diff", "--config", str(candidate), "--since", "7d"]) == 1
    out, err = capsys.readouterr()
    assert err == f"rogue-watchdog: reading {state}/state.db (daemon.state_dir of {candidate})\n"
    lines = out.splitlines()
    # Before: each run `rogue -> sanctioned ...: matches rule 'cron-legacy-retrain-1'`
    # and nothing under it.
    suspect = (
        "    suspect: rogue-watchdog disabled its source (action 1, undone by action 3) "
        "and terminated it (action 2)"
    )
    assert lines.count(suspect) == 4
    assert lines[-1] == (
        "4 run(s) would change verdict; 4 would be sanctioned although rogue-watchdog acted "
        "against its job or source (suspect: review before enforcing)"
    )


def _action(aid: int, kind: str, **kw: object) -> ActionRecord:
    base: dict[str, object] = {
        "id": aid, "created_at": 1.0, "actor": "enforcer", "kind": kind, "target": "t",
        "finding_id": None, "signature": None, "dry_run": False, "outcome": "ok",
        "details": {}, "undo": None, "undone_at": None,
    }  # fmt: skip
    base.update(kw)
    return ActionRecord(**base)  # type: ignore[arg-type]


def test_what_counts_as_acted_against() -> None:
    origin = CronOrigin(file="/etc/cron.d/g", line=1, user="root", schedule="* * * * *")
    other = CronOrigin(file="/etc/cron.d/g", line=2, user="root", schedule="* * * * *")
    run = RunRecord("s1", 5, 50, "root", ["/usr/bin/python3", "/g.py"], origin.to_json(),
                    "rogue", None, 1.0, 2.0)  # fmt: skip
    actions = [
        # A dry run and a refusal did nothing.
        _action(1, "terminate", signature="s1", dry_run=True, outcome="dry-run"),
        _action(2, "terminate", signature="s1", outcome="refused"),
        # Another line of the same file is another source.
        _action(3, "disable-source", details={"origin": other.to_json()}),
        # The same source, another run's signature: its source was acted against.
        _action(4, "disable-source", signature="s9", details={"origin": origin.to_json()}),
        # By root identity, and a gpu-deny undone by a person.
        _action(5, "gpu-deny", details={"root": [5, 50]}, undone_at=3.0),
    ]
    (g,) = group_runs([run])
    acted_notes([g], actions)
    assert g.acted == [
        "disabled its source (action 4)", "denied it the GPU (action 5, undone)",
    ]  # fmt: skip
    # Nothing acted: proposed as before (two runs).
    runs = [run, RunRecord("s1", 6, 60, "root", ["/usr/bin/python3", "/g.py"],
                           origin.to_json(), "rogue", None, 3.0, 4.0)]  # fmt: skip
    assert [g.rule for g in suggest(runs, 0.0).proposed] == ["cron-g-1"]
    assert suggest(runs, 0.0, actions=actions).proposed == []
    # `status`'s "N candidate rules" counts as `suggest` proposes.
    assert (candidate_count(runs, 0.0), candidate_count(runs, 0.0, actions)) == (1, 0)


def test_an_action_on_a_run_of_no_source_is_said_of_that_run_only() -> None:
    # Unknown and orphan origins pin no source: all of them had the same key, so a
    # terminate of the fresh user's own `train.py` was said of other people's test runs
    # ("rogue-watchdog terminated it (action 6)" on 80 groups).
    from rogue_watchdog.model import Origin, OrphanOrigin

    mine = RunRecord("s-mine", 7, 70, "root", ["python3", "train.py", "3608"],
                     Origin().to_json(), "rogue", None, 1.0, 2.0)  # fmt: skip
    theirs = RunRecord("s-theirs", 8, 80, "root", ["python3", "/x/train_probe.py"],
                       Origin().to_json(), "rogue", None, 1.0, 2.0)  # fmt: skip
    orphan = RunRecord("s-orphan", 9, 90, "root", ["python3", "/y/train_bashc.py"],
                       OrphanOrigin().to_json(), "rogue", None, 1.0, 2.0)  # fmt: skip
    actions = [
        _action(6, "terminate", signature="s-mine",
                details={"root": [7, 70], "origin": Origin().to_json()}),
        _action(7, "terminate", signature="s-gone",
                details={"root": [99, 990], "origin": OrphanOrigin().to_json()}),
    ]  # fmt: skip
    groups = group_runs([mine, theirs, orphan])
    acted_notes(groups, actions)
    said = {g.runs[0].signature: g.acted for g in groups}
    assert said == {"s-mine": ["terminated it (action 6)"], "s-theirs": [], "s-orphan": []}


def _ghost_seen_while_off(tmp_path: Path) -> tuple[Path, CronOrigin, CronOrigin]:
    """The ghost's state (:func:`_ghost`) with its latest two runs recorded while its
    line was off (A1 until A3): the state directory, the origin, the origin as disabled."""
    import dataclasses

    state, _script, origin, cmd, t0 = _ghost(tmp_path)
    off = dataclasses.replace(origin, entry_state="disabled")
    db = StateDB(str(state))
    for i in range(4, 6):
        pid = 21178 + i
        rec = RunRecord(
            "sig-ghost", pid, pid * 10, "root", cmd, off.to_json(), "rogue", None,
            t0 + 60 * i, t0 + 60 * i + 40,
        )  # fmt: skip
        db.record_run(rec, t0 + 60 * i + 40)
    db.close()
    return state, origin, off


def test_diff_names_a_line_put_back_by_undo_as_it_stands_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fresh user (issue 33's sandbox): after `disable-source` and `undo`, `allowlist diff`
    printed `(user root, cron FILE:1 (* * * * *), entry since disabled): matches rule …`
    above `suspect: … (action 1, undone by action 3)`: the runs seen while the line was
    off were recorded `disabled`, and the diff repeated that as a claim about now. The
    line reads as it stands when the diff runs: live again, then off again."""
    state, origin, off = _ghost_seen_while_off(tmp_path)
    assert off.describe() == f"{origin.describe()}, entry since disabled"
    candidate = tmp_path / "candidate.yaml"
    argv = ["allowlist", "suggest", "--state-dir", str(state), "--since", "7d"]
    assert main([*argv, "--include-acted", "--output", str(candidate)]) == 0
    capsys.readouterr()
    diff = ["allowlist", "diff", "--config", str(candidate), "--since", "7d"]
    assert main(diff) == 1
    runs = [line for line in capsys.readouterr().out.splitlines() if " -> sanctioned: " in line]
    assert len(runs) == 6, runs
    # Before: the last two ended `(user root, cron …:1 (* * * * *), entry since disabled)`.
    assert all(
        line.endswith(f"(user root, {origin.describe()}): matches rule 'cron-legacy-retrain-1'")
        for line in runs
    ), runs
    # Off again now: every run says so, as the line stands.
    tab = Path(origin.file)
    tab.write_text("#" + tab.read_text())
    assert main(diff) == 1
    runs = [line for line in capsys.readouterr().out.splitlines() if " -> sanctioned: " in line]
    assert len(runs) == 6 and all(
        line.endswith(
            f"(user root, {origin.describe()}, entry since disabled): matches rule "
            "'cron-legacy-retrain-1'"
        )
        for line in runs
    ), runs


def test_report_names_a_line_put_back_by_undo_as_it_stands_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fresh user's first day: `report`'s per-origin row (named by its latest run) said
    `cron FILE:1 (* * * * *), entry since disabled` of the ghost's line that `undo` had
    put back, as `allowlist diff` did before. It reads the line as `diff` does (one
    reading, :func:`rogue_watchdog.policy.learn.reader_now`): live again, then off again."""
    import json

    state, origin, _off = _ghost_seen_while_off(tmp_path)
    argv = ["report", "--state-dir", str(state), "--since", "7d"]

    def names() -> tuple[list[str], str, str]:
        assert main([*argv, "--format", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert main(argv) == 0
        text = capsys.readouterr().out
        assert main([*argv, "--format", "html"]) == 0
        return [row["name"] for row in doc["by_origin"]], text, capsys.readouterr().out

    rows, text, page = names()
    # Before: `cron …/legacy-retrain:1 (* * * * *), entry since disabled`.
    assert rows == [origin.describe()]
    assert "since disabled" not in text and "since disabled" not in page
    tab = Path(origin.file)
    tab.write_text("#" + tab.read_text())
    rows, text, page = names()
    assert rows == [f"{origin.describe()}, entry since disabled"]
    assert "entry since disabled" in page


def test_report_reads_a_line_where_its_config_says_crontabs_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A daemon whose ``paths.cron_d`` is not ``/etc/cron.d`` (a sandbox, a container
    reading the host's) recorded a run of a line in it while the line was off; ``undo``
    put it back. ``report --config`` read the line with the built-in paths, so the file,
    named like a user (``daemon``) and not theirs, was taken for that user's crontab,
    one cron refuses: the row said ``entry since ignored`` of a live line."""
    import dataclasses
    import json
    import os
    import pwd

    try:
        user = pwd.getpwnam("daemon")
    except KeyError:
        pytest.skip("no user named daemon on this host")
    crond = tmp_path / "cron.d"
    crond.mkdir()
    tab = crond / "daemon"
    entry = "* * * * * root /usr/bin/python3 /srv/train.py"
    tab.write_text(entry + "\n")
    os.chmod(tab, 0o644)
    if tab.stat().st_uid == user.pw_uid:
        pytest.skip("the test's files belong to the user daemon")
    origin = CronOrigin(file=str(tab), line=1, user="root", schedule="* * * * *", entry=entry)
    off = dataclasses.replace(origin, entry_state="disabled")
    state = tmp_path / "state"
    db = StateDB(str(state))
    t0 = time.time() - 600
    cmd = ["/usr/bin/python3", "/srv/train.py"]
    db.record_run(
        RunRecord("sig", 4242, 42420, "root", cmd, off.to_json(), "rogue", None, t0, t0 + 40),
        t0 + 40,
    )
    db.close()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"paths: {{cron_d: '{crond}'}}\ndaemon: {{state_dir: '{state}'}}\n")
    assert main(["report", "--config", str(cfg), "--since", "7d", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in doc["by_origin"]] == [origin.describe()]

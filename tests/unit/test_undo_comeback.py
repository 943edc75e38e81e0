"""A job back because an operator undid ``disable-source``: one finding that names the undo.

Real processes and a real state database: the ghost runs, is disabled and terminated,
the disabling is undone (the rows `rogue-watchdog undo` writes), and the ghost's next run
starts. Before: three findings (rogue-job, respawned, a critical remediation-failed),
none naming the undo.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import pytest

from rogue_watchdog.actions.enforcer import build_enforcers
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from tests.conftest import Spawned, poll
from tests.unit.test_printed_commands import unconfigured_commands

T0 = 2_000_000.0


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def _ghost(spawned: Spawned, script: Path) -> int:
    pid = spawned.start([sys.executable, str(script)]).pid

    def running() -> bool:  # exec'd (a fixed sleep was too short under load)
        try:
            return str(script).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False

    poll("the ghost to exec", running, 10, 0.01)
    return pid


def _opened(d: Daemon, pid: int) -> list[tuple[str, str]]:
    rows = d.db.conn.execute(
        "SELECT kind, severity FROM findings WHERE root_pid=? AND resolved_at IS NULL ORDER BY id",
        (pid,),
    ).fetchall()
    return [(k, s) for k, s in rows]


@pytest.mark.parametrize("undone", [True, False])
def test_the_next_run_after_an_undo_is_one_finding_naming_it(
    spawned: Spawned, tmp_path: Path, undone: bool
) -> None:
    cfg = parse_config(
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]}}\n",
        f"{tmp_path}/config.yaml",
    )
    d = Daemon(cfg, None)
    enf = build_enforcers(cfg, d.db)
    d.sources, d.enforcers = list(enf), list(enf)
    script = tmp_path / "train_ghost.py"
    script.write_text("import time\ntime.sleep(120)\n")
    first = _ghost(spawned, script)
    d.tick(T0)
    [sig] = {s for p, s in d.tracker.first_signature.items() if p[0] == first}
    start = next(j.start_ticks for j in d.last.result.jobs if j.root_pid == first)  # type: ignore[union-attr]
    disable = d.db.record_action(
        "cli:root", "disable-source", "cron /etc/cron.d/ghost:3", "ok",
        {"source": "cron /etc/cron.d/ghost:3", "done": ["commented out line 3"]}, T0 + 10,
        signature=sig, undo=[{"op": "rename", "from": "/x", "to": "/y"}],
    )  # fmt: skip
    d.db.record_action(
        "cli:root", "terminate", f"PID {first} (1 process(es))", "ok",
        {"root": [first, start], "procs": []}, T0 + 10, signature=sig,
    )  # fmt: skip
    spawned.procs[-1].kill()
    spawned.procs[-1].wait()
    d.tick(T0 + 15)  # gone
    undo = None
    if undone:
        d.db.mark_undone(disable, T0 + 30)
        undo = d.db.record_action(
            "cli:root", "undo", f"action {disable}", "ok",
            {"undid": disable, "done": [], "error": None}, T0 + 30, signature=sig,
        )  # fmt: skip
    second = _ghost(spawned, script)
    d.tick(T0 + 60)  # its next run
    if not undone:  # the remediation watch as before: the fix did not hold
        # All three recorded; one page, the return's respawned, at the loudest of them
        # (issue 35, one incident, one page: it is filed first, the others fold into it).
        assert _opened(d, second) == [
            ("respawned", "critical"), ("rogue-job", "high"), ("remediation-failed", "critical"),
        ]  # fmt: skip
        # Paged once its settle ends with the return still running (session h: a return
        # waits the settle like a job's first page; before, at the tick that saw it).
        d.tick(T0 + 60 + d.config.alerts.settle_s)
        paged = d.db.conn.execute(
            "SELECT f.kind FROM deliveries d JOIN findings f ON f.id = d.finding_id"
            " WHERE f.root_pid=? AND d.event = 'open'", (second,),
        ).fetchall()  # fmt: skip
        assert [k for (k,) in paged] == ["respawned"]
        return
    assert _opened(d, second) == [("rogue-job", "high")]
    [f] = [f for f in d.db.open_findings() if f.root_pid == second]
    # Fresh user D (issue 33): `rogue-watchdog undo 1`, without the daemon's --config:
    # pasted, `no action 1 in /var/lib/rogue-watchdog/state.db` (rc 2).
    assert not unconfigured_commands(f.message, f" --config {tmp_path}/config.yaml")
    assert f.message.endswith(
        f"; its source was re-enabled by ``rogue-watchdog undo --config {tmp_path}/config.yaml "
        f"{disable}`` (action {undo}) at "
        f"{_when(T0 + 30)} by cli:root, undoing disable-source action {disable}: an "
        "operator's undo, not a failed remediation"
    )
    assert f.details["source_undo"] == {"undo_action": undo, "undid": disable}
    d.tick(T0 + 65)  # still named a tick later, still one finding
    assert _opened(d, second) == [("rogue-job", "high")]
    [f] = [f for f in d.db.open_findings() if f.root_pid == second]
    assert "re-enabled by ``rogue-watchdog undo" in f.message
    sent = d.db.conn.execute(
        "SELECT COUNT(*) FROM deliveries d JOIN findings f ON f.id = d.finding_id"
        " WHERE f.root_pid=?", (second,),
    ).fetchone()[0]  # fmt: skip
    assert sent == 1  # one alert

    # The line put back runs every minute: each run ends by itself and the next starts.
    # The loop is one finding, as for any periodic job (the new user's hour, issue 33:
    # after an undo each run opened, and paged, a rogue-job of its own: the return was
    # never computed once an undo had re-enabled the source).
    pending: dict[int, int] = {}

    def exits() -> dict[int, int]:
        out = dict(pending)
        pending.clear()
        return out

    d.exit_statuses = exits
    spawned.procs[-1].kill()
    spawned.procs[-1].wait()
    pending[second] = 0  # what the proc connector reports for a run that exited by itself
    d.tick(T0 + 101)
    third = _ghost(spawned, script)
    d.tick(T0 + 120)
    assert any(j.root_pid == third for j in d.last.result.jobs)  # type: ignore[union-attr]
    mine = [x for x in d.db.open_findings() if x.kind == "rogue-job" and sig in x.fingerprint]
    assert [x.id for x in mine] == [f.id]  # the second run's finding goes on as the loop's
    assert mine[0].details["periodic"]["runs"] == 2
    opened = d.db.conn.execute(
        "SELECT COUNT(*) FROM deliveries WHERE event = 'open' AND finding_id IN"
        " (SELECT id FROM findings WHERE kind = 'rogue-job' AND id >= ? AND fingerprint LIKE ?)",
        (f.id, f"%{sig}"),
    ).fetchone()[0]  # fmt: skip
    assert opened == 1  # the second run's open; none for the third

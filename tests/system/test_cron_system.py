"""Real cron starts fake trainers; the cron resolver (and ``scan``) must name the line.

One module-scoped cron session installs four entries at once so they fire in the same
minute: an /etc/cron.d line, a user crontab line, a run-parts chain and a daemonised job
(``setsid ... &``: its shell exits and it is re-parented to PID 1).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.lineage.cron import CronResolver
from rogue_watchdog.lineage.crontab import DISABLE_PREFIX
from rogue_watchdog.model import Origin
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import need, need_program, need_root, run_cli
from tests.system.cronharness import PYTHON, CronHarness

pytestmark = pytest.mark.system


@dataclass
class Setup:
    harness: CronHarness
    cron_d: Path
    user: str
    spool: Path
    direct: Path
    user_trainer: Path
    run_parts_trainer: Path
    script: Path
    orphan: Path
    pids: dict[Path, int]
    lines: list[str]


@pytest.fixture(scope="module")
def cronrun() -> Iterator[Setup]:
    need_root()
    need_program("cron", "crontab", "useradd", "userdel", "run-parts", "setsid", "pgrep")
    need(Path(PYTHON).exists(), f"needs {PYTHON}")
    h = CronHarness()
    try:
        h.ensure_cron()
        direct = h.trainer("direct")
        user_trainer = h.trainer("user")
        run_parts_trainer = h.trainer("runparts")
        orphan = h.trainer("orphan")
        folder, script = h.run_parts_dir(run_parts_trainer)
        lines = [
            "# rogue-watchdog system test: fake trainers started by real cron",
            'MAILTO=""',
            "SHELL=/bin/sh",
            f"* * * * * root {PYTHON} {direct}",
            f"* * * * * root run-parts {folder}",
            f"* * * * * root setsid {PYTHON} {orphan} >/dev/null 2>&1 &",
        ]
        cron_d = h.add_cron_d(lines)
        user = h.add_user()
        spool = h.install_user_crontab(
            user, ["# throwaway user's crontab", 'MAILTO=""', f"* * * * * {PYTHON} {user_trainer}"]
        )
        wait_s = h.seconds_to_fire() + 12
        pids = h.wait_for([direct, user_trainer, run_parts_trainer, orphan], wait_s)
        yield Setup(
            h, cron_d, user, spool, direct, user_trainer, run_parts_trainer, script, orphan,
            pids, lines,
        )  # fmt: skip
    finally:
        h.close()


def _resolve(pid: int) -> tuple[Origin | None, datetime]:
    table = ProcessTable()
    table.refresh()
    now = datetime.now().astimezone()
    ctx = ResolveContext(table=table, now=now)
    return CronResolver().resolve(table.ancestors(pid), ctx), now


def _assert_next_minute(origin: Origin, now: datetime) -> None:
    nxt = datetime.fromisoformat(str(origin.fields["next_run"]))
    assert nxt.tzinfo is not None
    assert 0 < (nxt - now).total_seconds() <= 60
    assert nxt.second == 0


def test_cron_d_entry(cronrun: Setup) -> None:
    origin, now = _resolve(cronrun.pids[cronrun.direct])
    assert origin is not None and origin.kind == "cron"
    assert origin.fields["file"] == str(cronrun.cron_d)
    assert origin.fields["line"] == 4
    assert origin.fields["entry"] == cronrun.lines[3]
    assert origin.fields["user"] == "root"
    assert origin.fields["schedule"] == "* * * * *"
    _assert_next_minute(origin, now)
    assert origin.remediation == f"sed -i '4s/^/{DISABLE_PREFIX}/' {cronrun.cron_d}"


def test_user_crontab_entry(cronrun: Setup) -> None:
    origin, now = _resolve(cronrun.pids[cronrun.user_trainer])
    assert origin is not None and origin.kind == "cron"
    assert origin.fields["file"] == str(cronrun.spool)
    # crontab(1) put 3 header lines above the 3 we installed.
    assert origin.fields["line"] == 6
    assert origin.fields["user"] == cronrun.user
    assert origin.fields["entry"] == f"* * * * * {PYTHON} {cronrun.user_trainer}"
    _assert_next_minute(origin, now)
    assert origin.remediation == (
        f"crontab -u {cronrun.user} -l | sed '3s/^/{DISABLE_PREFIX}/' | crontab -u {cronrun.user} -"
    )


def test_run_parts_chain(cronrun: Setup) -> None:
    origin, now = _resolve(cronrun.pids[cronrun.run_parts_trainer])
    assert origin is not None and origin.kind == "cron"
    assert origin.fields["file"] == str(cronrun.cron_d)
    assert origin.fields["line"] == 5
    assert origin.fields["script"] == str(cronrun.script)
    assert origin.remediation == f"chmod -x {cronrun.script}"
    _assert_next_minute(origin, now)


def test_daemonised_job_still_cron(cronrun: Setup) -> None:
    pid = cronrun.pids[cronrun.orphan]
    table = ProcessTable()
    table.refresh()
    lineage = table.ancestors(pid)
    assert [p.pid for p in lineage[1:]] == [1], "precondition: re-parented to PID 1"
    origin, now = _resolve(pid)
    assert origin is not None and origin.kind == "cron"
    assert origin.fields["file"] == str(cronrun.cron_d)
    assert origin.fields["line"] == 6
    assert any("re-parented to PID 1" in e for e in origin.evidence)
    assert any("after the entry fired" in e for e in origin.evidence)
    _assert_next_minute(origin, now)


def test_scan_reports_all_four_rogue_with_cron_origin(cronrun: Setup, tmp_path: Path) -> None:
    cfg = tmp_path / "watchdog.yaml"
    cfg.write_text("nvml:\n  enabled: false\n")
    done = run_cli("scan", "--json", "--config", str(cfg))
    assert done.returncode in (0, 1), done.stderr
    doc = json.loads(done.stdout)
    expected = {
        cronrun.direct: (str(cronrun.cron_d), 4),
        cronrun.user_trainer: (str(cronrun.spool), 6),
        cronrun.run_parts_trainer: (str(cronrun.cron_d), 5),
        cronrun.orphan: (str(cronrun.cron_d), 6),
    }
    for trainer, (file, line) in expected.items():
        jobs = [j for j in doc["jobs"] if j["cmdline"] == [PYTHON, str(trainer)]]
        assert jobs, f"scan did not report {trainer}"
        for job in jobs:
            assert job["verdict"] == "rogue"
            assert job["origin"]["kind"] == "cron"
            assert (job["origin"]["file"], job["origin"]["line"]) == (file, line)


def test_same_script_from_cron_is_rogue_when_the_rule_pins_a_unit(
    cronrun: Setup, tmp_path: Path
) -> None:
    # The motivating incident: the ghost runs the pipeline's own script, from cron.
    cfg = tmp_path / "watchdog.yaml"
    cfg.write_text(
        "nvml: {enabled: false}\n"
        "sanctioned:\n"
        "  - name: pipeline\n"
        f"    cmdline: '{PYTHON} {cronrun.direct}'\n"
        "    origin: {systemd_unit: train-pipeline.service}\n"
        "  - name: user-cron\n"
        f"    cmdline: '{PYTHON} {cronrun.user_trainer}'\n"
        f"    origin: {{cron_file: '{cronrun.spool}', cron_line: 6}}\n"
    )
    done = run_cli("scan", "--json", "--config", str(cfg))
    doc = json.loads(done.stdout)
    ghost = [j for j in doc["jobs"] if j["cmdline"] == [PYTHON, str(cronrun.direct)]]
    assert ghost and all(j["verdict"] == "rogue" for j in ghost)
    assert ghost[0]["reason"] == (
        "not sanctioned: rule 'pipeline' matches the command line but origin must be "
        "systemd unit 'train-pipeline.service'"
    )
    pinned = [j for j in doc["jobs"] if j["cmdline"] == [PYTHON, str(cronrun.user_trainer)]]
    assert pinned and all((j["verdict"], j["rule"]) == ("sanctioned", "user-cron") for j in pinned)
    finding = next(f for f in doc["findings"] if f["root_pid"] == ghost[0]["root_pid"])
    assert finding["kind"] == "rogue-job"
    assert f"from cron {cronrun.cron_d}:4 (* * * * *)" in finding["message"]

"""Trust IV cases 1, 3 and 5 with real Debian cron: a sanctioned pipeline line
(``max_instances: 1``) whose runs overlap (a 300 s run every minute).

1. The excess run is stopped as a job, newest first, and the pipeline's own line is
   never a target: not in the finding, ``scan`` (table and JSON), ``explain``,
   ``disable-source --dry-run``, nor the daemon's automatic source disabling; the
   sanctioned run has no remediation at all.
5. The excess finding's id, its PIDs and every action on it name the excess run, never
   the sanctioned one.
3. Adding ``flock -n`` to the line while the sanctioned run is alive: the run stays
   sanctioned (scan, explain, the daemon, a restarted daemon), and an info finding says
   the entry changed.

Wall time: two cron minutes (about 2 to 2.5 minutes).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.config import load_config, parse_config
from rogue_watchdog.daemon.loop import Daemon
from tests.conftest import need, need_program, need_root, poll, run_cli
from tests.system.cronharness import PYTHON, CronHarness

pytestmark = pytest.mark.system


def cli(config: Path, *args: str) -> tuple[int, str]:
    res = run_cli(*args, "--config", str(config), timeout=120)
    return res.returncode, res.stdout + res.stderr


def scan_json(config: Path) -> dict[int, dict[str, Any]]:
    res = run_cli("scan", "--json", "--config", str(config), timeout=120)
    return {j["root_pid"]: j for j in json.loads(res.stdout)["jobs"]}


def open_findings(d: Daemon, pid: int) -> list[tuple[int, str, str]]:
    return [(f.id, f.kind, f.severity) for f in d.db.open_findings() if f.root_pid == pid]


def _rows_of(table: str, needle: str) -> str:
    """The rows of a scan table (a job's line and its indented lines) that name ``needle``."""
    rows: list[list[str]] = []
    for line in table.splitlines():
        if line.startswith("    ") and rows:
            rows[-1].append(line)
        else:
            rows.append([line])
    return "\n".join("\n".join(r) for r in rows if any(needle in x for x in r))


def test_overlapping_runs_of_the_sanctioned_line(tmp_path: Path) -> None:
    need_root()
    need_program("cron", "pgrep", "flock")
    need(Path(PYTHON).exists(), f"needs {PYTHON}")
    h = CronHarness()
    try:
        h.ensure_cron()
        trainer = h.trainer("pipe")
        trainer.write_text("import time\ntime.sleep(300)\n")
        line = f"* * * * * root {PYTHON} {trainer}"
        cron = h.add_cron_d(['MAILTO=""', line])
        config = h.sandbox / "config.yaml"
        config.write_text(
            "nvml: {enabled: false}\n"
            f"training: {{device_glob: '{h.sandbox}/nodev[0-9]*'}}\n"
            f"daemon: {{state_dir: '{h.sandbox}/state', socket: '{h.sandbox}/s.sock'}}\n"
            "sanctioned:\n"
            "  - name: pipeline\n"
            f"    cmdline: '{PYTHON} {trainer}'\n"
            "    user: root\n"
            f"    origin: {{cron_file: '{cron}', cron_line: 2}}\n"
            "    max_instances: 1\n"
        )
        d = Daemon(load_config(str(config)), str(config))
        first = h.wait_for([trainer], h.seconds_to_fire() + 30)[trainer]
        d.tick(time.time())
        (a,) = [j for j in d.last.result.jobs if j.root_pid == first]  # type: ignore[union-attr]
        assert (a.verdict, a.rule) == ("sanctioned", "pipeline")

        # The next minute: a second run while the first still runs.
        second = poll("the second run", lambda: next(
            (p for p in h.ours(trainer) if p != first), None), 75)  # fmt: skip
        d.tick(time.time())
        jobs = {j.root_pid: j for j in d.last.result.jobs}  # type: ignore[union-attr]
        assert (jobs[first].verdict, jobs[second].verdict) == ("sanctioned", "excess")
        where = f"cron {cron}:2 (* * * * *)"
        refused = (
            f"{where} is the origin of sanctioned rule 'pipeline' (its job PID {first} runs "
            "from it): never disabled; this run is one more than rule 'pipeline' allows "
            "(max_instances 1): stop it as a job (newest run first); to keep runs from "
            "overlapping, run the line's command under `flock -n LOCKFILE` so a run never "
            "starts while one is running, or raise max_instances"
        )
        assert jobs[second].advice.source_refused == refused
        (excess,) = [f for f in d.db.open_findings() if f.kind == "excess-instances"]
        assert excess.root_pid == second
        assert excess.message.endswith(
            f"; its source is not disabled: {refused}; to stop this run: "
            f"rogue-watchdog terminate --config {config} {second}"
        )
        assert "sed " not in excess.message and "disable-source" not in excess.message
        assert open_findings(d, first) == []

        # scan --json: no field names the line as something to act on.
        doc = scan_json(config)
        assert doc[first]["origin"]["remediation"] is None
        assert doc[first]["advice"]["refused"] == "the job is sanctioned (rule 'pipeline')"
        assert doc[second]["origin"]["remediation"] is None
        assert doc[second]["advice"]["disable"] is False
        assert doc[second]["advice"]["source_refused"] == refused
        code, table = cli(config, "scan")
        # This test's jobs only: other suites on this host run rogue cron jobs of their own.
        ours = _rows_of(table, str(trainer))
        assert ours and "disable-source" not in ours and "sed -i" not in ours
        code, text = cli(config, "explain", str(second))
        assert f"Remediation: its source is not disabled: {refused}" in text.replace("\n", " ")
        code, text = cli(config, "explain", str(first))
        assert "Remediation: none: the job is sanctioned (rule 'pipeline')" in text

        # disable-source, by PID and by the finding's id: refused, naming the excess run.
        for target in (str(second), f"F{excess.id}"):
            code, text = cli(config, "disable-source", target, "--dry-run")
            assert code == 1, text
            assert text.startswith(
                f"cannot disable the source of excess job PID {second} `{PYTHON} {trainer}`: "
                f"{where} is the origin of sanctioned rule 'pipeline'"
            ), text
            code, text = cli(config, "disable-source", target, "--dry-run", "--force")
            assert code == 1 and "never disabled" in text, text
        code, text = cli(config, "terminate", f"F{excess.id}", "--dry-run")
        assert code == 0, text
        assert f"would terminate excess job PID {second} " in text
        assert f"PID {first} " not in text

        # The daemon in terminate mode with automatic source disabling: the excess run is
        # stopped as a job; the source is never touched; the sanctioned run lives. The
        # mode is a rule for the sandbox's jobs: the daemon sees the whole host, whose
        # other rogue-looking processes stay observed.
        before = cron.read_bytes()
        d.db.close()
        enforcing = parse_config(
            config.read_text() + "enforcement: {auto_disable_source: true, grace_s: 2, rules:"
            f" [{{name: mine, cmdline: '*{h.sandbox}/*', mode: terminate}}]}}\n",
            str(config),
        )
        enf = Enforcer(enforcing, Daemon(enforcing, str(config)).db)
        d = Daemon(enforcing, str(config), sources=[enf], enforcers=[enf])
        d.tick(time.time())
        acted = [(r.kind, r.target, r.outcome) for r in d.db.actions()]
        assert [k for k, _, _ in acted] == ["terminate"], acted
        assert acted[0][1].startswith(f"PID {second} ")
        assert cron.read_bytes() == before
        poll("the excess run to exit", lambda: second not in h.ours(trainer) or None, 15)
        assert first in h.ours(trainer)

        # Case 3: the line gets `flock -n` while the sanctioned run is alive.
        lock = h.sandbox / "pipe.lock"
        cron.write_text(f'MAILTO=""\n* * * * * root flock -n {lock} {PYTHON} {trainer}\n')
        os.utime(cron.parent)
        d.tick(time.time())
        jobs = {j.root_pid: j for j in d.last.result.jobs}  # type: ignore[union-attr]
        assert (jobs[first].verdict, jobs[first].rule) == ("sanctioned", "pipeline")
        assert jobs[first].reason.startswith(
            "sanctioned by rule 'pipeline' when it started; kept for its life"
        )
        kinds = [k for _, k, _ in open_findings(d, first)]
        assert kinds == ["sanctioned-changed"]
        assert [s for _, _, s in open_findings(d, first)] == ["info"]
        doc = scan_json(config)  # a one-shot scan reads what the daemon recorded
        assert doc[first]["verdict"] == "sanctioned"
        code, text = cli(config, "explain", str(first))
        assert "verdict sanctioned" in text and "rogue-watchdog terminate" not in text
        d.db.close()
        restarted = Daemon(load_config(str(config)), str(config))
        restarted.tick(time.time())
        jobs = {j.root_pid: j for j in restarted.last.result.jobs}  # type: ignore[union-attr]
        assert jobs[first].verdict == "sanctioned"
        assert [k for _, k, _ in open_findings(restarted, first)] == ["sanctioned-changed"]
        restarted.db.close()
    finally:
        h.close()

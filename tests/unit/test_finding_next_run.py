"""Finding messages name no "next run" time: an open finding's text is kept (status,
reminders) long after such a time has passed. Before: ``..., next run
2026-12-06T02:00:00+00:00`` stayed in the text of a finding open for days."""

from __future__ import annotations

from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.tracking.jobs import respawned_finding
from rogue_watchdog.model import CronOrigin, Job
from rogue_watchdog.policy.findings import job_findings
from rogue_watchdog.policy.guard import protection, with_advice

CRON = CronOrigin(
    file="/etc/cron.d/legacy-retrain",
    line=4,
    schedule="0 2 * * 0",
    next_run="2026-12-06T02:00:00+00:00",
    remediation="sed -i '4s/^/# /' /etc/cron.d/legacy-retrain",
)


def _job() -> Job:
    job = Job(
        root_pid=4242, pids=[4242], user="alice",
        cmdline=("/usr/bin/python3", "/opt/legacy/train.py"), start_ticks=1,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[], origin=CRON, verdict="rogue",
        reason="not sanctioned",
    )  # fmt: skip
    [judged] = with_advice([job], protection([job], parse_config("", "c.yaml")))
    return judged


def test_a_rogue_job_finding_names_its_cron_line_but_no_next_run() -> None:
    [f] = job_findings([_job()])
    assert "next run" not in f.message
    assert f.message == (
        "rogue training job PID 4242, user alice, `/usr/bin/python3 /opt/legacy/train.py`, "
        "from cron /etc/cron.d/legacy-retrain:4 (0 2 * * 0); restarts it: on schedule, its "
        "cron line (0 2 * * 0); to stop the source: rogue-watchdog disable-source 4242 "
        "(backs up the cron.d file /etc/cron.d/legacy-retrain; the undo command it prints, "
        "with the action id, restores it), "
        "or by hand: "
        "sed -i '4s/^/# /' /etc/cron.d/legacy-retrain"
    )


def test_a_respawned_finding_names_no_next_run() -> None:
    f = respawned_finding(_job(), "sig", 1_000_000.0, 1_000_062.0)
    assert "next run" not in f.message
    assert ", started by cron /etc/cron.d/legacy-retrain:4 (0 2 * * 0)" in f.message
    # The machine-readable origin keeps what was known at the respawn.
    assert f.details["origin"]["next_run"] == "2026-12-06T02:00:00+00:00"

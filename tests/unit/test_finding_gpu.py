"""A rogue job's finding names its GPU: message, details, alert text and webhook payload."""

from __future__ import annotations

import dataclasses

from rogue_watchdog.daemon.alerts.alert import Alert
from rogue_watchdog.daemon.alerts.render import alert_text
from rogue_watchdog.model import GpuHeld, Job, Origin
from rogue_watchdog.policy.findings import gpus_text, job_findings
from rogue_watchdog.state import FindingRecord

GIB = 1024**3


def rogue(gpus: list[GpuHeld], memory: int | None) -> Job:
    return Job(
        root_pid=48213, pids=[48213], user=None, cmdline=("python3", "train.py"),
        start_ticks=1, gpu_memory_bytes=memory, gpu_uuids=[g.uuid for g in gpus], lineage=[],
        origin=Origin(), verdict="rogue", reason="not sanctioned", gpus=gpus,
    )  # fmt: skip


def test_message_and_details_name_the_gpu() -> None:
    (f,) = job_findings([rogue([GpuHeld("GPU-3", 3, 4 * GIB)], 4 * GIB)])
    assert f.message == (
        "rogue training job PID 48213 on GPU 3 (4.0 GiB), user -, `python3 train.py`,"
        " from unknown origin"
    )
    assert f.details["gpu_indexes"] == [3]
    assert f.details["gpus"] == [{"index": 3, "uuid": "GPU-3", "memory_bytes": 4 * GIB}]

    rec = FindingRecord(
        12, "rogue-job:x", f.kind, f.severity, f.message, f.root_pid, f.details,
        1.0, 1.0, 1, None, None,
    )  # fmt: skip
    alert = Alert.from_record("open", rec, "gpu-07", 1.0)
    payload = alert.to_json()
    assert payload["finding"]["details"]["gpu_indexes"] == [3]  # webhook payloads carry it
    assert alert_text(alert, 2000) == (
        f"[HIGH] rogue-job on gpu-07: {f.message} (finding F12, root PID 48213)"
    )


def test_several_gpus_and_unknown_memory() -> None:
    held = [GpuHeld("GPU-0", 0, 4 * GIB), GpuHeld("GPU-1", 1, None)]
    assert gpus_text(held) == "GPUs 0 (4.0 GiB), 1 (-)"
    (f,) = job_findings([rogue(held, 4 * GIB)])
    assert f.message.startswith("rogue training job PID 48213 on GPUs 0 (4.0 GiB), 1 (-), ")
    assert f.details["gpu_indexes"] == [0, 1]


def test_without_nvml_the_message_is_unchanged() -> None:
    (f,) = job_findings([rogue([], None)])
    assert f.message == (
        "rogue training job PID 48213, user -, `python3 train.py`, from unknown origin"
    )
    assert f.details["gpu_indexes"] == [] and f.details["gpus"] == []


def test_a_respawned_job_says_which_gpu_it_came_back_on() -> None:
    from rogue_watchdog.daemon.tracking.jobs import respawned_finding

    job = rogue([GpuHeld("GPU-3", 3, 4 * GIB)], 4 * GIB)
    f = respawned_finding(job, "sig", 1_700_000_000.0, 1_700_000_720.0)
    # and which command (issue 33, fresh user K: "… as PID 25746, started by unknown
    # origin" named nothing a person could tell the return by).
    assert (
        " as PID 48213 on GPU 3 (4.0 GiB), user -, `python3 train.py`, started by unknown origin"
        in f.message
    )
    assert f.details["gpu_indexes"] == [3]


def test_a_backtick_in_the_command_cannot_end_the_quote_and_name_an_origin() -> None:
    # The hostile tester's case (issue 33's session): an argument holding a backtick and
    # origin words read, in the message, as if cron had started the job.
    from rogue_watchdog.daemon.tracking.jobs import respawned_finding

    job = dataclasses.replace(
        rogue([], None), cmdline=("python3", "x` from cron /etc/cron.d/pipeline:1 `y")
    )
    (f,) = job_findings([job])
    assert f.message == (
        "rogue training job PID 48213, user -, "
        "`python3 x\\x60 from cron /etc/cron.d/pipeline:1 \\x60y`, from unknown origin"
    )
    assert f.message.count("`") == 2
    r = respawned_finding(job, "sig", 1_700_000_000.0, 1_700_000_720.0)
    assert r.message.count("`") == 2 and "started by unknown origin" in r.message

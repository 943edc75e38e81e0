"""Identifiers are never cut: a cut UUID, unit name or PID identifies nothing.

At 80 columns a real GPU UUID does not fit beside the GPU line; it is printed whole on a
line of its own. A unit name longer than its column, a long user name and a long word in
prose keep every character too: the line wraps or the column widens instead.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rogue_watchdog.cli.top import View, layout
from rogue_watchdog.daemon.status import status_gpu_lines
from rogue_watchdog.model import GpuHeld, GpuInfo, Job, NvmlStatus, ScanResult, SystemdOrigin
from rogue_watchdog.render import fit, gpu_lines, result_table

GIB = 1024**3
UUID = "GPU-00000000-0000-0000-0000-000000000000"
UNIT = "nightly-retrain-of-the-language-model-for-team-a.service"


def test_a_gpu_uuid_at_80_columns_gets_a_line_of_its_own() -> None:
    lines = gpu_lines("0", "NVIDIA H200", 5 * GIB, 140 * GIB, UUID, [("rogue", 4 * GIB)], 80)
    assert lines == [
        "  GPU 0  NVIDIA H200  5.0 GiB used of 140.0 GiB",
        f"    {UUID}",
        "    sanctioned 0 B, unsanctioned 4.0 GiB, not attributable 1.0 GiB",
    ]


def test_status_gpu_lines_keep_the_uuid_whole() -> None:
    doc = {
        "gpus": [{"index": 0, "name": "NVIDIA H200", "uuid": UUID,
                  "memory_used_bytes": 0, "memory_total_bytes": 140 * GIB}],
        "jobs": [],
    }  # fmt: skip
    assert f"    {UUID}" in status_gpu_lines(doc, 80)


def _result(user: str) -> ScanResult:
    job = Job(
        root_pid=4242,
        pids=[4242],
        user=user,
        cmdline=("/usr/bin/python3", "/srv/train.py"),
        start_ticks=1,
        gpu_memory_bytes=4 * GIB,
        gpu_uuids=[UUID],
        lineage=[],
        origin=SystemdOrigin(unit=UNIT),
        verdict="rogue",
        reason="not sanctioned",
        gpus=[GpuHeld(UUID, 0, 4 * GIB)],
    )
    return ScanResult(
        host="gpu-07",
        time=datetime(2027, 1, 15, 8, 0, tzinfo=UTC),
        duration_s=0.1,
        nvml=NvmlStatus(available=True, driver_version="550.54.15"),
        gpus=[GpuInfo(0, UUID, "NVIDIA H200", 140 * GIB, 5 * GIB)],
        jobs=[job],
        findings=[],
    )


def test_scan_table_keeps_unit_names_users_and_uuids_whole() -> None:
    user = "a-very-long-user-name"
    for width in (80, 120, 200):
        text = result_table(_result(user), width=width, colour=False)
        assert UUID in text, width
        assert any(UNIT in line for line in text.splitlines()), width
        assert f" {user} " in text, width
        assert "…" not in text.replace("…/", ""), width
    lines = result_table(_result(user), width=120, colour=False).splitlines()
    assert f"    from systemd unit {UNIT}" in lines


def test_prose_moves_a_word_whole_to_the_next_line_and_drops_nothing() -> None:
    assert fit(f"GPU 0 is {UUID} now", 48, "  ") == ["GPU 0 is", f"  {UUID} now"]
    # Longer than any line: a line of its own, whole (issue 33: a unit, a path or a
    # command broken across two lines is not one any more when pasted); the caller shows
    # it whole or cuts it visibly (top's panes: », ←/→).
    assert fit(f"unit {UNIT} failed", 40, "  ") == ["unit", f"  {UNIT}", "  failed"]


def test_top_keeps_users_origins_and_finding_ids_whole() -> None:
    doc = {
        "host": "gpu-07",
        "gpus": [{"index": 0, "name": "NVIDIA H200", "uuid": UUID,
                  "memory_used_bytes": 0, "memory_total_bytes": 140 * GIB}],
        "jobs": [{"root_pid": 4242, "user": "a-very-long-user-name", "verdict": "rogue",
                  "origin": f"systemd unit {UNIT}", "cmdline": ["python3", "train.py"],
                  "gpus": [{"index": 0, "uuid": UUID, "memory_bytes": GIB}]}],
        "findings": [{"id": 12, "severity": "high", "kind": "rogue-job",
                      "message": f"rogue job PID 4242 from systemd unit {UNIT} on {UUID}"}],
    }  # fmt: skip
    screen = "\n".join(layout(doc, "daemon (/run/rogue-watchdog/status.sock)", View(), 80, 40))
    for ident in (UUID, UNIT, "a-very-long-user-name", "/run/rogue-watchdog/status.sock"):
        assert ident in screen


def test_a_short_pid_list_says_how_many_it_leaves_out() -> None:
    from rogue_watchdog.actions.slurmsweep import _some_pids

    assert _some_pids([11, 12, 13, 14, 15, 16, 17]) == "11, 12, 13, 14, 15 and 2 more"
    assert _some_pids([11, 12]) == "11, 12"


def test_a_finding_message_keeps_the_script_and_its_arguments_behind_a_long_interpreter() -> None:
    """Finding messages cut the command from the right (``[:160]``, ``[:120]``, ``[:80]``):
    from a checkout with a long path, the interpreter filled the room and the script and
    its arguments (what tells jobs apart) were lost, with no sign of the cut. Now the
    command is shortened from the left and clipped with an ellipsis only last."""
    from rogue_watchdog.hosttext import command_text
    from rogue_watchdog.policy.findings import job_findings

    python = (
        "/srv/rw-ci3/a-long-directory-name-for-the-checkout-path/rogue-watchdog/.venv/bin/python"
    )
    argv = (
        python,
        "/tmp/pytest-of-root/pytest-55/test_a_command_line_that_is_no0/amjob_1.py",
        "epoch\udcff",
    )
    script = argv[1]
    assert command_text(argv, 160) == f"python {script} epoch\udcff"
    assert command_text(argv, 40) == "python …/amjob_1.py epoch\udcff"
    assert command_text(argv, 12) == "python …/am…"
    assert command_text(("python3", "train.py"), 160) == "python3 train.py"
    job = Job(7, [7], "root", argv, 1, None, [], [])
    [finding] = job_findings([job])
    assert f"`python {script} epoch\udcff`" in finding.message


def test_a_printed_command_is_never_wrapped_inside_itself() -> None:
    """Issue 33 item 4 (fresh user D): `... or by hand: sed` / `-i '1s/^/...` ran
    `-i: command not found`; `rogue-watchdog status --config` / `/tmp/.../config.yaml`
    failed `--config: expected one argument`; a cron schedule broke `(* * * *` / `*)`.
    Prose around them still wraps at words, and a program's name used as a word of
    prose glues nothing."""
    d = "/tmp/tmp.5padkcTgpa"
    sed = f"sed -i '1s/^/# disabled by rogue-watchdog: /' {d}/cron.d/legacy-retrain"
    status = f"`rogue-watchdog status --config {d}/config.yaml`"
    text = (
        f"from cron {d}/cron.d/legacy-retrain:1 (* * * * *); its crontab entry was removed "
        f"from the file a while ago; {status} lists all, or by hand: {sed}"
    )
    assert fit(text, 80, "    ", "  ") == [
        f"  from cron {d}/cron.d/legacy-retrain:1 (* * * * *); its crontab",
        "    entry was removed from the file a while ago;",
        f"    {status} lists all,",
        "    or by hand:",
        f"    {sed}",  # wider than 80: a line of its own, whole
    ]

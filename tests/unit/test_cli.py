"""The command line as a user runs it: help, exit codes, explain, the human table."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import Spawned, run_cli
from tests.unit.test_jobs import start_then_kill_leader


def test_help_lists_every_command() -> None:
    done = run_cli("--help")
    assert done.returncode == 0
    for cmd in ("scan", "explain", "check-config", "verify-weights", "gate"):
        assert cmd in done.stdout


def test_no_command_is_a_usage_error() -> None:
    done = run_cli()
    assert done.returncode == 2


def test_scan_with_a_broken_config_exits_2_and_names_the_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("nvml: {enabled: false}\nsanctioned:\n  - name: x\n    cmdline: y\n")
    done = run_cli("scan", "--config", str(cfg))
    assert done.returncode == 2
    assert done.stderr.startswith(f"rogue-watchdog: config error: {cfg}:3: sanctioned[0].origin:")
    assert done.stdout == ""


def test_killed_leader_orphans_end_to_end(spawned: Spawned, tmp_path: Path) -> None:
    # Public report: torchrun's leader killed, two DataLoader workers keep the device fd open.
    devdir, _, kids = start_then_kill_leader(spawned, tmp_path)
    script, kids_file = tmp_path / "dataloader_pool.py", tmp_path / "kids"
    time.sleep(0.3)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"nvml: {{enabled: false}}\ntraining: {{device_glob: '{devdir}/nvidia[0-9]*'}}\n"
    )
    done = run_cli("scan", "--json", "--config", str(cfg))
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    jobs = [j for j in doc["jobs"] if set(kids) & set(j["pids"])]
    assert len(jobs) == 1
    job = jobs[0]
    assert job["pids"] == kids
    assert job["evidence"] == ["device-fd"]
    assert job["verdict"] == "rogue"
    assert job["origin"]["kind"] == "orphan"
    rogue = [f for f in doc["findings"] if f["root_pid"] == kids[0]]
    assert [f["kind"] for f in rogue] == ["rogue-job"]

    table = run_cli("scan", "--config", str(cfg))
    row = [line for line in table.stdout.splitlines() if line.split()[1:2] == [str(kids[0])]]
    assert len(row) == 1
    assert row[0].split()[:4] == ["rogue", str(kids[0]), "root", "2"]
    assert "orphan (parent exited)" in row[0]

    explained = run_cli("explain", str(kids[0]), "--config", str(cfg))
    assert explained.returncode == 0
    assert explained.stdout.splitlines()[0] == f"PID {kids[0]}: {sys.executable} {script} " + (
        f"{devdir / 'nvidia0'} 2 {kids_file}"
    )
    assert "Origin: orphan (parent exited)" in explained.stdout.splitlines()
    assert explained.stdout.count("orphan (parent exited)") == 1  # said once
    assert explained.stdout.splitlines()[1] == "Training job: 2 process(es), verdict rogue"
    member = run_cli("explain", str(kids[1]), "--config", str(cfg))
    assert member.stdout.splitlines()[1] == (
        f"Training job (member of the job rooted at PID {kids[0]}): 2 process(es), verdict rogue"
    )
    assert (
        "Remediation: none needed for the source (nothing would start it again); to stop it: "
        f"rogue-watchdog terminate --config {cfg} {kids[0]}, or by hand: "
        f"kill -TERM {kids[0]} {kids[1]}"
    ) in member.stdout
    assert "None" not in member.stdout


def test_explain_of_a_process_of_no_job_advises_nothing(spawned: Spawned, tmp_path: Path) -> None:
    # A new user ran `explain` on the daemon's own PID and was told
    # `Remediation: kill -TERM <that PID>` (its orphan origin's command): explain must
    # never advise stopping or disabling what is not a training job.
    cfg = tmp_path / "c.yaml"
    cfg.write_text("nvml: {enabled: false}\n")
    # An orphan (its shell exited), as the daemon under `setsid`/nohup is: before, its
    # origin's `kill -TERM PID` was printed as the remediation.
    sh = spawned.start(["sh", "-c", "sleep 60 >/dev/null & echo $!"], stdout=subprocess.PIPE)
    out, _ = sh.communicate(timeout=10)
    orphan = int(out)
    done = run_cli("explain", str(orphan), "--config", str(cfg))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "Not a training job (no GPU, no device fd, no launcher command line)."
    assert (
        lines[-1]
        == "Remediation: none: not a training job (advice is only given for training jobs)"
    )
    assert "kill" not in done.stdout


def test_explain_unknown_pid_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("nvml: {enabled: false}\n")
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    free = next(p for p in range(pid_max - 1, 300, -1) if not Path(f"/proc/{p}").exists())
    done = run_cli("explain", str(free), "--config", str(cfg))
    assert done.returncode == 2
    assert f"PID {free} is not visible in /proc" in done.stderr


def test_hostile_command_lines_are_escaped_in_the_table(spawned: Spawned, tmp_path: Path) -> None:
    # Any user controls their argv: non-UTF-8 bytes and a newline must neither crash the
    # scan under a strict UTF-8 locale nor forge a table row.
    script = tmp_path / "train_evil.py"
    script.write_text("import time\ntime.sleep(60)\n")
    argv = [sys.executable.encode(), str(script).encode(), b"\xff\xfe", b"x\nrogue 1 root"]
    p = spawned.start(argv)
    time.sleep(0.5)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("nvml: {enabled: false}\n")
    done = run_cli("scan", "--config", str(cfg), env={"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": ""})
    assert done.returncode == 1, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.split()[1:2] == [str(p.pid)]]
    assert len(rows) == 1
    assert rows[0].endswith(f"{sys.executable} {script} \\xff\\xfe x\\nrogue 1 root")
    doc = json.loads(run_cli("scan", "--json", "--config", str(cfg)).stdout)
    job = next(j for j in doc["jobs"] if j["root_pid"] == p.pid)
    assert job["cmdline"][2:] == ["\udcff\udcfe", "x\nrogue 1 root"]
    explained = run_cli("explain", str(p.pid), "--config", str(cfg), env={"LC_ALL": "C.UTF-8"})
    assert explained.returncode == 0, explained.stderr
    assert "\\xff\\xfe x\\nrogue 1 root" in explained.stdout.splitlines()[0]

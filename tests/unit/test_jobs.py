"""Grouping real process trees into jobs, with device fds on plain files as device nodes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from rogue_watchdog.config import Config, parse_config
from rogue_watchdog.model import Job
from rogue_watchdog.scan import Scanner
from tests.conftest import Spawned, poll

WORKER_TREE = """
import os, sys, time
dev = open(sys.argv[1], "rb")          # the device node every worker inherits
kids = []
for _ in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    kids.append(pid)
with open(sys.argv[3], "w") as fh:
    fh.write(" ".join(map(str, kids)))
time.sleep(120)
"""


def wait_for(path: Path, timeout_s: float = 10) -> str:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written")


def config_for(devdir: Path, extra: str = "") -> Config:
    return parse_config(
        f"nvml: {{enabled: false}}\ntraining:\n  device_glob: '{devdir}/nvidia[0-9]*'\n{extra}",
        "test.yaml",
    )


def make_dev(tmp_path: Path) -> Path:
    devdir = tmp_path / "dev"
    devdir.mkdir()
    (devdir / "nvidia0").write_bytes(b"")
    (devdir / "nvidiactl").write_bytes(b"")
    return devdir


def exec_of(script: Path, parent: int) -> int | None:
    """The child of ``parent`` whose argv is ``python SCRIPT``: exec'd (an argument equal
    to, or text holding, the path would also match the shell's fork before its exec)."""
    want = [os.fsencode(sys.executable), os.fsencode(script), b""]
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        if argv == want and ppid == parent:
            return int(name)
    return None


def start_then_kill_leader(
    spawned: Spawned, tmp_path: Path
) -> tuple[Path, subprocess.Popen[bytes], list[int]]:
    """A leader holding the fake device forks two workers, then is SIGKILLed.

    Returns:
        ``(device dir, the dead leader, the two workers' PIDs ascending)``.
    """
    devdir = make_dev(tmp_path)
    script = tmp_path / "dataloader_pool.py"  # not a launcher name: found by fd alone
    script.write_text(WORKER_TREE)
    kids_file = tmp_path / "kids"
    leader = spawned.start(
        [sys.executable, str(script), str(devdir / "nvidia0"), "2", str(kids_file)]
    )
    kids = sorted(int(k) for k in wait_for(kids_file).split())
    leader.send_signal(signal.SIGKILL)
    leader.wait()
    return devdir, leader, kids


def test_launcher_tree_is_one_job_with_every_worker(spawned: Spawned, tmp_path: Path) -> None:
    devdir = make_dev(tmp_path)
    launcher = tmp_path / "torchrun"
    launcher.write_text(f"#!{sys.executable}\n{WORKER_TREE}")
    launcher.chmod(0o755)
    kids_file = tmp_path / "kids"
    p = spawned.start([str(launcher), str(devdir / "nvidia0"), "3", str(kids_file)])
    kids = sorted(int(k) for k in wait_for(kids_file).split())
    result = Scanner(config_for(devdir), resolvers=[]).scan()
    mine = [j for j in result.jobs if p.pid in j.pids]
    assert len(mine) == 1
    job = mine[0]
    assert job.root_pid == p.pid
    assert job.pids == [p.pid, *kids]
    assert job.evidence == ["device-fd", "launcher"]
    assert job.devices == [str(devdir / "nvidia0")]
    assert job.gpu_memory_bytes is None
    assert job.verdict == "rogue"
    rogue = [f for f in result.findings if f.root_pid == p.pid]
    assert [f.kind for f in rogue] == ["rogue-job"]  # one finding, not one per PID


def test_killed_leader_leaves_one_orphaned_job_found_through_fds(
    spawned: Spawned, tmp_path: Path
) -> None:
    # Public report: torchrun's leader is killed; two DataLoader workers keep the device fd
    # open under PID 1. NVML would not list them (no context); the fd walk does, and the
    # two re-parented siblings of one process group are one job.
    devdir, leader, kids = start_then_kill_leader(spawned, tmp_path)
    deadline = time.time() + 5
    scanner = Scanner(config_for(devdir), resolvers=[])
    while time.time() < deadline:
        result = scanner.scan()
        jobs = [j for j in result.jobs if set(kids) & set(j.pids)]
        if jobs and all(scanner.table.procs[k].ppid != leader.pid for k in kids):
            break
        time.sleep(0.1)
    assert len(jobs) == 1
    job = jobs[0]
    assert job.pids == kids
    assert job.root_pid == kids[0]
    assert job.evidence == ["device-fd"]
    assert job.devices == [str(devdir / "nvidia0")]
    assert scanner.table.procs[kids[0]].pgid == leader.pid


def test_shell_wrapper_is_lineage_not_the_job(spawned: Spawned, tmp_path: Path) -> None:
    script = tmp_path / "train_wrapped.py"
    script.write_text("import time\ntime.sleep(60)\n")
    # dash keeps the `sh -c` parent when a command follows the trainer.
    sh = spawned.start(["/bin/sh", "-c", f"{sys.executable} {script}; true"])
    deadline = time.time() + 5
    while time.time() < deadline:
        result = Scanner(config_for(tmp_path), resolvers=[]).scan()
        jobs = [j for j in result.jobs if str(script) in j.cmdline]
        if jobs:
            break
        time.sleep(0.05)
    assert len(jobs) == 1
    job = jobs[0]
    assert job.cmdline == (sys.executable, str(script))
    assert job.root_pid != sh.pid
    assert job.lineage[1].pid == sh.pid
    assert job.evidence == ["launcher"]


def test_ignore_list_by_exe_path_and_no_evasion_by_name(spawned: Spawned, tmp_path: Path) -> None:
    # A copy of a binary named Xorg in a user's directory is not the display server: the
    # default ignore entries are full paths under /usr (a tester hid a trainer this way).
    devdir = make_dev(tmp_path)
    xorg = tmp_path / "Xorg"
    shutil.copy("/bin/sh", xorg)
    trainer = tmp_path / "train_under_xorg.py"
    trainer.write_text("import time\ntime.sleep(60)\n")
    p = spawned.start([str(xorg), "-c", f"exec 3<{devdir}/nvidia0; {sys.executable} {trainer}; :"])
    # Wait for what the test looks at: the trainer exec'd below the shell (which then
    # holds the device). A fixed 0.5 s was a guess that a loaded host can outlast.
    poll("the trainer under the shell", lambda: exec_of(trainer, p.pid), 10, 0.02)
    result = Scanner(config_for(devdir), resolvers=[]).scan()
    jobs = [j for j in result.jobs if j.root_pid == p.pid]
    assert len(jobs) == 1 and jobs[0].verdict == "rogue"

    own = config_for(devdir, f"ignore:\n  - {{name: lab-display, exe: '{xorg}'}}\n")
    result = Scanner(own, resolvers=[]).scan()
    jobs = [j for j in result.jobs if j.root_pid == p.pid]
    assert len(jobs) == 1
    assert (jobs[0].verdict, jobs[0].rule, jobs[0].pids) == ("ignored", "lab-display", [p.pid])
    assert not [f for f in result.findings if f.root_pid == p.pid]
    # The trainer it started is not hidden behind the ignored parent.
    below = [j for j in result.jobs if str(trainer) in j.cmdline]
    assert len(below) == 1 and below[0].verdict == "rogue"
    assert below[0].lineage[1].pid == p.pid


def test_comm_is_never_matched(spawned: Spawned, tmp_path: Path) -> None:
    # comm says "train.py" after prctl(PR_SET_NAME), but the command line is not a launcher.
    script = tmp_path / "renamer.py"
    script.write_text(
        "import ctypes, time\nctypes.CDLL(None).prctl(15, b'train.py', 0, 0, 0)\ntime.sleep(60)\n"
    )
    p = spawned.start([sys.executable, str(script)])
    # Renamed once Python has started and loaded ctypes: a fixed 0.5 s was too short
    # under load.
    comm = Path(f"/proc/{p.pid}/comm")
    poll("the rename", lambda: comm.read_text() == "train.py\n", 10, 0.02)
    scanner = Scanner(config_for(tmp_path), resolvers=[])
    result = scanner.scan()
    assert scanner.table.procs[p.pid].comm == "train.py"
    assert not [j for j in result.jobs if p.pid in j.pids]


def test_the_watchdog_never_counts_itself(tmp_path: Path) -> None:
    # Seen on a real H200: NVML keeps /dev/nvidia0 open in the scanning process, so the
    # device-fd source found the scan itself. Here the test process holds the "device".
    devdir = make_dev(tmp_path)
    with open(devdir / "nvidia0", "rb"):
        result = Scanner(config_for(devdir), resolvers=[]).scan()
    assert not [j for j in result.jobs if os.getpid() in j.pids]
    assert [j for j in result.jobs if j.devices] == []


def _jobs_for(tmp_path: Path, needle: str, timeout_s: float = 5) -> list[Job]:
    deadline = time.time() + timeout_s
    while True:
        result = Scanner(config_for(tmp_path)).scan()
        jobs = [j for j in result.jobs if any(needle in a for a in j.cmdline)]
        if jobs or time.time() > deadline:
            return jobs
        time.sleep(0.1)


def test_separate_background_jobs_of_one_script_stay_separate(
    spawned: Spawned, tmp_path: Path
) -> None:
    # A script starts two trainers with `&` and exits: both are re-parented and share its
    # process group, but they are two jobs (seen by a new user: one row hid the other).
    a, b = tmp_path / "train_a.py", tmp_path / "train_b.py"
    for s in (a, b):
        s.write_text("import time\ntime.sleep(60)\n")
    starter = spawned.start(
        ["/bin/bash", "-c", f"{sys.executable} {a} & {sys.executable} {b} & exit 0"]
    )
    starter.wait()
    ja, jb = _jobs_for(tmp_path, str(a)), _jobs_for(tmp_path, str(b))
    assert len(ja) == 1 and len(jb) == 1
    assert ja[0].root_pid != jb[0].root_pid
    assert ja[0].pids == [ja[0].root_pid] and jb[0].pids == [jb[0].root_pid]
    assert ja[0].origin.kind == "orphan"


def test_wrappers_are_lineage_not_the_job(spawned: Spawned, tmp_path: Path) -> None:
    # `script -qc CMD` and `timeout N CMD` keep the trainer's command line in their own.
    s1, s2 = tmp_path / "train_tty.py", tmp_path / "train_timeout.py"
    for s in (s1, s2):
        s.write_text("import time\ntime.sleep(60)\n")
    w1 = spawned.start(["script", "-qc", f"{sys.executable} {s1}", "/dev/null"])
    w2 = spawned.start(["timeout", "60", sys.executable, str(s2)])
    for script, wrapper in ((s1, w1), (s2, w2)):
        jobs = _jobs_for(tmp_path, str(script))
        assert len(jobs) == 1
        assert jobs[0].cmdline == (sys.executable, str(script))
        assert jobs[0].root_pid != wrapper.pid
        assert wrapper.pid in [p.pid for p in jobs[0].lineage]


def test_trainer_under_an_orphaned_shell_is_an_orphan(spawned: Spawned, tmp_path: Path) -> None:
    script = tmp_path / "train_bashc.py"
    script.write_text("import time\ntime.sleep(60)\n")
    starter = spawned.start(
        ["/bin/bash", "-c", f"/bin/bash -c '{sys.executable} {script}; echo done' & exit 0"]
    )
    starter.wait()
    jobs = _jobs_for(tmp_path, str(script))
    assert len(jobs) == 1
    job = jobs[0]
    shell = job.lineage[1]
    assert shell.exe is not None and shell.exe.endswith("bash")
    assert job.origin.kind == "orphan"
    assert job.origin.remediation == f"kill -TERM {job.root_pid} {shell.pid}"
    assert f"its wrapper bash (PID {shell.pid}) was adopted by PID 1" in job.origin.evidence[1]

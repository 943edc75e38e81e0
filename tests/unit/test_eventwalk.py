"""The event-driven refresh (watchdog/sources/eventwalk.py, issue 34 item 1): what each
event makes a scan re-read, what no event reports and how it is still caught, and when a
full walk of /proc runs instead. On a fixture procfs tree; the lifecycle simulator
(tests/unit/test_trust_sim.py) checks the same path against a full walk on every scan."""

from __future__ import annotations

import shutil
from pathlib import Path

from rogue_watchdog.sources.eventwalk import EventWalk
from rogue_watchdog.sources.procevents import EventBatch
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import Spawned, poll


def write(root: Path, pid: int, ppid: int, argv: list[str], *, state: str = "S",
          start: int = 100, sid: int | None = None) -> None:  # fmt: skip
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    comm = Path(argv[0]).name[:15] if argv else "x"
    sid = pid if sid is None else sid
    (d / "stat").write_text(
        f"{pid} ({comm}) {state} {ppid} {sid} {sid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n"
    )
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (d / "status").write_text(f"Name:\t{comm}\nUid:\t0\t0\t0\t0\nNSpid:\t{pid}\n")
    (d / "cgroup").write_text("0::/\n")


def host(tmp_path: Path) -> tuple[Path, ProcessTable, EventWalk]:
    root = tmp_path / "proc"
    write(root, 1, 0, ["/sbin/init"])
    write(root, 10, 1, ["/bin/bash"])
    write(root, 11, 10, ["/usr/bin/sleep", "100"])
    table = ProcessTable(str(root))
    walk = EventWalk(reconcile_interval_s=30.0)
    assert walk.refresh(table, EventBatch(complete=True), 0.0)  # the first scan walks
    assert walk.last_full_reason == "first scan"
    return root, table, walk


def test_a_scan_reads_only_what_events_named(tmp_path: Path) -> None:
    root, table, walk = host(tmp_path)
    write(root, 20, 10, ["/usr/bin/python3", "train.py"])  # forked and exec'd: named
    write(root, 30, 1, ["/usr/bin/python3", "other.py"])  # no event: not read
    assert not walk.refresh(table, EventBatch(forked={20}, complete=True), 1.0)
    assert 20 in table.procs and 30 not in table.procs
    assert table.procs[20].cmdline == ("/usr/bin/python3", "train.py")
    # The reconcile walk finds what no event named, reading every stat line.
    assert walk.refresh(table, EventBatch(complete=True), 31.0)
    assert walk.last_full_reason == "reconcile"
    assert 30 in table.procs


def test_an_exec_keeping_comm_is_read_again(tmp_path: Path) -> None:
    root, table, walk = host(tmp_path)
    write(root, 20, 10, ["/usr/bin/python3"])
    walk.refresh(table, EventBatch(forked={20}, complete=True), 1.0)
    write(root, 20, 10, ["/usr/bin/python3", "train.py"])  # same comm, same start
    table.reinspect({20})  # what the scan does with the batch's reinspect set
    walk.refresh(table, EventBatch(reinspect={20}, complete=True), 2.0)
    assert table.procs[20].cmdline == ("/usr/bin/python3", "train.py")


def test_an_exit_reparents_children_and_a_zombie_is_read_until_reaped(tmp_path: Path) -> None:
    root, table, walk = host(tmp_path)
    # bash (10) exits; the kernel re-parents sleep (11) to init: no event says so.
    shutil.rmtree(root / "10")
    write(root, 11, 1, ["/usr/bin/sleep", "100"])
    walk.refresh(table, EventBatch(ended={10}, complete=True), 1.0)
    assert 10 not in table.procs and table.procs[11].ppid == 1
    # sleep exits; init has not reaped it yet: a zombie, then gone without an event.
    write(root, 11, 1, [], state="Z")
    walk.refresh(table, EventBatch(ended={11}, complete=True), 2.0)
    assert table.procs[11].is_zombie
    shutil.rmtree(root / "11")
    walk.refresh(table, EventBatch(complete=True), 3.0)
    assert 11 not in table.procs and 11 in table.removed


def test_a_process_gone_before_it_is_read_is_not_kept(tmp_path: Path) -> None:
    _root, table, walk = host(tmp_path)
    walk.refresh(table, EventBatch(forked={40}, ended={40}, reinspect={40}, complete=True), 1.0)
    assert 40 not in table.procs


def test_a_new_process_whose_parent_the_table_lacks_brings_its_lineage(tmp_path: Path) -> None:
    root, table, walk = host(tmp_path)
    write(root, 50, 1, ["/usr/sbin/cron"])
    write(root, 51, 50, ["/bin/sh", "-c", "python3 t.py"])
    write(root, 52, 51, ["/usr/bin/python3", "t.py"])
    walk.refresh(table, EventBatch(forked={52}, complete=True), 1.0)
    assert [p.pid for p in table.ancestors(52)] == [52, 51, 50, 1]


def test_watched_processes_are_current_every_scan(tmp_path: Path) -> None:
    root, table, walk = host(tmp_path)
    table.watched = {11}
    write(root, 11, 10, ["/usr/bin/sleep", "100"], state="T")  # stopped: no event
    walk.refresh(table, EventBatch(complete=True), 1.0)
    assert table.procs[11].state == "T"


def test_a_full_walk_after_loss_blindness_a_lacked_gpu_pid_and_without_events(
    tmp_path: Path,
) -> None:
    root, table, walk = host(tmp_path)
    write(root, 60, 1, ["/usr/bin/python3", "x.py"])
    assert walk.refresh(table, EventBatch(full_sweep=True, complete=True), 1.0)
    assert walk.last_full_reason == "process events lost" and 60 in table.procs
    # Events unavailable (polling): every scan lists /proc, none counts as the event
    # path's full walk.
    write(root, 61, 1, ["/usr/bin/python3", "y.py"])
    assert not walk.refresh(table, EventBatch(complete=False), 2.0)
    assert not walk.refresh(table, None, 2.5)
    assert 61 in table.procs and walk.full_walks == 2
    # A GPU source that turns blind: a full walk next (once, not while it stays blind).
    walk.after_gpu(True, [], table)
    assert walk.refresh(table, EventBatch(complete=True), 3.0)
    assert walk.last_full_reason == "a GPU source turned blind"
    walk.after_gpu(True, [], table)
    assert not walk.refresh(table, EventBatch(complete=True), 4.0)
    # NVML lists a PID the table lacks: the events missed it, a full walk next.
    write(root, 62, 1, ["/usr/bin/python3", "z.py"])
    walk.after_gpu(False, [62], table)
    assert walk.refresh(table, EventBatch(complete=True), 5.0)
    assert walk.last_full_reason == "a GPU process the table lacked" and 62 in table.procs
    assert walk.status() == {
        "reconcile_interval_s": 30.0,
        "full_walks": 4,
        "event_walks": 1,
        "last_full_walk_reason": "a GPU process the table lacked",
    }


def test_on_procfs_a_process_read_by_event_keeps_its_inode(spawned: Spawned) -> None:
    """On the real /proc: a process read because an event named it (not listed) is in
    the table with the inode its identity check trusts (``still_same``), and its exit
    removes it."""
    table = ProcessTable("/proc")
    walk = EventWalk()
    walk.refresh(table, EventBatch(complete=True), 0.0)
    child = spawned.start(["sleep", "60"])
    # Its fork event came before its exec: read once the exec is done (the exec event
    # would name it again otherwise).
    cmdline = Path(f"/proc/{child.pid}/cmdline")
    poll("its exec", lambda: cmdline.read_bytes().startswith(b"sleep"), 10, 0.01)
    assert not walk.refresh(table, EventBatch(forked={child.pid}, complete=True), 1.0)
    assert table.procs[child.pid].cmdline == ("sleep", "60")
    assert table.still_same(child.pid)
    child.kill()
    child.wait()
    walk.refresh(table, EventBatch(ended={child.pid}, complete=True), 2.0)
    assert child.pid not in table.procs


def test_an_exited_shared_shell_kept_from_its_exec_is_no_exclusive_wrapper(
    tmp_path: Path,
) -> None:
    """Trust simulator with kernel events (seed 11, 800 steps): an orphaned shell that ran
    ``python3 -m http.server`` beside a trainer, both exec'd and captured, shell and
    trainer gone by the tick while the server (re-parented to PID 1, in the shell's
    process group) runs on. The shell's exec-time record (state X) was named an exclusive
    wrapper of the exited job: its stop PIDs held the shared shell (I2), and a
    ``kill -TERM -- -PGID`` of its group would reach the server. Now a wrapper known
    only from its exec names nothing: the stop PIDs are the trainer's alone."""
    from rogue_watchdog.model import Job, Proc
    from rogue_watchdog.policy.guard import exclusive_wrappers

    root = tmp_path / "proc"
    write(root, 1, 0, ["/sbin/init"])
    write(root, 7, 1, ["/usr/bin/python3", "-m", "http.server"], sid=5)
    table = ProcessTable(str(root))
    table.refresh()
    script = "python3 -m http.server & timeout 300 python3 /home/u/train_a.py; wait"
    shell = Proc(5, 1, 100, "S", "sh", 5, 5, exe="/bin/sh", cmdline=("/bin/sh", "-c", script))
    run = Proc(
        6, 5, 101, "S", "python3", 5, 5, exe="/usr/bin/python3",
        cmdline=("/usr/bin/python3", "/home/u/train_a.py"),
    )  # fmt: skip
    assert table.add_exited([shell, run]) == {5, 6}
    job = Job(6, [6], None, run.cmdline, 101, None, [], table.ancestors(6))
    assert [p.pid for p in job.lineage] == [6, 5, 1]
    assert exclusive_wrappers(job, table) == []

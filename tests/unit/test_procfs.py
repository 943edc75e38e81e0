"""The procfs process table: parsing, fixture trees, identity and re-inspection."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from rogue_watchdog.model import Proc
from rogue_watchdog.sources import procfs
from rogue_watchdog.sources.procfs import ProcessTable, StatParseError, exec_mark, parse_stat
from tests.conftest import Spawned, poll

# A stat line whose comm holds spaces and a ')' (proc(5): split at the last ')').
STAT = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 0 0 0 0 7 3 0 0 20 0 1 0 987654 0 0"


def test_parse_stat_splits_at_the_last_paren() -> None:
    assert parse_stat(STAT) == ("a) b (c)", "S", 1, 4242, 4242, 4194560, 987654)


@pytest.mark.parametrize("bad", ["", "12 noparen S 1", "12 (x) S 1 2"])
def test_parse_stat_rejects_malformed(bad: str) -> None:
    with pytest.raises(StatParseError):
        parse_stat(bad)


def write_proc(
    root: Path,
    pid: int,
    *,
    ppid: int,
    start: int,
    comm: str,
    argv: list[str],
    uid: int = 0,
    cgroup: str = "0::/\n",
    flags: int = 0,
) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(
        f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n"
    )
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (d / "status").write_text(f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nNSpid:\t{pid}\n")
    (d / "cgroup").write_text(cgroup)


def test_fixture_tree_is_read_with_injected_root(tmp_path: Path) -> None:
    write_proc(tmp_path, 1, ppid=0, start=1, comm="init", argv=["/sbin/init"])
    write_proc(tmp_path, 20, ppid=1, start=50, comm="cron", argv=["/usr/sbin/cron", "-f"])
    write_proc(
        tmp_path,
        30,
        ppid=20,
        start=60,
        comm="pt_main_thread",
        argv=["/usr/bin/python3", "/srv/train.py"],
        uid=0,
        cgroup="1:name=systemd:/system.slice/cron.service\n0::/system.slice/cron.service\n",
    )
    write_proc(tmp_path, 2, ppid=0, start=1, comm="kthreadd", argv=[], flags=0x00200000)
    (tmp_path / "self").mkdir()  # non-numeric entries are ignored
    table = ProcessTable(str(tmp_path))
    procs = table.refresh()
    assert sorted(procs) == [1, 2, 20, 30]
    p = procs[30]
    assert p.cmdline == ("/usr/bin/python3", "/srv/train.py")
    assert p.user == "root" and p.uid == 0
    assert p.cgroup == (
        "1:name=systemd:/system.slice/cron.service",
        "0::/system.slice/cron.service",
    )
    assert [a.pid for a in table.ancestors(30)] == [30, 20, 1]
    assert procs[2].kernel_thread and procs[2].cmdline == ()
    assert table.children(1) == [20]
    assert table.new_pids == {1, 2, 20, 30}
    assert table.refresh() and table.new_pids == set()


def test_vanished_and_half_written_entries_are_skipped(tmp_path: Path) -> None:
    write_proc(tmp_path, 1, ppid=0, start=1, comm="init", argv=["/sbin/init"])
    (tmp_path / "77").mkdir()  # exited: directory without readable files
    (tmp_path / "78").mkdir()
    (tmp_path / "78" / "stat").write_text("78 (x) S")  # truncated
    assert sorted(ProcessTable(str(tmp_path)).refresh()) == [1]


def test_a_process_read_in_the_middle_of_its_exec_is_read_again(tmp_path: Path) -> None:
    # execve(2) sets the new comm before the new image's argv exists: a read then sees
    # `python3` with no command line, and the next reads see the same comm, start time
    # and (here) stat line. Before, that empty command line was kept for good (a flaky
    # test_shell_resolver case on a loaded host: "PID N never ran python3").
    write_proc(tmp_path, 1, ppid=0, start=1, comm="init", argv=["/sbin/init"])
    write_proc(tmp_path, 40, ppid=1, start=100, comm="python3", argv=[])
    table = ProcessTable(str(tmp_path))
    assert table.refresh()[40].cmdline == ()
    (tmp_path / "40" / "cmdline").write_bytes(b"/usr/bin/python3\0train.py\0")
    assert table.refresh()[40].cmdline == ("/usr/bin/python3", "train.py")
    assert table.new_pids == {40}
    assert table.refresh() and table.new_pids == set()  # read whole: not again


def test_pid_reuse_is_a_new_identity(tmp_path: Path) -> None:
    write_proc(tmp_path, 1, ppid=0, start=1, comm="init", argv=["/sbin/init"])
    write_proc(tmp_path, 40, ppid=1, start=100, comm="sleep", argv=["sleep", "9"])
    table = ProcessTable(str(tmp_path))
    table.refresh()
    for f in (tmp_path / "40").iterdir():
        f.unlink()
    (tmp_path / "40").rmdir()
    write_proc(tmp_path, 40, ppid=1, start=555, comm="python3", argv=["python3", "train.py"])
    procs = table.refresh()
    assert table.new_pids == {40}
    assert procs[40].cmdline == ("python3", "train.py") and procs[40].start_ticks == 555


def test_alive_is_the_same_start_time_and_not_a_zombie(tmp_path: Path) -> None:
    write_proc(tmp_path, 1, ppid=0, start=1, comm="init", argv=["/sbin/init"])
    write_proc(tmp_path, 40, ppid=1, start=100, comm="python3", argv=["python3", "train.py"])
    write_proc(tmp_path, 41, ppid=1, start=200, comm="python3", argv=[])
    stat = tmp_path / "41" / "stat"
    stat.write_text(stat.read_text().replace(") S ", ") Z ", 1))
    table = ProcessTable(str(tmp_path))
    table.refresh()
    zombie = table.get(41)
    assert zombie is not None and zombie.is_zombie
    assert table.alive((40, 100))
    assert not table.alive((40, 101))  # the PID reused by another process
    assert not table.alive((41, 200))  # exited, not reaped yet
    assert not table.alive((42, 100))  # gone


def _wait_exec(pid: int, argv: tuple[str, ...]) -> None:
    """Until ``pid``'s command line, read from /proc (never through the table under
    test), is ``argv``: the script's exec after its 0.6 s. A fixed 1.0 or 1.2 s left
    Python's start-up 0.4-0.6 s, which a loaded 2-CPU host can outlast."""

    def now() -> bool:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return tuple(os.fsdecode(a) for a in raw.split(b"\0")[:-1]) == argv

    poll("the exec", now, 10, 0.02)


def test_real_process_exec_is_reinspected(spawned: Spawned, tmp_path: Path) -> None:
    # The process execs from a plain sleep loop into a differently named program: same PID
    # and start time, new comm and cmdline.
    script = tmp_path / "flip.py"
    script.write_text(
        "import os, sys, time\ntime.sleep(0.6)\nos.execv('/bin/sleep', ['/bin/sleep', '30'])\n"
    )
    p = spawned.start([sys.executable, str(script)])
    table = ProcessTable()
    deadline = time.time() + 5
    while time.time() < deadline:
        table.refresh()
        proc = table.get(p.pid)
        if proc is not None and proc.cmdline[-1:] == (str(script),):
            break
        time.sleep(0.05)
    assert table.get(p.pid) is not None
    before = table.get(p.pid)
    assert before is not None and before.cmdline[-1] == str(script)
    _wait_exec(p.pid, ("/bin/sleep", "30"))
    # Same inode after exec: the rotation re-reads it within restat_every refreshes.
    noticed_at = None
    for i in range(1, table.restat_every + 1):
        table.refresh()
        if p.pid in table.new_pids:
            noticed_at = i
            break
    assert noticed_at is not None
    after = table.get(p.pid)
    assert after is not None
    assert after.start_ticks == before.start_ticks
    assert after.cmdline == ("/bin/sleep", "30")
    assert after.exe == os.path.realpath("/bin/sleep")


def test_watched_pid_is_current_every_refresh(spawned: Spawned, tmp_path: Path) -> None:
    script = tmp_path / "flip2.py"
    script.write_text(
        "import os, time\ntime.sleep(0.6)\nos.execv('/bin/sleep', ['/bin/sleep', '30'])\n"
    )
    p = spawned.start([sys.executable, str(script)])
    table = ProcessTable()
    table.refresh()
    table.watched = {p.pid}
    _wait_exec(p.pid, ("/bin/sleep", "30"))
    table.refresh()
    assert p.pid in table.new_pids
    proc = table.get(p.pid)
    assert proc is not None and proc.cmdline == ("/bin/sleep", "30")


def test_an_exec_that_keeps_comm_is_read_again(spawned: Spawned, tmp_path: Path) -> None:
    # `python3 launch.py` execs `python3 train.py`: same PID, start time and comm, and no
    # exec event to say so (events off). Before, the table kept the launcher's command
    # line for the process's life; the stat line's code and stack addresses moved.
    launch, train = tmp_path / "launch.py", tmp_path / "train.py"
    train.write_text("import time\ntime.sleep(30)\n")
    launch.write_text(
        "import os, sys, time\ntime.sleep(0.6)\n"
        f"os.execv(sys.executable, [sys.executable, {str(train)!r}, '--epochs', '9'])\n"
    )
    p = spawned.start([sys.executable, str(launch)])
    table = ProcessTable()
    table.watched = {p.pid}
    table.refresh()
    before = table.get(p.pid)
    assert before is not None and before.cmdline[-1] == str(launch)
    _wait_exec(p.pid, (sys.executable, str(train), "--epochs", "9"))
    table.refresh()
    after = table.get(p.pid)
    assert after is not None
    assert (after.start_ticks, after.comm) == (before.start_ticks, before.comm)
    assert after.cmdline[1:] == (str(train), "--epochs", "9")
    assert p.pid in table.new_pids


def test_exec_mark_is_none_where_the_kernel_hides_the_addresses() -> None:
    # A zombie, a kernel thread or a process the reader may not ptrace reads 0 there.
    assert exec_mark(STAT.encode()) is None  # a line with no fields 26-28
    zero = b"7 (python3) Z 1 7 7 0 -1 0 " + b" ".join([b"0"] * 45)
    assert exec_mark(zero) is None
    live = b"7 (a) b) S 1 7 7 0 -1 0 " + b" ".join([b"0"] * 16)  # fields 3-25
    old = exec_mark(live + b" 100 200 300 0 0")  # a kernel before 3.5: fields 26-28
    assert old is not None and old == exec_mark(live + b" 100 200 300 9 9")
    assert old != exec_mark(live + b" 100 200 301 0 0")
    # Fields 45-51 (start_data .. env_end) count where the line has them.
    tail = b" ".join([b"0"] * 16)  # fields 29-44
    full = live + b" 100 200 300 " + tail + b" 1 2 3 4 5 6 7 0"
    assert exec_mark(full) is not None and exec_mark(full) != old
    assert exec_mark(full) != exec_mark(full.replace(b" 4 5 6 7 0", b" 4 5 6 8 0"))


def test_an_exec_that_keeps_comm_is_read_again_without_aslr(
    spawned: Spawned, tmp_path: Path
) -> None:
    # Under `setarch -R` (as randomize_va_space=0, or a debugger) nothing is randomized
    # at exec, and `launch.py` -> `train.py` is one byte shorter: the stack start keeps
    # its 16-byte-aligned address. Before, fields 26-28 read the same, and the table
    # kept the launcher's command line; arg_start (field 48) moved.
    if shutil.which("setarch") is None:
        pytest.skip("needs util-linux setarch")
    launch, train = tmp_path / "launch.py", tmp_path / "train.py"
    train.write_text("import time\ntime.sleep(30)\n")
    launch.write_text(
        "import os, sys, time\ntime.sleep(0.6)\n"
        f"os.execv(sys.executable, [sys.executable, {str(train)!r}])\n"
    )
    p = spawned.start(["setarch", "-R", sys.executable, str(launch)])
    table = ProcessTable()
    table.watched = {p.pid}
    before = poll("the launcher", lambda: _cmdline_ends(table, p.pid, str(launch)), 10, 0.02)
    _wait_exec(p.pid, (sys.executable, str(train)))
    table.refresh()
    after = table.get(p.pid)
    assert after is not None
    assert (after.start_ticks, after.comm) == (before.start_ticks, before.comm)
    assert after.cmdline[1:] == (str(train),)
    assert p.pid in table.new_pids


def _cmdline_ends(table: ProcessTable, pid: int, last: str) -> Proc | None:
    """``pid`` as the table reads it after a refresh, when its command line ends in
    ``last`` and ``setarch`` has exec'd the interpreter (its comm read too); else None."""
    table.refresh()
    proc = table.get(pid)
    ok = proc is not None and proc.cmdline[-1:] == (last,) and proc.comm != "setarch"
    return proc if ok else None


def test_steady_refresh_reads_a_slice_of_stat_files(monkeypatch: pytest.MonkeyPatch) -> None:
    table = ProcessTable()
    assert table.trust_inodes  # /proc is procfs here
    table.refresh()
    table.refresh()
    known = set(table.procs)
    read: list[int] = []
    real = procfs._read_bytes

    def counted(path: str) -> bytes | None:
        if path.endswith("/stat"):
            read.append(int(path.rsplit("/", 2)[-2]))
        return real(path)

    monkeypatch.setattr(procfs, "_read_bytes", counted)
    table.refresh()
    # The stat lines read again of processes already in the table: one slice of six.
    # (Each new process is read once: all reads counted, this was a count of the host's
    # churn, failing beside another test's burst of forked workers.)
    again = [pid for pid in read if pid in known]
    assert len(again) < len(known) // table.restat_every + 20, (len(again), len(known))
    assert not ProcessTable("/tmp").trust_inodes


def test_parse_status_reads_the_kernels_rows_not_a_name_that_looks_like_one() -> None:
    from rogue_watchdog.sources.procfs import parse_status

    real = "Name:\tx\x1cUid:\t0\t0\t0\t0\x1cNSpid:\t1\nUmask:\t0022\nUid:\t1000\t1000\t1000\t1000\n"
    assert parse_status(real + "NSpid:\t4242\t7\nNSpgid:\t4242\t7\n") == (1000, (4242, 7))
    assert parse_status("Name:\tsleep\nUid:\t0\t0\t0\t0\nNSpid:\t99") == (0, (99,))
    assert parse_status("Name:\tsleep\nUid:\nNSpid:\t9 x\n") == (None, ())
    assert parse_status("") == (None, ())
    assert parse_status(None) == (None, ())


def test_compact_keeps_every_record_and_gives_back_the_peak_tables() -> None:
    # After a job of thousands of processes ends, the PID-keyed maps are rebuilt at their
    # live size, every record kept (issue 34, item 3).
    table = ProcessTable()
    table.refresh()
    before = dict(table.procs)
    raws, inodes = dict(table._stat_raw), dict(table._inodes)
    # A job's worth of records that then ended, several times the host's own.
    fake = range(10_000_000, 10_000_000 + 4 * len(before) + 4096)
    for pid in fake:
        table._procs[pid] = before[next(iter(before))]
        table._stat_raw[pid] = b""
        table._inodes[pid] = 0
    peak = sys.getsizeof(table._procs)
    table._forget(set(fake))
    assert sys.getsizeof(table._procs) == peak  # a dict keeps its largest table
    table.compact()
    assert sys.getsizeof(table._procs) < peak
    assert table.procs == before
    assert table._stat_raw == raws and table._inodes == inodes
    assert all(p.cmdline is table._values[p.cmdline] for p in table.procs.values())
    table.refresh()  # and it goes on as before
    assert set(table.procs) & set(before)

"""Process events without the kernel connector: decoding, the reader thread on a socket
pair, the scan's event hook (exited processes, exec with the same comm), GPU-library
candidates, the fallback, and the loop's early ticks."""

from __future__ import annotations

import errno
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rogue_watchdog.config import Config, ConfigError, load_config, parse_config
from rogue_watchdog.daemon.events import attach_events, events_status
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.metrics import EventsCollector
from rogue_watchdog.daemon.status import build_status, render_status
from rogue_watchdog.model import Proc
from rogue_watchdog.policy.jobs import is_launcher
from rogue_watchdog.sources import procfs
from rogue_watchdog.sources.gpulibs import GpuLibraryCache, library_pattern
from rogue_watchdog.sources.procevents import (
    PROC_EVENT_EXEC,
    PROC_EVENT_EXIT,
    PROC_EVENT_FORK,
    PROC_EVENT_NONE,
    EventBatch,
    ProcEventSource,
    _await_ack,
    parse_events,
    subscribe_message,
)
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import Spawned, need_program, poll


def message(what: int, *fields: int) -> bytes:
    """One netlink message as the proc connector sends it (linux/cn_proc.h): the
    event_data union is always 24 bytes, whatever the event."""
    data = struct.pack(f"=IIQ{len(fields)}I", what, 0, 123, *fields).ljust(40, b"\0")
    cn = struct.pack("=IIIIHH", 1, 1, 0, 0, len(data), 0)
    body = cn + data
    return struct.pack("=IHHII", 16 + len(body), 3, 0, 0, 0) + body


def config(tmp_path: Path, extra: str = "") -> Config:
    return parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', interval_s: 60}}\n"
        f"alerts:\n  sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]\n" + extra,
        "t.yaml",
    )


class FakeFeed:
    """An event feed handing the scan one prepared batch."""

    def __init__(self, batch: EventBatch) -> None:
        self.batch = batch
        self.watched: frozenset[int] = frozenset()
        self.roots: frozenset[int] = frozenset()
        self.sweeps = 0
        self.full_wanted = False

    def drain(self) -> EventBatch:
        batch, self.batch = self.batch, EventBatch()
        return batch

    def captures_pending(self) -> bool:
        return bool(self.batch.candidates)

    def status(self) -> dict[str, object]:
        return {"mode": "events", "available": True}

    def swept(self) -> None:
        self.sweeps += 1


def ack(echo: int, err: int = 0) -> bytes:
    """The kernel's acknowledgement (cn_proc_ack): PROC_EVENT_NONE, cn_msg.ack = echo."""
    data = struct.pack("=IIQI", PROC_EVENT_NONE, 0, 123, err).ljust(40, b"\0")
    cn = struct.pack("=IIIIHH", 1, 1, 0, echo, len(data), 0)
    body = cn + data
    return struct.pack("=IHHII", 16 + len(body), 3, 0, 0, 0) + body


def test_an_unacknowledged_subscription_times_out_instead_of_hanging() -> None:
    """The kernel ignores PROC_CN_MCAST_LISTEN from outside the initial PID namespace and
    never answers: pyroute2's control() waited forever there, so the daemon under a
    nested systemd never sent READY=1. Now: events before the ack are skipped, another
    subscriber's ack (multicast to all) is not ours, the ack's error number is raised,
    and no ack within the limit is ETIMEDOUT."""
    ours, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with ours, kernel:
        started = time.monotonic()
        with pytest.raises(OSError) as silent:
            _await_ack(ours, 0.3, 41)
        assert silent.value.errno == errno.ETIMEDOUT
        assert "did not acknowledge" in str(silent.value)
        assert 0.3 <= time.monotonic() - started < 5
        kernel.send(ack(8))  # another subscriber's request was acknowledged: not ours
        with pytest.raises(OSError) as theirs:
            _await_ack(ours, 0.3, 41)
        assert theirs.value.errno == errno.ETIMEDOUT
        kernel.send(message(PROC_EVENT_EXEC, 5, 5))
        kernel.send(ack(8, errno.EINVAL))  # another's refusal is not ours either
        kernel.send(ack(42))
        _await_ack(ours, 5, 41)  # the exec and the other acks skipped, ours accepted
        kernel.send(ack(42, errno.EINVAL))
        with pytest.raises(OSError) as refused:
            _await_ack(ours, 5, 41)
        assert refused.value.errno == errno.EINVAL
        # An error number no errno fits is still an OSError (the daemon then polls and
        # says why), not os.strerror's OverflowError (hostile test, session h).
        kernel.send(ack(42, 0xFFFFFFFF))
        with pytest.raises(OSError) as odd:
            _await_ack(ours, 5, 41)
        assert odd.value.errno == 0xFFFFFFFF
        assert "error number 4294967295 in the kernel's acknowledgement" in str(odd.value)


@pytest.mark.parametrize("nonce", [0, 1, 41, 0x12345678, (1 << 31) - 1])
def test_the_subscription_is_byte_for_byte_pyroute2s(nonce: int) -> None:
    """The 40-byte PROC_CN_MCAST_LISTEN request the daemon packs itself (issue 34: the
    daemon no longer imports pyroute2's package, 196 modules and 7 MiB resident, for
    it) is exactly what pyroute2's ``proc_event_control`` encodes, as the daemon
    sent it before (header NLMSG_DONE, flags 0, sequence 0, port 0; idx and val
    CN_IDX_PROC/CN_VAL_PROC, ack the nonce, len 4, action PROC_CN_MCAST_LISTEN)."""
    from pyroute2.netlink import NLMSG_DONE
    from pyroute2.netlink.connector.cn_proc import (
        CN_IDX_PROC,
        CN_VAL_PROC,
        PROC_CN_MCAST_LISTEN,
        proc_event_control,
    )

    msg = proc_event_control()
    msg["action"] = PROC_CN_MCAST_LISTEN
    msg["idx"], msg["val"], msg["len"] = CN_IDX_PROC, CN_VAL_PROC, 4
    msg["ack"] = nonce
    msg["header"].update(type=NLMSG_DONE, flags=0, sequence_number=0, pid=0)
    msg.encode()
    assert subscribe_message(nonce) == bytes(msg.data)
    assert len(subscribe_message(nonce)) == 40


def test_the_daemon_does_not_import_pyroute2() -> None:
    """What the daemon loads to run, with events on: no pyroute2 module (its package
    import builds ndb, ipdb, psutil: 7 MiB of the daemon's resident memory)."""
    code = (
        "import sys\n"
        "import rogue_watchdog.daemon.loop, rogue_watchdog.sources.procevents\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyroute2'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_parse_events_decodes_fork_exec_exit_and_skips_truncated() -> None:
    data = (
        message(PROC_EVENT_FORK, 10, 10, 11, 11)
        + message(PROC_EVENT_EXEC, 11, 11)
        + message(PROC_EVENT_EXIT, 12, 11, 0, 17, 10, 10)
    )
    assert list(parse_events(data)) == [
        (PROC_EVENT_FORK, 11, 11, None),
        (PROC_EVENT_EXEC, 11, 11, None),
        (PROC_EVENT_EXIT, 12, 11, 0),
    ]
    assert list(parse_events(data[:-4])) == [
        (PROC_EVENT_FORK, 11, 11, None),
        (PROC_EVENT_EXEC, 11, 11, None),
    ]
    # The exit_code is a wait(2) status: exit(3) is 3 << 8, SIGTERM is 15.
    killed = message(PROC_EVENT_EXIT, 12, 12, 15, 17, 10, 10)
    exited = message(PROC_EVENT_EXIT, 13, 13, 3 << 8, 17, 10, 10)
    assert list(parse_events(killed + exited)) == [
        (PROC_EVENT_EXIT, 12, 12, 15),
        (PROC_EVENT_EXIT, 13, 13, 3 << 8),
    ]
    assert list(parse_events(b"\x00" * 8)) == []


def test_the_reader_decodes_full_short_and_truncated_messages_alike() -> None:
    """The reader's one-unpack decoder (issue 34: exec storm) hands on the same events as
    parse_events: a message shorter than the kernel's (here an exec of 60 bytes) and
    what follows it go through the careful decoder, a truncated tail is dropped."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    theirs.setblocking(False)
    source = ProcEventSource("/proc", lambda _p: False, gpu_libraries=())
    gone = 4_000_000  # no such process: its exec is counted as missed
    data = struct.pack("=IIQII", PROC_EVENT_EXEC, 0, 123, gone + 1, gone + 1)
    cn = struct.pack("=IIIIHH", 1, 1, 0, 0, len(data), 0)
    short = struct.pack("=IHHII", 16 + len(cn) + len(data), 3, 0, 0, 0) + cn + data
    try:
        ours.send(
            message(PROC_EVENT_FORK, 10, 10, gone, gone)
            + message(PROC_EVENT_FORK, gone, gone, gone + 7, gone)  # a thread: no process
            + message(PROC_EVENT_EXEC, gone, gone)
            + short
            + message(PROC_EVENT_EXIT, gone + 2, gone + 2, 0, 17, 1, 1)
            + message(PROC_EVENT_EXIT, gone, gone, 0, 17, 1, 1)[:-4]
        )
        ours.send(message(PROC_EVENT_EXIT, gone, gone, 0, 17, 1, 1))
        assert source._read_all(theirs) == 2  # both datagrams, then the socket is dry
        assert source.counters.events == {"fork": 2, "exec": 2, "exit": 2, "uid": 0, "sid": 0}
        assert source.counters.missed == 2
        batch = source.drain()
        assert batch.forked == {gone}
        assert batch.ended == {gone + 2, gone}
        assert batch.reinspect == {gone, gone + 1}
        assert not batch.full_sweep
    finally:
        ours.close()
        theirs.close()


def _capture_chain(pid: int) -> dict[int, Proc]:
    reader = ProcessTable("/proc")
    chain: dict[int, Proc] = {}
    cur = reader.read(pid)
    while cur is not None:
        chain[cur.pid] = cur
        cur = reader.read(cur.ppid) if cur.ppid > 0 else None
    return chain


def _short_lived(tmp_path: Path, name: str) -> tuple[Path, dict[int, Proc]]:
    """Run a trainer, read it and its ancestors while it runs (as the exec event does),
    then let it exit and reap it."""
    script = tmp_path / name
    script.write_text("import sys\nsys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE)
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    poll("the trainer to exec", lambda: str(script) in cmdline.read_text(errors="replace"), 10)
    chain = _capture_chain(proc.pid)
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(10)
    return script, chain


def test_a_rogue_caught_at_exec_that_is_a_zombie_by_the_tick_is_judged(
    tmp_path: Path,
) -> None:
    # A trainer living 30 ms whose parent has not reaped it yet: the scan's table shows
    # a zombie (no command line, no cgroup) under the same PID and start time. The record
    # read at its exec is what ran; before, the zombie won and no finding opened (about
    # half of 30 ms trainers started beside longer ones went unreported).
    d = Daemon(config(tmp_path), None)
    script = tmp_path / "train_zombie.py"
    script.write_text("import sys\nsys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE)
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        poll("the trainer to exec", lambda: str(script) in cmdline.read_text(errors="replace"), 10)
        chain = _capture_chain(proc.pid)
        assert proc.stdin is not None
        proc.stdin.close()
        stat = Path(f"/proc/{proc.pid}/stat")
        poll("the zombie", lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", 10, 0.01)
        d.tick(1_000_000.0)  # the table now holds the zombie
        assert d.scanner.table.procs[proc.pid].is_zombie
        d.scanner.events = FakeFeed(EventBatch(captured=chain, candidates={proc.pid}))
        summary = d.tick(1_000_001.0)
        assert summary.result is not None
        [job] = [j for j in summary.result.jobs if j.root_pid == proc.pid]
        assert job.verdict == "rogue" and str(script) in job.cmdline
        assert proc.pid in summary.result.exited
        [finding] = [f for f in summary.findings if f.root_pid == proc.pid]
        assert finding.message.endswith("(already exited: seen at its exec)")
        # The next refresh reads the zombie again: it is no job, the finding resolves.
        summary = d.tick(1_000_002.0)
        assert summary.result is not None
        assert d.scanner.table.procs[proc.pid].is_zombie
        assert all(j.root_pid != proc.pid for j in summary.result.jobs)
        assert summary.track is not None
        assert [r.kind for r in summary.track.resolved if r.root_pid == proc.pid] == ["rogue-job"]
    finally:
        proc.wait(10)
        d.db.close()


def test_exited_rogue_caught_at_exec_is_judged_recorded_resolved_and_respawns(
    tmp_path: Path,
) -> None:
    d = Daemon(config(tmp_path), None)
    script, chain = _short_lived(tmp_path, "train_blink.py")
    root = next(iter(chain))
    d.scanner.events = FakeFeed(EventBatch(captured=chain, candidates={root}))
    t0 = 1_000_000.0
    summary = d.tick(t0)
    assert summary.result is not None
    [job] = [j for j in summary.result.jobs if str(script) in j.cmdline]
    assert job.root_pid == root and job.verdict == "rogue" and job.user
    assert root in summary.result.exited
    assert [p.pid for p in job.lineage][:2] == [root, os.getpid()]
    [finding] = [f for f in summary.findings if f.root_pid == root]
    assert finding.message.endswith("(already exited: seen at its exec)")
    assert finding.details["exited"] is True
    assert summary.track is not None
    assert [(r.kind, r.root_pid) for r in summary.track.opened if r.root_pid == root] == [
        ("rogue-job", root)
    ]
    # The next tick: the record is gone with the process, the finding resolves.
    summary = d.tick(t0 + 1)
    assert summary.track is not None
    assert [r.kind for r in summary.track.resolved if r.root_pid == root] == ["rogue-job"]
    # Another run of the same job a minute later, also gone before the scan: respawned.
    _, again = _short_lived(tmp_path, "train_blink.py")
    second = next(iter(again))
    d.scanner.events = FakeFeed(EventBatch(captured=again, candidates={second}))
    summary = d.tick(t0 + 60)
    assert summary.track is not None
    kinds = sorted(r.kind for r in summary.track.opened if r.root_pid == second)
    assert kinds == ["respawned", "rogue-job"]
    row = d.db.conn.execute(
        "SELECT sightings, gone_at FROM jobs WHERE summary LIKE ?", (f"%{script}%",)
    ).fetchone()
    assert tuple(row) == (2, None)


def test_exec_keeping_comm_is_reread_only_when_the_event_says_so(
    tmp_path: Path, spawned: Spawned, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where the stat line cannot tell (its code and stack fields read 0: a process the
    # reader may not ptrace), only the exec event does; where it can, the table reads
    # the exec by itself (tests/unit/test_procfs.py).
    monkeypatch.setattr(procfs, "exec_mark", lambda _raw: None)
    go = tmp_path / "go"
    trainer = tmp_path / "train_same_comm.py"
    trainer.write_text("import time\ntime.sleep(60)\n")
    waiter = (
        "import os, sys, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
        "os.execv(sys.executable, [sys.executable, os.environ['TRAINER']])\n"
    )
    pid = spawned.start(
        [sys.executable, "-c", waiter], env={**os.environ, "TRAINER": str(trainer)}
    ).pid
    table = ProcessTable("/proc", restat_every=1)  # every stat line re-read each time
    poll("the waiter", lambda: (table.refresh(), table.get(pid))[1], 10)
    go.touch()
    poll("the exec", lambda: str(trainer) in Path(f"/proc/{pid}/cmdline").read_text(), 10, 0.02)
    table.refresh()
    stale = table.get(pid)
    assert stale is not None and str(trainer) not in stale.cmdline  # comm and start unchanged
    table.reinspect([pid])
    table.refresh()
    fresh = table.get(pid)
    assert fresh is not None and fresh.cmdline == (sys.executable, str(trainer))
    assert pid in table.new_pids and pid in table.changed


def test_reader_thread_captures_a_launcher_exec_and_asks_for_a_tick(
    tmp_path: Path, spawned: Spawned
) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    theirs.setblocking(False)
    woke = threading.Event()
    source = ProcEventSource(
        "/proc",
        lambda p: is_launcher(p, parse_config("", "t").training.launchers),
        gpu_libraries=(),
        wake=woke.set,
        opener=lambda _n: theirs,
    )
    source.start()
    try:
        trainer = tmp_path / "train_event.py"
        trainer.write_text("import time\ntime.sleep(60)\n")
        idle = spawned.start([sys.executable, "-c", "import time; time.sleep(60)"]).pid
        pid = spawned.start([sys.executable, str(trainer)]).pid
        poll("exec", lambda: str(trainer) in Path(f"/proc/{pid}/cmdline").read_text(), 10, 0.02)
        ours.send(message(PROC_EVENT_FORK, 1, 1, idle, idle) + message(PROC_EVENT_EXEC, idle, idle))
        ours.send(message(PROC_EVENT_EXEC, pid, pid))
        assert woke.wait(10)
        poll("the capture", lambda: source.counters.candidates, 10, 0.02)
        batch = source.drain()
        assert batch.candidates == {pid}
        assert batch.captured[pid].cmdline == (sys.executable, str(trainer))
        assert os.getpid() in batch.captured  # the lineage, up to PID 1
        assert batch.reinspect == {idle, pid}
        assert source.counters.events["exec"] == 2 and source.counters.events["fork"] == 1
        # Its exit asks for another tick (the finding resolves without the sweep).
        woke.clear()
        ours.send(message(PROC_EVENT_EXIT, pid, pid, 0, 9, 1, 1))
        assert woke.wait(10)
    finally:
        source.stop()
        ours.close()


def test_unavailable_connector_polls_and_says_so_once(tmp_path: Path) -> None:
    d = Daemon(config(tmp_path), None)

    def refused(_n: int) -> socket.socket:
        raise ConnectionRefusedError(111, "Connection refused")

    source = attach_events(d)
    assert source is not None and d.workers[0] is source
    source.opener = refused
    source.start()
    d.tick(1_000_000.0)
    doc = build_status(d)
    assert doc["events"] == {
        "mode": "polling",
        "available": False,
        "reason": (
            "kernel process events unavailable (Connection refused): needs CAP_NET_ADMIN "
            "and the initial network, PID and user namespaces; polling every "
            "daemon.interval_s instead"
        ),
        "events": {"fork": 0, "exec": 0, "exit": 0, "uid": 0, "sid": 0},
        "lost": 0,
        "full_sweeps": 0,
        "candidates": 0,
        "early_ticks_requested": 0,
        "exec_missed": 0,
        # Polling: every scan walks /proc, none counts as the event path's full walk.
        "reconcile_interval_s": 30.0,
        "full_walks": 0,
        "event_walks": 0,
        "last_full_walk_reason": None,
        "exec_passes": 0,
    }
    assert (
        "process events: unavailable, polling only (kernel process events unavailable "
        "(Connection refused)" in render_status(json.loads(json.dumps(doc)))
    )
    metrics = {m.name: m for m in EventsCollector(d).collect()}
    assert metrics["rogue_watchdog_proc_events_up"].samples[0].value == 0
    d.db.close()


def test_events_off_by_config(tmp_path: Path) -> None:
    cfg = parse_config(
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/s', events: 'off'}}\n", "t"
    )
    d = Daemon(cfg, None)
    assert attach_events(d) is None and d.scanner.events is None
    assert events_status(d)["mode"] == "polling"
    d.db.close()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("daemon: {events: on}\n", "t:1: daemon.events: must be auto or off, got 'on'"),
        ("daemon: {events: sometimes}\n", "t:1: daemon.events: must be auto or off"),
        ("daemon: {events_rcvbuf_bytes: 100}\n", "must be at least 4096, got 100"),
        ("training: {gpu_libraries: [../libcuda.so]}\n", "training.gpu_libraries[0]: expected a"),
    ],
)
def test_event_settings_are_validated(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(text, "t")
    assert error in str(exc.value)


def test_gpu_library_defaults_and_matching() -> None:
    cfg = parse_config("", "t")
    want = ("libcuda.so", "libcudart.so", "libtorch_cuda.so", "libnccl.so")
    assert cfg.training.gpu_libraries == want
    pattern = library_pattern(cfg.training.gpu_libraries)
    assert pattern is not None
    maps = (
        b"7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05\n"
        b"7f02-7f03 r-xp 0 08:01 2 /opt/venv/torch/lib/libtorch_cuda.so\n"
        b"7f04-7f05 r-xp 0 08:01 3 /opt/libcudart.so.12 (deleted)\n"
        b"7f06-7f07 r-xp 0 08:01 4 /opt/libcuda_stub.so\n"
        b"7f08-7f09 r-xp 0 08:01 5 /opt/libnccl.sox\n"
    )
    found = sorted({m.group(1).decode() for m in pattern.finditer(maps)})
    assert found == ["libcuda.so", "libcudart.so", "libtorch_cuda.so"]
    assert library_pattern(()) is None


def test_run_py_mapping_a_stand_in_cudart_is_a_training_candidate(
    tmp_path: Path, spawned: Spawned
) -> None:
    need_program("gcc")
    src = tmp_path / "cudart.c"
    src.write_text("int cudaRuntimeGetVersion(int *v) { *v = 12040; return 0; }\n")
    lib = tmp_path / "libcudart.so.12"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    script = tmp_path / "run.py"
    script.write_text("import ctypes, sys, time\nctypes.CDLL(sys.argv[1])\ntime.sleep(60)\n")
    plain = spawned.start([sys.executable, "-c", "import time; time.sleep(60)"]).pid
    pid = spawned.start([sys.executable, str(script), str(lib)]).pid
    maps = Path(f"/proc/{pid}/maps")
    poll("the library to be mapped", lambda: str(lib) in maps.read_text(), 10, 0.02)
    d = Daemon(config(tmp_path), None)
    summary = d.tick(1_000_000.0)
    assert summary.result is not None
    [job] = [j for j in summary.result.jobs if j.root_pid == pid]
    assert (job.verdict, job.evidence) == ("rogue", ["gpu-library"])
    assert all(j.root_pid != plain for j in summary.result.jobs)
    reads = d.scanner.gpu_libraries.reads
    d.tick(1_000_060.0)  # old identities: maps not read again (the host may start others)
    assert d.scanner.gpu_libraries.reads - reads <= len(d.scanner.table.new_pids)
    d.db.close()


def test_gpu_library_cache_rechecks_young_identities_only() -> None:
    cache = GpuLibraryCache(("libcudart.so",), recheck_s=10.0)
    table = ProcessTable("/proc")
    table.refresh()
    cache.holders(table, 100.0)
    first = cache.reads
    assert first == sum(1 for p in table.procs.values() if not p.kernel_thread and not p.is_zombie)
    cache.holders(table, 100.5)  # under a second later: nothing re-read
    assert cache.reads == first
    cache.holders(table, 200.0)  # older than recheck_s: nothing re-read
    assert cache.reads == first


def test_gpu_library_cache_rechecks_only_what_was_young_when_first_seen(
    spawned: Spawned,
) -> None:
    # A daemon starting on a busy host sees thousands of old processes at once: their
    # maps are read once, not again every second for 10 s (2,000 reads a second at
    # 2,000 processes); a process started just now is re-read in its first seconds.
    young = spawned.start(["sleep", "60"])
    cache = GpuLibraryCache(("libcudart.so",), recheck_s=10.0)
    table = ProcessTable("/proc")
    table.refresh()
    cache.holders(table, 100.0)
    old = min(
        (p for p in table.procs.values() if not p.kernel_thread and not p.is_zombie),
        key=lambda p: p.start_ticks,
    )
    started = table.start_time_s(old.start_ticks)
    assert started is not None and started < time.time() - 12  # this host's oldest
    cache.holders(table, 101.5)
    seen = cache._seen
    # pid -> (start ticks, first seen, last read, libraries)
    assert seen[old.pid][::2] == (old.start_ticks, 100.0)  # read once, at its first sighting
    mine = table.procs[young.pid]
    assert seen[young.pid][::2] == (mine.start_ticks, 101.5)  # re-read a second later
    # After that first scan, a new identity gets its 10 s whatever its age (a tick gap,
    # a clock step or a reload must not shorten anyone's window).
    del seen[old.pid]
    cache.holders(table, 103.0)
    cache.holders(table, 104.5)
    assert cache._seen[old.pid][:3] == (old.start_ticks, 103.0, 104.5)
    # A reload's new scanner adopts the cache: nothing is new to it, nothing is re-read.
    reloaded = GpuLibraryCache(("libcudart.so",), recheck_s=10.0)
    reloaded.adopt(cache)
    reads = reloaded.reads
    reloaded.holders(table, 105.0)
    assert reloaded.reads - reads <= 1  # at most the young sleeper, due again


def test_request_tick_wakes_the_loop_early(tmp_path: Path) -> None:
    d = Daemon(config(tmp_path), None)
    ticks: list[float] = []
    d.on_tick.append(lambda s: ticks.append(time.monotonic()))
    t = threading.Thread(target=d.run_forever, daemon=True)
    t.start()
    poll("the first tick", lambda: ticks, 30, 0.01)
    asked = time.monotonic()
    d.request_tick()
    poll("the early tick", lambda: len(ticks) >= 2, 10, 0.01)
    assert ticks[1] - asked < 5  # the interval is 60 s
    d.request_stop()
    t.join(10)
    assert not t.is_alive()


def test_full_sweep_after_lost_events_finds_a_same_comm_exec(
    tmp_path: Path, spawned: Spawned, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stat line cannot tell here (as for a process the reader may not ptrace): only
    # an event or a full sweep finds the exec.
    monkeypatch.setattr(procfs, "exec_mark", lambda _raw: None)
    go = tmp_path / "go"
    trainer = tmp_path / "train_lost_event.py"
    trainer.write_text("import time\ntime.sleep(60)\n")
    waiter = (
        "import os, sys, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
        "os.execv(sys.executable, [sys.executable, os.environ['TRAINER']])\n"
    )
    pid = spawned.start(
        [sys.executable, "-c", waiter], env={**os.environ, "TRAINER": str(trainer)}
    ).pid
    d = Daemon(config(tmp_path))
    feed = FakeFeed(EventBatch())
    d.scanner.events = feed
    poll("the waiter in the table", lambda: (d.tick(1_000_000.0), d.scanner.table.get(pid))[1], 10)
    go.touch()
    poll("the exec", lambda: str(trainer) in Path(f"/proc/{pid}/cmdline").read_text(), 10, 0.02)
    summary = d.tick(1_000_001.0)  # no event for it (lost): the same comm hides the exec
    assert summary.result is not None and all(j.root_pid != pid for j in summary.result.jobs)
    feed.batch = EventBatch(full_sweep=True)
    summary = d.tick(1_000_002.0)
    assert summary.result is not None and summary.result.full_sweep
    assert [j.root_pid for j in summary.result.jobs if j.root_pid == pid] == [pid]
    assert feed.sweeps == 1
    feed.batch = EventBatch(full_sweep=True)  # again at once: postponed, not repeated
    summary = d.tick(1_000_003.0)
    assert summary.result is not None and not summary.result.full_sweep and feed.sweeps == 1
    d.db.close()


def test_a_failing_reader_turns_to_polling_and_asks_for_a_sweep(tmp_path: Path) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    theirs.setblocking(False)
    woke = threading.Event()

    def broken(_p: Proc) -> bool:
        raise RuntimeError("candidate check failed")

    source = ProcEventSource("/proc", broken, wake=woke.set, opener=lambda _n: theirs)
    source.start()
    try:
        ours.send(message(PROC_EVENT_EXEC, os.getpid(), os.getpid()))
        assert woke.wait(10)
        poll("the thread to stop", lambda: source.available is False, 10, 0.02)
        assert source.status()["mode"] == "polling"
        assert source.reason == (
            "kernel process events stopped (RuntimeError('candidate check failed')); "
            "polling instead"
        )
        assert source.drain().full_sweep
    finally:
        source.stop()
        ours.close()


def test_an_exit_drops_the_maps_checks_of_its_exec(
    tmp_path: Path, spawned: Spawned, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A storm of short programs (a shell loop, make) must not cost three maps opens per
    # exec after each has exited; a process still running is checked as before.
    monkeypatch.setattr("rogue_watchdog.sources.procevents.MAPS_CHECK_DELAYS_S", (0.2, 0.4))
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    theirs.setblocking(False)
    source = ProcEventSource(
        "/proc", lambda _p: False, gpu_libraries=("libcudart.so",), opener=lambda _n: theirs
    )
    source.start()
    try:
        kept = spawned.start(["sleep", "60"]).pid
        ended = spawned.start(["sleep", "60"]).pid
        ours.send(message(PROC_EVENT_EXEC, kept, kept))
        # One datagram: the exec (its command line read at once) and then its exit.
        ours.send(
            message(PROC_EVENT_EXEC, ended, ended)
            + message(PROC_EVENT_EXIT, ended, ended, 0, 9, 1, 1)
        )
        poll("both checks of the one running", lambda: source.counters.maps_reads >= 2, 10, 0.02)
        time.sleep(0.5)
        assert source.counters.maps_reads == 2  # the exited one's two checks: dropped
        assert source.counters.events["exec"] == 2 and source.counters.missed == 0
        assert source._maps_pending == {}  # nothing left behind after the last check
    finally:
        source.stop()
        ours.close()


def test_the_exec_candidate_answer_is_kept_per_command_and_per_launchers(
    tmp_path: Path,
) -> None:
    d = Daemon(config(tmp_path), None)
    source = attach_events(d)
    assert source is not None
    train = Proc(5, 0, 0, "R", "", exe="/usr/bin/python3", cmdline=("python3", "train.py"))
    tail = Proc(6, 0, 0, "R", "", exe="/usr/bin/tail", cmdline=("tail", "-f", "train.py"))
    assert [source.is_candidate(p) for p in (train, tail, train)] == [True, False, True]
    # A reload with other launchers: the kept answers are not reused.
    d.config = config(tmp_path, "training: {launchers: ['(^|/)tail$']}\n")
    assert [source.is_candidate(p) for p in (train, tail)] == [False, True]
    # A command line too long to keep is still answered.
    long = Proc(7, 0, 0, "R", "", exe="/usr/bin/tail", cmdline=("tail", "-f", "x" * 600))
    assert source.is_candidate(long) is True
    d.db.close()


def test_a_storm_of_member_exits_keeps_how_the_root_ended(tmp_path: Path) -> None:
    """Fresh-user hour, 2026-12-06: a 4,096-process job ended in the same tick as a cron
    ghost's 20 s run; the members' exit statuses evicted the ghost root's (the newest
    4,096 were kept), so its next run had no evidence of how the first ended and was
    paged as ``respawned``, every minute. Before: the root's status was lost (``{}``).
    Now only roots (and captured processes) are kept: the root's ``exited`` status
    stays, whatever its members do."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    theirs.setblocking(False)
    woke = threading.Event()
    source = ProcEventSource(
        "/proc", lambda _p: False, gpu_libraries=(), wake=woke.set, opener=lambda _n: theirs
    )
    root, members = 4_000_000, range(4_000_001, 4_005_001)
    source.roots = frozenset({root})
    source.watched = frozenset({root, *members})
    source.start()
    try:
        ours.send(message(PROC_EVENT_EXIT, root, root, 0, 17, 1, 1))
        batch = list(members)
        for i in range(0, len(batch), 50):
            ours.send(b"".join(message(PROC_EVENT_EXIT, p, p, 9, 17, root, root)
                               for p in batch[i : i + 50]))  # fmt: skip
        poll("every exit read", lambda: source.counters.events.get("exit", 0) >= 5001, 20, 0.02)
        assert source.exits() == {root: 0}
    finally:
        source.stop()
        ours.close()


def test_a_storm_that_lasts_is_read_in_sparser_rounds() -> None:
    """Reading rounds begin at most every 2 ms in a storm, every 8 ms for the next
    second after a second that brought 600 datagrams a second or more (200 programs:
    the wake-ups were most of a 500 execs/s storm's cost, issue 34); a busy host below
    that rate keeps 2 ms."""
    from rogue_watchdog.sources.procevents import (
        ROUND_SPACING_S,
        SUSTAINED_SPACING_S,
        SUSTAINED_STORM_RATE,
        SUSTAINED_STORM_S,
        storm_spacing_s,
    )

    assert (ROUND_SPACING_S, SUSTAINED_SPACING_S) == (0.002, 0.008)
    assert (SUSTAINED_STORM_RATE, SUSTAINED_STORM_S) == (600, 1.0)
    assert storm_spacing_s(1500, 1.0) == SUSTAINED_SPACING_S  # 500 execs/s
    assert storm_spacing_s(600, 1.0) == SUSTAINED_SPACING_S
    assert storm_spacing_s(599, 1.0) == ROUND_SPACING_S
    assert storm_spacing_s(300, 1.0) == ROUND_SPACING_S  # a build: 100 programs a second
    assert storm_spacing_s(1500, 5.0) == ROUND_SPACING_S  # a second's storm, then quiet
    assert storm_spacing_s(0, 0.0) == ROUND_SPACING_S


def test_status_after_a_reload_names_the_reloads_walk_not_a_first_scan(tmp_path: Path) -> None:
    """A fresh user's first day: `status` after a SIGHUP reload said `process events:
    ... full walks, last: first scan` of a daemon that had scanned for hours (the reload
    builds a new scanner, whose walk started over). Now the walk goes on: the counts
    stand and its last full walk is said to be the reload's. `Daemon.reload` is what
    SIGHUP runs (`request_reload`); the feed stands in for the kernel's, re-attached on
    reload as `attach_events` does."""
    from tests.unit.test_status import quiet_proc_root

    path = tmp_path / "c.yaml"
    path.write_text(
        f"nvml: {{enabled: false}}\npaths: {{proc_root: '{quiet_proc_root(tmp_path)}'}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', interval_s: 60}}\n"
        f"alerts:\n  sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]\n"
    )
    d = Daemon(load_config(str(path)), str(path))
    feed = FakeFeed(EventBatch(complete=True))

    def reattach(daemon: Daemon) -> None:
        daemon.scanner.events = feed  # type: ignore[assignment]

    reattach(d)
    d.on_reload.append(reattach)
    for i in range(3):
        feed.batch = EventBatch(complete=True)
        d.tick(1_000_000.0 + i)
    walks = ("full_walks", "event_walks", "last_full_walk_reason")
    assert [build_status(d)["events"][k] for k in walks] == [1, 2, "first scan"]
    assert d.reload()
    feed.batch = EventBatch(complete=True)
    d.tick(1_000_010.0)
    doc = build_status(d)
    assert [doc["events"][k] for k in walks] == [2, 2, "config reload"]
    assert "; 2 scans by events, 2 full walks, last: config reload)" in render_status(
        json.loads(json.dumps(doc))
    )
    d.db.close()

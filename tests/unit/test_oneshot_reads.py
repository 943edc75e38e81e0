"""The one-shot scan reads fd tables only where they can change its answer (issue 34,
item 2): while NVML sees every GPU, the family lines of GPU candidates (NVML-listed, a
launcher's command line, CUDA libraries mapped); every process when NVML is off or blind,
and always in the daemon. Real processes, device fds on plain files, the stand-in NVML."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rogue_watchdog.config import Config, parse_config
from rogue_watchdog.lineage.base import is_wrapper
from rogue_watchdog.model import Job
from rogue_watchdog.scan import Scanner
from rogue_watchdog.sources.devfd import DeviceFdSource, related
from rogue_watchdog.sources.gpulibs import GpuLibraryCache
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import Spawned, need_program
from tests.fakenvml.fixtures import fake_nvml, library_path
from tests.unit.test_jobs import wait_for

# A parent holding the device forks a launcher-named child that drops it (exec'd under
# a launcher name) and a plain child that keeps it.
FAMILY = """
import os, sys, time
dev = open(sys.argv[1], "rb")
kid = os.fork()
if kid == 0:
    dev.close()
    os.execv("/bin/sleep", ["train_oneshot_child.py", "120"])
keeper = os.fork()
if keeper == 0:
    time.sleep(120)
    os._exit(0)
with open(sys.argv[2], "w") as fh:
    fh.write(f"{kid} {keeper}")
time.sleep(120)
"""
# Holds the device, maps no CUDA library, is no launcher and is related to no candidate.
LONE = "import sys, time\ndev = open(sys.argv[1], 'rb')\ntime.sleep(120)\n"


class CountingTable(ProcessTable):
    """A process table that records whose fd table was read."""

    def __init__(self, proc_root: str = "/proc") -> None:
        super().__init__(proc_root)
        self.fd_reads: list[int] = []

    def fd_targets(self, pid: int) -> list[str]:
        self.fd_reads.append(pid)
        return super().fd_targets(pid)


def start(spawned: Spawned, tmp_path: Path) -> tuple[Path, int, int, int, int]:
    """The family and the lone holder; ``(device, parent, launcher child, keeper, lone)``."""
    dev = tmp_path / "nvidia0"
    dev.write_bytes(b"")
    (tmp_path / "family.py").write_text(FAMILY)
    (tmp_path / "lone_holder.py").write_text(LONE)
    kids = tmp_path / "kids"
    parent = spawned.start([sys.executable, str(tmp_path / "family.py"), str(dev), str(kids)])
    lone = spawned.start([sys.executable, str(tmp_path / "lone_holder.py"), str(dev)])
    kid, keeper = (int(x) for x in wait_for(kids).split())
    deadline = time.time() + 10
    while time.time() < deadline:  # the child's exec and the lone holder's open
        if b"train_oneshot_child" in Path(f"/proc/{kid}/cmdline").read_bytes() and any(
            str(dev) == p.readlink().as_posix() for p in Path(f"/proc/{lone.pid}/fd").iterdir()
        ):
            break
        time.sleep(0.05)
    return dev, parent.pid, kid, keeper, lone.pid


def config(tmp_path: Path, nvml: str) -> Config:
    return parse_config(
        f"nvml: {nvml}\ntraining: {{device_glob: '{tmp_path}/nvidia[0-9]*'}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n",
        "test.yaml",
    )


def seeing_nvml(tmp_path: Path) -> str:
    """The stand-in NVML with one GPU and nothing on it: available, not blind."""
    need_program("gcc")
    lib = fake_nvml(tmp_path, {"devices": [{"uuid": "GPU-oneshot", "total": 1 << 34}]})
    return f"{{library: '{library_path(lib)}'}}"


def mine(jobs: list[Job], pids: set[int]) -> dict[int, tuple[list[int], list[str], list[str]]]:
    return {j.root_pid: (j.pids, j.evidence, j.devices) for j in jobs if pids & set(j.pids)}


def test_family_lines_only_while_nvml_sees_every_gpu(spawned: Spawned, tmp_path: Path) -> None:
    dev, parent, kid, keeper, lone = start(spawned, tmp_path)
    # Plain processes of the test's own, related to nothing that trains: a one-shot reads
    # none of their fd tables. (A count over the whole host read depended on what else ran
    # beside it: another test's 4,096 launcher-named workers are candidates.)
    plain = {spawned.start(["sleep", "120"]).pid for _ in range(8)}
    cfg = config(tmp_path, seeing_nvml(tmp_path))
    ours = {parent, kid, keeper, lone}
    one = Scanner(cfg, resolvers=[], remember=False, one_shot=True)
    full = Scanner(cfg, resolvers=[], remember=False)
    one.table = CountingTable()
    try:
        once = one.scan()
        daemon = full.scan()
    finally:
        # nvmlShutdown: a test leaving NVML initialised makes every later test of this
        # process that loads another stand-in library see "another NVML library ... is
        # in use" (the trust simulator's replays, in the same xdist worker).
        for scanner in (one, full):
            close = getattr(scanner.gpu_source, "close", None)
            if close is not None:
                close()
    assert once.nvml.available and not once.gpu_blind
    # The family is the same job either way: the parent holds the device (a trainer
    # above the launcher), its members and devices as a full sweep finds them.
    family = (
        [parent, kid, keeper],
        ["device-fd", "launcher"],
        [str(dev)],
    )
    assert mine(once.jobs, ours) == {parent: family}
    # The lone holder (no CUDA mapped, no launcher, NVML does not list it) is what a
    # one-shot leaves unread while NVML sees every GPU; the daemon's sweep finds it.
    assert mine(daemon.jobs, ours) == {parent: family, lone: ([lone], ["device-fd"], [str(dev)])}
    reads = set(one.table.fd_reads)
    assert {parent, kid, keeper} <= reads
    assert lone not in reads
    assert plain <= set(one.table.procs) and not plain & reads


def test_every_fd_table_when_nvml_is_off(spawned: Spawned, tmp_path: Path) -> None:
    dev, parent, kid, keeper, lone = start(spawned, tmp_path)
    cfg = config(tmp_path, "{enabled: false}")
    once = Scanner(cfg, resolvers=[], remember=False, one_shot=True).scan()
    got = mine(once.jobs, {parent, kid, keeper, lone})
    assert got[lone] == ([lone], ["device-fd"], [str(dev)])
    assert got[parent][2] == [str(dev)]


def test_related_is_seeds_ancestors_and_descendants(spawned: Spawned, tmp_path: Path) -> None:
    _dev, parent, kid, keeper, lone = start(spawned, tmp_path)
    table = ProcessTable()
    table.refresh()
    fam = related(table, [kid])
    assert {kid, parent} <= fam
    assert keeper not in fam and lone not in fam  # a sibling is no ancestor
    assert {parent, kid, keeper} <= related(table, [parent])
    assert related(table, [2**22 + 1]) == set()  # a seed the table lacks
    # An ancestor found holding the device roots the job: its other children are read.
    holders = DeviceFdSource(f"{tmp_path}/nvidia[0-9]*").holders(table, 0.0, seeds={kid})
    assert set(holders) == {parent, keeper}


def test_wrappers_maps_are_not_read_until_they_exec(spawned: Spawned, tmp_path: Path) -> None:
    # A shell's maps cannot change the answer (the scan counts no library a wrapper
    # maps), so they are not read; once it execs a program, that program's are.
    need_program("gcc")
    (tmp_path / "cuda.c").write_text("int cuInit(unsigned int f) { (void)f; return 0; }\n")
    lib = tmp_path / "libcuda.so.1"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "cuda.c")], check=True
    )
    go = tmp_path / "go"
    # bash holds the stand-in library mapped (LD_PRELOAD) while it waits, then execs
    # python, which maps it too.
    up = tmp_path / "up"
    # python says when it runs: the loader maps LD_PRELOAD after the exec, so the
    # name changing is no sign the library is mapped yet (a KeyError under load).
    code = f"import pathlib, time; pathlib.Path({str(up)!r}).touch(); time.sleep(60)"
    then = f'exec {sys.executable} -c "{code}"'
    # The same holds for bash: it says so (a builtin redirection, no child) once its
    # script runs, which is after the loader mapped LD_PRELOAD (CI's KeyError under
    # load, stop 43: the maps were read between bash's exec and the loader's mmap).
    waiting = tmp_path / "waiting"
    shell = spawned.start(
        ["bash", "-c", f": > {waiting}; while [ ! -e {go} ]; do sleep 0.05; done; {then}"],
        env={"LD_PRELOAD": str(lib), "PATH": "/usr/bin:/bin"},
    )
    cache = GpuLibraryCache(("libcuda.so",), recheck_s=0.0)
    table = ProcessTable()
    deadline = time.time() + 30
    while time.time() < deadline and not waiting.exists():
        time.sleep(0.01)
    while time.time() < deadline and (
        table.get(shell.pid) is None or not is_wrapper(table.procs[shell.pid])
    ):
        table.refresh()
    assert is_wrapper(table.procs[shell.pid])
    assert shell.pid not in cache.holders(table, 1.0, skip=is_wrapper)
    assert cache.holders(table, 1.0)[shell.pid] == ("libcuda.so",)  # mapped all along
    cache = GpuLibraryCache(("libcuda.so",), recheck_s=0.0)
    cache.holders(table, 1.0, skip=is_wrapper)
    go.write_text("")
    while time.time() < deadline and (is_wrapper(table.procs[shell.pid]) or not up.exists()):
        table.refresh()
    assert not is_wrapper(table.procs[shell.pid])
    assert cache.holders(table, 2.0, skip=is_wrapper)[shell.pid] == ("libcuda.so",)


def test_the_daemons_sanctioned_record_is_read_when_it_exists(tmp_path: Path) -> None:
    # The state package is imported only when the database exists (start-up), and then
    # the one-shot starts from what the daemon sanctioned, as before.
    from rogue_watchdog.scan import remembered_sanctioned
    from rogue_watchdog.sources.procfs import boot_id
    from rogue_watchdog.state import StateDB

    state = tmp_path / "state"
    assert remembered_sanctioned(str(state), "/proc") == ({}, {})
    db = StateDB(state)
    db.set_sanctioned_procs({(4242, 1000): "pipeline"}, boot_id("/proc"), 0.0)
    db.close()
    assert remembered_sanctioned(str(state), "/proc") == ({(4242, 1000): "pipeline"}, {})
    cfg = config(tmp_path, "{enabled: false}")
    assert Scanner(cfg, resolvers=[], one_shot=True).sanctioned == {(4242, 1000): "pipeline"}


def test_socket_reads_are_shared_by_the_scopes_of_one_moment(spawned: Spawned) -> None:
    # Jobs started by one parent share their origin's processes: with one SocketReads,
    # each fd table is read once however many scopes name it, and the answers are those
    # of reads that share nothing.
    import socket

    from rogue_watchdog.sources import sockets

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    child = spawned.start(["sleep", "60"])
    scopes = [[os.getpid(), child.pid], [os.getpid()], [child.pid, os.getpid()]]
    alone = [sockets.scan_listening(s) for s in scopes]
    reads: list[int] = []
    real = sockets._socket_inodes

    def counted(proc_root: str, pid: int) -> list[int] | None:
        reads.append(pid)
        return real(proc_root, pid)

    sockets._socket_inodes = counted  # type: ignore[assignment]
    try:
        seen = sockets.SocketReads()
        shared = [sockets.scan_listening(s, "/proc", seen) for s in scopes]
    finally:
        sockets._socket_inodes = real  # type: ignore[assignment]
        server.close()
    assert [r.listening for r in shared] == [r.listening for r in alone]
    assert any(x.port == port and x.pid == os.getpid() for x in shared[1].listening)
    assert sorted(reads) == sorted({os.getpid(), child.pid})  # each read once


def test_maps_searched_once_answer_as_every_match(tmp_path: Path) -> None:
    # mapped_libraries' single search before going through the matches gives the answer
    # of every match of the pattern on maps texts with and without a listed library, near
    # misses, versions and deleted files.
    from rogue_watchdog.sources.gpulibs import library_pattern, mapped_libraries

    names = ("libcuda.so", "libcudart.so", "libtorch_cuda.so", "libnccl.so")
    row = "7f00-7f10 r-xp 00000000 08:01 1234 "
    texts = [
        "",
        row + "/usr/lib/x86_64-linux-gnu/libc.so.6\n",
        row + "/usr/lib/libcuda.so.1\n",
        row + "/usr/lib/libcuda.so\n",
        row + "/opt/libcudart.so.12 (deleted)\n" + row + "/opt/x/libnccl.so.2\n",
        row + "/opt/libcuda.so_backup/libz.so\n",  # a directory named like one
        row + "/opt/libcudaXso.1\n" + row + "/opt/mylibcuda.so.1\n",
        row + "/opt/torch/lib/libtorch_cuda.so",  # no final newline
        "libcuda.so.1 without a slash\n",
    ]
    pattern = library_pattern(names)
    assert pattern is not None
    for i, text in enumerate(texts):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "maps").write_text(text)
        every = tuple(sorted({m.group(1).decode() for m in pattern.finditer(text.encode())}))
        assert mapped_libraries(str(tmp_path), i, pattern) == every, text
    assert mapped_libraries(str(tmp_path), 4, pattern) == (
        "libcudart.so",
        "libnccl.so",
    )

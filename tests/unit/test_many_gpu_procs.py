"""Issue 32 case 8 / issue 34 item 3: one job of 4,096 GPU processes. Lineage and ignore
matching are shared across the processes of one parent (one walk per chain, one match per
distinct process), and the answer is the one a small twin of the job gets: same job shape,
verdict, origin, evidence and findings, with the counts scaled."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from rogue_watchdog.config import parse_config
from rogue_watchdog.model import Proc
from rogue_watchdog.policy.jobs import TrainingEvidence, _roots, ignore_match, ignored_pids
from rogue_watchdog.scan import release_memory
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import Spawned, need_program, poll, run_cli
from tests.fakenvml.fixtures import fake_nvml, library_path

MIB = 1 << 20

LAUNCHER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
/* train_many.py N: fork N sleeping workers, print their PIDs, then "ready". */
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) { for (;;) pause(); }
        if (pid < 0) return 1;
        printf("%d\n", (int)pid);
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}
"""


def _roots_per_process(
    table: ProcessTable, ev: TrainingEvidence, ignored: set[int]
) -> dict[int, int]:
    """The grouping before issue 34 item 3: one ancestor walk per training process."""
    training = set(ev.by_pid) - set(ignored)
    roots: dict[int, int] = {pid: pid for pid in ignored if pid in ev.by_pid}
    for pid in training:
        root = pid
        for anc in table.ancestors(pid)[1:]:
            if anc.pid in training and anc.pid > 1:
                root = anc.pid
        roots[pid] = root
    for pid in list(roots):
        if pid in ignored and any(a.pid in training for a in table.ancestors(pid)[1:]):
            del roots[pid]
    return roots


def _table(tmp_path: Path, parents: dict[int, int]) -> ProcessTable:
    table = ProcessTable(str(tmp_path / "no-proc"))
    table._procs.update(
        {pid: Proc(pid, ppid, 100 + pid, "S", "w", cmdline=("w",)) for pid, ppid in parents.items()}
    )
    return table


def test_roots_are_those_of_one_walk_per_process(tmp_path: Path) -> None:
    """A launcher (10) with 4,096 training workers, each of the first 64 with a training
    grandchild; a training chain under a non-training wrapper; PID 1 training; an ignored
    worker inside the tree and one outside; a parent loop (a fixture tree can have one);
    a worker whose parent is not visible. The shared walk gives what one walk per process
    gave."""
    parents = {1: 0, 5: 1, 10: 5}
    parents.update({w: 10 for w in range(1000, 1000 + 4096)})
    parents.update({20000 + i: 1000 + i for i in range(64)})  # grandchildren
    parents.update({30: 1, 31: 30, 32: 31})  # 31 is no trainer, 30 and 32 are
    parents.update({40: 41, 41: 42, 42: 40})  # a loop
    parents.update({50: 9999, 60: 1})  # 9999 is not visible; 60 ignored
    table = _table(tmp_path, parents)
    ev = TrainingEvidence()
    for pid in [1, 10, 30, 32, 40, 41, 50, 60, *range(1000, 1000 + 4096), *range(20000, 20064)]:
        ev.add(pid, "nvml")
    ignored = {1500, 60}
    got = _roots(table, ev, ignored)
    assert got == _roots_per_process(table, ev, ignored)
    assert {got[w] for w in range(1000, 1000 + 4096) if w != 1500} == {10}
    assert {got[g] for g in range(20000, 20064)} == {10}
    assert 1500 not in got  # ignored inside a training tree: a member, no root
    assert 60 not in got  # ignored, and PID 1 above it trains here
    assert (got[1], got[10], got[30], got[32], got[50]) == (1, 10, 30, 30, 50)
    assert (got[40], got[41]) == (41, 40)  # each loop member: the walk from it decides


def test_ignore_matching_is_once_per_distinct_process(tmp_path: Path) -> None:
    cfg = parse_config(
        "ignore:\n  - {name: notebooks, cmdline: 'jupyter*'}\n  - {name: bob, user: bob}\n",
        "t.yaml",
    )
    procs = [
        Proc(100 + i, 1, 5, "S", "c", uid=0, user=user, cmdline=(cmd, "x"))
        for i, (cmd, user) in enumerate(
            [("jupyter-lab", "root"), ("python3", "root"), ("python3", "bob")] * 1000
        )
    ]
    want = frozenset(p.pid for p in procs if ignore_match(p, cfg.ignore) is not None)
    assert ignored_pids(procs, cfg.ignore) == want
    assert len(want) == 2000


def _launch(spawned: Spawned, binary: Path, n: int) -> tuple[int, list[int]]:
    proc = spawned.start([str(binary), str(n)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    workers = []
    for line in proc.stdout:
        if line.strip() == b"ready":
            break
        workers.append(int(line))
    assert len(workers) == n
    return proc.pid, workers


def _scan(tmp_path: Path, root: int, workers: list[int], name: str) -> dict[str, Any]:
    lib = fake_nvml(
        tmp_path / name,
        {
            "driver": "550.54.15",
            "devices": [
                {
                    "name": "NVIDIA H200", "uuid": "GPU-many", "total": 1 << 50,
                    "used": len(workers) * 64 * MIB,
                    "processes": [{"pid": p, "mem": 64 * MIB} for p in workers],
                }
            ],
        },
    )  # fmt: skip
    cfg = tmp_path / name / "cfg.yaml"
    cfg.write_text(
        f"nvml: {{library: '{library_path(lib)}'}}\n"
        f"training: {{device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
        f"daemon: {{state_dir: '{tmp_path / name}-state'}}\n"
    )
    done = run_cli("scan", "--json", "--config", str(cfg), timeout=240)
    assert done.returncode == 1, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    [job] = [j for j in doc["jobs"] if j["root_pid"] == root]
    findings = [f for f in doc["findings"] if f.get("root_pid") == root]
    return {"job": job, "findings": findings, "case": name}


def _shape(seen: dict[str, Any], root: int, workers: list[int], memory_text: str) -> str:
    """The scan's job and findings as JSON text, with what must scale replaced by names:
    the PIDs (a list of them by its length), the member count, the memory."""
    n = len(workers)
    members = [root, *sorted(workers)]
    start = seen["findings"][0]["details"]["root"][1]  # the root: (PID, start ticks)

    def norm(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items() if k not in ("start_time", "runtime_s")}
        if isinstance(value, list):
            return f"{len(value) - n} + N PIDs" if value == members else [norm(v) for v in value]
        if value == str(n):
            return "N"
        if value in (root, start) and not isinstance(value, bool):
            return "ROOT" if value == root else "START"
        if value in (n * 64 * MIB, n, n + 1) and not isinstance(value, bool):
            return {n * 64 * MIB: "MEM", n: "N", n + 1: "N+1"}[value]
        return value

    # The lineage above the root is the test runner's own (its arguments may hold a number
    # equal to N, such as pytest's "-n 4"): the same processes in both scans, kept as read.
    root_line, *above = seen["job"]["lineage"]
    job = {**seen["job"], "lineage": [norm(root_line), *above]}
    text = json.dumps(
        {"job": {k: v if k == "lineage" else norm(v) for k, v in job.items()},
         "findings": norm(seen["findings"])},
        sort_keys=True,
    )  # fmt: skip
    for old, name in (
        (f"{root} {start}", "ROOT START"),  # details.incident: the job (PID, start ticks)
        (str(root), "ROOT"), (f"train_many.py {n}", "train_many.py N"),
        (f"/{seen['case']}/", "/CASE/"),
        (f"{n + 1} processes", "N+1 processes"), (memory_text, "MEM"),
    ):  # fmt: skip
        text = text.replace(old, name)
    return text


def test_a_4096_process_job_is_its_small_twin_scaled(spawned: Spawned, tmp_path: Path) -> None:
    """Before (bd663fe) and after: one rogue job rooted at the launcher with every worker
    as a member, 4,096 x 64 MiB on GPU-many, evidence launcher + nvml, one high
    ``rogue-job`` finding; the same, with the counts scaled, as for 4 workers."""
    need_program("gcc")
    src = tmp_path / "launcher.c"
    src.write_text(LAUNCHER_C)
    binary = tmp_path / "train_many.py"
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(src)], check=True)
    small_root, small_workers = _launch(spawned, binary, 4)
    small = _scan(tmp_path, small_root, small_workers, "small")
    big_root, big_workers = _launch(spawned, binary, 4096)
    big = _scan(tmp_path, big_root, big_workers, "big")

    job = big["job"]
    assert len(job["pids"]) == 4097
    assert job["gpu_memory_bytes"] == 4096 * 64 * MIB
    assert job["gpu_uuids"] == ["GPU-many"]
    assert job["evidence"] == ["launcher", "nvml"]
    assert job["verdict"] == "rogue"
    assert [(f["kind"], f["severity"]) for f in big["findings"]] == [("rogue-job", "high")]
    assert _shape(big, big_root, big_workers, "256.0 GiB") == _shape(
        small, small_root, small_workers, "256.0 MiB"
    )


def test_processes_alike_share_their_values_and_drop_them_when_gone(spawned: Spawned) -> None:
    """Three ``sleep`` processes with one command line hold one tuple of it (and one
    executable and cgroup text); once they are gone, no value is kept for them beyond
    what live processes hold (bounded: twice the table plus 256)."""
    argv = ["sleep", "3600.25"]
    pids = [spawned.start(argv).pid for _ in range(3)]
    # Each exec'd (a table read between fork and exec would see the parent's line).
    poll("sleep exec'd", lambda: all(_argv(p) == argv for p in pids), 10)
    table = ProcessTable("/proc")
    table.refresh()
    procs = [table.procs[p] for p in pids]
    assert procs[0].cmdline == ("sleep", "3600.25")
    assert procs[1].cmdline is procs[0].cmdline and procs[2].cmdline is procs[0].cmdline
    assert procs[1].exe is procs[0].exe and procs[1].cgroup is procs[0].cgroup
    for p in spawned.procs:
        p.kill()
        p.wait()
    table.refresh()
    assert not set(pids) & set(table.procs)
    assert len(table._values) <= 2 * len(table.procs) + 256
    stale = {(str(i),): (str(i),) for i in range(2 * len(table.procs) + 300)}
    table._values = {**table._values, **stale}
    table._drop_unshared()
    assert ("sleep", "3600.25") not in table._values
    assert ("0",) not in table._values


def _argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def test_release_memory_never_raises() -> None:
    assert release_memory() in (True, False)


def test_training_evidence_is_one_set_per_combination() -> None:
    # The workers of one job share their reasons' set: no set per PID per tick.
    from rogue_watchdog.policy.jobs import TrainingEvidence

    ev = TrainingEvidence()
    for pid in range(100, 4196):
        ev.add(pid, "nvml")
        ev.add(pid, "gpu-library")
    ev.add(7, "gpu-library")
    ev.add(7, "nvml")  # the same reasons in another order
    ev.add(8, "launcher")
    assert len({id(v) for v in ev.by_pid.values()}) == 2
    assert ev.by_pid[100] is ev.by_pid[7] == {"nvml", "gpu-library"}
    assert ev.by_pid[8] == {"launcher"}
    ev.add(9, "nvml", own=False)
    assert 9 not in ev.own and {100, 7, 8} <= ev.own

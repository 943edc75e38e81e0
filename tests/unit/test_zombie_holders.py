"""Whose job counts a zombie's GPU memory (issue 31, sim seed 3131).

NVML lists a dead process until its parent reaps it. The parent's job counts that memory
only when the parent is training itself (or below a trainer) or is an exclusive wrapper
of training; a hub, a person's shell, a multiplexer or a shell that also runs a web
server is never made a job by it: that job would hold what else it runs, and its
``terminate`` and by-hand ``kill`` would reach it. The guard refuses such a root
whatever grouped it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from rogue_watchdog.config import parse_config
from rogue_watchdog.model import GpuProcess
from rogue_watchdog.policy.guard import advise, protection
from rogue_watchdog.policy.jobs import TrainingEvidence, collect_training, group_jobs
from rogue_watchdog.sources.procfs import ProcessTable
from tests.fixtures.proc.fakeproc import FakeProc, make_context

PY = "/usr/bin/python3"
TRAIN = "/u/train_loop.py"
LOOP = f"while true; do python3 {TRAIN}; sleep 5; done"
GIB = 1 << 30
ZOMBIE = 60


def _shell(argv: Sequence[str]) -> FakeProc:
    return FakeProc(50, 1, argv, exe="/usr/bin/bash", uid=1000)


def _kill_zombie(root: Path, table: ProcessTable, known: bool) -> ProcessTable:
    """PID 60 exits and is not reaped: ``Z``, no command line. The table keeps the
    command line it read while 60 was alive (``known``); else a fresh table first sees
    a zombie."""
    stat = root / str(ZOMBIE) / "stat"
    stat.write_text(stat.read_text().replace(" S ", " Z ", 1))
    (root / str(ZOMBIE) / "cmdline").write_bytes(b"")
    (root / str(ZOMBIE) / "exe").unlink()
    if not known:
        table = ProcessTable(str(root))
    table.refresh()
    return table


def _scan(
    tmp_path: Path, holder: FakeProc, others: Sequence[FakeProc] = (), known: bool = True
) -> tuple[TrainingEvidence, ProcessTable]:
    procs = [
        FakeProc(1, 0, ["/sbin/init"]),
        holder,
        *others,
        FakeProc(ZOMBIE, holder.pid, [PY, TRAIN], exe=PY, uid=1000),
    ]
    root = tmp_path / "proc"
    ctx = make_context(root, procs)
    table = _kill_zombie(root, ctx.table, known)
    gpu = [GpuProcess(ZOMBIE, "GPU-a", 0, GIB, "compute")]
    launchers = parse_config("", "c.yaml").training.launchers
    return collect_training(table, gpu, {}, launchers), table


@pytest.mark.parametrize("known", [True, False])
def test_an_exclusive_loop_shell_holding_its_trainer_is_the_job(
    tmp_path: Path, known: bool
) -> None:
    """Kept as before: `bash -c 'while true; do python3 train_loop.py; ...'` runs only
    the trainer; killing it frees the memory and ends the loop."""
    ev, table = _scan(tmp_path, _shell(["bash", "-c", LOOP]), known=known)
    assert (ev.held, ev.unheld, ev.by_pid, ev.own) == ({ZOMBIE: 50}, {}, {50: {"nvml"}}, set())
    gpu = [GpuProcess(ZOMBIE, "GPU-a", 0, GIB, "compute")]
    [job] = group_jobs(table, ev, gpu, {})
    assert (job.root_pid, job.pids, job.gpu_memory_bytes) == (50, [50, ZOMBIE], GIB)


def test_a_shell_that_also_runs_a_web_server_is_no_job_for_it(tmp_path: Path) -> None:
    """The seed-3131 case: before, the shell was a job of [50, 51, 60] (51 the web
    server), its plan and `kill -TERM -- -50` reaching the web server."""
    web = FakeProc(51, 50, [PY, "-m", "http.server"], exe=PY, uid=1000)
    ev, table = _scan(tmp_path, _shell(["bash", "-c", f"python3 -m http.server & {LOOP}"]), [web])
    assert (ev.held, ev.by_pid) == ({}, {})
    assert ev.unheld == {ZOMBIE: f"it runs other work: PID 51 `{PY} -m http.server`"}
    assert group_jobs(table, ev, [GpuProcess(ZOMBIE, "GPU-a", 0, GIB, "compute")], {}) == []


def test_a_hub_holding_a_trainer_is_no_job_and_its_live_trainer_is_its_own(
    tmp_path: Path,
) -> None:
    """A service's own process that launches trainers does other work: it holds the
    zombie of one run while the next runs; only the live run is a job."""
    hub = FakeProc(50, 1, [PY, "/srv/hub/hub_server.py"], exe=PY)
    run = FakeProc(52, 50, [PY, "/srv/hub/train_hub.py"], exe=PY)
    ev, table = _scan(tmp_path, hub, [run])
    assert (ev.held, ev.by_pid) == ({}, {52: {"launcher"}})
    assert ev.unheld == {
        ZOMBIE: "it is no training process and no wrapper of one (it may do other work)"
    }
    [job] = group_jobs(table, ev, [GpuProcess(ZOMBIE, "GPU-a", 0, GIB, "compute")], {})
    assert (job.root_pid, job.pids, job.gpu_memory_bytes) == (52, [52], None)


@pytest.mark.parametrize(
    ("holder", "why"),
    [
        (["-bash"], "its command line does not run the trainer's (train_loop.py)"),
        (
            ["tmux", "new-session", "-d", LOOP],
            "it is a terminal multiplexer (it holds other sessions)",
        ),
    ],
)
def test_a_persons_shell_or_a_multiplexer_is_no_job_for_it(
    tmp_path: Path, holder: list[str], why: str
) -> None:
    exe = "/usr/bin/tmux" if holder[0] == "tmux" else "/usr/bin/bash"
    ev, _ = _scan(tmp_path, FakeProc(50, 1, holder, exe=exe, uid=1000))
    assert (ev.held, ev.by_pid, ev.unheld) == ({}, {}, {ZOMBIE: why})


def test_a_trainer_holding_its_worker_counts_it(tmp_path: Path) -> None:
    """A training process holding an exited worker: its own job counts the memory."""
    ev, table = _scan(tmp_path, FakeProc(50, 1, [PY, "/u/train_main.py"], exe=PY, uid=1000))
    assert (ev.held, ev.unheld, ev.by_pid, ev.own) == (
        {ZOMBIE: 50}, {}, {50: {"launcher"}}, {50}
    )  # fmt: skip
    [job] = group_jobs(table, ev, [GpuProcess(ZOMBIE, "GPU-a", 0, GIB, "compute")], {})
    assert (job.root_pid, job.pids, job.gpu_memory_bytes) == (50, [50, ZOMBIE], GIB)


def test_the_guard_refuses_a_root_made_a_job_by_a_zombie_that_runs_other_work(
    tmp_path: Path,
) -> None:
    """Whatever grouped it: a root with no training evidence of its own is a target only
    as an exclusive wrapper of training; the advice is refused, no PID named."""
    web = FakeProc(51, 50, [PY, "-m", "http.server"], exe=PY, uid=1000)
    _, table = _scan(tmp_path, _shell(["bash", "-c", f"python3 -m http.server & {LOOP}"]), [web])
    ev = TrainingEvidence()
    ev.add(50, "nvml", own=False)  # as the grouping before issue 31 did
    [job] = group_jobs(table, ev, [], {})
    assert job.pids == [50, 51, ZOMBIE]
    config = parse_config("", "c.yaml")
    guard = protection([job], config, table=table, trainers=set())
    advice = advise(job, guard, table, config)
    assert advice.refused == (
        "PID 50 is a job only for the GPU memory of a zombie it has not reaped, and it runs "
        f"other work: PID 51 `{PY} -m http.server`: never signalled for it (the memory is "
        "freed when it reaps the zombie or exits)"
    )
    assert (advice.stop_pids, advice.by_hand) == ((), None)
    # An exclusive wrapper stays a target: the web server gone, the shell runs only the run.
    (tmp_path / "proc" / "51" / "stat").unlink()
    table.refresh()
    [job] = group_jobs(table, ev, [], {})
    guard = protection([job], config, table=table, trainers=set())
    advice = advise(job, guard, table, config)
    assert (advice.refused, advice.stop_pids) == (None, (50, ZOMBIE))

"""Counterexamples the lifecycle simulator (tests/sim/machine.py, bench/trust_sim.py)
found, each kept as a plain test of its exact right value.

1. I6 (seed 1): a ``cron.d`` file made group/other-writable (0666) while its run was
   alive was still named as the run's live source. Debian cron refuses such a file
   ("BAD FILE MODE"): it is no crontab, and the running job's entry is ``ignored``.
2. I2 (seed 1): two launches of the same command in the same second, 2 and 3 workers
   (`train_w.py --rank N`, each in its own session), were merged into one job: the plan
   for the first would have signalled the second's workers. One launch has each rank once.
3. I5 (seed 1): the CRON child of a cron job exited (its shell re-parented to PID 1) and
   the daemon restarted: the fresh look called the job an orphan, its signature changed,
   and the same job got a second rogue-job finding. Origins of running jobs survive a
   restart.
4. I5 (seed 0): a run whose line was edited before the first look (no line runs its
   command: rogue, origin "entry gone") lost its CRON parent; the next look called it an
   orphan, the signature changed and the same job got a second finding. A job keeps
   the signature it first had for its life.
5. I2 (seed 2, then read back): the sim's "shared" shell became exclusive once its web
   server exited, so signalling it was right; reading the rule again showed the one
   that is not: a login shell (``-bash``) whose only child is the trainer is the
   person's session, never the job's wrapper.
6. I4/I5 (seed 77031): a ghost run started while the sanctioned line was identical to
   its own (excess, not rogue) lost that alternative when the sanctioned line was
   edited: rogue while it read ``flock``, excess again under a new finding id once
   restored. The lines that can have started a process are kept from the first look.
7. I4/I5 (seed 20261203, 100,000 steps): the same two ghost runs, with a daemon restart
   before and after the edit. A restart restored the first look's origin only for the
   root the ``jobs`` row names (one per signature: the sanctioned run), not for the
   excess copy beside it: rogue under the edit, excess again under a new id once
   restored. Every run of a present job keeps its recorded origin across a restart.
8. I2 (seed 3131, issue 31): a trainer left a zombie by a shell that also runs a web
   server made the shell a job (a zombie's memory counted for its parent), the web
   server one of its members: planned, advised and, in terminate mode, signalled. A
   zombie's memory makes its parent a job only when it trains or is an exclusive
   wrapper of training. Beside it: the pipeline's cron ``sh -c`` holding its sanctioned
   run unreaped was a rogue job of its own; a wrapper of a sanctioned run is none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.lineage.cron import CronResolver, entry_state
from rogue_watchdog.lineage.cronfiles import cron_skips, list_crontabs
from rogue_watchdog.model import CronOrigin
from rogue_watchdog.policy.jobs import TrainingEvidence, group_jobs
from tests.fixtures.proc.fakeproc import FakeProc, make_context, write_tree

PY = "/usr/bin/python3"
SCRIPT = "/srv/pipeline/train.py"


def test_a_group_writable_cron_d_file_is_no_crontab(tmp_path: Path) -> None:
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir()
    line = f"* * * * * root {PY} {SCRIPT}"
    pipeline = cron_d / "pipeline"
    pipeline.write_text(f'MAILTO=""\n{line}\n')
    pipeline.chmod(0o644)
    listed = list_crontabs((), str(cron_d), ())
    assert [f.path for f in listed.files] == [str(pipeline)]
    pipeline.chmod(0o666)
    assert cron_skips(str(pipeline), True) == "mode 0666: writable by group or others"
    assert list_crontabs((), str(cron_d), ()).files == []
    # A run that started while cron read it: its entry is no longer live.
    ctx = make_context(tmp_path / "proc", [FakeProc(1, 0, ["/sbin/init"])])
    ctx.cron_d_dir = str(cron_d)
    ctx.cron_files = ()
    origin = CronOrigin(file=str(pipeline), line=2, entry=line, schedule="* * * * *")
    assert entry_state(origin, ctx) == "ignored"
    pipeline.chmod(0o644)
    assert entry_state(origin, ctx) == "live"
    assert CronOrigin(file=str(pipeline), line=2, entry_state="ignored").source_gone() == (
        "cron no longer reads its crontab (writable by group or others, or not root's)"
    )
    assert CronResolver is not None  # the resolver reads the same listing


def test_two_launches_in_one_second_are_two_jobs(tmp_path: Path) -> None:
    procs = [FakeProc(1, 0, ["/sbin/init"])]
    pid = 100
    for workers in (2, 3):
        for rank in range(workers):
            pid += 1
            procs.append(
                FakeProc(pid, 1, [PY, "/home/u/train_w.py", "--rank", str(rank)], uid=1000)
            )
    ctx = make_context(tmp_path / "proc", procs)
    evidence = TrainingEvidence()
    for p in procs[1:]:
        evidence.add(p.pid, "launcher")
    jobs = group_jobs(ctx.table, evidence, [], {})
    assert sorted(sorted(j.pids) for j in jobs) == [[101, 102], [103, 104, 105]]


def test_a_restart_keeps_a_running_jobs_origin_and_its_finding(tmp_path: Path) -> None:
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir()
    proc = tmp_path / "proc"
    _cron_tree(proc, cron_d, f"* * * * * root {PY} {SCRIPT}")
    text = _config(tmp_path, cron_d)
    first = Daemon(parse_config(text, "t.yaml"), None)
    now = 1_800_000_000 + 61.0
    first.tick(now)
    (f1,) = [f for f in first.db.open_findings() if f.kind == "rogue-job"]
    assert f1.root_pid == 903 and f1.details["origin_kind"] == "cron"
    _cron_child_exits(proc)  # then a restart
    first.db.close()
    again = Daemon(parse_config(text, "t.yaml"), None)
    again.tick(now + 5)
    (f2,) = [f for f in again.db.open_findings() if f.kind == "rogue-job"]
    assert (f2.id, f2.root_pid, f2.details["origin_kind"]) == (f1.id, 903, "cron")
    again.db.close()


def _cron_child_exits(proc: Path) -> None:
    """cron's per-run child (901) exits: the job's shell (902) is re-parented to PID 1."""
    import shutil

    shutil.rmtree(proc / "901")
    shutil.rmtree(proc / "902")
    write_tree(
        proc,
        [FakeProc(902, 1, ["/bin/sh", "-c", f"{PY} {SCRIPT}"], exe="/usr/bin/dash", start=100)],
    )


def _cron_tree(proc: Path, cron_d: Path, line: str) -> list[FakeProc]:
    (cron_d / "pipeline").write_text(f'MAILTO=""\n{line}\n')
    (cron_d / "pipeline").chmod(0o644)
    proc.mkdir(exist_ok=True)
    (proc / "stat").write_text("btime 1800000000\n")
    tree = [
        FakeProc(1, 0, ["/sbin/init"]),
        FakeProc(900, 1, ["/usr/sbin/cron", "-f"], exe="/usr/sbin/cron"),
        FakeProc(901, 900, ["/usr/sbin/CRON", "-f"], exe="/usr/sbin/cron", start=100),
        FakeProc(902, 901, ["/bin/sh", "-c", f"{PY} {SCRIPT}"], exe="/usr/bin/dash", start=100),
        FakeProc(903, 902, [PY, SCRIPT], start=100),
    ]
    write_tree(proc, tree)
    return tree


def _config(tmp_path: Path, cron_d: Path) -> str:
    return (
        "nvml: {enabled: false}\n"
        f"paths: {{proc_root: '{tmp_path}/proc', crontab: '{tmp_path}/crontab',"
        f" cron_d: '{cron_d}', cron_spool: [], unit_dirs: []}}\n"
        f"training: {{device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]}}\n"
    )


def test_a_job_keeps_its_first_signature_and_its_finding(tmp_path: Path) -> None:
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir()
    proc = tmp_path / "proc"
    _cron_tree(proc, cron_d, f"* * * * * root flock -n /run/x.lock {PY} {SCRIPT}")
    d = Daemon(parse_config(_config(tmp_path, cron_d), "t.yaml"), None)
    now = 1_800_000_000 + 61.0
    d.tick(now)
    (f1,) = [f for f in d.db.open_findings() if f.kind == "rogue-job"]
    _cron_child_exits(proc)
    d.tick(now + 5)
    (f2,) = [f for f in d.db.open_findings() if f.kind == "rogue-job"]
    assert (f2.id, f2.root_pid, f2.details["root"]) == (f1.id, 903, [903, 100])
    d.db.close()


def test_a_login_shell_is_never_the_jobs_wrapper(tmp_path: Path) -> None:
    from rogue_watchdog.policy.guard import exclusive_wrappers

    procs = [
        FakeProc(1, 0, ["/sbin/init"]),
        FakeProc(50, 1, ["-bash"], exe="/usr/bin/bash", uid=1000),
        FakeProc(60, 50, [PY, "/home/u/train_a.py"], uid=1000, sid=50, pgid=60),
        FakeProc(70, 1, ["/usr/bin/timeout", "300", PY, "/home/u/train_b.py"], uid=1000),
        FakeProc(71, 70, [PY, "/home/u/train_b.py"], uid=1000),
    ]
    ctx = make_context(tmp_path / "proc", procs)
    evidence = TrainingEvidence()
    evidence.add(60, "launcher")
    evidence.add(71, "launcher")
    jobs = {j.root_pid: j for j in group_jobs(ctx.table, evidence, [], {})}
    assert exclusive_wrappers(jobs[60], ctx.table) == []
    assert [p.pid for p in exclusive_wrappers(jobs[71], ctx.table)] == [70]


def test_a_zombie_it_has_not_reaped_leaves_a_shell_the_jobs(tmp_path: Path) -> None:
    """Sim (seed 20261201): a shared shell's web server became a zombie the shell had not
    reaped. terminate took the shell as the job's (the zombie is gone already) while the
    advice still called it shared; both now agree: it exists only for the job."""
    from rogue_watchdog.policy.guard import exclusive_wrappers

    procs = [
        FakeProc(1, 0, ["/sbin/init"]),
        FakeProc(
            50,
            1,
            ["/bin/sh", "-c", f"python3 -m http.server & timeout 300 {PY} /u/train_a.py"],
            exe="/usr/bin/dash",
        ),
        FakeProc(51, 50, [PY, "-m", "http.server"]),
        FakeProc(52, 50, ["/usr/bin/timeout", "300", PY, "/u/train_a.py"]),
        FakeProc(53, 52, [PY, "/u/train_a.py"]),
    ]
    ctx = make_context(tmp_path / "proc", procs)
    evidence = TrainingEvidence()
    evidence.add(53, "launcher")
    (job,) = group_jobs(ctx.table, evidence, [], {})
    assert [p.pid for p in exclusive_wrappers(job, ctx.table)] == [52]  # 51 is alive
    stat = tmp_path / "proc" / "51" / "stat"
    stat.write_text(stat.read_text().replace(" S 50 ", " Z 50 "))
    (tmp_path / "proc" / "51" / "cmdline").write_bytes(b"")
    ctx.table.refresh()
    (job,) = group_jobs(ctx.table, evidence, [], {})
    assert [p.pid for p in exclusive_wrappers(job, ctx.table)] == [52, 50]


def _findings(state: Any) -> list[tuple[Any, ...]]:
    """Every finding the simulated daemon recorded: (id, kind, root PID, resolved at)."""
    rows = state.daemon.db.conn.execute(
        "SELECT id, kind, root_pid, resolved_at FROM findings ORDER BY id"
    ).fetchall()
    return [tuple(r) for r in rows]


def test_an_edited_then_restored_line_keeps_the_ghosts_excess_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulator's shrunk counterexample (seed 77031), replayed step by step.

    Two ghost runs start when the sanctioned line and the retired one are identical: the
    first is sanctioned, the second excess (the pipeline's line can as well have started
    it). The line is then edited to run under ``flock`` and restored. Before, each
    re-resolution replaced the first look's ``also`` with the lines identical now: the
    second run went rogue while the line read ``flock`` (F1 resolved, F2 rogue-job and
    F3 sanctioned-changed opened) and excess again once restored, under a new id (F4).
    What can have started a process is fixed when it starts: one finding, F1, all along.
    """
    from tests.sim.machine import TrustMachine

    monkeypatch.setattr(TrustMachine, "workdir", tmp_path)  # never the host's /tmp

    monkeypatch.setattr(TrustMachine, "events", False)  # found while it polled
    state = TrustMachine()
    try:
        state.ghost_fires()
        state.ghost_fires()
        state.tick(seconds=5.0)
        state.edit_pipeline_line(edit="flock")
        state.reload(cap=1, mode="observe")
        state.tick(seconds=5.0)
        last = state.daemon.last
        assert last is not None and last.result is not None
        (ghost,) = [j for j in last.result.jobs if j.verdict != "sanctioned"]
        assert (ghost.verdict, ghost.origin.label()) == ("excess", f"{state.host.legacy}:4")
        assert ghost.origin.also == (f"{state.host.pipeline}:2",)  # the first look's
        state.reload(cap=1, mode="observe")
        state.edit_pipeline_line(edit="restore")
        state.tick(seconds=5.0)
        assert _findings(state) == [(1, "excess-instances", ghost.root_pid, None)]
    finally:
        state.teardown()


def test_a_restart_keeps_the_first_look_of_every_copy_of_a_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulator's shrunk counterexample (seed 20261203), replayed step by step.

    Before: F1 excess-instances, resolved when the restarted daemon called the copy
    rogue (F2 rogue-job, the edited line no longer identical), then F3 excess-instances
    once the line was restored. After: one finding, F1, all along.
    """
    from tests.sim.machine import TrustMachine

    monkeypatch.setattr(TrustMachine, "workdir", tmp_path)  # never the host's /tmp

    monkeypatch.setattr(TrustMachine, "events", False)  # found while it polled
    state = TrustMachine()
    try:
        state.ghost_fires()
        state.ghost_fires()
        state.tick(seconds=5.0)
        state.restart()
        state.edit_pipeline_line(edit="flock")
        state.tick(seconds=5.0)
        last = state.daemon.last
        assert last is not None and last.result is not None
        (ghost,) = [j for j in last.result.jobs if j.verdict != "sanctioned"]
        assert ghost.verdict == "excess"
        assert ghost.origin.also == (f"{state.host.pipeline}:2",)  # the first look's
        state.restart()
        state.edit_pipeline_line(edit="restore")
        state.tick(seconds=5.0)
        assert _findings(state) == [(1, "excess-instances", ghost.root_pid, None)]
    finally:
        state.teardown()


def _plans(state: Any) -> dict[int, tuple[list[int], tuple[int, ...], list[int], str | None]]:
    """Each unsanctioned job of the last tick: root -> (members, advised stop PIDs,
    planned signals (the terminate plan's PIDs the live guard lets through), the by-hand
    command)."""
    from rogue_watchdog.actions.guards import LiveProc
    from rogue_watchdog.actions.remedy import Remedy, target_from_job
    from rogue_watchdog.actions.terminate import plan_tree

    last = state.daemon.last
    assert last is not None and last.result is not None
    host = state.host
    remedy = Remedy(
        state.daemon.config.enforcement, state.daemon.db, state.effects, actor="test",
        backup_dir=str(host.root / "backups"), proc_root=str(host.proc),
        spool_dirs=(str(host.spool),), crontab=str(host.etc / "crontab"),
        cron_d=str(host.cron_d), protection=last.result.protection, record_dry_runs=False,
    )  # fmt: skip
    out = {}
    for job in last.result.jobs:
        if job.unsanctioned:
            target = target_from_job(job, None, None, str(host.proc))
            guard = remedy.guard()
            plan = plan_tree(target.members, guard)
            planned = sorted(e.pid for e, _d in plan if isinstance(guard.check(e.pid, e), LiveProc))
            out[job.root_pid] = (job.pids, job.advice.stop_pids, planned, job.advice.by_hand)
    return out


def test_a_trainer_left_a_zombie_by_a_shared_shell_makes_no_job_of_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulator's shrunk counterexample (seed 3131, issue 31), replayed step by step.

    An orphaned `bash -c 'python3 -m http.server & while true; do python3 train_loop.py;
    sleep 5; done'` (PID 4000020, web server 4000021) whose trainer 4000022 exited and
    is not reaped yet. Before: the zombie's memory made the shell a rogue job of
    [4000020, 4000021, 4000022]; advice `kill -TERM -- -4000020`, stop PIDs all three,
    planned signals [4000020, 4000021], the web server included. After: no job holds
    any of them; the
    zombie-gpu-memory finding names the shell, says it runs other work and that nothing
    is signalled. Once the web server is gone the shell runs only the trainer's zombie:
    an exclusive wrapper, a job again as before (plan: the shell).
    """
    from tests.sim.machine import TrustMachine

    monkeypatch.setattr(TrustMachine, "workdir", tmp_path)  # never the host's /tmp

    monkeypatch.setattr(TrustMachine, "events", False)  # found while it polled
    state = TrustMachine()
    try:
        for _ in range(6):
            state.ghost_fires()
        state.gpu_user(what="notebook")
        state.shell_loop(shared=True)
        state.host.zombie(4000022)  # something_ends(how="zombie") drew the trainer
        state.tick(seconds=5.0)
        ghosts = {p: ([p], (), [p - 1, p], None) for p in range(4000006, 4000019, 3)}
        assert _plans(state) == {
            **ghosts,
            4000019: ([4000019], (4000019,), [4000019], "kill -TERM -- -4000019"),
        }
        last = state.daemon.last
        assert last is not None and last.result is not None
        [zombie] = [f for f in last.result.findings if f.kind == "zombie-gpu-memory"]
        assert (zombie.root_pid, zombie.details["holder_pid"]) == (None, None)
        assert zombie.message == (
            "zombie PID 4000022 holds 1.0 GiB on GPU 1; it has exited, not reaped by its "
            "parent PID 4000020 `bash -c python3 -m http.server & while true; do python3 "
            "/home/u/train_loop.py; …`: the memory is "
            "freed when PID 4000020 reaps it (wait(2)) or exits. PID 4000020 is no job for "
            "it: it runs other work: PID 4000021 `/usr/bin/python3 -m http.server`; nothing "
            "is signalled for it (signalling the zombie does nothing)"
        )
        state.host.exit(4000021)  # the web server ends: the shell exists only for the run
        state.tick(seconds=5.0)
        assert _plans(state)[4000020] == (
            [4000020, 4000022],
            (4000020, 4000022),
            [4000020],
            "kill -TERM -- -4000020",
        )
    finally:
        state.teardown()


def test_terminate_mode_never_signals_the_web_server_of_a_shell_holding_a_zombie(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other shrunk counterexample of seed 3131: the same shell in terminate mode.
    Before: the daemon terminated the shell as a rogue job: SIGSTOP, SIGTERM, SIGCONT to
    the shell 4000020 and its web server 4000021 (terminate `ok`, "PID 4000020 (3
    process(es))", after a refused disable-source). After: nothing is signalled
    and no terminate is recorded (the ghosts' runs are refused: their line may be the
    sanctioned one)."""
    from tests.sim.machine import TrustMachine

    monkeypatch.setattr(TrustMachine, "workdir", tmp_path)  # never the host's /tmp

    monkeypatch.setattr(TrustMachine, "events", False)  # found while it polled
    state = TrustMachine()
    try:
        for _ in range(4):
            state.ghost_fires()
        state.loops_run_again()
        state.ghost_fires()
        state.gpu_user(what="notebook")
        state.ghost_fires()
        state.shell_loop(shared=True)
        state.host.zombie(4000022)
        state.reload(cap=1, mode="terminate")
        state.restart()
        state.tick(seconds=5.0)
        assert state.effects.signals() == []
        rows = state.daemon.db.conn.execute(
            "SELECT kind, outcome, target FROM actions ORDER BY id"
        ).fetchall()
        assert [tuple(r) for r in rows] == [
            ("terminate", "refused", f"PID {pid}")
            for pid in (4000019, 4000015, 4000012, 4000009, 4000006)
        ]
        assert sorted(p for p in state.host.procs if p >= 4000020) == [4000020, 4000021, 4000022]
    finally:
        state.teardown()


def test_the_wrapper_of_a_sanctioned_run_holding_it_unreaped_is_no_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found beside seed 3131 (issue 31): the pipeline's cron `sh -c` (PID 4000002) holding
    its sanctioned run 4000003, exited and not reaped. Before: the shell, an exclusive
    wrapper, was made a job judged by its own command line: rogue, [4000002, 4000003],
    stop PIDs both (a rogue-job page and a terminate target for the sanctioned pipeline).
    After: no job, now, later and after a daemon restart; the zombie-gpu-memory finding
    says the wrapper wraps a sanctioned run. The simulator checks it (I1)."""
    from tests.sim.machine import TrustMachine

    monkeypatch.setattr(TrustMachine, "workdir", tmp_path)  # never the host's /tmp

    monkeypatch.setattr(TrustMachine, "events", False)  # found while it polled
    state = TrustMachine()
    try:
        state.pipeline_fires()
        state.tick(seconds=5.0)
        state.host.zombie(4000003)
        for step in ("tick", "tick", "restart"):
            if step == "restart":
                state.restart()
            state.tick(seconds=65.0)
            assert _plans(state) == {}
        last = state.daemon.last
        assert last is not None and last.result is not None
        [zombie] = [f for f in last.result.findings if f.kind == "zombie-gpu-memory"]
        assert (zombie.root_pid, zombie.message) == (
            None,
            "zombie PID 4000003 holds 4.0 GiB on GPU 0; it has exited, not reaped by its "
            "parent PID 4000002 `/bin/sh -c /usr/bin/python3 /srv/pipeline/train.py`: the "
            "memory is freed when PID 4000002 reaps it (wait(2)) or exits. PID 4000002 is "
            "no job for it: it wraps a run that rule 'pipeline' sanctioned; nothing is "
            "signalled for it (signalling the zombie does nothing)",
        )
    finally:
        state.teardown()

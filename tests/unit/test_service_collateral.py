"""A service is never collateral (issue 31, case 1): the guard's rule on a simulated
procfs (tests/sim/host.py): which units are the job's own, which also run other work,
and that ``disable-source`` plans a service's unit only when ``--stop-service`` names it.
The real-systemd cases are in tests/system/test_restart_sources.py.
"""

from __future__ import annotations

from pathlib import Path

from rogue_watchdog.actions.remedy import Remedy, target_from_job
from rogue_watchdog.config import parse_config
from rogue_watchdog.model import Job, SystemdOrigin
from rogue_watchdog.policy.guard import ScanProtection, advise, service_collateral
from rogue_watchdog.sources.procfs import ProcessTable
from tests.sim.host import PY, SimEffects, SimHost

HUB = "td-hub.service"


def _host(tmp_path: Path) -> SimHost:
    return SimHost(tmp_path, tmp_path / "nvml.json")


def _table(host: SimHost) -> ProcessTable:
    table = ProcessTable(str(host.proc))
    table.refresh()
    return table


def _origin(unit: str) -> SystemdOrigin:
    return SystemdOrigin(unit=unit, restart="always", remediation=f"systemctl disable --now {unit}")


def test_a_hub_whose_own_process_launches_the_trainer_is_a_service(tmp_path: Path) -> None:
    h = _host(tmp_path)
    hub = h.unit_run(HUB, (PY, "/srv/hub/hub_server.py"), ("service", ""))
    job = h.spawn(hub.pid, (PY, "/srv/hub/train_hub.py"), PY, ("job", "t"))
    found = service_collateral(_origin(HUB), job.pid, _table(h), {job.pid})
    assert found is not None
    assert (found.name, found.what, found.others, found.by_hand) == (
        HUB,
        f"systemd unit {HUB}",
        (f"PID {hub.pid} `/usr/bin/python3 /srv/hub/hub_server.py`",),
        f"systemctl disable --now {HUB}",
    )


def test_a_shell_loop_running_only_the_trainer_is_the_jobs_own(tmp_path: Path) -> None:
    h = _host(tmp_path)
    loop = "while true; do python3 /srv/train.py; sleep 5; done"
    shell = h.unit_run("loop.service", ("/bin/bash", "-c", loop), ("wrapper", "t"))
    job = h.spawn(shell.pid, (PY, "/srv/train.py"), PY, ("job", "t"))
    assert service_collateral(_origin("loop.service"), job.pid, _table(h), {job.pid}) is None
    # Between two runs (`sleep 5` below the loop) the loop runs something else: the
    # answer is the safe one, a service.
    h.exit(job.pid)
    h.spawn(shell.pid, ("/bin/sleep", "5"), "/bin/sleep", ("wrapper", "t"))
    assert service_collateral(_origin("loop.service"), shell.pid, _table(h), set()) is not None


def test_a_tmux_server_is_the_jobs_only_while_it_runs_nothing_else(tmp_path: Path) -> None:
    h = _host(tmp_path)
    tmux = h.unit_run("svc.service", ("/usr/bin/tmux", "new-session", "-d"), ("wrapper", "t"))
    job = h.spawn(tmux.pid, (PY, "/srv/train.py"), PY, ("job", "t"))
    origin = _origin("svc.service")
    assert service_collateral(origin, job.pid, _table(h), {job.pid}) is None
    # A person's idle shell on that server: stopping the unit would end their session.
    shell = h.spawn(tmux.pid, ("-bash",), "/usr/bin/bash", ("bystander", ""))
    found = service_collateral(origin, job.pid, _table(h), {job.pid})
    assert found is not None and found.others == (
        f"PID {tmux.pid} `/usr/bin/tmux new-session -d`",
        f"PID {shell.pid} `-bash`",
    )


def test_advice_and_plan_name_the_service_and_act_only_when_asked(tmp_path: Path) -> None:
    h = _host(tmp_path)
    hub = h.unit_run(HUB, (PY, "/srv/hub/hub_server.py"), ("service", ""))
    proc = h.spawn(hub.pid, (PY, "/srv/hub/train_hub.py"), PY, ("job", "t"))
    table = _table(h)
    lineage = table.ancestors(proc.pid)
    job = Job(proc.pid, [proc.pid], "root", proc.argv, proc.start, None, [], lineage,
              _origin(HUB), "rogue")  # fmt: skip
    guard = ScanProtection(training=frozenset({proc.pid}))
    advice = advise(job, guard, table)
    assert advice.disable is False and advice.by_hand is None
    assert advice.collateral is not None and advice.collateral.name == HUB
    assert advice.stop_line(proc.pid) == (
        f"rogue-watchdog terminate {proc.pid}  # --dry-run first to preview; stops the run "
        f"only: its source is a service, systemd unit {HUB} also runs PID {hub.pid} "
        f"`/usr/bin/python3 /srv/hub/hub_server.py`, not part of the job, never stopped "
        f"unasked; to stop the service {HUB} too: rogue-watchdog disable-source {proc.pid} "
        f"--stop-service {HUB}"
    )
    config = parse_config(f"paths: {{proc_root: '{h.proc}'}}\n")
    effects = SimEffects(host=h)
    remedy = Remedy(config.enforcement, None, effects, actor="test",  # type: ignore[arg-type]
                    backup_dir=str(tmp_path / "b"), proc_root=str(h.proc),
                    protection=guard, cli_args=" --config /etc/rw/a.yaml")  # fmt: skip
    target = target_from_job(job, None, None, str(h.proc))
    refused = remedy.plan_disable(target, h.now)
    assert refused.refused is not None
    assert refused.refused.startswith(
        f"disabling it would stop a service: systemd unit {HUB} also runs PID {hub.pid} "
    )
    # The refusal's commands act on the same daemon's state (issue 33).
    assert refused.refused.endswith(
        f"To stop this run only: rogue-watchdog terminate --config /etc/rw/a.yaml "
        f"{proc.pid}; to stop the service {HUB} as well: rogue-watchdog disable-source "
        f"--config /etc/rw/a.yaml {proc.pid} --stop-service {HUB}"
    )
    assert remedy.plan_disable(target, h.now, stop_service="x.service").refused is not None
    plan = remedy.plan_disable(target, h.now, stop_service=HUB)
    assert plan.refused is None and plan.stops_service == HUB
    assert f"systemctl disable --now {HUB}" in plan.steps
    assert not [c for c in effects.calls if c[0] == "run"]  # planned, never run

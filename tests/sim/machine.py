"""The lifecycle simulator: a hypothesis ``RuleBasedStateMachine`` that drives the real
:class:`~rogue_watchdog.scan.Scanner`, :meth:`~rogue_watchdog.daemon.loop.Daemon.tick` and the
enforcer over a simulated host (:mod:`tests.sim.host`), and checks after every tick that
rogue-watchdog is never wrong in the dangerous direction:

- I1 no advice, plan, action or JSON field targets what the guard protects (a
  sanctioned job, the sanctioned pipeline's crontab line);
- I2 no signal reaches anything but a rogue job's own processes and exclusive wrappers
  (never a shared shell, a bystander, the system, a process ever sanctioned);
- I3 a sanctioned process stays sanctioned for its life (edits, reloads, restarts);
- I4 blindness never resolves or reopens a finding; ``respawned`` needs a new identity;
- I5 a finding's id, root and root start name one job for its whole life (a periodic
  finding names none, from the tick its first run's finding became the loop's);
- I6 every live cron source named is a crontab cron really reads (mode, name);
- I7 no false page: under the default configuration no finding of severity high or
  above names a GPU user that is not training (a notebook kernel, an inference server, a
  display server outside /usr), each is classed so, and none of them is ever signalled;
- I8 a periodic job never pages more than once per finding: after its open, a periodic
  finding is alerted again only by a reminder (``reminder_after_s`` apart), never
  because a run came or went; and a terminate that did not hold is paged once
  (``remediation-failed`` naming the same newest action opens again only after its job
  was quiet longer than ``RETURN_WINDOW_S`` or a run of it was killed since: I13's
  "never twice" for pages); and a job's return is one page: no ``rogue-job`` or
  ``remediation-failed`` about a signature that opens while its ``respawned`` finding is
  open pages on its own, unless it is louder than that page; and one incident is one
  page (issue 33: one launcher's jobs, ``details.incident`` as first filed): no two
  ``rogue-job`` findings of one incident are both paged when the first paged was open
  as the second opened, unless the second is louder than it; and no silence: a
  ``rogue-job`` never paged whose job runs ``settle_s`` after it opened is folded into
  a paged, open page of its incident (or of its, or its incident's, return);
- I9 a killed job's return that stays is always paged: an unsanctioned signature that
  may train (class training or unknown) back after one of the runs it had last was
  ended by a signal (ours or a person's; before the tick's scan, not by that tick's own
  action) opens ``respawned`` at that tick (or did at a tick the daemon was killed in
  after storing it, before the action it died in: a kill leaves that tick unchecked),
  unless the run back was started from a person's login session none of those runs
  came from (a person's new job, not a return: a sweep from a login shell after one
  orphaned),
  and when a run that came back then still runs at the first checked tick
  ``alerts.settle_s`` or more after it, that ``respawned`` was paged (its ``open``
  spooled) by then. A return gone within the settle is not looked at (it is filed,
  not paged: issue 33, fresh user J; docs/alerts.md).
- I10 a service is never collateral: no ``systemctl`` stop, disable or mask of a unit
  while a process of it that is not training runs (a hub that launches trainers), no
  ``disable-source`` plan for it without ``--stop-service``, and its jobs' ``stop:``
  line names the service and says it is not stopped.
- I11 a restart source is named: a job whose loop shell ``terminate`` leaves has advice
  that says the loop restarts it and stops the loop first; the daemon records at most
  one terminate per job signature that said the job will return (``will-return``, or
  ``partial`` when the source restarted it at once): it does not repeat a futile one; a
  container's restart policy (``unknown`` when the engine did not answer), a supervisord
  program's ``autorestart`` and an at job that re-queued itself are named as what starts
  the job again after ``terminate``;
- I12 every side effect has a record: at the moment of each signal, file change or
  command, the newest write-ahead step in the state database is the one naming it
  (issue 32, case 4);
- I13 never twice: no SIGTERM or SIGKILL reaches one process (PID + start time) twice,
  across daemon kills and restarts; an action left half-way is taken over by the next
  start that can write its state (none stays owned by a dead daemon).
- I14 no sanctioned or protected process is ever denied the GPU
  (``enforcement.gpu_open``, issue 36): every move into a denial's device cgroup reaches
  a rogue job's own process or exclusive wrapper, never one ever sanctioned, never the
  system, a service, a shared shell or a bystander; and after every tick no process the
  scan judges sanctioned or ignored is left in a denial (a rule that sanctions a denied
  job lifts it in the tick that judges so; a lift is never withheld for want of a
  record).
- I15 a terminate never says ``ok`` to a job that will come back: when its container's
  restart policy or supervisord's autorestart started it again, or a queued run of its
  re-queuing at job waits, the outcome is ``will-return`` (or not ``ok``), unless
  ``disable-source`` stopped that source first (issue 31, case 4).
- I16 the event-driven scan is a full walk's equal (issue 34): the daemon follows the
  simulated kernel's process events (tests/sim/events.py: fork, exec, exit, uid, sid;
  none for re-parenting; dropped with ``ENOBUFS``; held until the tick and read in
  another order, a quick trainer then gone before its exec is read) and re-reads only
  what they named; a twin scanner fed the same events walks every process at every
  scan, and both must give identical jobs, verdicts, origins, advice and findings; an
  exec-path scan (``exec_pass``: captures judged between ticks) must give the whole
  scan's jobs and findings for the new jobs it judged.

The steps are what happens on an ordinary host: the pipeline's cron line firing (its runs
overlap), the retired line that runs the pipeline's own script (the seed's ghost), a
hub unit whose own process launches trainers and a unit whose shell loop runs only its
trainer, a
trainer in an orphaned shell that also runs a web server, the workers of one launch each
in a session of their own, processes that only name a training script, exits, zombies
(a trainer its shared shell or hub has not reaped among them: issue 31, seed 3131),
edits and chmods of the crontab, NVML blips (NO_PERMISSION, a GPU leaving the list, the
device count lost, unknown memory), config reloads between observe and terminate,
daemon restarts, Docker containers whose main process is a trainer under each restart
policy (an engine that stops answering), a supervisord program with ``autorestart=true``
(its configuration a real file), an at job that re-queues itself, a person's
shell loop running a short job every 5 s (each run ends by
itself), a sweep's launcher (`python3 sweep.py`, from a person's login shell or
orphaned) starting 2-4 different trainers at once or over a few ticks (one ending by
itself within its settle, the launcher exiting before its last is seen, or one killed
by a person and started again), a person killing a process, daemon kills between two
steps of an action (at a fault point, watchdog/faults.py: the daemon object is dropped
where it stands) and a state database that refuses writes for a while. The daemon gets
each exit status as the kernel's exit events would hand it on. ``bench/trust_sim.py`` runs it long;
``tests/unit/test_trust_sim.py`` runs it in CI with a fixed budget.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rogue_watchdog import faults
from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.actions.guards import LiveProc
from rogue_watchdog.actions.remedy import Remedy, target_from_job
from rogue_watchdog.actions.runner import InlineRunner
from rogue_watchdog.actions.terminate import plan_tree
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.outagefile import outage_path
from rogue_watchdog.daemon.sanctionedfile import sanctioned_path
from rogue_watchdog.daemon.tracking.incident import FOLDED_KINDS, RANK, return_signature
from rogue_watchdog.daemon.tracking.periodic import RETURN_WINDOW_S
from rogue_watchdog.lineage import at as at_lineage
from rogue_watchdog.model import (
    AtOrigin,
    ContainerOrigin,
    CronOrigin,
    Job,
    SupervisorOrigin,
    SystemdOrigin,
)
from rogue_watchdog.policy.signature import job_signature
from rogue_watchdog.scan import Scanner
from tests.fakenvml.build import CONFIG_NAME, build_library
from tests.sim.events import Differential, SimKernel
from tests.sim.host import GIB, PIPELINE_SCRIPT, PY, SimContainer, SimEffects, SimHost

JOB_KINDS = ("rogue-job", "excess-instances")
REMINDER_AFTER_S = 60.0
# Where the daemon can be killed between two steps of an action (watchdog/faults.py).
KILL_POINTS = (
    "terminate:begun", "terminate:freeze:intent", "terminate:freeze:sent",
    "terminate:term:intent", "terminate:term:sent", "terminate:cont:sent", "terminate:waiting",
    "terminate:kill-freeze:sent", "terminate:kill:intent", "terminate:kill:sent",
    "terminate:finishing", "disable-source:begun", "effects:backup:done",
    "effects:write:intent", "effects:write:done", "effects:touch:done",
    "gpu-deny:begun", "gpu-deny:move", "effects:cgroup-mkdir:done",
    "effects:cgroup-move:intent", "effects:cgroup-rmdir:intent",
)  # fmt: skip


# The at spools the at resolver reads and disable-source accepts; the simulator adds its
# sandbox's for a machine's life.
_AT_SPOOLS = at_lineage.AT_SPOOLS


def answered_by(scanner: Scanner, host: SimHost) -> None:
    """The scan's commands (``docker inspect``, ``systemctl``) answered by ``host``."""
    context = scanner.context

    def answered(now: Any) -> Any:
        ctx = context(now)
        ctx.run_cmd = host.run_cmd
        return ctx

    scanner.context = answered  # type: ignore[method-assign]


class SimKilled(BaseException):
    """The simulated daemon died at a fault point (not an Exception: nothing catches it)."""


_LIB: dict[str, Path] = {}


def fake_library(cache: Path) -> Path:
    """The fake NVML library, built once per process (pynvml loads one library per
    process, so every machine of a run shares it; each writes its own config file)."""
    if "lib" not in _LIB:
        cache.mkdir(parents=True, exist_ok=True)
        _LIB["lib"] = build_library(cache)
    return _LIB["lib"]


class TrustMachine(RuleBasedStateMachine):
    """See the module docstring. ``violations`` lists every invariant broken (each also
    raises, so hypothesis shrinks the steps that led to it)."""

    workdir: ClassVar[Path] = Path(tempfile.gettempdir())
    # Whether the first daemon follows the simulated kernel's events (a restart draws
    # anew); the replays of counterexamples found while it polled set it False.
    events: ClassVar[bool] = True
    # Across every machine of a run, for the summary: steps, ticks, jobs judged.
    counts: ClassVar[dict[str, int]] = {
        "machines": 0, "ticks": 0, "jobs": 0, "signals": 0, "kills": 0, "storage_faults": 0,
        "taken_over": 0, "gpu_denied": 0, "gpu_lifted": 0, "engine_restarts": 0, "at_runs": 0,
        "will_return": 0, "program_restarts": 0, "compared": 0, "event_walks": 0,
        "events_lost": 0, "exec_passes": 0, "exec_compared": 0, "exec_jobs": 0,
    }  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="trust-sim-", dir=self.workdir))
        lib = fake_library(self.workdir / "trust-sim-lib")
        conf = lib.parent / CONFIG_NAME
        self.host = SimHost(self.dir, conf)
        # The kernel's process events (issue 34): the daemon's scans re-read only what
        # they name, and a twin that walks every process checks each scan (I16).
        self.kernel = SimKernel()
        self.kernel.attach(self.host)
        self.events_on = self.events
        self.diffs: list[Differential] = []
        at_lineage.AT_SPOOLS = (*_AT_SPOOLS, str(self.host.atspool))
        self.lib = lib
        self.mode = "observe"
        self.max_instances = 1
        self.gpu_open = "enforce"
        self.auto_disable = True
        self.effects = SimEffects(host=self.host, state_db=self.host.root / "state" / "state.db")
        self.kill_point: str | None = None
        self.taken_over: set[int] = set()
        self.daemon = self._daemon()
        self.verdicts: dict[tuple[int, int], str] = {}
        self.finding_roots: dict[int, tuple[Any, Any]] = {}
        # Finding id -> the identities of the copies of its job it named (instance_roots).
        self.finding_copies: dict[int, set[tuple[Any, ...]]] = {}
        self.job_finding: dict[tuple[str, int, int], int] = {}
        self.respawns: set[int] = set()
        self.seen_roots: dict[str, set[tuple[int, int]]] = {}
        # Every identity the daemon judged sanctioned: for life, also when the state
        # database refused writes then (the file beside the socket keeps it).
        self.sanctioned_durable: set[tuple[int, int]] = set()
        # Seen while the state database refused writes: durable once a tick stores.
        self.pending_seen: dict[str, set[tuple[int, int]]] = {}
        # Every label a PID had (the simulator never reuses a PID).
        self.labels_ever: dict[int, tuple[str, str]] = {}
        # I9: per signature, the jobs table's sightings after the last tick and the roots
        # of its runs when it was last seen.
        self.sightings: dict[str, int] = {}
        self.last_roots: dict[str, set[tuple[int, int]]] = {}
        # I9: per signature, the login session of each of those runs (None: no person's).
        self.last_sessions: dict[str, set[object]] = {}
        # I9: each return seen and not yet due its page: its signature, when it was
        # seen, the lower bound of when its respawned may have opened, the runs back.
        self.returns_due: list[tuple[str, float, float, set[tuple[int, int]]]] = []
        # I8: when each killed run (PID, start) was first seen killed, at a check.
        self.kill_seen: dict[tuple[int, int], float] = {}
        # I8 (incidents): each rogue-job finding's details.incident as first recorded.
        self.incidents: dict[int, Any] = {}
        # The time of the last tick whose invariants were checked: a tick the daemon was
        # killed in stored its findings (and pages) before its action began, unchecked.
        self.checked_at = -1.0
        # The time of the last checked tick that could store: a return paged from
        # memory during a storage outage is stored (opened then) when writes come back.
        self.stored_at = -1.0
        self.loop_shell: int | None = None
        # I9: the host time of the last tick checked. A daemon killed inside a tick
        # after it stored and spooled that tick's findings (during an action) paged
        # then: the next check counts what was opened since, not only at its own time.
        self.paged_since = float("-inf")
        self.ticks = 0
        self.calls_seen = 0
        self.actions_seen = 0
        self.at_before: list[int] = []
        self.counts["machines"] += 1

    def teardown(self) -> None:
        faults.set_hook(None)
        at_lineage.AT_SPOOLS = _AT_SPOOLS
        self.counts["engine_restarts"] += self.host.engine_restarts
        self.counts["program_restarts"] += self.host.sup_restarts
        self.counts["compared"] += sum(d.compared for d in self.diffs)
        self.counts["event_walks"] += sum(d.incremental for d in self.diffs)
        self.counts["exec_compared"] += sum(d.exec_compared for d in self.diffs)
        self.counts["exec_jobs"] += sum(d.exec_jobs for d in self.diffs)
        self.counts["events_lost"] += self.kernel.sent["lost"]
        self.daemon.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the daemon ---------------------------------------------------------------------

    def config_text(self) -> str:
        h = self.host
        return (
            f"nvml: {{library: '{self.lib}', call_timeout_s: 5}}\n"
            f"paths: {{proc_root: '{h.proc}', crontab: '{h.etc}/crontab', cron_d: '{h.cron_d}',"
            f" cron_spool: ['{h.spool}'], unit_dirs: ['{h.root}/units'],"
            f" cgroup_root: '{h.root}/cgroup'}}\n"
            f"training: {{device_glob: '{h.root}/nodev[0-9]*'}}\n"
            f"daemon: {{state_dir: '{h.root}/state', socket: '{h.root}/s.sock'}}\n"
            f"alerts: {{sinks: [{{type: log, path: '{h.root}/alerts.log'}}],"
            f" reminder_after_s: {REMINDER_AFTER_S:g}}}\n"
            "sanctioned:\n"
            "  - name: pipeline\n"
            f"    cmdline: '{PY} {PIPELINE_SCRIPT}*'\n"
            "    user: root\n"
            f"    origin: {{cron_file: '{h.pipeline}', cron_line: 2}}\n"
            f"    max_instances: {self.max_instances}\n"
            f"enforcement: {{mode: {self.mode}, auto_disable_source:"
            f" {str(self.auto_disable).lower()}, grace_s: 0,"
            f" backup_dir: '{h.root}/backups', gpu_open: {self.gpu_open}}}\n"
        )

    def _daemon(self) -> Daemon:
        config = parse_config(self.config_text(), str(self.dir / "config.yaml"))
        # The sanctioned identities and the outage memory beside the socket, as `run`
        # keeps them.
        socket = config.daemon.socket
        daemon = Daemon(
            config,
            None,
            sanctioned_file=sanctioned_path(socket),
            outage_file=outage_path(socket),
        )
        daemon.exit_statuses = self.host.drain_exits  # the kernel's exit events
        answered_by(daemon.scanner, self.host)
        if self.events_on:
            self._events(daemon, new=True)
        else:
            self.kernel.source = None  # polling: the kernel's messages reach no one
        # Inline: a terminate's waits run in the step that starts it (deterministic).
        enf = Enforcer(
            config, daemon.db, self.effects, runner=InlineRunner(),
            gpu_rules=lambda _globs: ["c 195:0 rwm"],  # the simulated nodes are no devices
        )  # fmt: skip
        daemon.sources.append(enf)
        daemon.enforcers.append(enf)

        def rebuild(d: Daemon) -> None:
            # As `run`'s reload hook does (watchdog/daemon/assemble.py): the enforcer is
            # built again from the new configuration (its mode, auto_disable_source).
            new = Enforcer(d.config, d.db, self.effects, runner=InlineRunner())
            d.sources = [s for s in d.sources if not isinstance(s, Enforcer)] + [new]
            d.enforcers = [new]

        daemon.on_reload.append(rebuild)
        return daemon

    # -- steps: what happens on the host --------------------------------------------------

    @rule()
    def pipeline_fires(self) -> None:
        """The sanctioned line fires (if cron still reads it): runs of 300 s overlap."""
        h = self.host
        h.next_minute()
        text = h.pipeline.read_text().splitlines()
        if len(text) < 2 or text[1].startswith("#") or h.pipeline.stat().st_mode & 0o022:
            return  # disabled, or a mode cron skips
        command = text[1].split(None, 6)[6]
        h.runs += 1
        h.cron_run(command, (PY, PIPELINE_SCRIPT), f"pipeline#{h.runs}",
                   gpu=(0, 4 * GIB))  # fmt: skip

    @rule()
    def ghost_fires(self) -> None:
        """The retired weekly line runs the pipeline's own script (the seed's ghost)."""
        h = self.host
        lines = h.legacy.read_text().splitlines()
        if len(lines) < 4 or lines[3].startswith("#"):
            return
        # Sunday 02:00 of the simulated week: cron ran it then.
        h.now = max(h.now, h.now - h.now % (7 * 86400) + 3 * 86400 + 2 * 3600 + 1)
        h.runs += 1
        h.cron_run(f"{PY} {PIPELINE_SCRIPT}", (PY, PIPELINE_SCRIPT), f"ghost#{h.runs}",
                   gpu=(1, 2 * GIB))  # fmt: skip

    @rule(shared=st.booleans(), stubborn=st.booleans())
    def orphaned_shell(self, shared: bool, stubborn: bool) -> None:
        """An orphaned shell (adopted by PID 1) runs `timeout 300 python3 train_a.py`,
        and, when shared, `python3 -m http.server` beside it."""
        h = self.host
        h.now += 1.0
        h.runs += 1
        key = f"shell#{h.runs}"
        shell = h.spawn(1, ("/bin/sh", "-c", "python3 -m http.server & timeout 300 python3 "
                            "/home/u/train_a.py; wait"), "/usr/bin/dash",
                        ("shared" if shared else "wrapper", key), uid=1000)  # fmt: skip
        if shared:
            h.spawn(shell.pid, (PY, "-m", "http.server"), PY, ("bystander", ""))
        wrapper = h.spawn(shell.pid, ("timeout", "300", PY, "/home/u/train_a.py"),
                          "/usr/bin/timeout", ("wrapper", key))  # fmt: skip
        h.spawn(wrapper.pid, (PY, "/home/u/train_a.py"), PY, ("job", key),
                stubborn=stubborn, gpu=(1, None))  # fmt: skip

    @rule(shared=st.booleans())
    def shell_loop(self, shared: bool) -> None:
        """An orphaned `bash -c 'while true; do python3 train_loop.py; sleep 5; done'`
        (case 2 of issue 31), and, when shared, a web server it started beside it."""
        h = self.host
        h.now += 1.0
        h.runs += 1
        key = f"loop#{h.runs}"
        text = "while true; do python3 /home/u/train_loop.py; sleep 5; done"
        if shared:
            text = "python3 -m http.server & " + text
        shell = h.spawn(1, ("bash", "-c", text), "/usr/bin/bash",
                        ("shared" if shared else "wrapper", key), uid=1000)  # fmt: skip
        h.loops[shell.pid] = key
        if shared:
            h.spawn(shell.pid, (PY, "-m", "http.server"), PY, ("bystander", ""))
        h.spawn(shell.pid, (PY, "/home/u/train_loop.py"), PY, ("job", key), gpu=(1, GIB))

    @rule()
    def loops_run_again(self) -> None:
        """Each live loop whose run ended starts it again (5 s later)."""
        h = self.host
        h.now += 5.0
        for pid, key in list(h.loops.items()):
            shell = h.procs.get(pid)
            if shell is None or shell.state == "Z":
                h.loops.pop(pid)
                continue
            if not any(c.argv[1:2] == ("/home/u/train_loop.py",) for c in h.children(pid)):
                h.spawn(pid, (PY, "/home/u/train_loop.py"), PY, ("job", key), gpu=(1, GIB))

    @rule(hub=st.booleans())
    def unit_launches(self, hub: bool) -> None:
        """A unit starts a trainer: ``td-hub.service``'s own process (a hub doing other
        work, started once and kept) launches it, or ``loop-train.service``'s shell loop
        runs it and nothing else (that unit is the job's own)."""
        h = self.host
        h.now += 1.0
        h.runs += 1
        key = f"unit#{h.runs}"
        if hub:
            # A unit runs one main process: the hub, started once and kept.
            tops = [p for p in h.unit_procs("td-hub.service") if p.pid in h.unit_mains]
            top = tops[0] if tops else h.unit_run(
                "td-hub.service", (PY, "/srv/hub/hub_server.py"), ("service", "")
            )  # fmt: skip
            h.spawn(top.pid, (PY, "/srv/hub/train_hub.py"), PY, ("job", key), gpu=(0, GIB))
            return
        if h.unit_procs("loop-train.service"):
            return  # a unit runs once: starting it while it runs does nothing
        loop = "while true; do python3 /srv/loop/train_loop.py; sleep 5; done"
        top = h.unit_run("loop-train.service", ("/bin/bash", "-c", loop), ("wrapper", key))
        h.spawn(top.pid, (PY, "/srv/loop/train_loop.py"), PY, ("job", key), gpu=(1, GIB))

    @rule(policy=st.sampled_from(["always", "always", "unless-stopped", "on-failure", "no"]))
    def container_runs(self, policy: str) -> None:
        """`docker run -d --restart=POLICY` of an image whose main process is a trainer
        (the container is the job's own); the engine starts it again as its policy says
        (issue 31, case 5)."""
        h = self.host
        h.now += 1.0
        n = len(h.containers)
        cid = f"{n + 1:04x}" * 16
        c = SimContainer(cid, f"ctr-{n + 1}", policy)
        h.containers[cid] = c
        h.container_start(c)

    @rule(up=st.booleans())
    def engine(self, up: bool) -> None:
        """dockerd stops answering (its socket gone) or answers again; its containers
        run on under their shims."""
        self.host.engine_up = up

    @rule()
    def at_job_runs(self) -> None:
        """atd runs the soonest queued at job (a person queues the first): it queues its
        next run, then trains (issue 31, case 3)."""
        h = self.host
        h.now += 1.0
        pending = h.at_pending() or [h.at_queue(h.now + 60)]
        path = pending[0]
        h.now = max(h.now, int(path.name[6:], 16) * 60 + 1.0)
        h.at_run(path)
        self.counts["at_runs"] += 1

    @rule()
    def program_runs(self) -> None:
        """supervisord's ``[program:trainer]`` (``autorestart=true``) runs a trainer;
        a person starts it when it is stopped (issue 31, case 6)."""
        h = self.host
        h.now += 1.0
        if h.sup_main is None:
            h.program_start()

    @rule()
    def person_atrm(self) -> None:
        """A person removes the queued at jobs (`atrm N`) while a run goes on."""
        for path in self.host.at_pending():
            self.host.command(["atrm", str(int(path.name[1:6], 16))])

    @rule(workers=st.integers(2, 4))
    def one_launch(self, workers: int) -> None:
        """A launcher starts workers `train_w.py --rank N`, each in a session of its own,
        then exits: one job."""
        h = self.host
        # Separate launches are separate events: a person does not start the same
        # command twice within LAUNCH_WINDOW_S (see docs/operations.md, limits).
        h.now += 3.0
        h.runs += 1
        key = f"launch#{h.runs}"
        launcher = h.spawn(1, (PY, "/home/u/launch.py"), PY, ("wrapper", key), uid=1000)
        for rank in range(workers):
            h.spawn(launcher.pid, (PY, "/home/u/train_w.py", "--rank", str(rank)), PY,
                    ("job", key), sid=0, pgid=0)  # fmt: skip
        for w in h.children(launcher.pid):
            w.sid = w.pgid = w.pid
        h.exit(launcher.pid)

    @rule(
        data=st.data(), n=st.integers(2, 4), from_shell=st.booleans(), spread=st.booleans(),
        twist=st.sampled_from(["none", "ends", "launcher-exits", "killed-back"]),
    )  # fmt: skip
    def sweep_launcher(
        self, data: st.DataObject, n: int, from_shell: bool, spread: bool, twist: str
    ) -> None:
        """A launcher (`python3 sweep.py`, no wrapper) started from a person's login shell
        or orphaned starts 2-4 different trainers, at once or over a few ticks: one
        incident, one page (issue 33, fresh user H). Sometimes one ends by itself within
        the settle, the launcher exits before its last trainer is first seen (that one
        has no live launcher: another incident), or a person kills a trainer after its
        page and the launcher starts it again (its return still pages: I9)."""
        h = self.host
        h.now += 1.0
        h.runs += 1
        key = f"sweep#{h.runs}"
        parent = 1
        if from_shell:
            # A person's login shell (its logind scope): shared by whatever they run.
            shell = h.spawn(1, ("-bash",), "/usr/bin/bash", ("person", ""), uid=1000,
                            cgroup="/user.slice/user-1000.slice/session-7.scope")  # fmt: skip
            parent = shell.pid
        launcher = h.spawn(parent, (PY, "/home/u/sweep.py"), PY, ("launcher", key), uid=1000)
        scripts = [f"/home/u/train_{x}.py" for x in ("lr", "bs", "wd", "drop")[:n]]
        runs = []
        for i, script in enumerate(scripts):
            if i and spread:
                self.tick(5.0)
            if twist == "launcher-exits" and i == n - 1:
                h.exit(launcher.pid)  # its last trainer is first seen without it
                parent = 1
            else:
                parent = launcher.pid
            run = h.spawn(parent, (PY, script), PY, ("job", f"{key}/{i}"), gpu=(i % 2, GIB))
            runs.append((run.pid, script, i))
        self.tick(5.0)  # first looks (each opens, settling)
        which = data.draw(st.integers(0, n - 1))
        pid, script, i = runs[which]
        if twist == "ends" and pid in h.procs:
            h.exit(pid)  # by itself, within its settle: nothing to page
            self.tick(5.0)
        elif twist == "killed-back" and pid in h.procs and launcher.pid in h.procs:
            self.tick(5.0)  # paged (or folded into the incident's page)
            h.exit(pid, status=signal.SIGTERM)  # a person's kill
            h.spawn(launcher.pid, (PY, script), PY, ("job", f"{key}/{i}"), gpu=(i % 2, GIB))
            self.tick(5.0)

    @rule(what=st.sampled_from(["notebook", "server", "display"]))
    def gpu_user(self, what: str) -> None:
        """A GPU user that is not training (issue 35): a person's notebook kernel, an
        inference server, a display server outside /usr. (A notebook that runs a training
        script is training: tests/unit/test_workload_classes.py; here its tree would
        regroup whenever NVML hides the kernel, which I4/I5 is not about.)"""
        h = self.host
        h.now += 1.0
        h.runs += 1
        key = f"{what}#{h.runs}"
        kernel = (PY, "-m", "ipykernel_launcher", "-f", "/home/u/.jupyter/kernel-1.json")
        argv, exe, gpu = {
            "notebook": (kernel, PY, (0, 2 * GIB)),
            "server": ((PY, "-m", "vllm.entrypoints.openai.api_server"), PY, (1, 20 * GIB)),
            "display": (("/opt/X11/bin/Xorg", ":1"), "/opt/X11/bin/Xorg", (0, GIB // 4)),
        }[what]
        h.spawn(1, argv, exe, ("not-training", key), uid=1000, gpu=gpu)

    @rule(gpu=st.booleans())
    def probe_loop(self, gpu: bool) -> None:
        """A person's shell loop runs a short job every 5 s (`while true; do python3
        train_probe.py; sleep 5; done`): the run before ends by itself, the next starts
        and the daemon looks at once (its exec event asks for an early tick)."""
        h = self.host
        shell = h.procs.get(self.loop_shell) if self.loop_shell is not None else None
        if shell is None or shell.state == "Z":
            shell = h.spawn(1, ("/bin/bash", "-c", "while true; do python3 "
                                "/home/u/train_probe.py; sleep 5; done"), "/usr/bin/bash",
                            ("wrapper", "loop"), uid=1000)  # fmt: skip
            self.loop_shell = shell.pid
        for run in h.children(shell.pid):
            if run.state != "Z":
                h.exit(run.pid)  # by itself: status 0
        h.now += 5.0
        h.spawn(shell.pid, (PY, "/home/u/train_probe.py"), PY, ("job", "loop"),
                gpu=(0, GIB // 4) if gpu else None)  # fmt: skip
        self.tick(0.2)

    @rule(which=st.sampled_from(["tail", "pgrep", "vim"]))
    def names_a_script(self, which: str) -> None:
        """A process that only names the training script: never a job."""
        h = self.host
        argv = {
            "tail": ("/usr/bin/tail", "-f", PIPELINE_SCRIPT),
            "pgrep": ("/usr/bin/pgrep", "-f", "-x", f"{PY} {PIPELINE_SCRIPT}"),
            "vim": ("/usr/bin/vim", "/home/u/train_a.py"),
        }[which]
        h.spawn(1, argv, argv[0], ("bystander", ""), uid=1000)

    @precondition(lambda self: len(self.host.procs) > 2)
    @rule(data=st.data(), how=st.sampled_from(["exit", "exit", "zombie", "killed"]))
    def something_ends(self, data: st.DataObject, how: str) -> None:
        """A process exits by itself, becomes a zombie, or a person kills it (SIGTERM)."""
        h = self.host
        pids = sorted(p for p, proc in h.procs.items() if proc.label[0] != "system")
        if not pids:
            return
        pid = data.draw(st.sampled_from(pids))
        if how == "zombie" and h.procs[pid].state != "Z" and h.procs[pid].ppid > 1:
            h.zombie(pid)
        else:
            h.exit(pid, status=signal.SIGTERM if how == "killed" else 0)

    @rule(edit=st.sampled_from(["flock", "chmod-0666", "restore", "comment"]))
    def edit_pipeline_line(self, edit: str) -> None:
        """Edit the sanctioned line while its runs live (flock -n, a mode cron skips, a
        comment), or put it back."""
        h = self.host
        lines = {
            "flock": f"* * * * * root flock -n {h.root}/pipe.lock {PY} {PIPELINE_SCRIPT}",
            "comment": "# " + h.pipeline_line,
        }
        h.pipeline.write_text(f'MAILTO=""\n{lines.get(edit, h.pipeline_line)}\n')
        h.pipeline.chmod(0o666 if edit == "chmod-0666" else 0o644)

    @rule(mode=st.sampled_from(["ok", "ok", "no-permission", "vanish1", "count-lost"]))
    def nvml_view(self, mode: str) -> None:
        self.host.nvml_mode = mode
        self.host.write_nvml()

    @rule(
        mode=st.sampled_from(["observe", "terminate"]), cap=st.integers(1, 2),
        gpu=st.sampled_from(["enforce", "enforce", "audit", "off"]),
        auto=st.sampled_from([True, True, False]),
    )  # fmt: skip
    def reload(self, mode: str, cap: int, gpu: str = "enforce", auto: bool = True) -> None:
        """A config reload (SIGHUP): enforcement mode, ``gpu_open``, auto_disable_source
        and the rule's max_instances (the enforcer is built again, as `run`'s reload hook
        does)."""
        self.mode, self.max_instances, self.gpu_open, self.auto_disable = mode, cap, gpu, auto
        (self.dir / "config.yaml").write_text(self.config_text())
        self.daemon.config_path = str(self.dir / "config.yaml")
        assert self.daemon.reload()
        answered_by(self.daemon.scanner, self.host)
        if self.events_on:
            self._events(self.daemon, new=False)

    def _events(self, daemon: Daemon, *, new: bool) -> None:
        """The daemon's scanner follows the simulated kernel's events (a new daemon
        subscribes anew; a reload keeps the source, as `run` does), checked against a
        twin that walks every process (I16)."""
        source = self.kernel.source
        if new or source is None:
            source = self.kernel.subscribe(daemon.config)
        daemon.scanner.events = source
        twin = Scanner(
            daemon.config, fd_sweep_interval_s=daemon.config.daemon.fd_sweep_interval_s,
            remember=False,
        )  # fmt: skip
        answered_by(twin, self.host)
        self.diffs.append(Differential(daemon.scanner, twin))

    @rule(events=st.booleans())
    def restart(self, events: bool = True) -> None:
        """A restart; with ``events`` false the new daemon cannot open the proc
        connector (a container, no CAP_NET_ADMIN) and polls: every scan walks."""
        self.events_on = events
        self._new_daemon()

    def _new_daemon(self) -> None:
        """A restart: what the old daemon held only in memory is gone."""
        self.daemon.db.close()
        self.daemon = self._daemon()
        self.effects.storage_ok = True
        self.pending_seen = {}

    @rule(point=st.sampled_from(KILL_POINTS))
    def kill_between_steps(self, point: str) -> None:
        """The daemon is killed the next time it reaches ``point`` (an action's step)."""
        self.kill_point = point

    @rule(ok=st.booleans())
    def storage(self, ok: bool) -> None:
        """The state database refuses writes (full, unwritable) or takes them again."""
        self.effects.storage_ok = ok
        self.daemon.db.conn.execute(f"PRAGMA query_only={0 if ok else 1}")
        if not ok:
            self.counts["storage_faults"] += 1

    @rule()
    def events_lost(self) -> None:
        """The kernel drops process events (the socket buffer is full): ``ENOBUFS``."""
        self.kernel.lose_next = True

    @rule(late=st.booleans())
    def events_behind(self, late: bool) -> None:
        """The event reader falls behind: messages wait until the tick and are read in
        another order (an exec'd process is often gone by then), or it catches up."""
        self.kernel.late = late

    @rule()
    def quick_trainer(self) -> None:
        """A trainer that lives under a second: exec'd by a person's shell and gone
        before the next tick (seen at its exec, or missed when the reader is behind)."""
        h = self.host
        h.now += 1.0
        h.runs += 1
        key = f"quick#{h.runs}"
        shell = h.spawn(1, ("/bin/bash", "-c", "python3 /home/u/train_quick.py"), "/bin/bash",
                        ("wrapper", key), uid=1000)  # fmt: skip
        run = h.spawn(shell.pid, (PY, "/home/u/train_quick.py"), PY, ("job", key))
        self.labels_ever.update({shell.pid: shell.label, run.pid: run.label})
        h.exit(run.pid)
        h.exit(shell.pid)

    @rule(seconds=st.sampled_from([5.0, 5.0, 20.0, 65.0]))
    def tick(self, seconds: float) -> None:
        self.host.now += seconds
        self.host.write_nvml()
        self.kernel.flush()  # the reader caught up before the scan
        # What the scan will see (the enforcer may end some of it within the tick).
        self.before = {p.pid: (p.label, p.start) for p in self.host.procs.values()}
        self.at_before = [int(f.name[1:6], 16) for f in self.host.at_pending()]
        self.labels_ever.update((p.pid, p.label) for p in self.host.procs.values())
        point = self.kill_point

        def hook(name: str) -> None:
            if name == point:
                raise SimKilled(name)

        faults.set_hook(hook if point else None)
        try:
            self.daemon.tick(self.host.now)
        except SimKilled:
            # Dead where it stood; the next start takes its action over.
            self.counts["kills"] += 1
            self.kill_point = None
            faults.set_hook(None)
            self.check_effects()
            self._note_copies()  # what the killed tick stored is what the next start reads
            self._new_daemon()
            return
        finally:
            faults.set_hook(None)
        self.ticks += 1
        self.counts["ticks"] += 1
        self.check()

    # -- the invariants -------------------------------------------------------------------

    def check_effects(self) -> None:
        """I12 and I13's first half (see the module docstring)."""
        assert not self.effects.unrecorded, f"I12: unrecorded: {self.effects.unrecorded}"
        twice = [
            (pid, start, sig)
            for (pid, start, sig), n in self.effects.per_identity.items()
            if n > 1 and sig in (signal.SIGTERM, signal.SIGKILL)
        ]
        assert not twice, f"I13: signalled twice: {twice}"

    def check_taken_over(self) -> None:
        """I13's second half: after a tick that could write its state, no action is left
        to a daemon that is gone."""
        if not self.effects.storage_ok or "state" in self.daemon.degraded:
            return
        session = self.daemon.db.session
        for rec in self.daemon.db.unfinished_actions():
            owner = (rec.owner or {}).get("session")
            assert owner == session, f"I13: action {rec.id} ({rec.kind}) left to {owner}"
        for rec in self.daemon.db.interrupted_since(0.0):
            if rec.id not in self.taken_over:
                self.taken_over.add(rec.id)
                self.counts["taken_over"] += 1

    def check(self) -> None:
        self.check_effects()
        self.check_taken_over()
        last = self.daemon.last
        assert last is not None
        result = last.result
        assert result is not None, self.daemon.degraded
        jobs = result.jobs
        host = self.host
        labels = {pid: label for pid, (label, _start) in self.before.items()}
        for pid in result.exited:
            # Seen only at its exec (kernel events), gone before the tick (PIDs are never
            # reused here): what it was when it exited.
            labels.setdefault(pid, host.ended.get(pid, ("gone", "")))
            self.labels_ever.setdefault(pid, labels[pid])
        # I3: sanctioned for life, also when judged so while the state database refused
        # writes and the daemon restarted before it took them again (issue 32).
        for job in jobs:
            for pid in job.pids:
                if pid not in self.before:
                    continue
                ident = (pid, self.before[pid][1])
                if job.verdict == "sanctioned":
                    host.sanctioned_ever.add(ident)  # I2 holds for these whatever happens
                    self.sanctioned_durable.add(ident)
                elif ident in self.sanctioned_durable and job.root_pid == pid:
                    raise AssertionError(
                        f"I3: PID {pid} ({labels[pid]}) was sanctioned, now {job.verdict}: "
                        f"{job.reason}"
                    )
        # I2: every signal sent went to a rogue job's own process or exclusive wrapper.
        self.counts["jobs"] += len(jobs)
        self.counts["signals"] += len(self.effects.signalled)
        for pid, sig, label, was_sanctioned, _start in self.effects.signalled:
            assert label[0] in ("job", "wrapper"), f"I2: signal {sig} to PID {pid} {label}"
            assert not was_sanctioned, f"I2: signal {sig} to sanctioned PID {pid} {label}"
        self.effects.signalled.clear()
        self._check_gpu_denials(jobs)
        self._check_units()
        guard = result.protection
        assert guard is not None
        remedy = Remedy(
            self.daemon.config.enforcement, self.daemon.db, self.effects, actor="sim",
            backup_dir=str(host.root / "backups"), proc_root=str(host.proc),
            spool_dirs=(str(host.spool),), crontab=str(host.etc / "crontab"),
            cron_d=str(host.cron_d), protection=guard, record_dry_runs=False,
        )  # fmt: skip
        for job in jobs:
            self._check_job(job, remedy, labels)
        # I1: nothing ever changed the pipeline's crontab but the simulator itself.
        touched = [c for c in self.effects.calls if str(host.pipeline) in json.dumps(c[1:2])]
        assert not touched, f"I1: the pipeline's line was acted on: {touched}"
        self._check_findings(result.gpu_blind, jobs)
        # A terminate that said its source restarts the job (will_return) is futile
        # once; repeated, whatever it ended (a restart at once leaves it partial).
        repeated = self.daemon.db.conn.execute(
            "SELECT signature, COUNT(*) FROM actions WHERE kind='terminate' AND dry_run=0"
            " AND (outcome IN ('will-return', 'may-return') OR (outcome='partial' AND"
            " (json_extract(details_json, '$.will_return') IS NOT NULL"
            " OR json_extract(details_json, '$.may_return') IS NOT NULL)))"
            " GROUP BY signature HAVING COUNT(*) > 1"
        ).fetchall()
        assert not repeated, f"I11: a futile terminate repeated: {repeated}"
        self._check_terminates()
        self._check_no_false_page(jobs, labels)
        self._check_pages(jobs)

    def _check_no_false_page(self, jobs: list[Job], labels: dict[int, tuple[str, str]]) -> None:
        """I7: no high page for a GPU user that is not training, and each is classed so."""
        for job in jobs:
            root = labels.get(job.root_pid, ("gone", ""))
            if root[0] == "not-training":
                assert not job.may_train, f"I7: {job.cmdline} classed {job.workload}"
        rows = self.daemon.db.conn.execute(
            "SELECT id, kind, severity, root_pid FROM findings"
            " WHERE severity IN ('high', 'critical') AND root_pid IS NOT NULL"
        ).fetchall()
        for fid, kind, severity, root_pid in rows:
            label = self.labels_ever.get(root_pid)
            assert label is None or label[0] != "not-training", (
                f"I7: F{fid} {kind} ({severity}) pages for {label}, not training"
            )

    def _check_gpu_denials(self, jobs: list[Job]) -> None:
        """I14 (see the module docstring)."""
        self.counts["gpu_denied"] += len(self.effects.denied)
        self.counts["gpu_lifted"] += self.effects.lifted
        self.effects.lifted = 0
        for pid, label, was_sanctioned, _start in self.effects.denied:
            assert label[0] in ("job", "wrapper"), f"I14: PID {pid} {label} denied the GPU"
            assert not was_sanctioned, f"I14: sanctioned PID {pid} {label} denied the GPU"
        self.effects.denied.clear()
        kept = {pid for job in jobs if not job.unsanctioned for pid in job.pids}
        for proc in self.host.procs.values():
            if "rogue-watchdog-gpu-deny." not in proc.devices or proc.state == "Z":
                continue
            assert proc.label[0] in ("job", "wrapper"), (
                f"I14: PID {proc.pid} {proc.label} is in a denial ({proc.devices})"
            )
            assert proc.pid not in kept, (
                f"I14: PID {proc.pid} {proc.label} judged sanctioned or ignored, still denied"
            )

    def _services(self, unit: str) -> list[int]:
        """PIDs of ``unit``'s processes doing other work, as the scan saw them."""
        cg = f"/system.slice/{unit}"
        return [
            pid
            for pid, p in self.host.procs.items()
            if p.cgroup == cg and p.label[0] == "service" and pid in self.before
        ]

    def _check_units(self) -> None:
        """I10: no systemctl verb that stops a unit reached one with a service in it."""
        calls = self.effects.calls[self.calls_seen :]
        self.calls_seen = len(self.effects.calls)
        for call in calls:
            argv = call[1] if call[0] == "run" else ()
            if not argv or argv[0] != "systemctl":
                continue
            if argv[1] in ("stop", "disable", "mask", "kill", "restart"):
                for unit in argv[2:]:
                    live = self._services(str(unit))
                    assert not live, f"I10: `{' '.join(argv)}` stops service PIDs {live}"

    def _check_job(self, job: Job, remedy: Remedy, labels: dict[int, tuple[str, str]]) -> None:
        root = labels.get(job.root_pid, ("gone", ""))
        # A process that only names a script is never a job.
        assert root[0] != "bystander", f"I2: a bystander is a job: {job.cmdline}"
        advice = job.advice
        target = target_from_job(job, None, None, str(self.host.proc))
        plan = plan_tree(target.members, remedy.guard())
        guard = remedy.guard()
        allowed = {exp.pid for exp, _d in plan if isinstance(guard.check(exp.pid, exp), LiveProc)}
        if not job.unsanctioned:
            assert advice.refused is not None, f"I1: advice for {job.verdict} job {job.root_pid}"
            assert job.origin.remediation is None, f"I1: remediation of {job.verdict} job"
            assert not allowed, f"I2: a {job.verdict} job's PIDs {allowed} may be signalled"
            disable = remedy.plan_disable(target, self.host.now)
            assert disable.refused is not None, f"I1: disable plan for {job.verdict} job"
            return
        # I1: the wrapper of a sanctioned run (the pipeline's `sh -c`) holding it
        # unreaped is never judged a job of its own.
        sanctioned = {self.labels_ever[p][1] for p, _s in self.host.sanctioned_ever
                      if p in self.labels_ever}  # fmt: skip
        assert not (root[0] == "wrapper" and root[1] in sanctioned), (
            f"I1: the wrapper {job.root_pid} of sanctioned run {root[1]} is {job.verdict}"
        )
        # A person may stop a GPU user that is not training by hand (the daemon never
        # does: I2 above, I7): its plan signals its own processes only.
        own = (
            ("job", "wrapper", "not-training") if root[0] == "not-training" else ("job", "wrapper")
        )
        for pid in allowed:
            label = labels.get(pid, ("gone", ""))
            assert label[0] in own and label[1] == root[1], (
                f"I2: the plan for job {job.root_pid} ({root}) signals PID {pid} {label}"
            )
        assert set(advice.stop_pids) <= set(job.pids) | {
            p for p, lab in labels.items() if lab == ("wrapper", root[1])
        }, f"I2: stop PIDs {advice.stop_pids} of {root}"
        if isinstance(job.origin, CronOrigin) and job.origin.file == str(self.host.pipeline):
            assert not advice.disable and job.origin.remediation is None, (
                f"I1: job {job.root_pid} from the pipeline's line may disable it"
            )
            disable = remedy.plan_disable(target, self.host.now)
            assert disable.refused is not None, f"I1: disable plan {disable.steps}"
        loops = [p for p in job.lineage[1:] if p.pid in self.host.loops]
        if loops and loops[0].pid not in advice.stop_pids:
            # I11: the loop terminate leaves is named, and stopped first.
            again = advice.restarts
            assert again is not None and again.after_terminate, f"I11: {job.root_pid}: {advice}"
            line = advice.stop_line(job.root_pid) or ""
            assert f"stop the loop first: kill -TERM {loops[0].pid}" in line, f"I11: {line}"
        self._check_restart_source(job)
        unit = job.origin.unit if isinstance(job.origin, SystemdOrigin) else None
        if unit and self._services(unit):
            # I10: a unit that also runs a hub is never planned, offered or advised unasked.
            assert not advice.disable and job.origin.remediation is None, (
                f"I10: job {job.root_pid} of {unit} may disable it: {advice}"
            )
            assert advice.collateral is not None and advice.collateral.name == unit, (
                f"I10: job {job.root_pid} of {unit}: no service named in {advice}"
            )
            line = advice.stop_line(job.root_pid) or ""
            assert f"--stop-service {unit}" in line and "stops the run only" in line, line
            disable = remedy.plan_disable(target, self.host.now)
            assert disable.refused is not None, f"I10: disable plan for {unit}: {disable.steps}"
        if isinstance(job.origin, CronOrigin) and job.origin.file and not job.origin.entry_state:
            # I6: a live cron source is a file cron reads: not group/other-writable.
            mode = os.stat(job.origin.file).st_mode
            assert not mode & 0o022, f"I6: {job.origin.file} mode {mode:o} named live"

    def _check_restart_source(self, job: Job) -> None:
        """I11 for a restart policy and a re-queuing at job: named, with what stops it."""
        h = self.host
        again = job.advice.restarts
        cid = h.container_mains.get(job.root_pid)
        if cid is not None:
            origin = job.origin
            assert isinstance(origin, ContainerOrigin) and origin.container_id == cid, (
                f"I11: container {cid[:12]}'s job {job.root_pid} from {origin.describe()}"
            )
            policy = origin.restart_policy
            if policy is None:  # the engine did not answer when it was first seen
                assert again is not None and again.when == "unknown", f"I11: {again}"
            elif policy != "no":
                had = h.containers[cid].policies
                assert policy in had, f"I11: policy {policy} named, the container had {had}"
                # Every policy but `no` starts it again after terminate's signal: the
                # container's exit status is then non-zero (128 + the signal).
                assert again is not None and again.after_terminate, (
                    f"I11: container {cid[:12]} (--restart={policy}): {again}"
                )
                assert f"restart policy {policy}" in again.how, f"I11: {again.how}"
        if (
            job.root_pid in h.sup_mains
            and isinstance(job.origin, SupervisorOrigin)
            and job.root_pid in h.procs
        ):
            # (A run seen only at its exec and gone by the tick (kernel events) has no
            # environment left to name its program by; there is nothing to terminate.)
            value = job.origin.autorestart
            assert value is not None, f"I11: supervisord's settings unread: {job.origin}"
            if value in ("true", "unexpected"):
                assert again is not None and again.after_terminate, f"I11: {again}"
                assert f"autorestart={value}" in again.how, f"I11: {again.how}"
        proc = h.procs.get(job.root_pid)
        shell = h.procs.get(proc.ppid) if proc is not None else None
        child = h.procs.get(shell.ppid) if shell is not None and shell.pid in h.at_shells else None
        if self.at_before and child is not None and child.ppid == h.atd.pid and child.state != "Z":
            # Its lineage still reaches atd (a person may have ended atd's child).
            assert isinstance(job.origin, AtOrigin), f"I11: at job {job.root_pid}: {job.origin}"
            assert again is not None and again.after_terminate, f"I11: at job: {again}"
        if isinstance(job.origin, AtOrigin):
            # Read live (issue 31, case 3): the queued jobs named are queued now.
            named = set(job.origin.pending_same_command)
            assert named <= set(self.at_before), (
                f"I11: at job {job.origin.job} names queued {sorted(named)}; queued now: "
                f"{self.at_before}"
            )

    def _check_terminates(self) -> None:
        """I15: a terminate never ends ``ok`` when its job's source has started it
        again: a container's restart policy, a queued run of a re-queuing at job."""
        h = self.host
        rows = self.daemon.db.conn.execute(
            "SELECT id, outcome, json_extract(details_json, '$.root[0]'),"
            " json_extract(details_json, '$.origin.kind') FROM actions"
            " WHERE kind = 'terminate' AND dry_run = 0 AND id > ?",
            (self.actions_seen,),
        ).fetchall()
        for aid, outcome, root, kind in rows:
            self.actions_seen = max(self.actions_seen, aid)
            self.counts["will_return"] += outcome in ("will-return", "may-return")
            if outcome != "ok" or root is None:
                continue
            cid = h.container_mains.get(root)
            if cid is not None:
                c = h.containers[cid]
                assert c.main is None, (
                    f"I15: terminate {aid} of PID {root} said ok; container {cid[:12]} "
                    f"(--restart={c.policy}) runs it again as PID {c.main}"
                )
            if root in h.sup_mains:
                assert h.sup_main is None, (
                    f"I15: terminate {aid} of PID {root} said ok; supervisord runs "
                    f"[program:trainer] again as PID {h.sup_main}"
                )
            if root in h.at_jobs and kind == "at":
                # (A person who ended atd's child left an orphan: no lineage to atd.)
                pending = [f.name for f in h.at_pending()]
                assert not pending, f"I15: terminate {aid} of at job {root} ok; queued {pending}"

    def _note_copy_list(self, fid: int, details: dict[str, Any]) -> None:
        copies = details.get("instance_roots")
        if isinstance(copies, list):
            named = {tuple(c) for c in copies if isinstance(c, list)}
            self.finding_copies[fid] = self.finding_copies.get(fid, set()) | named

    def _note_copies(self) -> None:
        """The copies each stored finding names (``instance_roots``), also for a tick
        that was not checked (the daemon was killed in it, after storing its findings)."""
        for fid, details_json in self.daemon.db.conn.execute(
            "SELECT id, details_json FROM findings WHERE resolved_at IS NULL"
        ):
            self._note_copy_list(fid, json.loads(details_json))

    def _check_findings(self, blind: bool, jobs: list[Job]) -> None:
        rows = self.daemon.db.conn.execute(
            "SELECT id, kind, root_pid, details_json, resolved_at, last_seen, fingerprint"
            " FROM findings"
        ).fetchall()
        alive = {(p.pid, p.start) for p in self.host.procs.values() if p.state != "Z"}
        seen = {(j.root_pid, j.start_ticks) for j in jobs}
        now = self.host.now
        for fid, kind, root_pid, details_json, resolved_at, _last, fp in rows:
            details = json.loads(details_json)
            root = tuple(details["root"]) if isinstance(details.get("root"), list) else None
            # I5: one job for the finding's whole life; a periodic finding names none (its
            # loop), also one that continues its first run's finding: that one names no
            # job from then on.
            if ":periodic:" in fp and (root_pid, root) == (None, None):
                self.finding_roots[fid] = (None, None)
            first = self.finding_roots.setdefault(fid, (root_pid, root))
            if first != (root_pid, root) and root in self.finding_copies.get(fid, ()):
                # The run it named ended (or is no longer one of what it is about: within
                # a raised cap); it goes on about a copy of its job it already named as an
                # instance (paged for it then: no second page, issue 35, seeds 64401 and
                # 64601).
                self.finding_roots[fid] = first = (root_pid, root)
            assert first == (root_pid, root), f"I5: F{fid} named {first}, now {root_pid, root}"
            self._note_copy_list(fid, details)
            if kind in JOB_KINDS and root is not None:
                key = (kind, root[0], root[1])
                had = self.job_finding.setdefault(key, fid)
                assert had == fid, f"I4/I5: {kind} of {root} reopened as F{fid} (was F{had})"
                if resolved_at == now and blind and root in alive and root not in seen:
                    raise AssertionError(f"I4: F{fid} resolved while blind, {root} alive")
            if kind == "respawned" and fid not in self.respawns and root is not None:
                # I4: a respawn is a new identity under a signature seen before.
                sig = str(details.get("signature"))
                assert root not in self.seen_roots.get(sig, set()), (
                    f"I4: respawned F{fid} names {root}, seen before under {sig}"
                )
                self.respawns.add(fid)
        # Roots seen while the database refused writes count once a tick stores: the
        # respawn of one of them is recorded when it does (reconciled, not a new one).
        durable = "state" not in self.daemon.degraded
        if durable:
            for sig, roots in self.pending_seen.items():
                self.seen_roots.setdefault(sig, set()).update(roots)
            self.pending_seen = {}
        for job in jobs:
            sig = job_signature(job.user, job.cmdline, job.origin)
            seen = self.seen_roots if durable else self.pending_seen
            seen.setdefault(sig, set()).add((job.root_pid, job.start_ticks))

    def _check_pages(self, jobs: list[Job]) -> None:
        db = self.daemon.db
        now = self.host.now
        # I8: a periodic finding pages once; then only reminders, REMINDER_AFTER_S apart.
        sent: dict[int, list[float]] = {}
        for fid, at in db.conn.execute(
            "SELECT d.finding_id, d.created_at FROM deliveries d JOIN findings f"
            " ON f.id = d.finding_id WHERE d.event IN ('open', 'remind')"
            " AND f.fingerprint LIKE '%:periodic:%' ORDER BY d.id"
        ):
            sent.setdefault(fid, []).append(at)
        for fid, times in sent.items():
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert all(g >= REMINDER_AFTER_S for g in gaps), f"I8: periodic F{fid} paged {times}"
        self._check_failed_pages(now)
        self._check_return_pages()
        self._check_fanout_pages(jobs)
        # I9: a return after a run killed by a signal opens respawned, and pages (a class
        # that is not training never opens respawned: I7).
        tracked = [j for j in jobs if j.verdict != "ignored"]
        rows = dict(db.conn.execute("SELECT signature, sightings FROM jobs").fetchall())
        first: dict[str, Job] = {}
        roots: dict[str, set[tuple[int, int]]] = {}
        sessions: dict[str, set[object]] = {}
        for job in tracked:
            sig = self.daemon.tracker.first_signature.get((job.root_pid, job.start_ticks))
            sig = sig or job_signature(job.user, job.cmdline, job.origin)
            first.setdefault(sig, job)
            roots.setdefault(sig, set()).add((job.root_pid, job.start_ticks))
            sessions.setdefault(sig, set()).add(_login_session(job))
        for sig, job in first.items():
            was = self.sightings.get(sig)
            back = was is not None and rows.get(sig, 0) > was
            # A run killed in this very tick (the enforcer acts after the scan) was alive
            # when the scan saw it: the job is not back after that kill (seed 33063, a
            # sighting stored late after a storage outage made it look back).
            killed = {
                (pid, start)
                for pid, start in self.last_roots.get(sig, set()) & self.host.killed
                if self.before.get(pid, (None, None))[1] != start
            }
            session = _login_session(job)
            anew = session is not None and session not in self.last_sessions.get(sig, set())
            if back and job.unsanctioned and job.may_train and killed and not anew:
                # Its page waits for the settle, as a job's first page (issue 33, fresh
                # user J): it is due once the run back still runs alerts.settle_s later.
                # Opened at this tick; or at a tick since the last checked one that the
                # daemon was killed in (its findings were stored before its action
                # began: seed 61207), naming a run of that tick; or from memory at a tick
                # the database refused writes in (stored with its alert state when it
                # can write again: seed 64301).
                new = roots[sig] - self.last_roots.get(sig, set())
                lower = min(self.checked_at, self.stored_at)
                self.returns_due.append((sig, now, lower, new or set(roots[sig])))
        settle = self.daemon.config.alerts.settle_s
        for due in list(self.returns_due):
            sig, back_at, lower, runs = due
            if now < back_at + settle or "state" in self.daemon.degraded:
                continue  # not due yet; or kept in memory now: looked at once stored
            self.returns_due.remove(due)
            if not runs & roots.get(sig, set()):
                continue  # gone within the settle: filed, not paged
            found = db.conn.execute(
                "SELECT f.id FROM findings f WHERE f.kind = 'respawned' AND f.opened_at > ?"
                " AND f.opened_at <= ? AND json_extract(f.details_json, '$.signature') = ?"
                " AND (f.last_alert_at IS NOT NULL OR EXISTS (SELECT 1 FROM deliveries d"
                " WHERE d.finding_id = f.id AND d.event = 'open'))",
                (lower, back_at, sig),
            ).fetchall()
            assert found, (
                f"I9: {sig} back at {back_at:.1f} as {sorted(runs)}, still running "
                f"{now - back_at:g} s later: no page"
            )
        self.sightings = rows
        self.paged_since = now
        self.last_roots.update(roots)
        self.last_sessions.update(sessions)
        self.checked_at = now
        if "state" not in self.daemon.degraded:
            self.stored_at = now

    def _check_return_pages(self) -> None:
        """I8 for a return (issue 35, "one incident, one page"): the findings about a
        job's run that opened while the job's ``respawned`` finding was open are folded
        into its page: none of them is paged on its own, unless louder than it.

        Only a ``respawned`` that was paged counts: one held by the settle and filed
        unpaged (its run ended within ``alerts.settle_s``, issue 33) sent nothing, so a
        later page of what it folded (the loop's periodic finding, seed 67901) is the
        incident's one page, not a second."""
        db = self.daemon.db
        returns: dict[str, list[tuple[int, float, float, str]]] = {}
        for fid, fp, opened, resolved, severity in db.conn.execute(
            "SELECT f.id, f.fingerprint, f.opened_at, f.resolved_at, f.severity FROM findings f"
            " WHERE f.kind = 'respawned' AND (f.last_alert_at IS NOT NULL OR EXISTS"
            " (SELECT 1 FROM deliveries d WHERE d.finding_id = f.id AND d.event = 'open'))"
        ):
            sig = return_signature("respawned", fp)
            if sig is not None:
                end = float("inf") if resolved is None else resolved
                returns.setdefault(sig, []).append((fid, opened, end, severity))
        marks = ",".join("?" * len(FOLDED_KINDS))
        for fid, kind, fp, opened, severity in db.conn.execute(
            "SELECT f.id, f.kind, f.fingerprint, f.opened_at, f.severity FROM findings f"
            f" WHERE f.kind IN ({marks}) AND EXISTS (SELECT 1 FROM deliveries d"
            " WHERE d.finding_id = f.id AND d.event = 'open')",
            sorted(FOLDED_KINDS),
        ):
            sig = return_signature(kind, fp)
            for rid, r_opened, r_end, r_severity in returns.get(sig or "", []):
                louder = RANK.get(severity, 3) > RANK.get(r_severity, 3)
                assert not (r_opened <= opened < r_end) or louder, (
                    f"I8: a return paged twice: respawned F{rid} (opened {r_opened}) and "
                    f"{kind} F{fid} (opened {opened})"
                )

    def _check_fanout_pages(self, jobs: list[Job]) -> None:
        """I8 for an incident (issue 33, fresh user H: one launcher's jobs, one
        source's): "one incident, one page" and "no silence".

        One page: no two ``rogue-job`` findings of one incident (``details.incident`` as
        first recorded: a launcher that exits later does not make its jobs another
        incident) both page while the first one paged is open, unless the later one is
        louder than that first page (once that page resolved, a job of the incident still
        running pages again: never silent). Pages are the ``open`` deliveries; one sent from
        memory during a storage outage has none (the in-memory path does not fold:
        docs/alerts.md), so an outage's pages are not counted here.

        No silence: a ``rogue-job`` finding never paged whose job runs now, seen at this
        tick, ``settle_s`` after it opened, is folded: into a paged, open ``rogue-job``
        of its incident that is not quieter than it, or an open ``respawned`` of
        its return, paged or still within its own settle (its page waits for it, as a
        job's first page: issue 33, fresh user J). A job that ended within its
        settle is not looked at (its finding resolved unpaged: docs/alerts.md), nor a
        tick the database refused writes in
        (what is paged then lives in memory), nor a periodic finding (it names no
        run). The simulated configuration has no learning period.
        """
        db = self.daemon.db
        now = self.host.now
        rows = db.conn.execute(
            "SELECT f.id, f.kind, f.fingerprint, f.details_json, f.opened_at, f.resolved_at,"
            " f.severity, f.last_alert_at, (SELECT MIN(d.id) FROM deliveries d"
            " WHERE d.finding_id = f.id AND d.event = 'open') FROM findings f"
            " WHERE f.kind IN ('rogue-job', 'respawned') ORDER BY f.id"
        ).fetchall()
        jobs_rows = []
        returns = []
        for fid, kind, fp, details_json, opened, resolved, severity, alerted, first_open in rows:
            details = json.loads(details_json)
            end = float("inf") if resolved is None else resolved
            if kind == "respawned":
                returns.append((return_signature(kind, fp), end, alerted, opened))
                continue
            self.incidents.setdefault(fid, details.get("incident"))
            jobs_rows.append(
                (fid, fp, details, opened, end, severity, alerted, first_open,
                 self.incidents[fid])
            )  # fmt: skip
        # One incident, one page.
        opens = dict(db.conn.execute(
            "SELECT id, created_at FROM deliveries WHERE event = 'open'"
        ).fetchall())  # fmt: skip
        paged = [
            (first_open, opens[first_open], opened, fid, end, severity, key)
            for fid, _fp, _d, opened, end, severity, _a, first_open, key in jobs_rows
            if first_open is not None and isinstance(key, str) and key
        ]
        paged.sort()
        for n, (_did, at, _opened, fid, _end, severity, key) in enumerate(paged):
            # Paged before it and still open when it paged: a finding paged only as it
            # resolved (the record of a job terminate stopped, its open owed:
            # tracker._owes_open) was never a page to fold into; and once the first page
            # resolved (its resolve sent: a new run of its own job elsewhere took its
            # fingerprint), a job of the incident still running pages again, never silent
            # (seed 67401, tests/unit/test_sim_faults.py case 21).
            earlier = [
                (a_fid, a_sev)
                for _d, a_at, _o, a_fid, a_end, a_sev, a_key in paged[:n]
                if a_key == key and a_end > at and a_end > a_at
            ]
            if not earlier:
                continue
            anchor, a_sev = min(earlier)
            assert RANK.get(severity, 3) > RANK.get(a_sev, 3), (
                f"I8: one incident paged twice: rogue-job F{anchor} and F{fid} ({key})"
            )
        # No silence.
        if "state" in self.daemon.degraded or not self.effects.storage_ok:
            return
        settle = self.daemon.config.alerts.settle_s
        alive = {(p.pid, p.start) for p in self.host.procs.values() if p.state != "Z"}
        seen = {(j.root_pid, j.start_ticks) for j in jobs}
        for fid, fp, details, opened, end, severity, alerted, first_open, key in jobs_rows:
            root = details.get("root")
            if alerted is not None or first_open is not None or end != float("inf"):
                continue
            if ":periodic:" in fp or not isinstance(root, list) or now - opened < settle:
                continue
            if tuple(root) not in alive or tuple(root) not in seen:
                continue
            # Its return's, or one of its incident's (a job of it killed and back).
            sigs = {return_signature("rogue-job", fp)} | {
                return_signature("rogue-job", a_fp)
                for _i, a_fp, _d, _o, a_end, _s, _a, _f, a_key in jobs_rows
                if key and a_key == key and a_end >= now
            }
            # Open at the start of this tick (one resolved in it was this tick's page).
            into = [
                a_fid
                for a_fid, _f, _d, _o, a_end, a_sev, a_al, a_first, a_key in jobs_rows
                if a_fid != fid and a_end >= now and a_key == key and key
                and (a_al is not None or a_first is not None)
                and RANK.get(severity, 3) <= RANK.get(a_sev, 3)
            ] + [
                0 for r_sig, r_end, r_al, r_opened in returns
                if r_sig and r_sig in sigs and r_end >= now
                and (r_al is not None or now - r_opened < settle)
            ]  # fmt: skip
            assert into, (
                f"I8: rogue-job F{fid} ({key}) never paged, its job {root} running "
                f"{now - opened:g} s: folded into no open page"
            )

    def _check_failed_pages(self, now: float) -> None:
        """I8/I13 for ``remediation-failed``: a terminate that did not hold is paged once
        while its job's runs follow one another (a loop's next run is the same failure,
        not a new one). Paged again only after the job was quiet longer than the window
        a run's finding waits for it (a slow loop, as for ``rogue-job``), or after a
        run of it was killed since (its return is news: ``respawned``)."""
        for pid, start in self.host.killed:
            self.kill_seen.setdefault((pid, start), now)
        paged: dict[tuple[str, int], list[tuple[int, float, float]]] = {}
        for fid, details_json, opened, last_seen in self.daemon.db.conn.execute(
            "SELECT f.id, f.details_json, MIN(d.created_at), f.last_seen FROM findings f"
            " JOIN deliveries d ON d.finding_id = f.id WHERE f.kind = 'remediation-failed'"
            " AND d.event = 'open' GROUP BY f.id ORDER BY MIN(d.created_at)"
        ):
            details = json.loads(details_json)
            sig, actions = details.get("signature"), details.get("actions") or []
            if not isinstance(sig, str) or not actions:
                continue  # a terminate's tree still running: identified by its action
            paged.setdefault((sig, max(actions)), []).append((fid, opened, last_seen))
        for (sig, action), pages in paged.items():
            roots = self.seen_roots.get(sig, set()) | self.pending_seen.get(sig, set())
            for (fa, opened_a, seen_a), (fb, opened_b, _s) in itertools.pairwise(pages):
                quiet = opened_b - seen_a > RETURN_WINDOW_S
                killed = any(
                    opened_a <= t <= opened_b for r, t in self.kill_seen.items() if r in roots
                )
                assert quiet or killed, (
                    f"I8/I13: remediation-failed of action {action} paged twice: F{fa} at "
                    f"{opened_a}, F{fb} at {opened_b}, no kill between, not quiet"
                )

    @invariant()
    def never_touches_real_processes(self) -> None:
        for pid, _sig in self.effects.signals():
            assert pid >= 4_000_000, f"a real PID {pid} was signalled"


class ExecPathMachine(TrustMachine):
    """The trust machine with the daemon's exec path (issue 34) among its steps: a
    subclass, so that the plain machine's example stream (CI's fixed seed) stays as it
    was."""

    @rule()
    def exec_pass(self) -> None:
        """The event reader woke the daemon for captures alone: the exec path
        (``Daemon.exec_tick``, issue 34) judges them between two ticks. Its scan is
        compared with the twin's whole scan (I16: the same jobs and findings for what
        it judged); what it filed is checked with the next tick's."""
        if not self.events_on:
            return
        self.host.now += 0.2
        self.host.write_nvml()
        self.kernel.flush()
        if self.daemon.exec_tick(self.host.now) is not None:
            self.counts["exec_passes"] += 1


def _login_session(job: Job) -> object:
    """The logind session a job's run was started from by a person (its shell origin's),
    or None: the only person's session the simulated host has (a sweep's login shell)."""
    return job.origin.to_json().get("login_session") if job.origin.kind == "shell" else None

"""Issue 35: page only for what a person must act on.

Each handed case as a test of its exact value (docs/first-week.md, "Pages"):

- case 1: a short CUDA job run every 5 s from a user's loop, ending by itself each time,
  paged ``rogue-job`` + ``respawned`` on every run; now it is one periodic finding and
  one page for the whole loop;
- case 4: NVML memory appearing a tick after the open made a ``remind`` 2 s after the
  ``open``; now the open waits for its first complete picture (``alerts.settle_s``);
- case 5: during ``daemon.learn_until`` ``rogue-service`` stayed ``high``.

The daemon's ticks run on real processes with a fake clock; how each run ended is what
the kernel's exit event says (``Daemon.exit_statuses``, fed here from ``wait``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any, cast

from rogue_watchdog.config import parse_config
from rogue_watchdog.config.alerts import AlertSettings
from rogue_watchdog.daemon.loop import Daemon, learned
from rogue_watchdog.daemon.tracking.jobs import Return, how_ended
from rogue_watchdog.daemon.tracking.lifecycle import Resolve, decide
from rogue_watchdog.daemon.tracking.periodic import (
    RETURN_WINDOW_S,
    Loop,
    cadence_text,
    expected,
    gap_text,
    loops,
)
from rogue_watchdog.daemon.tracking.reminders import settling
from rogue_watchdog.model import FINDING_KINDS, Finding, Job
from rogue_watchdog.state import ActionRecord, FindingRecord
from tests.conftest import Spawned, need_program, poll
from tests.fakenvml.fixtures import REPO, fake_nvml, library_path

T0 = 1_900_000_000.0


def _daemon(tmp_path: Path, extra: str = "") -> Daemon:
    cfg = parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'{extra}}}\n"
        f"alerts:\n  sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]\n",
        "t.yaml",
    )
    return Daemon(cfg, None)


def pages(d: Daemon, mark: str, pids: Collection[int] = ()) -> list[tuple[str, str, str]]:
    """``(event, kind, severity)`` of every spooled open or remind naming ``mark`` or
    about one of ``pids``."""
    rows = d.db.conn.execute(
        "SELECT event, payload_json FROM deliveries WHERE event IN ('open', 'remind') ORDER BY id"
    ).fetchall()
    out = []
    for event, payload in rows:
        doc = json.loads(payload)
        if mark in payload or doc["finding"]["root_pid"] in pids:
            out.append((event, doc["finding"]["kind"], doc["finding"]["severity"]))
    return out


_LOOP = r"""
import json, os, signal, subprocess, sys, time
from pathlib import Path
from tests.fakenvml.build import write_config
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon, learned

lib, conf, tmp, runs, kill_at, feed, period, quiet = sys.argv[1:9]
runs, kill_at, feed = int(runs), int(kill_at), feed == "1"
period, quiet = float(period), float(quiet)
GIB = 1 << 30
# A GPU box: NVML lists one GPU and none of the loop's runs (a CUDA probe that maps
# libcudart and exits before it holds memory).
write_config(Path(conf), {"devices": [{"uuid": "GPU-aaaa", "total": 80 * GIB, "used": 0,
                                       "processes": []}]})
cfg = parse_config(
    f"nvml: {{library: '{lib}'}}\n"
    f"training: {{device_glob: '{tmp}/nodev[0-9]*'}}\n"
    f"daemon: {{state_dir: '{tmp}/state'}}\n"
    f"alerts: {{sinks: [{{type: log, path: '{tmp}/alerts.log'}}]}}\n",
    "t.yaml",
)
d = Daemon(cfg, None)
d.scanner.gpu_source.retry_first_s = 0.0
pending = {}
def exits():
    global pending
    out, pending = pending, {}
    return out
if feed:  # what the proc connector's exit events hand the daemon
    d.exit_statuses = exits
script = Path(tmp) / "train_probe.py"
# A run ends by itself when the test says so (PROBE_GO appears): never before the look.
script.write_text("import os, time\nwhile not os.path.exists(os.environ['PROBE_GO']):\n"
                  "    time.sleep(0.005)\n")
t0 = 1_900_000_000.0
pids = []
for i in range(runs):
    go = Path(tmp) / f"go-{i}"
    env = {**os.environ, "PROBE_GO": str(go)}
    p = subprocess.Popen([sys.executable, "-S", str(script)], env=env)
    deadline = time.monotonic() + 10
    while str(script).encode() not in Path(f"/proc/{p.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    pids.append(p.pid)
    d.tick(t0 + period * i)
    if i == kill_at:
        p.send_signal(signal.SIGTERM)
    else:
        go.touch()
    code = p.wait(30)
    pending[p.pid] = -code if code < 0 else code << 8  # the wait(2) status
    d.tick(t0 + period * i + 0.5)
    if period > 10:
        d.tick(t0 + period * i + period / 2)  # between two runs
if quiet:
    d.tick(t0 + period * (runs - 1) + quiet)
pages = []
for event, payload in d.db.conn.execute(
    "SELECT event, payload_json FROM deliveries WHERE event IN ('open', 'remind') ORDER BY id"
):
    f = json.loads(payload)["finding"]
    if str(script) in payload or f["root_pid"] in pids:
        pages.append([event, f["kind"], f["severity"]])
mine = [
    {"kind": f.kind, "root_pid": f.root_pid, "message": f.message, "details": f.details}
    for f in d.db.open_findings() if str(script) in f.message or f.root_pid in pids
]
# This test's own: the daemon sees the whole host, and another test's runs (whose exit
# statuses this daemon is not fed) would come back as respawned here.
respawned = [pid for (pid,) in d.db.conn.execute(
    "SELECT root_pid FROM findings WHERE kind='respawned' ORDER BY id") if pid in pids]
events = [list(r) for r in d.db.conn.execute(
    "SELECT d.event, f.root_pid IS NULL FROM deliveries d JOIN findings f ON f.id = d.finding_id"
    " WHERE f.kind = 'rogue-job' AND f.message LIKE ? ORDER BY d.id", (f"%{script}%",))]
from rogue_watchdog.daemon.status import build_status, exit_code, render_status
ids = {f.id for f in d.db.open_findings() if str(script) in f.message or f.root_pid in pids}
doc = build_status(d)
doc["findings"] = [f for f in doc["findings"] if f["id"] in ids]  # not the host's others
status = {"findings": doc["findings"], "exit": exit_code(doc), "text": render_status(doc)}
print(json.dumps({"pids": pids, "pages": pages, "open": mine, "respawned": respawned,
                  "events": events, "status": status}))
"""


def run_loop(
    tmp_path: Path,
    runs: int,
    kill_at: int = -1,
    feed: bool = True,
    period: float = 5.0,
    quiet: float = 0.0,
) -> dict[str, Any]:
    """``runs`` short runs of ``train_probe.py`` ``period`` s apart (fake clock) on a
    GPU box (the fake NVML), the daemon ticked while each runs and after it ended (by
    itself, or by SIGTERM for run ``kill_at``), and halfway to the next run when that
    is more than 10 s away; a last tick ``quiet`` s after the last run when given. With
    ``feed``, the daemon gets each run's exit status as the kernel's exit event carries
    it. Its own interpreter: pynvml loads one library per process."""
    need_program("gcc")
    lib = fake_nvml(tmp_path, {})
    out = subprocess.run(
        [sys.executable, "-c", _LOOP, str(library_path(lib)), str(lib / "fake_nvml.conf"),
         str(tmp_path), str(runs), str(kill_at), "1" if feed else "0", str(period),
         str(quiet)],
        capture_output=True, text=True, timeout=300, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


def test_case1_a_loop_of_short_runs_is_one_periodic_finding_and_one_page(
    tmp_path: Path,
) -> None:
    """Case 1: before, 23 pages for 12 runs (rogue-job, then rogue-job + respawned per
    run); after, one periodic finding with its count, cadence and origin, one page."""
    doc = run_loop(tmp_path, 12)
    assert [tuple(p) for p in doc["pages"]] == [("open", "rogue-job", "high")]
    (row,) = doc["open"]
    periodic = row["details"]["periodic"]
    assert (periodic["runs"], periodic["cadence_s"], periodic["pid"]) == (12, 5.0, doc["pids"][-1])
    assert row["root_pid"] is None
    assert row["details"]["origin"]["kind"] == row["details"]["origin_kind"]
    assert row["message"].startswith("periodic: 12 runs about every 5s since ")
    assert doc["respawned"] == []


def test_a_killed_run_of_a_periodic_loop_comes_back_as_respawned(tmp_path: Path) -> None:
    """``respawned`` keeps its meaning inside a loop: the run after one stopped by a
    signal opens it, the loop stays one finding. That run ended by itself 0.5 s later,
    within the settle: filed, not paged (issue 33, fresh user J: before, paged at the
    return, ``("open", "respawned", "high")`` after the loop's page)."""
    doc = run_loop(tmp_path, 6, kill_at=3)
    assert [tuple(p) for p in doc["pages"]] == [("open", "rogue-job", "high")]
    assert doc["respawned"] == [doc["pids"][4]]
    assert [f["details"]["periodic"]["runs"] for f in doc["open"] if f["kind"] == "rogue-job"] == [
        6
    ]


def test_a_loop_is_paged_between_its_runs_once_settled_and_resolves_when_quiet(
    tmp_path: Path,
) -> None:
    """A loop a minute apart: its finding opens with the second run, which is gone
    before the settle ends; the open goes out between two runs, once. Quiet for twice
    its cadence plus 60 s, it resolves (one resolve); the first run, which ended by
    itself within its settle, sent nothing."""
    doc = run_loop(tmp_path, 3, period=60.0, quiet=181.0)
    assert doc["events"] == [["open", 1], ["resolve", 1]]
    assert doc["open"] == []


def test_without_exit_evidence_every_return_is_still_a_respawn(tmp_path: Path) -> None:
    """No exit event (polling only): nothing says a run ended by itself, so each return
    is ``respawned``, as before: never quieter without evidence."""
    doc = run_loop(tmp_path, 3, feed=False)
    assert doc["respawned"] == doc["pids"][1:]


_CASE4 = r"""
import json, subprocess, sys, time
from pathlib import Path
from tests.fakenvml.build import write_config
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon, learned

lib, conf, state, tmp = sys.argv[1:5]
script = Path(tmp) / "train_settle.py"
script.write_text("import time\ntime.sleep(60)\n")
worker = subprocess.Popen([sys.executable, str(script)])
deadline = time.monotonic() + 10
while str(script).encode() not in Path(f"/proc/{worker.pid}/cmdline").read_bytes():
    assert time.monotonic() < deadline
    time.sleep(0.01)
GIB = 1 << 30
def nvml(listed):
    procs = [{"pid": worker.pid, "mem": 4 * GIB}] if listed else []
    write_config(Path(conf), {"devices": [{"uuid": "GPU-aaaa", "total": 80 * GIB,
                                           "used": 4 * GIB if listed else 0,
                                           "processes": procs}]})
cfg = parse_config(
    f"nvml: {{library: '{lib}'}}\n"
    f"training: {{device_glob: '{tmp}/nodev[0-9]*'}}\n"
    f"daemon: {{state_dir: '{state}'}}\n"
    f"alerts: {{sinks: [{{type: log, path: '{tmp}/alerts.log'}}]}}\n",
    "t.yaml",
)
d = Daemon(cfg, None)
d.scanner.gpu_source.retry_first_s = 0.0
t = 1_900_000_000.0
for dt, listed in ((0, False), (2, True), (4, True), (6, True), (30, True)):
    nvml(listed)
    d.tick(t + dt)
rows = d.db.conn.execute(
    "SELECT event, payload_json FROM deliveries WHERE event IN ('open', 'remind') ORDER BY id"
).fetchall()
out = []
for event, payload in rows:
    doc = json.loads(payload)
    if str(script) in payload:
        f = doc["finding"]
        out.append([event, f["kind"], f["details"].get("gpu_indexes"), doc["time"]])
worker.kill(); worker.wait()
print(json.dumps(out))
"""


def test_case4_memory_a_tick_later_is_part_of_the_open_not_a_remind(tmp_path: Path) -> None:
    """Case 4: before, ``open`` then ``remind`` 2 s later (the job now held GPU 0): two
    pages for one incident. After: one ``open``, naming GPU 0, once the picture held
    still for a look (here at +4 s, within ``alerts.settle_s``)."""
    need_program("gcc")
    lib = fake_nvml(tmp_path, {})
    out = subprocess.run(
        [sys.executable, "-c", _CASE4, str(library_path(lib)), str(lib / "fake_nvml.conf"),
         str(tmp_path / "state"), str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    got: list[list[Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    assert [(e, k, g) for e, k, g, _at in got] == [("open", "rogue-job", [0])], got


_SERVICE = """import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
time.sleep(120)
"""


def test_case5_learning_downgrades_rogue_service_too(spawned: Spawned, tmp_path: Path) -> None:
    """Case 5: before, a rogue trainer listening on 127.0.0.1 during ``learn_until`` gave
    ``rogue-job`` info but ``rogue-service`` high; after, both info."""
    d = _daemon(tmp_path, ", learn_until: '2033-05-18T03:33:20+00:00'")
    script = tmp_path / "train_serving.py"
    script.write_text(_SERVICE)
    port = tmp_path / "port"
    pid = spawned.start([sys.executable, str(script), str(port)]).pid
    poll("the port", port.exists, 20, 0.05)
    time.sleep(0.1)
    d.tick(T0)
    mine = sorted((f.kind, f.severity) for f in d.db.open_findings() if f.root_pid == pid)
    assert mine == [("rogue-job", "info"), ("rogue-service", "info")]
    assert [p for p in pages(d, str(script)) if p[2] != "info"] == []


def test_a_lone_short_run_that_ends_by_itself_within_the_settle_is_recorded_not_paged(
    tmp_path: Path,
) -> None:
    """A job that ended by itself before its picture settled left nothing to act on:
    its finding is recorded (and counted), not paged (it waits RETURN_WINDOW_S for the
    job to come back, then resolves); so did a run a signal from someone else stopped
    within the settle (fresh user G, issue 33: before, its open and resolve were sent;
    should it come back, ``respawned`` pages it). Only this product's own action owes
    the open (tests/unit/test_pages_without_nvml.py)."""
    waiting = run_loop(tmp_path / "waiting", 1)
    assert waiting["pages"] == [] and [f["kind"] for f in waiting["open"]] == ["rogue-job"]
    quiet = run_loop(tmp_path / "quiet", 1, quiet=RETURN_WINDOW_S + 1)
    assert quiet["pages"] == [] and quiet["open"] == []
    killed = run_loop(tmp_path / "killed", 1, kill_at=0)
    assert killed["pages"] == []


def test_status_lists_a_run_that_ended_before_its_page_apart_and_exits_0_for_it(
    tmp_path: Path,
) -> None:
    """Issue 33, fresh user K: `open findings: 92`, nearly all other people's test runs
    that had exited within the settle (never paged, open 5 minutes in case they come
    back), listed one by one and making `status` exit 1, hid the two pages that asked
    for action. Such a finding is marked ``ended_before_page``, summed up in one line,
    and not counted in the exit code; a paged one is. Before (7f5f2b2): the finding
    listed as `F1 high rogue-job (open 0s, seen 1x): rogue training job …; now: its run
    PID … exited with status 0 …`, exit 1; after: one line, exit 0."""
    waiting = run_loop(tmp_path / "waiting", 1)
    (entry,) = waiting["status"]["findings"]
    assert entry["kind"] == "rogue-job" and entry["ended_before_page"] is True
    assert waiting["status"]["exit"] == 0
    text = waiting["status"]["text"]
    assert (
        "  + 1 about runs that ended before any page (nothing left to act on; open a "
        f"while in case the job comes back; --json lists them): F{entry['id']}" in text
    )
    assert f"F{entry['id']} high" not in text
    # A loop of such runs is paged (one periodic finding): listed, counted, between
    # two runs too.
    loop = run_loop(tmp_path / "loop", 4)
    assert loop["pages"] == [["open", "rogue-job", "high"]]
    (paged,) = loop["status"]["findings"]
    assert "ended_before_page" not in paged and loop["status"]["exit"] == 1
    assert f"F{paged['id']} high     rogue-job" in loop["status"]["text"]


def test_learning_downgrades_every_kind_about_what_runs_and_nothing_else() -> None:
    """Every finding kind about what runs outside the allowlist is info while learning
    (``respawned``: by the tracker, test_learning.py); a kind added later must be put on
    one side or the other here."""
    about_jobs = {
        "rogue-job", "excess-instances", "queue-unsanctioned", "rogue-service",
        "unsanctioned-gpu-use", "remediation-failed",
    } & set(FINDING_KINDS)  # fmt: skip
    downgraded = {k for k in FINDING_KINDS if learned(Finding(k, "high", "m")).severity == "info"}
    assert downgraded == about_jobs
    f = learned(Finding("rogue-service", "high", "m", 7, {"listening": []}))
    assert (f.severity, f.details) == ("info", {"listening": [], "learning": True})


# -- the phases as plain functions -----------------------------------------------------


def _act(kind: str, outcome: str = "ok", root: list[int] | None = None, **kw: Any) -> ActionRecord:
    fields: dict[str, Any] = {
        "id": 1, "created_at": T0, "actor": "t", "kind": kind, "target": "x", "finding_id": None,
        "signature": "sig", "dry_run": False, "outcome": outcome,
        "details": {"root": root or [10, 5]}, "undo": None, "undone_at": None,
    }  # fmt: skip
    fields.update(kw)
    return ActionRecord(**fields)


def test_how_a_run_ended_reads_our_actions_then_the_exit_status() -> None:
    one = [(10, 5)]
    assert how_ended([], one, {}) is None  # no evidence
    assert how_ended([], one, {10: 0}) == "exited"
    assert how_ended([], one, {10: 1 << 8}) == "exited"  # a crash is no stop by anyone
    assert how_ended([], one, {10: signal.SIGTERM}) == "stopped"
    assert how_ended([], one, {10: signal.SIGKILL | 0x80}) == "stopped"  # core dumped
    assert how_ended([], one, {11: signal.SIGKILL}) is None  # another PID's exit
    # Two instances ran: one killed is a stop; both must have ended by themselves.
    two = [(10, 5), (12, 7)]
    assert how_ended([], two, {10: 0, 12: signal.SIGTERM}) == "stopped"
    assert how_ended([], two, {10: 0}) is None
    assert how_ended([], two, {10: 0, 12: 0}) == "exited"
    # Our terminate of such a run, or a disabled source, is a stop whatever the status.
    assert how_ended([_act("terminate")], one, {10: 0}) == "stopped"
    assert how_ended([_act("terminate", root=[12, 7])], two, {10: 0, 12: 0}) == "stopped"
    assert how_ended([_act("disable-source")], one, {10: 0}) == "stopped"
    # ... unless it did nothing: a dry run, a refusal, an undone disable, another run.
    for act in (
        _act("terminate", dry_run=True),
        _act("terminate", "refused"),
        _act("disable-source", undone_at=T0 + 1),
        _act("terminate", root=[10, 4]),
    ):
        assert how_ended([act], one, {10: 0}) == "exited", act


def _periodic_rec(fid: int, runs: int, first: float, last: float, **kw: Any) -> FindingRecord:
    fields: dict[str, Any] = {
        "id": fid, "fingerprint": "rogue-job:periodic:sig", "kind": "rogue-job",
        "severity": "high", "message": "m", "root_pid": None,
        "details": {"signature": "sig", "fingerprint": "periodic:sig",
                    "periodic": {"runs": runs, "first_at": first, "last_at": last,
                                 "cadence_s": 5.0, "pid": 10}},
        "opened_at": last, "last_seen": last, "seen_count": 1, "resolved_at": None,
        "last_alert_at": None,
    }  # fmt: skip
    fields.update(kw)
    return FindingRecord(**fields)


def test_loops_start_on_a_run_that_ended_by_itself_and_count_every_return() -> None:
    job = cast(Job, None)
    exited = Return("sig", job, T0, "exited")
    unknown = Return("sig", job, T0, None)
    stopped = Return("sig", job, T0, "stopped")
    assert loops([], {"sig": exited}, T0 + 5) == {"sig": Loop("sig", 2, T0, T0 + 5)}
    assert loops([], {"sig": unknown}, T0 + 5) == {}
    assert loops([], {"sig": stopped}, T0 + 5) == {}
    rec = _periodic_rec(1, 3, T0, T0 + 10)
    assert loops([rec], {}, T0 + 12) == {"sig": Loop("sig", 3, T0, T0 + 10)}
    # Any return of a loop is one more run of it, a stopped one too (that one also
    # opens respawned: record_jobs).
    for back in (exited, unknown, stopped):
        assert loops([rec], {"sig": back}, T0 + 15) == {"sig": Loop("sig", 4, T0, T0 + 15)}
    assert Loop("sig", 4, T0, T0 + 15).cadence_s == 5.0
    assert Loop("sig", 4, T0, T0 + 15).quiet_s == 70.0


def test_a_loop_stays_open_between_runs_until_quiet() -> None:
    rec = _periodic_rec(1, 3, T0, T0 + 10)  # every 5 s: quiet after 2 * 5 + 60 s
    last = {"sig": T0 + 10.5}
    assert expected([rec], set(), last, T0 + 80.5) == {"sig"}
    assert expected([rec], set(), last, T0 + 80.6) == set()
    # A run seen now whose findings were not reported (sanctioned now) ends it.
    assert expected([rec], {"sig"}, last, T0 + 11) == set()
    steps = decide({}, [rec], present=set(), held=set(), expected={"sig"})
    assert steps == []
    assert decide({}, [rec], present=set(), held=set()) == [Resolve(rec)]


def test_the_settle_waits_for_a_gpu_seen_twice_alike_at_most_settle_s() -> None:
    s = AlertSettings(settle_s=5.0)
    job = Finding("rogue-job", "high", "m", 10, {"root": [10, 5], "gpus": []})
    other = Finding("excess-instances", "high", "m", 10, {"root": [10, 5]})
    service = Finding("rogue-service", "high", "m", 10, {"job_root_pid": 10})
    bare = {"alertname": "RogueJob"}
    gpu = {"alertname": "RogueJob", "gpu": "0"}
    assert settling(job, bare, None, 0.0, s)
    assert settling(job, gpu, None, 0.0, s)  # on a GPU, but looked at once
    assert settling(job, gpu, bare, 2.0, s)  # the GPU is new this look
    assert not settling(job, gpu, gpu, 4.0, s)  # the same at two looks: complete
    assert not settling(job, bare, bare, 5.0, s)  # never longer than settle_s
    assert not settling(other, bare, None, 0.0, s)  # not about where a job runs
    # A rogue service is about the run it started: it waits with it (fresh user I,
    # issue 33: before, it was paged at once, beside the run's own page).
    assert settling(service, bare, None, 0.0, s)
    assert not settling(service, bare, bare, 5.0, s)
    assert not settling(job, bare, None, 0.0, AlertSettings(settle_s=0.0))


def test_gap_text() -> None:
    assert [gap_text(x) for x in (0.3, 4.6, 60, 61, 150, 3600, 3900, 86400, 7 * 86400)] == [
        "under 1s", "5s", "1m", "1m01s", "2m30s", "1h", "1h05m", "24h", "7d",
    ]  # fmt: skip


def test_cadence_text_for_sub_second_loops_and_two_runs() -> None:
    """Issue 33, fresh user D: a finding read `periodic: 2 runs about every under 1s`
    (before: `about every {gap_text}` whatever the gap and the count)."""
    assert [cadence_text(n, s) for n, s in ((2, 0.3), (5, 0.2), (2, 72), (12, 4.6))] == [
        "2 runs less than 1s apart", "5 runs less than 1s apart", "2 runs 1m12s apart",
        "12 runs about every 5s",
    ]  # fmt: skip


# -- counterexamples of the lifecycle simulator (tests/sim/machine.py I8, I9) -------------

_SIM = r"""
import json, sys, tempfile
from pathlib import Path
from tests.sim.machine import TrustMachine
TrustMachine.workdir = Path(sys.argv[1])
TrustMachine.events = False  # found while the simulated daemon polled
state = TrustMachine()
exec(sys.argv[2])
rows = state.daemon.db.conn.execute(
    "SELECT f.kind, f.fingerprint LIKE '%:periodic:%', d.event FROM deliveries d"
    " JOIN findings f ON f.id = d.finding_id WHERE d.event IN ('open', 'remind')"
    " ORDER BY d.id").fetchall()
state.teardown()
print(json.dumps([list(r) for r in rows]))
"""


def replay(tmp_path: Path, steps: str) -> list[list[Any]]:
    """Run simulator steps (as hypothesis prints them); every invariant is checked
    after each tick. Returns ``[kind, periodic, event]`` of each open or remind."""
    need_program("gcc")
    out = subprocess.run(
        [sys.executable, "-c", _SIM, str(tmp_path), steps],
        capture_output=True, text=True, timeout=300, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    rows: list[list[Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    return rows


def test_sim_i8_a_loop_whose_later_runs_hold_a_gpu_is_not_paged_again(tmp_path: Path) -> None:
    """I8 (seed 2): three runs of a loop without a GPU, then one on GPU 0: the loop's
    GPU label grew after its open and re-paged it at once (a relabel). The labels of a
    periodic finding are those of its first alert; the GPUs later runs held are in
    ``gpu_indexes``."""
    steps = "\n".join(f"state.probe_loop(gpu={gpu})" for gpu in ("False", "False", "False", "True"))
    assert replay(tmp_path, steps) == [["rogue-job", 1, "open"]]


# -- with the workload classes: a class that is not training ------------------------------


def _classed(workload: str, pid: int, start: int) -> Job:
    from rogue_watchdog.model import Proc, ShellOrigin

    root = Proc(pid=pid, ppid=1, start_ticks=start, state="S", comm="python3", uid=0, user="root")
    return Job(
        root_pid=pid,
        pids=[pid],
        user="root",
        cmdline=("python3", "/home/u/probe.py"),
        start_ticks=start,
        gpu_memory_bytes=None,
        gpu_uuids=[],
        lineage=[root],
        origin=ShellOrigin(session="tmux session 'lab'"),
        workload=workload,  # type: ignore[arg-type]
    )


def _runs(tmp_path: Path, workload: str, statuses: list[int]) -> tuple[Daemon, list[Any]]:
    """Runs of one job signature of class ``workload`` 5 s apart, each ended with the
    wait(2) status given (the kernel's exit event), tracked tick by tick; the tracker's
    result of each return."""
    from rogue_watchdog.policy.findings import job_findings

    d = _daemon(tmp_path)
    results = []
    for i, status in enumerate([*statuses, 0]):
        job = _classed(workload, 5000 + i, 100 + i)
        now = T0 + 5 * i
        results.append(d.tracker.update([job], job_findings([job]), now))
        d.tracker.update([], [], now + 1, exits={job.root_pid: status})
    return d, results


def test_a_class_that_is_not_training_never_opens_respawned_even_after_a_kill(
    tmp_path: Path,
) -> None:
    """A notebook/server/probe killed and back is no respawned ghost (its own
    unsanctioned-gpu-use finding says what it is); a training or unknown job is."""
    for workload, respawned in (("training", 1), ("unknown", 1), ("serving", 0), ("probe", 0)):
        _d, results = _runs(tmp_path / workload, workload, [signal.SIGTERM])
        assert len(results[1].respawned) == respawned, workload


def test_a_probe_loop_of_a_class_that_is_not_training_is_one_periodic_finding(
    tmp_path: Path,
) -> None:
    """The periodic rule applies to unsanctioned-gpu-use as to rogue-job: six runs of a
    probe that each end by themselves are one open finding, no respawned."""
    d, results = _runs(tmp_path, "probe", [0] * 5)
    assert not any(r.respawned for r in results)
    open_now = [f for f in d.db.open_findings() if f.kind == "unsanctioned-gpu-use"]
    (loop,) = open_now
    assert loop.fingerprint.startswith("unsanctioned-gpu-use:periodic:")
    assert loop.root_pid is None and loop.details["periodic"]["runs"] == 6


# -- a loop is one finding from its first run (the busy box's cron ghost) ----------------


def _ghost(tmp_path: Path, statuses: list[int], period: float = 60.0) -> tuple[Daemon, float]:
    """A training job run every ``period`` s for 20 s, each run ended with the wait(2)
    status given (the kernel's exit event), ticked every 5 s while it runs and once
    after it ended; returns the daemon and when the last run was seen gone."""
    from rogue_watchdog.policy.findings import job_findings

    d = _daemon(tmp_path)
    gone = T0
    for i, status in enumerate(statuses):
        job = _classed("training", 6000 + i, 300 + i)
        start = T0 + period * i
        for k in range(5):  # 0 … 20 s: the settle (5 s) ends while it runs
            d.tracker.update([job], job_findings([job]), start + 5 * k)
        gone = start + 25
        d.tracker.update([], [], gone, exits={job.root_pid: status})
        d.tracker.update([], [], start + period / 2)
    return d, gone


def _alerts(d: Daemon, kind: str) -> list[tuple[str, int, str]]:
    """``(event, finding id, message)`` of every alert spooled about ``kind``."""
    rows = d.db.conn.execute(
        "SELECT d.event, d.finding_id, f.message FROM deliveries d JOIN findings f"
        " ON f.id = d.finding_id WHERE f.kind = ? ORDER BY d.id",
        (kind,),
    ).fetchall()
    return [(e, fid, m) for e, fid, m in rows]


def test_busy_box_ghost_a_run_that_ended_by_itself_and_came_back_is_paged_once(
    tmp_path: Path,
) -> None:
    """The busy box's cron ghost (20 s every minute): before, its first run's rogue-job
    was paged, resolved when the run ended by itself, and the second run opened the
    loop's finding and paged again (2 opens, 2 ids). After, the first run's finding waits
    RETURN_WINDOW_S for the job, the return continues it as the loop's (one id, one open,
    runs 3), and it resolves once, saying it ended by itself, when nothing came back."""
    d, gone = _ghost(tmp_path, [0, 0, 0])
    sent = _alerts(d, "rogue-job")
    assert [e for e, _f, _m in sent] == ["open"]
    (rec,) = d.db.open_findings()
    assert rec.id == sent[0][1] and rec.root_pid is None
    assert rec.fingerprint.startswith("rogue-job:periodic:")
    assert (rec.details["periodic"]["runs"], rec.details["periodic"]["cadence_s"]) == (3, 60.0)
    assert [r.id for r in map(d.db.finding, range(1, 5)) if r is not None] == [rec.id]
    d.tracker.update([], [], gone + RETURN_WINDOW_S + 1)  # the loop quiet: it ends
    events = _alerts(d, "rogue-job")
    assert [(e, fid) for e, fid, _m in events] == [("open", rec.id), ("resolve", rec.id)]
    assert not d.db.open_findings() and not _alerts(d, "respawned")


def test_a_run_that_ended_by_itself_alone_resolves_when_its_return_window_ends(
    tmp_path: Path,
) -> None:
    """One run that ended by itself stays open (not paged again) for RETURN_WINDOW_S,
    then resolves saying so."""
    d, gone = _ghost(tmp_path, [0])
    d.tracker.update([], [], gone + RETURN_WINDOW_S - 1)
    assert [e for e, _f, _m in _alerts(d, "rogue-job")] == ["open"]
    d.tracker.update([], [], gone + RETURN_WINDOW_S + 1)
    (_o, (event, _fid, message)) = _alerts(d, "rogue-job")
    assert (
        event == "resolve" and "ended by itself at " in message and "not back within 5m" in message
    )


def test_a_ghost_killed_by_sigterm_that_comes_back_is_respawned_paged_at_once(
    tmp_path: Path,
) -> None:
    """A run stopped by a signal resolves when it is gone (as before) and its return
    opens respawned, paged at the return's tick: respawned keeps its meaning."""
    d, _gone = _ghost(tmp_path, [signal.SIGTERM, 0])
    first = _alerts(d, "rogue-job")
    assert [e for e, _f, _m in first][:2] == ["open", "resolve"]
    assert [e for e, _f, _m in _alerts(d, "respawned")][:1] == ["open"]
    opened = d.db.conn.execute("SELECT opened_at FROM findings WHERE kind = 'respawned'").fetchone()
    assert tuple(opened) == (T0 + 60,)
    assert not any(":periodic:" in f.fingerprint for f in d.db.open_findings())


def test_a_return_after_the_window_is_a_new_finding(tmp_path: Path) -> None:
    """Documented (docs/respawn.md): a job back more than RETURN_WINDOW_S after its run
    ended by itself finds its first finding resolved ("ended by itself"); the return
    opens the loop's finding, a new one, paged (2 opens, 2 ids); no respawned."""
    d, _gone = _ghost(tmp_path, [0, 0], period=RETURN_WINDOW_S + 120)
    sent = _alerts(d, "rogue-job")
    assert [e for e, _f, _m in sent] == ["open", "resolve", "open"]
    assert sent[0][1] == sent[1][1] != sent[2][1]
    assert "ended by itself" in sent[1][2]
    (rec,) = d.db.open_findings()
    assert (
        rec.fingerprint.startswith("rogue-job:periodic:") and rec.details["periodic"]["runs"] == 2
    )
    assert not _alerts(d, "respawned")


def test_sim_a_loop_back_after_a_terminate_pages_remediation_failed_once(tmp_path: Path) -> None:
    """A loop's run terminated (terminate mode, its loop shell not disabled), then
    observe: the loop's next run is back (``remediation-failed``, critical, and
    ``respawned``); each run after it ended by itself and the next came. Before, the
    tracker tied ``remediation-failed`` to the run's root PID: resolved and opened again
    for each run, the one terminate paged critical three times. Now it is the loop's
    one finding (``remediation-failed:periodic:…``), paged once."""
    steps = "\n".join(
        [
            "state.reload(mode='terminate', cap=1, auto=False)",
            "state.probe_loop(gpu=True)",
            "state.tick(5.0)",
            "state.reload(mode='observe', cap=1)",
            *["state.probe_loop(gpu=True)\nstate.tick(5.0)"] * 3,
        ]
    )
    failed = [r for r in replay(tmp_path, steps) if r[0] == "remediation-failed"]
    # Was 3 opens; 1 at ed3f72c; now none of its own: it is folded into the return's
    # respawned page (one incident, one page: test_return_pages.py).
    assert failed == []


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_learning_downgrades_remediation_failed(spawned: Spawned, tmp_path: Path) -> None:
    """During ``daemon.learn_until`` a job outside the allowlist is info, and so is its
    return after an operator's terminate (taken with the CLI: the daemon acts on nothing
    while learning): the run that came back may well be the pipeline the allowlist does
    not list yet. Before, its ``remediation-failed`` paged critical while its
    ``rogue-job`` was info."""
    from rogue_watchdog.actions.enforcer import build_enforcers
    from rogue_watchdog.policy.signature import job_signature

    cfg = parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', learn_until: '2033-05-18T03:33:20+00:00'}}\n"
        f"alerts:\n  sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]\n",
        "t.yaml",
    )
    db = Daemon(cfg, None).db
    enf = build_enforcers(cfg, db)
    d = Daemon(cfg, None, db=db, sources=enf, enforcers=enf)
    script = tmp_path / "train_comeback.py"
    script.write_text("import time\ntime.sleep(120)\n")
    run = spawned.start([sys.executable, str(script)])
    first = run.pid
    summary = d.tick(T0)
    assert summary.result is not None
    (job,) = [j for j in summary.result.jobs if j.root_pid == first]
    sig = job_signature(job.user, job.cmdline, job.origin)
    # An operator's `rogue-watchdog terminate` of the first run, as recorded.
    db.record_action(
        "cli", "terminate", f"PID {first}", "ok",
        {"root": [first, job.start_ticks], "procs": []}, T0 + 1, signature=sig,
    )  # fmt: skip
    run.kill()
    run.wait()
    back = spawned.start([sys.executable, str(script)]).pid
    # Ticked once it runs the script: under load the fork had not exec'd yet, and the
    # tick saw no return (a flake of the whole unit run, session h).
    poll("the return to exec", lambda: str(script).encode() in _cmdline(back), 10, 0.01)
    d.tick(T0 + 5)
    mine = sorted((f.kind, f.severity) for f in d.db.open_findings() if f.root_pid == back)
    # was remediation-failed critical beside them
    assert mine == [("remediation-failed", "info"), ("rogue-job", "info")]
    assert [p for p in pages(d, str(script), [first, back]) if p[2] != "info"] == []


def test_a_gpu_a_job_comes_to_hold_after_its_page_is_named_not_paged_again(
    tmp_path: Path,
) -> None:
    """Trust IV case 7 under the page-once rule: a job seen by its command line with no
    GPU for longer than the settle is paged without one; when it comes to hold GPU 0
    later, the alert keeps its labels (no relabelled ``remind``: before, one 10 s after
    the open, ``labels_were`` set), and the finding's message and ``gpu_indexes`` name
    GPU 0 (``gpus_gained``)."""
    from rogue_watchdog.model import GpuHeld
    from rogue_watchdog.policy.findings import job_findings

    d = _daemon(tmp_path)
    job = _classed("training", 7000, 700)
    for k in range(3):  # 0 … 10 s: no GPU yet, the settle (5 s) ends and it is paged
        d.tracker.update([job], job_findings([job]), T0 + 5 * k)
    held = dataclasses.replace(job, gpu_uuids=["GPU-0"], gpus=[GpuHeld("GPU-0", 0, 4 << 30)])
    for k in range(3, 5):
        d.tracker.update([held], job_findings([held]), T0 + 5 * k)
    assert pages(d, "probe.py") == [("open", "rogue-job", "high")]  # was open, remind
    (f,) = [f for f in d.db.open_findings() if f.root_pid == 7000]
    assert "on GPU 0 (4.0 GiB)" in f.message
    assert (f.details["gpus"], f.details["gpu_indexes"], f.details["gpus_gained"]) == ([], [0], [0])


def test_ended_before_page_trusts_the_scan_not_the_message() -> None:
    """A command line is host text: one carrying the end-of-run marker (`; now: its run
    PID `) must not make a running, not yet paged finding look ended (it would leave the
    exit code during its settle). Only a root the last scan did not see counts; before
    the first scan nothing does."""
    from rogue_watchdog.daemon.status import ended_before_page
    from rogue_watchdog.daemon.tracking.current import RUN_ENDED

    def rec(message: str, alerted: bool = False, **details: Any) -> FindingRecord:
        return FindingRecord(
            id=1, fingerprint="rogue-job:x", kind="rogue-job", severity="high",
            message=message, root_pid=700, details=details, opened_at=0.0, last_seen=0.0,
            seen_count=1, resolved_at=None, last_alert_at=1.0 if alerted else None,
        )  # fmt: skip

    hostile = rec(f"rogue training job PID 700, `python3 x.py '{RUN_ENDED}1 exited'`",
                  root=[700, 5])  # fmt: skip
    assert not ended_before_page(hostile, {(700, 5)})  # it runs: not ended
    ended = rec(f"rogue training job PID 700{RUN_ENDED}700 exited with status 0",
                root=[700, 5])  # fmt: skip
    assert ended_before_page(ended, set())
    assert not ended_before_page(ended, None)  # no scan yet: unsure is counted
    assert not ended_before_page(rec(ended.message, alerted=True, root=[700, 5]), set())
    assert not ended_before_page(rec(ended.message), set())  # no root recorded


def test_status_limit_never_hides_a_page_behind_runs_that_ended_before_theirs() -> None:
    """Hostile test of the change above: 92 high findings about ended, never-paged runs
    and two paged, running ones: `status --severity high --limit 10` (the help's own
    example) showed ten ended ones and exited 0. Ended ones now sort after every other
    finding, so the pages are shown and counted."""
    from rogue_watchdog.daemon.status import _outcome_lines, exit_code, select_findings

    def entry(fid: int, ended: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": fid, "kind": "rogue-job", "severity": "high", "message": f"m{fid}",
            "root_pid": fid, "opened_at": 0.0, "age_s": 1.0, "seen_count": 1,
            "instances": 1, "root_pids": [fid],
        }  # fmt: skip
        if ended:
            out["ended_before_page"] = True
        return out

    doc: dict[str, Any] = {"findings": [entry(i, True) for i in range(1, 93)]}
    doc["findings"] += [entry(93, False), entry(94, False)]
    assert exit_code(doc) == 1
    shown = select_findings(doc, "high", 10)
    assert [f["id"] for f in shown["findings"][:2]] == [93, 94]
    assert exit_code(shown) == 1
    ended_only = select_findings({"findings": doc["findings"][:92]}, "high", 10)
    assert exit_code(ended_only) == 0
    text = "\n".join(_outcome_lines(shown))
    assert "F93 high" in text and "F94 high" in text
    assert "+ 8 about runs that ended before any page" in text


def test_ended_before_page_counts_a_malformed_root() -> None:
    """A root of the wrong shape (a hand-edited database) is counted, and does not take
    the whole findings section down with a TypeError (hostile test)."""
    from rogue_watchdog.daemon.status import ended_before_page
    from rogue_watchdog.daemon.tracking.current import RUN_ENDED

    for root in ([[1], 2], [1, {}], [1.5, 2], ["1", 2], [True, 2]):
        f = FindingRecord(
            id=1, fingerprint="rogue-job:x", kind="rogue-job", severity="high",
            message=f"m{RUN_ENDED}1 exited", root_pid=1, details={"root": root},
            opened_at=0.0, last_seen=0.0, seen_count=1, resolved_at=None, last_alert_at=None,
        )  # fmt: skip
        assert ended_before_page(f, {(1, 2)}) is False

"""Issue 33, fresh user H item 1: one launcher's fan-out is one incident, one page.

Another engineer's bench (one python launcher, still running) started 40 different
training scripts (`train_lat_0.py` … `train_lat_39.py`) in 4 s; the new user's sandbox
daemon sent 40 separate high `rogue-job` opens (F5 to F44), each saying "its launcher PID
21394 … still runs and may start it again": one thing for a person to act on (stop the
launcher), paged 40 times. Now the first page of an incident (the jobs one launcher
started, or one source's) stands for the others: they are filed, listed and acted on as
before, named in that finding (``details.folded``, its message), and send no alert of
their own; it resolves when the last of them ends. A real Daemon ticked on a fake clock
over real processes; NVML unavailable (its library does not exist), as on that host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from rogue_watchdog.daemon.tracking.incident import FANOUT_NOTE, fanned_into, fanout_anchors
from rogue_watchdog.state import FindingRecord
from tests.fakenvml.fixtures import REPO

_SCRIPT = r"""
import json, os, subprocess, sys, time
from pathlib import Path
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon

tmp, token, plan = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
cfg = parse_config(
    f"nvml: {{library: '{tmp}/no-such-libnvidia-ml.so.1'}}\n"
    f"training: {{launchers: ['{token}'], device_glob: '{tmp}/nodev[0-9]*'}}\n"
    f"daemon: {{state_dir: '{tmp}/state'}}\n"
    "alerts: {settle_s: 5, reminder_after_s: 3600,"
    f" sinks: [{{type: log, path: '{tmp}/alerts.log'}}]}}\n",
    "t.yaml",
)
d = Daemon(cfg, None)
d.exit_statuses = lambda: {}
stop = Path(tmp) / "stop"
# Each launcher: a python process that starts its scripts (each a different program)
# and waits for them, as a sweep's launcher does.
launcher = (
    "import subprocess, sys\n"
    "kids = [subprocess.Popen([sys.executable, '-S', a, sys.argv[1]]) for a in sys.argv[2:]]\n"
    "[k.wait() for k in kids]\n"
)
body = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.01)\n"
launchers, scripts = [], []
for n, count in enumerate(plan["launchers"]):
    mine = []
    for i in range(count):
        s = Path(tmp) / f"{token}_{n}_{i}.py"
        s.write_text(body)
        mine.append(str(s))
    scripts += mine
    launchers.append(subprocess.Popen([sys.executable, "-S", "-c", launcher, str(stop), *mine]))
deadline = time.monotonic() + 30
def running():
    out = set()
    for pid in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmd and b"-c" not in cmd.split(b"\0")[:3]:
            out.add(int(pid))
    return out
while len(running()) < len(scripts):
    assert time.monotonic() < deadline, "the scripts did not start"
    time.sleep(0.05)
t0 = 1_900_000_000.0
for dt in plan["ticks"]:
    d.tick(t0 + dt)
opened = {r.id: r for r in d.db.open_findings() if r.kind == "rogue-job"}
from rogue_watchdog.daemon.status import build_status, render_status
doc = build_status(d)
status = {f["id"]: f.get("paged_with") for f in doc["findings"] if f["id"] in opened}
text = render_status(doc)
stop.touch()
for p in launchers:
    p.wait(30)
for dt in plan["after"]:
    d.tick(t0 + dt)
sent = [(event, json.loads(payload)["finding"]) for event, payload in d.db.conn.execute(
    "SELECT event, payload_json FROM deliveries ORDER BY id")]
mine = [(e, f) for e, f in sent if token in f["message"]]
print(json.dumps({
    "sent": [[e, f["kind"], f["severity"], f["id"], f["message"]] for e, f in mine],
    "open": {str(k): [r.message, r.details.get("folded"), r.details.get("incident")]
             for k, r in opened.items() if token in r.message},
    "left": [r.id for r in d.db.open_findings() if token in r.message],
    "paged_with": {str(k): v for k, v in status.items()},
    "status_text": text,
}))
"""


def _run(tmp_path: Path, plan: dict[str, Any]) -> dict[str, Any]:
    token = f"train_fan_{uuid.uuid4().hex[:8]}"
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path), token, json.dumps(plan)],
        capture_output=True, text=True, timeout=180, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


def test_one_launchers_forty_jobs_are_one_page(tmp_path: Path) -> None:
    """H's shape, 40 different scripts from one live launcher. Before (e3229d3): 40
    ``open rogue-job high`` alerts and 40 resolves. After: one open, naming the launcher
    (its message), one resolve once the last job ended; the other 39 are filed and open
    while they run, each naming the same launcher, and named by the first."""
    doc = _run(tmp_path, {"launchers": [40], "ticks": [0.0, 2.0, 4.0, 6.0, 8.0],
                          "after": [20.0, 22.0]})  # fmt: skip
    events = [(e, kind, sev) for e, kind, sev, _fid, _m in doc["sent"]]
    assert events == [("open", "rogue-job", "high"), ("resolve", "rogue-job", "high")]
    anchor = doc["sent"][0][3]
    assert doc["sent"][1][3] == anchor
    assert "its launcher PID" in doc["sent"][0][4]
    assert len(doc["open"]) == 40  # every job is its own finding: listed, acted on
    incidents = {inc for _m, _f, inc in doc["open"].values()}
    assert len(incidents) == 1 and next(iter(incidents)).startswith("launcher ")
    message, folded, _inc = doc["open"][str(anchor)]
    assert sorted(f["id"] for f in folded) == sorted(
        int(k) for k in doc["open"] if int(k) != anchor
    )
    assert FANOUT_NOTE in message and message.endswith(" and 29 more")
    # `status` says whose page each stands for: "F6 high rogue-job (open 8s, seen 5x,
    # paged with F5)"; the page itself names none.
    others = {k: v for k, v in doc["paged_with"].items() if int(k) != anchor}
    assert set(others.values()) == {anchor} and len(others) == 39
    assert doc["paged_with"][str(anchor)] is None
    assert doc["status_text"].count(f"paged with F{anchor})") == 39
    assert doc["left"] == []


def test_two_launchers_are_two_incidents(tmp_path: Path) -> None:
    """Jobs of another launcher are another incident: each launcher's first job pages."""
    doc = _run(tmp_path, {"launchers": [3, 3], "ticks": [0.0, 2.0, 4.0, 6.0, 8.0],
                          "after": [20.0]})  # fmt: skip
    opens = [fid for e, _k, _s, fid, _m in doc["sent"] if e == "open"]
    assert len(opens) == 2
    incidents = {doc["open"][str(fid)][2] for fid in opens}
    assert len(incidents) == 2


def _rec(fid: int, severity: str = "high", alerted: bool = True, **details: Any) -> FindingRecord:
    return FindingRecord(
        id=fid, fingerprint=f"rogue-job:{fid}", kind="rogue-job", severity=severity,
        message="m", root_pid=100 + fid, details=details, opened_at=0.0, last_seen=0.0,
        seen_count=1, resolved_at=None, last_alert_at=1.0 if alerted else None,
    )  # fmt: skip


def test_only_a_paged_finding_is_an_incidents_page() -> None:
    """A finding folds only into one already paged, of its own incident, not quieter;
    one paged itself, one louder, one of no incident page on their own."""
    before = [
        _rec(1, alerted=False, incident="launcher 9 1"),
        _rec(2, incident="launcher 9 1"),
        _rec(3, incident="launcher 8 1"),
        _rec(4, severity="info", incident="source x"),
    ]
    got = fanout_anchors(before)
    assert {k: a.finding_id for k, a in got.items()} == {
        "launcher 9 1": 2, "launcher 8 1": 3, "source x": 4}  # fmt: skip
    same = {"incident": "launcher 9 1"}
    assert fanned_into("rogue-job", 1, same, "high", False, got).finding_id == 2  # type: ignore[union-attr]
    assert fanned_into("rogue-job", None, same, "high", False, got).finding_id == 2  # type: ignore[union-attr]
    assert fanned_into("rogue-job", 2, same, "high", False, got) is None  # itself
    assert fanned_into("rogue-job", 5, same, "high", True, got) is None  # paged itself
    assert fanned_into("rogue-job", 5, {"incident": "source x"}, "high", False, got) is None
    assert fanned_into("rogue-job", 5, {}, "high", False, got) is None  # no incident
    assert fanned_into("excess-instances", 5, same, "high", False, got) is None


def _service_tick_plan(tmp_path: Path, ticks: list[float], gone_at: float) -> list[tuple[str, str]]:
    """A rogue job and the rogue service that started it (the scan's two findings about
    one run), ticked until ``gone_at``, then gone; the alerts spooled."""
    import dataclasses

    from rogue_watchdog.model import Finding
    from rogue_watchdog.policy.findings import incident_key, job_findings
    from tests.unit.test_pages import T0, _classed, _daemon

    d = _daemon(tmp_path)
    job = dataclasses.replace(_classed("training", 7100, 200), cmdline=("python3", "/srv/t.py"))
    service = Finding(
        "rogue-service", "high", "service PID 7000 (listening on 127.0.0.1:8080/tcp), "
        "started the run: rogue job PID 7100 `python3 /srv/t.py`", root_pid=7100,
        details={"listening": [], "job_root_pid": 7100, "verdict": "rogue",
                 "origin_kind": "shell", "gpu_indexes": [], "incident": incident_key(job)},
    )  # fmt: skip
    for dt in ticks:
        if dt < gone_at:
            d.tracker.update([job], [*job_findings([job]), service], T0 + dt)
        else:  # it ended by itself (the kernel's exit event: status 0)
            d.tracker.update([], [], T0 + dt, exits={7100: 0})
    return [
        (event, kind)
        for event, kind in d.db.conn.execute(
            "SELECT d.event, f.kind FROM deliveries d JOIN findings f ON f.id = d.finding_id"
            " ORDER BY d.id"
        )
    ]


def test_a_service_and_the_run_it_started_are_one_page(tmp_path: Path) -> None:
    """Fresh user I (issue 33): a test's listening trainer made a rogue-service page at
    once and its rogue-job page after the settle, two pages for one run (F7 + F8, F11 +
    F12). Before: two opens (the service's at t=0, the run's after the settle); after:
    one open, after the settle, for the one incident."""
    sent = _service_tick_plan(tmp_path, [0.0, 2.0, 4.0, 5.0, 7.0, 60.0], gone_at=1e9)
    assert [e for e, _k in sent] == ["open"]


def test_a_service_gone_within_the_settle_is_not_paged(tmp_path: Path) -> None:
    """Before: the rogue-service open went at its first look and a resolve 2 s later
    (a 1.9 s test service, fresh user I F12): before, ``[("open", "rogue-service")]``;
    after, nothing is sent."""
    assert _service_tick_plan(tmp_path, [0.0, 1.0, 2.0, 8.0], gone_at=2.0) == []


def test_a_return_pages_for_its_incident_and_an_incident_is_kept() -> None:
    """The lifecycle simulator's sweep (tests/unit/test_sim_faults.py, cases 17 and 18):
    an incident whose page resolved as its job was killed and started again folds into
    that return's ``respawned``; a finding keeps the incident it was filed in once its
    launcher exits."""
    import dataclasses

    from rogue_watchdog.daemon.tracking.incident import kept_incident
    from rogue_watchdog.model import Finding

    back = dataclasses.replace(
        _rec(5, alerted=False, incident="launcher 9 1"), fingerprint="rogue-job:sig"
    )
    respawned = dataclasses.replace(
        _rec(6), kind="respawned", fingerprint="respawned:sig", details={}
    )
    got = fanout_anchors([_rec(2, alerted=False, incident="launcher 9 1"), back, respawned])
    assert {k: a.finding_id for k, a in got.items()} == {"launcher 9 1": 6}
    # A paged rogue-job of the incident is still its page first.
    got = fanout_anchors([_rec(1, incident="launcher 9 1"), back, respawned])
    assert {k: a.finding_id for k, a in got.items()} == {"launcher 9 1": 1}
    # Held back by the settle, its return's respawned is still the one page to come
    # (issue 33, fresh user J): the incident folds into it meanwhile.
    quiet = dataclasses.replace(respawned, last_alert_at=None)
    assert {k: a.finding_id for k, a in fanout_anchors([back, quiet]).items()} == {
        "launcher 9 1": 6
    }
    gone = Finding("rogue-job", "high", "m", 107, {"incident": None, "root": [107, 1]})
    kept = kept_incident(_rec(7, incident="launcher 9 1"), gone)
    assert kept.details == {"incident": "launcher 9 1", "root": [107, 1]}
    assert kept_incident(_rec(7), gone) is gone  # filed in none: none

"""A finding about one action keeps its identity when only the description of its job's
origin changes between looks (trust simulator, seed 91001, issue 34), and no message
renders a Python None.

The case: a cron run's terminate said its source restarts it (``will-return``); the run
back was first seen from cron with no entry that can have started it; a later look
described the same run as started by a crontab line since disabled (another
signature); the next run read "entry gone". Before: the remediation-failed finding took
each look's signature, lost its run and resolved, and the next run opened and paged it
again (F7, F11), each message ending "…was not found) (None)".
"""

from __future__ import annotations

from pathlib import Path

from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.daemon.status import _events_line
from rogue_watchdog.model import CronOrigin, Job, Proc
from rogue_watchdog.model.advice import Advice
from rogue_watchdog.model.origin import Restarts
from rogue_watchdog.policy.signature import job_signature
from rogue_watchdog.spelling import optional
from tests.unit.test_pages import _daemon
from tests.unit.test_remediation_superseded import _pages, _tick

CMD = ("/usr/bin/python3", "/srv/pipeline/train.py")
FILE = "/etc/cron.d/legacy"
ENTRY = "0 2 * * 0 root /usr/bin/python3 /srv/pipeline/train.py"
UNATTRIBUTED = CronOrigin(user="root", entry_state="unattributed")
DISABLED = CronOrigin(
    file=FILE, line=4, entry=ENTRY, user="root", schedule="0 2 * * 0", entry_state="disabled"
)
GONE = CronOrigin(user="root", entry_state="removed")
T0 = 1800151200.0


def _run(pid: int, start: int, origin: CronOrigin) -> Job:
    root = Proc(pid=pid, ppid=pid - 1, start_ticks=start, state="S", comm="python3", uid=0)
    return Job(
        root_pid=pid, pids=[pid], user="root", cmdline=CMD, start_ticks=start,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[root], origin=origin,
    )  # fmt: skip


def test_a_remediation_failure_keeps_its_finding_as_the_origin_is_described_anew(
    tmp_path: Path,
) -> None:
    d = _daemon(tmp_path)
    clock = [T0]
    enf = Enforcer(d.config, d.db, clock=lambda: clock[0])
    sig = job_signature("root", CMD, UNATTRIBUTED)
    assert job_signature("root", CMD, DISABLED) != sig  # the description is another source
    # The terminate of an earlier run said its source restarts it: what stops it is not
    # known (the line that started it was not found).
    again = UNATTRIBUTED.restarts()
    assert again is not None and again.stops is None
    d.db.record_action(
        "daemon", "terminate", "PID 4000003 (2 process(es))", "will-return",
        {"root": [4000003, 100], "procs": [],
         "will_return": {"restarts": again.line(), "stops": again.stops}},
        T0, signature=sig,
    )  # fmt: skip
    for now, jobs in [
        (T0 + 50, [_run(4000006, 200, UNATTRIBUTED)]),
        (T0 + 55, [_run(4000006, 200, UNATTRIBUTED)]),
        # Described anew: started by the line, since disabled (another signature)...
        (T0 + 100, [_run(4000006, 200, DISABLED), _run(4000017, 300, GONE)]),
        # ...and once it ended, the next run (cron, entry gone).
        (T0 + 105, [_run(4000017, 300, GONE)]),
    ]:
        _tick(d, enf, clock, now, jobs)
    rows = d.db.conn.execute(
        "SELECT id, fingerprint, resolved_at, message FROM findings"
        " WHERE kind = 'remediation-failed'"
    ).fetchall()
    # Before (c2a0950): [(…, T0 + 100), (…, None)]: the first lost its run when the run
    # took the disabled line's signature and resolved; the next run opened a second
    # finding of the same fingerprint, paged again.
    assert [(r[1], r[2]) for r in rows] == [(f"remediation-failed:{sig}", None)]
    assert _pages(d, "remediation-failed") == 1
    assert "None" not in rows[0][3]  # before: "…was not found) (None); the daemon…"
    assert rows[0][3].endswith(
        "as its terminate said, its source restarts it: unknown, cron (the line that "
        "started it was not found); the daemon does not terminate it again"
    )


def test_optional_parts_are_left_out_never_said_as_none() -> None:
    assert optional(None, " ({})") == ""
    assert optional("  ", " ({})") == ""
    assert optional("disable-source first", " ({})") == " (disable-source first)"
    assert optional(4, ":{}") == ":4"
    # Each origin and advice path that formats an optional value.
    half = CronOrigin(file=FILE, user="root", launch_script="/srv/run.sh")
    assert "None" not in half.describe() and "None" not in str(half.source_detail())
    assert half.describe() == f"cron {FILE} via /srv/run.sh"
    nowhere = Restarts("unknown", "cron (the line that started it was not found)")
    for advice in (
        Advice(stops_job=True, restarts=nowhere),
        Advice(stops_job=True, restarts=Restarts("at once", "a loop", None, False)),
    ):
        assert "None" not in advice.explain_line(None)
    assert Advice(stops_job=True, restarts=nowhere).explain_line(None) == (
        "restarts it: unknown, cron (the line that started it was not found)"
    )
    assert _events_line({"mode": "polling"}) == "process events: unavailable, polling only"
    assert _events_line({"mode": "polling", "reason": "EPERM"}) == (
        "process events: unavailable, polling only (EPERM)"
    )

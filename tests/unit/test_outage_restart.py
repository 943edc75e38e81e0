"""A restart during a storage outage does not page a still-running rogue again (the
outage file beside the socket: watchdog/daemon/outagefile.py), and a daemon with no
account to go by says in its page that it may repeat one. Real rogue processes, the
daemon's own ticks; SQLite refuses the writes (``PRAGMA query_only``), as in
test_unstored.py, from before the restarted daemon opens."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

from rogue_watchdog.config import Config, parse_config
from rogue_watchdog.daemon.alerts import DeliveryWorker
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.outagefile import OutageAccount, outage_path, read_outage, write_outage
from rogue_watchdog.daemon.status import build_status, render_status
from rogue_watchdog.daemon.unstored import MAY_REPEAT
from rogue_watchdog.records import FindingRecord
from rogue_watchdog.state import StateDB
from tests.conftest import Spawned

TOKEN = f"train_outage_{uuid.uuid4().hex[:8]}"
T0 = 2_000_000.0
MINE: set[int] = set()  # the rogues this module started (the host runs other jobs too)


def config(tmp_path: Path) -> Config:
    return parse_config(
        "nvml: {enabled: false}\n"
        f"training: {{launchers: ['{TOKEN}']}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', socket: '{tmp_path}/run/status.sock'}}\n"
        f"alerts:\n  settle_s: 0\n  sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]\n",
        "t.yaml",
    )


def start(tmp_path: Path, *, full: bool, outage_file: str | None) -> tuple[Daemon, DeliveryWorker]:
    """A daemon as ``run`` builds it; with ``full`` its database refuses writes from the
    moment it is opened (the daemon starts during the outage)."""
    cfg = config(tmp_path)
    db = StateDB(cfg.daemon.state_dir)
    if full:
        db.conn.execute("PRAGMA query_only=ON")
    d = Daemon(cfg, None, db=db, outage_file=outage_file)
    w = DeliveryWorker(
        d.db, lambda: d.config.alerts, jitter=0.0, degraded=d.degraded, memory=d.unstored.spool
    )
    return d, w


def full(d: Daemon, on: bool) -> None:
    d.db.conn.execute(f"PRAGMA query_only={'ON' if on else 'OFF'}")


def rogue(spawned: Spawned, tmp_path: Path, name: str) -> int:
    script = tmp_path / f"{TOKEN}.py"
    script.write_text("import time\ntime.sleep(120)\n")
    pid = spawned.start([sys.executable, str(script), name]).pid
    time.sleep(0.3)
    MINE.add(pid)
    return pid


def pages(tmp_path: Path) -> list[dict[str, object]]:
    """The ``open`` alerts the log sink wrote about this module's rogues, in order."""
    path = tmp_path / "alerts.log"
    if not path.exists():
        return []
    docs = [json.loads(line) for line in path.read_text().splitlines()]
    return [a for a in docs if a["action"] == "open" and a["root_pid"] in MINE]


def run_dir(tmp_path: Path) -> str:
    (tmp_path / "run").mkdir(mode=0o700, exist_ok=True)
    return outage_path(str(tmp_path / "run" / "status.sock"))


def test_a_restart_during_the_outage_does_not_page_the_running_rogue_again(
    spawned: Spawned, tmp_path: Path
) -> None:
    path = run_dir(tmp_path)
    d, w = start(tmp_path, full=False, outage_file=path)
    d.tick(T0)
    full(d, True)
    pid = rogue(spawned, tmp_path, "a")
    d.tick(T0 + 5)
    w.deliver_due(T0 + 5)
    assert [(a["root_pid"], a["kind"]) for a in pages(tmp_path)] == [(pid, "rogue-job")]
    fid = pages(tmp_path)[0]["finding_id"]
    account = read_outage(path, d.boot_id)
    assert account is not None
    # The rogue's finding and the degraded state's, both paged from memory.
    assert [(r.id, r.kind) for r in account.findings] == [
        (fid, "rogue-job"), (fid + 1, "component-degraded"),
    ]  # fmt: skip
    assert account.queued == []  # their pages went out

    d.db.close()  # the restart: still full
    d, w = start(tmp_path, full=True, outage_file=path)
    assert d.unstored.adopted == [fid, fid + 1]
    d.tick(T0 + 10)
    w.deliver_due(T0 + 10)
    d.tick(T0 + 15)
    w.deliver_due(T0 + 15)
    # Before: a second open of the same running rogue under the same id, no word of it.
    assert len(pages(tmp_path)) == 1
    mem = [f["id"] for f in build_status(d)["findings"] if f.get("persisted") is False]
    assert mem == [fid, fid + 1]

    full(d, False)  # storage returns: stored under the id it was paged with, not again
    d.tick(T0 + 20)
    w.deliver_due(T0 + 20)
    stored = [f for f in d.db.open_findings() if f.root_pid == pid]
    assert [(f.id, f.last_alert_at is not None) for f in stored] == [(fid, True)]
    assert len(pages(tmp_path)) == 1
    assert not os.path.exists(path)  # the database holds it now
    d.db.close()


def test_a_page_queued_but_not_sent_at_the_restart_is_sent_once(
    spawned: Spawned, tmp_path: Path
) -> None:
    path = run_dir(tmp_path)
    d, _w = start(tmp_path, full=False, outage_file=path)
    d.tick(T0)
    full(d, True)
    rogue(spawned, tmp_path, "b")
    d.tick(T0 + 5)  # paged from memory, the restart before the sink sent it
    d.db.close()
    d, w = start(tmp_path, full=True, outage_file=path)
    d.tick(T0 + 10)
    w.deliver_due(T0 + 10)
    d.tick(T0 + 15)
    w.deliver_due(T0 + 15)
    assert len(pages(tmp_path)) == 1
    assert MAY_REPEAT not in str(pages(tmp_path)[0]["message"])
    d.db.close()


def test_without_an_account_the_page_says_it_may_repeat(spawned: Spawned, tmp_path: Path) -> None:
    """Nothing could be written beside the socket either (its directory is not there):
    the restarted daemon cannot know what was paged, pages the running rogue (never
    silent) and says it may repeat; a rogue younger than it is paged plainly."""
    path = str(tmp_path / "gone" / "outage.json")
    d, w = start(tmp_path, full=False, outage_file=path)
    d.tick(T0)
    full(d, True)
    old = rogue(spawned, tmp_path, "c")
    d.tick(T0 + 5)
    w.deliver_due(T0 + 5)
    assert MAY_REPEAT not in str(pages(tmp_path)[0]["message"])  # nothing before it
    d.db.close()
    d, w = start(tmp_path, full=True, outage_file=path)
    time.sleep(1.5)  # /proc/stat's btime has whole seconds: clearly younger
    young = rogue(spawned, tmp_path, "d")
    d.tick(T0 + 10)
    w.deliver_due(T0 + 10)
    by_pid = [(a["root_pid"], MAY_REPEAT in str(a["message"])) for a in pages(tmp_path)]
    assert by_pid == [(old, False), (old, True), (young, False)]
    doc = build_status(d)
    assert doc["outage_memory"]["may_repeat_before"] == d.started_at
    assert "may repeat one" in render_status(doc, width=200)
    full(d, False)
    d.tick(T0 + 15)  # stored: the database knows from now on
    assert d.unstored.unknown_before is None
    d.db.close()


def test_an_untrusted_account_is_not_taken(spawned: Spawned, tmp_path: Path) -> None:
    """A file others could write would silence a rogue's page: not taken, and the page
    says it may repeat one."""
    path = run_dir(tmp_path)
    d, w = start(tmp_path, full=False, outage_file=path)
    d.tick(T0)
    full(d, True)
    pid = rogue(spawned, tmp_path, "e")
    d.tick(T0 + 5)
    w.deliver_due(T0 + 5)
    d.db.close()
    os.chmod(path, 0o666)
    d, w = start(tmp_path, full=True, outage_file=path)
    assert d.unstored.adopted == []
    d.tick(T0 + 10)
    w.deliver_due(T0 + 10)
    assert [(a["root_pid"], MAY_REPEAT in str(a["message"])) for a in pages(tmp_path)] == [
        (pid, False),
        (pid, True),
    ]
    d.db.close()


def test_a_resolve_queued_but_not_sent_at_the_restart_is_sent_once(
    spawned: Spawned, tmp_path: Path
) -> None:
    path = run_dir(tmp_path)
    d, w = start(tmp_path, full=False, outage_file=path)
    d.tick(T0)
    full(d, True)
    d.tick(T0 + 2)  # the outage's own page first: the rogue's id is the newest given
    pid = rogue(spawned, tmp_path, "f")
    d.tick(T0 + 5)
    w.deliver_due(T0 + 5)
    spawned.procs[-1].kill()
    spawned.procs[-1].wait()
    d.tick(T0 + 10)  # resolved in memory, the restart before the sink sent the resolve
    d.db.close()
    d, w = start(tmp_path, full=True, outage_file=path)
    d.tick(T0 + 15)
    w.deliver_due(T0 + 15)
    d.tick(T0 + 20)
    w.deliver_due(T0 + 20)
    docs = [json.loads(line) for line in (tmp_path / "alerts.log").read_text().splitlines()]
    mine = [(a["action"], a["finding_id"]) for a in docs if a["root_pid"] == pid]
    assert [e for e, _ in mine] == ["open", "resolve"]
    full(d, False)  # storage returns: the id that finding was paged under is not given again
    d.tick(T0 + 25)
    # Before, the database gave that id to the next finding (only the open one stored).
    assert d.db.next_finding_id() > mine[0][1]
    d.db.close()


def test_the_file_is_read_back_for_this_boot_only_and_checked(tmp_path: Path) -> None:
    path = run_dir(tmp_path)
    rec = FindingRecord(
        7, "rogue-job:ab", "rogue-job", "high", "rogue `x`\x1b[2J", 42, {"root": [42, 9]},
        T0, T0 + 1, 2, None, T0, 1, 1, [42], {"gpu": "0"},
    )  # fmt: skip
    write_outage(path, OutageAccount([rec], [(7, "log", "open", {"a": 1}, T0)], 9), "boot-a")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert [p.name for p in Path(path).parent.iterdir()] == ["outage.json"]  # no temp file
    back = read_outage(path, "boot-a")
    assert back == OutageAccount([rec], [(7, "log", "open", {"a": 1}, T0)], 9)
    assert read_outage(path, "boot-b") is None  # PIDs of another boot name nothing
    doc = json.loads(Path(path).read_text())
    doc["findings"].append({**doc["findings"][0], "id": "8"})  # not one as written: skipped
    doc["queued"].append([8, "log", "bogus", {}, T0])
    Path(path).write_text(json.dumps(doc))
    assert read_outage(path, "boot-a") == back
    Path(path).write_text("{not json")
    assert read_outage(path, "boot-a") is None
    # Damaged past the checks (before: RecursionError, OverflowError, TypeError out of
    # the daemon's start, which then paged nothing): no account.
    for damaged in (
        "[" * 100_000,
        '{"boot_id": "boot-a", "queued": [[7, "log", "open", {}, 1%s]]}' % ("0" * 400),
        '{"boot_id": "boot-a", "findings": 5}',
        '{"boot_id": "boot-a", "queued": 5}',
    ):
        Path(path).write_text(damaged)
        assert read_outage(path, "boot-a") is None, damaged[:60]

"""The alert worker wakes when an alert is spooled, not by polling an empty spool
(issue 34: its threads ran a round every second and at every tick, 1.2-1.3 ms of the
idle daemon's 2 s interval). No alert may go out later than before: one spooled by a
tick or an exec pass (the store, at its commit), one kept in memory while the database
cannot be written (the memory spool), and one another process spooled into a shared
state directory (the supervisor's check, every 10 s) each wake the sink; a
retry, a rate limit or a receiver's pause is waited for until it is due."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.alerts import DeliveryWorker
from rogue_watchdog.daemon.alerts.memory import MemorySpool
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.tracking.spool import deliveries
from rogue_watchdog.state import StateDB
from tests.conftest import poll

T0 = 3_000_000.0
#: Longer than any wait below: a delivery within it was woken, not polled.
SLOW_POLL_S = 600.0


def _daemon(tmp_path: Path, sinks: str | None = None) -> Daemon:
    sinks = sinks or f"[{{type: log, path: '{tmp_path}/alerts.log'}}]"
    text = (
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"alerts: {{retry_base_s: 5, retry_max_s: 60, sinks: {sinks}}}\n"
    )
    return Daemon(parse_config(text, str(tmp_path / "config.yaml")), None)


def _spool(d: Daemon, db: StateDB, message: str) -> None:
    """Spool an open alert for every sink, in a transaction as the tracker does."""
    with db.transaction():
        fid = db.insert_finding(f"k:{message}", "rogue-job", "high", message, 7, {}, T0)
        rec = db.finding(fid)
        assert rec is not None
        for sink, payload in deliveries("open", rec, "h", T0, d.config.alerts.sinks, None):
            db.enqueue(fid, sink, "open", payload, T0)


def _sent(tmp_path: Path) -> list[str]:
    log = tmp_path / "alerts.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line)["message"] for line in lines]


def test_the_store_tells_a_spooled_alert_at_its_commit(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    path = d.db.path
    seen: list[int] = []

    def queued_elsewhere() -> None:  # what another thread's connection reads then
        with sqlite3.connect(path) as other:
            seen.append(other.execute("SELECT count(*) FROM deliveries").fetchone()[0])

    d.db.add_spool_listener(queued_elsewhere)
    _spool(d, d.db, "one")
    assert seen == [1]  # once per transaction, and the row is committed when told
    with pytest.raises(RuntimeError), d.db.transaction():
        d.db.enqueue(1, "log", "open", {"event": "open"}, T0)
        raise RuntimeError("rolled back")
    assert seen == [1]  # nothing spooled: nobody woken
    d.db.enqueue(1, "log", "open", {"event": "open"}, T0)  # outside a transaction: at once
    assert seen == [1, 2]
    d.db.remove_spool_listener(queued_elsewhere)
    _spool(d, d.db, "two")
    assert seen == [1, 2]
    d.db.close()


def test_a_spooled_alert_wakes_the_idle_sink(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    w = DeliveryWorker(d.db, lambda: d.config.alerts, poll_interval_s=SLOW_POLL_S)
    w.start()
    try:
        poll("the sink's first round", lambda: "log" in w._next_at, 10, 0.05)
        assert w.wait_s("log") is None  # nothing queued: it waits for a wake-up
        _spool(d, d.db, "from a tick")
        assert poll("the alert", lambda: _sent(tmp_path), 10, 0.05) == ["from a tick"]
        spool = w.memory
        spool.put(2, "log", "open", {"event": "open", "finding": {"message": "kept"}}, T0)
        poll("the memory spool's alert", lambda: len(_sent(tmp_path)) == 2, 10, 0.05)
        assert spool.queued() == 0
    finally:
        w.stop()
    assert d.db._spool_listeners == [] and w.memory.listeners == []  # stop() detaches
    d.db.close()


def test_a_row_another_process_spooled_is_found_by_the_supervisors_check(
    tmp_path: Path,
) -> None:
    d = _daemon(tmp_path)
    w = DeliveryWorker(
        d.db, lambda: d.config.alerts, poll_interval_s=SLOW_POLL_S, elsewhere_poll_s=0.2
    )
    w.start()
    try:
        poll("the sink's first round", lambda: "log" in w._next_at, 10, 0.05)
        other = StateDB(d.db.dir)  # its own handle: this worker is not its listener
        _spool(d, other, "from elsewhere")
        other.close()
        assert poll("the alert", lambda: _sent(tmp_path), 10, 0.05) == ["from elsewhere"]
    finally:
        w.stop()
    d.db.close()


def test_a_row_spooled_elsewhere_before_the_first_check_is_still_found(
    tmp_path: Path,
) -> None:
    # The supervisor's first check came after its sink's first round and after another
    # process spooled a row (a loaded host): the row was in the check's mark, never woken
    # for, left to the sink's own poll (10 minutes here; a flaky test under load).
    d = _daemon(tmp_path)
    w = DeliveryWorker(
        d.db, lambda: d.config.alerts, poll_interval_s=SLOW_POLL_S, elsewhere_poll_s=0.2
    )
    spooled = threading.Event()
    real = d.db.last_delivery_id

    def late_first_check() -> int:
        # Held until the sink's first round is done (at most 2 s) and the row is in.
        poll_until = time.monotonic() + 2
        while "log" not in w._next_at and time.monotonic() < poll_until:
            time.sleep(0.01)
        if "log" in w._next_at:
            spooled.wait(10)
        return real()

    d.db.last_delivery_id = late_first_check  # type: ignore[method-assign]
    w.start()
    try:
        poll("the sink's first round", lambda: "log" in w._next_at, 10, 0.05)
        other = StateDB(d.db.dir)
        _spool(d, other, "spooled before the first check")
        other.close()
        spooled.set()
        sent = poll("the alert", lambda: _sent(tmp_path), 10, 0.05)
        assert sent == ["spooled before the first check"]
    finally:
        w.stop()
    d.db.close()


def test_a_sink_with_rows_waiting_looks_again_when_they_are_due(
    tmp_path: Path,
) -> None:
    d = _daemon(tmp_path, "[{type: webhook, name: hook, url_env: RW_HOOK_URL}]")
    # Nothing listens on port 9: the attempt fails and is retried after 5 s.
    env = {"RW_HOOK_URL": "http://127.0.0.1:9/h"}
    now = [T0]
    w = DeliveryWorker(
        d.db, lambda: d.config.alerts, environ=env, jitter=0.0, poll_interval_s=10.0,
        clock=lambda: now[0], memory=MemorySpool(),
    )  # fmt: skip
    assert w.deliver_sink("hook") is not None
    assert w.wait_s("hook") is None  # empty: idle
    _spool(d, d.db, "x")
    res = w.deliver_sink("hook")
    assert res is not None and list(res.failed)
    assert w.wait_s("hook") == 5.0  # the retry, sooner than the poll interval
    now[0] += 4.0
    assert w.deliver_sink("hook") is not None and w.wait_s("hook") == 1.0
    w.poll_interval_s = 0.5
    assert w.wait_s("hook") == 0.5  # never longer than the poll interval
    d.db.close()

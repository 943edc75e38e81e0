"""kill -9 of the real daemon at each step of a terminate and of a quarantine (issue 32,
case 4 and build item 8).

The daemon runs as ``python -m rogue_watchdog run`` with the fake NVML library listing the
rogue, a log sink and a webhook sink (tests/httpreceiver.py). It is killed with SIGKILL
by its own fault point (``ROGUE_WATCHDOG_FAULT``, watchdog/faults.py: exactly what kill
-9 does, at a chosen step), or from outside while a terminate waits out its grace
period (the handed case, which needs no fault point), then started again over the same
state directory. Each case checks, per fault:

- signals: the rogue counts each SIGTERM it receives (it ignores them): exactly one,
  then SIGKILL ends it; none repeated;
- actions recorded vs done: one terminate (or quarantine) row, its steps name every
  signal (or rename) made, and it ends ``interrupted`` with its outcome;
- alerts: each alert exactly once on each sink (``rogue-job`` open and resolve,
  ``action-interrupted`` open; for a quarantine its ``poisoned-weights`` open and
  resolve).

The rogue is found first in observe mode and enforcement is switched on by a reload
(SIGHUP): the kill then never races the delivery of the rogue's first alert.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Spawned, poll
from tests.fakenvml.build import write_config
from tests.fakenvml.fixtures import fake_nvml, library_path
from tests.httpreceiver import Receiver

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parent.parent.parent
ROGUE = (
    "import signal, sys, time\n"
    "def got(sig, frame):\n"
    "    with open(sys.argv[1], 'a') as fh:\n"
    "        fh.write(signal.Signals(sig).name + '\\n')\n"
    "signal.signal(signal.SIGTERM, got)\n"
    "signal.signal(signal.SIGCONT, got)\n"
    "time.sleep(600)\n"
)


def spec(pids: list[int]) -> dict[str, Any]:
    return {
        "devices": [
            {
                "name": "NVIDIA H200", "uuid": "GPU-wal-0", "total": 140 << 30, "used": 1 << 30,
                "processes": [{"pid": p, "mem": 1 << 30} for p in pids],
            }
        ]
    }  # fmt: skip


class Host:
    """The daemon under test, its sinks, its state and the rogue."""

    def __init__(self, tmp: Path, spawned: Spawned, gate: bool = False) -> None:
        self.tmp, self.spawned = tmp, spawned
        self.rx = Receiver()
        lib = fake_nvml(tmp, spec([]))
        self.lib = library_path(lib)
        self.nvml_conf = write_config(tmp / "nvml.conf", spec([]))
        self.socket = str(tmp / "status.sock")
        self.config = tmp / "config.yaml"
        self.gate = gate
        self.log = tmp / "daemon.log"
        self.daemon: subprocess.Popen[bytes] | None = None
        self.rogue: subprocess.Popen[bytes] | None = None
        self.got = tmp / "got.txt"
        self.write_config("observe")

    def write_config(self, mode: str) -> None:
        gates = (
            f"ship_gates:\n  - {{name: prod, deploy_dir: '{self.tmp}/deploy', quarantine: true}}\n"
            if self.gate
            else ""
        )
        self.config.write_text(
            f"nvml: {{library: '{self.lib}'}}\n"
            "training: {launchers: ['train_wal_rogue']}\n"
            f"daemon: {{state_dir: '{self.tmp}/state', socket: '{self.socket}',"
            " interval_s: 0.3}\n"
            "alerts:\n  retry_base_s: 0.2\n  retry_max_s: 1\n  sinks:\n"
            f"    - {{type: log, path: '{self.tmp}/alerts.jsonl'}}\n"
            "    - {type: webhook, name: hook, url_env: WAL_HOOK_URL, coalesce: false}\n"
            "enforcement:\n  mode: observe\n  grace_s: 2\n  rules:\n"
            f"    - {{name: mine, cmdline: '*{self.tmp}/*', mode: {mode}}}\n" + gates
        )

    def start(self, fault: str | None = None) -> subprocess.Popen[bytes]:
        env = dict(
            os.environ, PYTHONPATH=str(REPO), FAKE_NVML_CONFIG=str(self.nvml_conf),
            WAL_HOOK_URL=self.rx.url("/hook"),
        )  # fmt: skip
        env.pop("ROGUE_WATCHDOG_FAULT", None)
        if fault:
            env["ROGUE_WATCHDOG_FAULT"] = fault
        with open(self.log, "ab") as fh:
            self.daemon = self.spawned.start(
                [sys.executable, "-m", "rogue_watchdog", "run", "--config", str(self.config)],
                env=env, stdout=fh, stderr=subprocess.STDOUT,
            )  # fmt: skip
        poll("daemon answers", lambda: Path(self.socket).exists() or self.daemon.poll(), 30)  # type: ignore[union-attr]
        return self.daemon

    def start_rogue(self) -> int:
        script = self.tmp / "train_wal_rogue.py"
        script.write_text(ROGUE)
        self.rogue = self.spawned.start([sys.executable, str(script), str(self.got)])
        pid = self.rogue.pid
        poll("rogue exec'd", lambda: script.name in _cmdline(pid), 10)
        write_config(self.nvml_conf, spec([pid]))
        return pid

    def received(self) -> list[str]:
        return self.got.read_text().split() if self.got.exists() else []

    def sent(self, kind: str, event: str) -> dict[str, int]:
        """Per sink, how many ``event`` alerts about findings of ``kind`` went out (for
        ``rogue-job``, about this test's rogue only: the host runs other jobs)."""
        mine = self.rogue.pid if self.rogue is not None and kind == "rogue-job" else None
        out = {"log": 0, "hook": 0}
        path = self.tmp / "alerts.jsonl"
        seen: set[str] = set()
        for line in path.read_text().splitlines() if path.exists() else []:
            doc = json.loads(line)
            # The log sink is in the same at-least-once window: one line per delivery_id.
            if doc.get("delivery_id") in seen:
                continue
            seen.add(doc.get("delivery_id") or "")
            out["log"] += (
                doc.get("action") == event
                and doc.get("kind") == kind
                and (mine is None or doc.get("root_pid") == mine)
            )
        keys: set[str] = set()
        for req in list(self.rx.requests):
            # One delivery per idempotency key: a daemon killed -9 after the receiver
            # took a request but before it recorded the delivery sends it again with the
            # same key (at-least-once, as docs/alerts.md says); a new key is a new alert.
            key = req.headers.get("idempotency-key") or req.headers.get("Idempotency-Key")
            if req.status is not None and req.status < 300 and (key is None or key not in keys):
                keys.add(key or "")
                doc = req.json
                finding = doc.get("finding") or {}
                out["hook"] += (
                    doc.get("event") == event
                    and finding.get("kind") == kind
                    and (mine is None or finding.get("root_pid") == mine)
                )
        return out

    def rows(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.tmp / "state" / "state.db", timeout=10)
        try:
            return [tuple(r) for r in conn.execute(sql, args)]
        finally:
            conn.close()

    def close(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.daemon.wait(timeout=10)
        self.rx.close()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _once(host: Host, kind: str, event: str) -> dict[str, int]:
    return host.sent(kind, event)


def find_then_enforce(host: Host, fault: str | None) -> int:
    """The daemon (with ``fault``) finds the rogue in observe mode, alerts it on both
    sinks, then is switched to terminate mode by a reload."""
    host.start(fault)
    pid = host.start_rogue()
    poll(
        "rogue-job alerted on both sinks",
        lambda: _once(host, "rogue-job", "open") == {"log": 1, "hook": 1},
        30,
    )
    host.write_config("terminate")
    assert host.daemon is not None
    host.daemon.send_signal(signal.SIGHUP)
    return pid


TERMINATE_POINTS = [
    "terminate:begun",
    "terminate:freeze:sent",
    "terminate:term:sent",
    "terminate:waiting",
    "terminate:kill:intent",
    "terminate:kill:sent",
    "terminate:finishing",
]


def terminate_fault(host: Host, fault: str | None) -> dict[str, Any]:
    pid = find_then_enforce(host, fault)
    assert host.daemon is not None
    if fault is None:
        # The handed case: kill -9 from outside while the grace period runs.
        poll("SIGTERM received", lambda: "SIGTERM" in host.received(), 30)
        host.daemon.kill()
    assert host.daemon.wait(timeout=60) == -signal.SIGKILL, host.log.read_text()[-3000:]
    before = host.rows("SELECT state, outcome FROM actions WHERE kind='terminate'")
    host.start()  # no fault this time
    assert host.rogue is not None
    poll("the rogue ended", lambda: host.rogue.poll() is not None, 60)  # type: ignore[union-attr]
    poll(
        "the action finished and its finding alerted",
        lambda: (
            host.rows("SELECT 1 FROM actions WHERE state='interrupted'")
            and _once(host, "action-interrupted", "open") == {"log": 1, "hook": 1}
            and _once(host, "rogue-job", "resolve") == {"log": 1, "hook": 1}
        ),
        60,
    )
    time.sleep(1.5)  # a few more ticks: nothing more goes out
    [(aid, state, outcome, details)] = host.rows(
        "SELECT id, state, outcome, details_json FROM actions WHERE kind='terminate'"
    )
    steps = host.rows(
        "SELECT detail_json, status FROM action_steps WHERE action_id=? AND op='signal'"
        " ORDER BY id",
        aid,
    )
    waves = [(json.loads(d)["wave"], status) for d, status in steps]
    return {
        "pid": pid,
        "before_restart": before,
        "exit": host.rogue.returncode,
        "received": host.received(),
        "rows": (state, outcome),
        "waves": waves,
        "procs": [p["signals"] for p in json.loads(details)["procs"] if p["pid"] == pid],
        "alerts": {
            (k, e): _once(host, k, e)
            for k, e in (
                ("rogue-job", "open"),
                ("rogue-job", "resolve"),
                ("action-interrupted", "open"),
                ("action-interrupted", "resolve"),
            )
        },
    }


@pytest.mark.parametrize("fault", [None, *TERMINATE_POINTS])
def test_kill_9_at_each_step_of_a_terminate(
    spawned: Spawned, tmp_path: Path, fault: str | None
) -> None:
    """Case 4: before, killed during the grace period (fault None) left no record of
    the SIGTERM/SIGCONT sent, and the restarted daemon signalled the same process
    again (it received SIGTERM twice); now once, recorded, and SIGKILL at the end."""
    host = Host(tmp_path, spawned)
    try:
        got = terminate_fault(host, fault)
    finally:
        host.close()
    # Recorded before the kill, whatever step it hit.
    assert got["before_restart"] == [("pending", "pending")], got
    assert got["exit"] == -signal.SIGKILL, got
    assert got["received"].count("SIGTERM") == 1, got  # never repeated
    assert got["rows"] == ("interrupted", "ok"), got
    # Recorded vs done: a SIGTERM wave is written once; a SIGKILL wave written but cut
    # off before it was sent is made again by the restarted daemon (checked on the host:
    # the process still ran), so the rogue's record lists each signal it got once.
    assert [w for w, _status in got["waves"]].count("term") == 1, got
    assert [w for w, _status in got["waves"]].count("kill") in (1, 2), got
    [signals] = got["procs"]
    assert signals.count("SIGTERM") == 1 and signals.count("SIGKILL") == 1, got
    assert got["alerts"] == {
        ("rogue-job", "open"): {"log": 1, "hook": 1},
        ("rogue-job", "resolve"): {"log": 1, "hook": 1},
        ("action-interrupted", "open"): {"log": 1, "hook": 1},
        ("action-interrupted", "resolve"): {"log": 0, "hook": 0},
    }, got


def _nan_model(path: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"w": np.full((4, 8), np.nan, dtype=np.float16)}, str(path))


@pytest.mark.parametrize("fault", ["quarantine:begun", "quarantine:intent", "quarantine:renamed"])
def test_kill_9_at_each_step_of_a_quarantine(spawned: Spawned, tmp_path: Path, fault: str) -> None:
    """Case 4 (ship gate): before, killed between the rename and the database write
    (3 of 3 tries), the model was in quarantine with no finding, no alert, no action
    and no undo; now it gets each, once."""
    host = Host(tmp_path, spawned, gate=True)
    model = tmp_path / "deploy" / "model.safetensors"
    try:
        host.write_config("observe")
        host.start(fault)
        _nan_model(model)
        assert host.daemon is not None
        assert host.daemon.wait(timeout=60) == -signal.SIGKILL, host.log.read_text()[-3000:]
        moved = fault == "quarantine:renamed"
        assert model.exists() != moved
        assert host.rows("SELECT state FROM actions") == [("pending",)]
        assert _once(host, "poisoned-weights", "open") == {"log": 0, "hook": 0}
        host.start()
        poll(
            "the model's alerts",
            lambda: (
                _once(host, "poisoned-weights", "resolve") == {"log": 1, "hook": 1}
                and _once(host, "action-interrupted", "open") == {"log": 1, "hook": 1}
            ),
            60,
        )
        time.sleep(1.5)
        rows = host.rows("SELECT id, state, outcome, undo_json FROM actions ORDER BY id")
        assert _once(host, "poisoned-weights", "open") == {"log": 1, "hook": 1}
        assert _once(host, "action-interrupted", "open") == {"log": 1, "hook": 1}
        assert not model.exists()  # in quarantine, by the first daemon or the second
        aid, state, outcome, undo = rows[0]
        assert state == "interrupted"
        if moved:
            assert len(rows) == 1 and outcome == "done" and json.loads(undo)[0]["op"] == "rename"
            out = subprocess.run(
                [sys.executable, "-m", "rogue_watchdog", "undo", str(aid),
                 "--config", str(host.config)],
                capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)),
                check=False, timeout=60,
            )  # fmt: skip
            assert out.returncode == 0, out.stdout + out.stderr
            assert model.exists()
        else:
            # Nothing had moved: the restarted gate quarantined it, as its own action.
            assert outcome == "failed" and undo is None
            assert [(s, o) for _i, s, o, _u in rows[1:]] == [("done", "done")]
    finally:
        host.close()

"""Faults on the real daemon process (issue 32): a full state directory (a small tmpfs,
filled), an unwritable one (``chattr +i``), a socket path taken by something else.

The daemon runs as ``python -m rogue_watchdog run`` with the fake NVML library listing the
rogue jobs on a GPU, a log sink (a file outside the state directory) and a webhook
sink (tests/httpreceiver.py). Each fault checks alerts delivered against expected:
exactly one ``open`` per rogue on each sink while the database cannot be written,
none again once it can, and exactly one ``resolve`` per rogue after they exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.daemon.ipc import StatusError, query_status
from tests.conftest import Spawned, need, need_program, poll
from tests.fakenvml.build import write_config
from tests.fakenvml.fixtures import fake_nvml, library_path
from tests.httpreceiver import Receiver

pytestmark = pytest.mark.system

ROGUES = 8
REPO = Path(__file__).resolve().parent.parent.parent


def spec(pids: list[int]) -> dict[str, Any]:
    return {
        "devices": [
            {
                "name": "NVIDIA H200",
                "uuid": "GPU-rel-0",
                "total": 140 << 30,
                "used": 1 << 30,
                "processes": [{"pid": p, "mem": 1 << 30} for p in pids],
            }
        ]
    }


@pytest.fixture
def root() -> None:
    need(os.geteuid() == 0, "needs root (tmpfs mount, chattr)")
    need_program("mount", "umount", "chattr")


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0750", "tmpfs", str(path)],
                   check=True)  # fmt: skip
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.contextmanager
def immutable(paths: list[Path]) -> Iterator[None]:
    subprocess.run(["chattr", "+i", *map(str, paths)], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", *map(str, paths)], check=False)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Host:
    """The daemon under test, its sinks and its rogues."""

    def __init__(self, tmp_path: Path, spawned: Spawned, state: Path) -> None:
        self.tmp, self.spawned, self.state = tmp_path, spawned, state
        self.rx = Receiver()
        lib = fake_nvml(tmp_path, spec([]))
        self.nvml_conf = write_config(tmp_path / "nvml.conf", spec([]))
        self.socket = str(tmp_path / "status.sock")
        self.config = tmp_path / "config.yaml"
        self.config.write_text(
            f"nvml: {{library: '{library_path(lib)}'}}\n"
            "training: {launchers: ['train_rel_ghost']}\n"
            f"daemon: {{state_dir: '{state}', socket: '{self.socket}', interval_s: 0.3}}\n"
            "alerts:\n  retry_base_s: 0.2\n  retry_max_s: 1\n  sinks:\n"
            f"    - {{type: log, path: '{tmp_path}/alerts.jsonl'}}\n"
            f"    - {{type: webhook, name: hook, url_env: REL_HOOK_URL, coalesce: false}}\n"
        )
        self.script = tmp_path / "train_rel_ghost.py"
        self.script.write_text("import time\ntime.sleep(300)\n")
        self.rogues: list[subprocess.Popen[bytes]] = []
        self.log = tmp_path / "daemon.log"
        self.daemon: subprocess.Popen[bytes] | None = None

    def start(self) -> subprocess.Popen[bytes]:
        env = dict(
            os.environ,
            PYTHONPATH=str(REPO),
            FAKE_NVML_CONFIG=str(self.nvml_conf),
            REL_HOOK_URL=self.rx.url("/hook"),
        )
        with open(self.log, "ab") as fh:
            self.daemon = self.spawned.start(
                [sys.executable, "-m", "rogue_watchdog", "run", "--config", str(self.config)],
                env=env, stdout=fh, stderr=subprocess.STDOUT,
            )  # fmt: skip
        return self.daemon

    def status(self) -> dict[str, Any] | None:
        try:
            return query_status(self.socket, timeout_s=2.0)
        except StatusError:
            return None

    def start_rogues(self, n: int) -> None:
        for i in range(n):
            self.rogues.append(self.spawned.start([sys.executable, str(self.script), str(i)]))
        # NVML lists a process once it holds a CUDA context, which is after exec; listing a
        # child that still runs pytest's command line made a second finding for one rogue.
        for p in self.rogues:
            poll("rogue exec'd", lambda p=p: self.script.name in cmdline(p.pid), 10)
        write_config(self.nvml_conf, spec([p.pid for p in self.rogues]))

    def stop_rogues(self) -> None:
        for p in self.rogues:
            p.kill()
            p.wait()
        write_config(self.nvml_conf, spec([]))

    def sent(self, event: str) -> dict[str, list[int]]:
        """Per sink: the finding ids of each ``event`` alert about a rogue job."""
        out: dict[str, list[int]] = {"log": [], "hook": []}
        path = self.tmp / "alerts.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        for line in lines:
            doc = json.loads(line)
            if doc.get("action") == event and self.mine(doc.get("root_pid")):
                out["log"].append(doc["finding_id"])
        for req in list(self.rx.requests):
            if req.status is None or req.status >= 300:
                continue
            doc = req.json
            if doc.get("event") == event and self.mine(doc.get("finding", {}).get("root_pid")):
                out["hook"].append(doc["finding"]["id"])
        return out

    def mine(self, pid: object) -> bool:
        """Whether ``pid`` is one of this test's rogues (other tests' processes on the
        host are jobs too)."""
        return pid in {p.pid for p in self.rogues}

    def close(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.daemon.wait(timeout=10)
        self.rx.close()


def each_once(sent: dict[str, list[int]], n: int) -> bool:
    return all(len(ids) == n and len(set(ids)) == n for ids in sent.values())


def run_fault(host: Host, fault: contextlib.AbstractContextManager[Any]) -> dict[str, Any]:
    """Start the daemon, apply ``fault``, start the rogues; check alerts and status
    while the fault lasts, after it ends, and after the rogues exit."""
    host.start()
    poll("daemon answers", host.status, 30)
    with fault:
        time.sleep(1.0)  # a few ticks fail to store
        host.start_rogues(ROGUES)
        try:
            poll("an open per rogue on each sink", lambda: each_once(host.sent("open"), ROGUES), 30)
        except AssertionError:
            doc = host.status() or {}
            raise AssertionError(
                f"sent {host.sent('open')}; degraded {doc.get('degraded')}; "
                f"log {host.log.read_text()[-3000:]}"
            ) from None
        doc = poll("status lists them", host.status, 10)
        unstored = [
            f for f in doc["findings"] if f.get("persisted") is False and host.mine(f["root_pid"])
        ]
        during = {"unstored": len(unstored), "state_degraded": "state" in doc["degraded"]}
        ids = sorted(f["id"] for f in unstored)
    # Storage is back: the findings are stored under their ids, alerted no second time.
    doc = poll(
        "findings stored",
        lambda: (
            (d := host.status())
            and not [f for f in d["findings"] if f.get("persisted") is False]
            and "state" not in d["degraded"]
            and d
        ),
        30,
    )
    stored = sorted(f["id"] for f in doc["findings"] if host.mine(f["root_pid"]))
    time.sleep(1.5)
    opens_after = host.sent("open")
    host.stop_rogues()
    poll("a resolve per rogue on each sink", lambda: each_once(host.sent("resolve"), ROGUES), 30)
    # Every delivery's mark is written once the database can be written again (the
    # delivery threads' connections, read-only while the files were, reconnect).
    poll("every delivery recorded", lambda: (d := host.status()) and not d["alerts"]["queued"], 20)
    time.sleep(1.0)
    return {
        **during,
        "ids": ids,
        "stored": stored,
        "opens": {k: len(v) for k, v in opens_after.items()},
        "resolves": {k: len(v) for k, v in host.sent("resolve").items()},
        "running": host.daemon is not None and host.daemon.poll() is None,
        # Said once: one line that state is degraded, at most one per sink that its
        # deliveries cannot be recorded.
        "said": sum(
            '"component-degraded"' in line and '"component": "state"' in line
            for line in host.log.read_text().splitlines()
        ),
        "mark_lines": host.log.read_text().count('"alert-mark-failed"'),
    }


class Fill:
    """Fill the file system of ``directory`` to the last byte while active."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "filler"

    def __enter__(self) -> Fill:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for size in (1 << 16, 4096, 512, 1):
                with contextlib.suppress(OSError):
                    while os.write(fd, b"\0" * size):
                        pass
        finally:
            os.close(fd)
        return self

    def __exit__(self, *exc: object) -> None:
        self.path.unlink()


def test_a_full_state_directory_never_silences_alerts(
    root: None, spawned: Spawned, tmp_path: Path
) -> None:
    """Case 1 (full): before, 96 of 100 rogues were alerted on no sink at all."""
    with tmpfs(tmp_path / "state", "2m") as state:
        host = Host(tmp_path, spawned, state)
        try:
            got = run_fault(host, Fill(state))
        finally:
            host.close()
    assert got["unstored"] == ROGUES and got["state_degraded"]
    assert got["stored"] == got["ids"]
    assert got["opens"] == {"log": ROGUES, "hook": ROGUES}
    assert got["resolves"] == {"log": ROGUES, "hook": ROGUES}
    assert got["running"] and got["said"] == 1 and got["mark_lines"] <= 2


def test_an_unwritable_state_directory_never_silences_alerts(
    root: None, spawned: Spawned, tmp_path: Path
) -> None:
    """Case 1 (chattr +i on the state directory and its files)."""
    state = tmp_path / "state"
    host = Host(tmp_path, spawned, state)

    class Immutable:
        def __enter__(self) -> None:
            self.paths = [state, *[p for p in state.iterdir() if p.name.startswith("state.db")]]
            self.cm = immutable(self.paths)
            self.cm.__enter__()

        def __exit__(self, *exc: object) -> None:
            self.cm.__exit__(None, None, None)

    try:
        got = run_fault(host, Immutable())
    finally:
        subprocess.run(["chattr", "-R", "-i", str(state)], check=False)
        host.close()
    assert got["unstored"] == ROGUES and got["state_degraded"]
    assert got["stored"] == got["ids"]
    assert got["opens"] == {"log": ROGUES, "hook": ROGUES}
    assert got["resolves"] == {"log": ROGUES, "hook": ROGUES}
    assert got["running"] and got["said"] == 1 and got["mark_lines"] <= 2


@pytest.mark.parametrize("taken", ["file", "symlink"])
def test_a_socket_path_taken_refuses_to_start(spawned: Spawned, tmp_path: Path, taken: str) -> None:
    """Case 6: before, the daemon ran without a socket while `status` said "not
    running"; now it refuses to start, exit 2, saying why."""
    host = Host(tmp_path, spawned, tmp_path / "state")
    try:
        path = Path(host.socket)
        if taken == "file":
            path.write_text("not a socket\n")
        else:
            path.symlink_to(tmp_path / "elsewhere.sock")
        d = host.start()
        assert d.wait(timeout=30) == 2
        text = host.log.read_text()
        what = "a regular file" if taken == "file" else "a symlink"
        assert f"the status socket path {path} is taken by {what}" in text
        assert path.is_symlink() == (taken == "symlink")  # left as it was
    finally:
        host.close()

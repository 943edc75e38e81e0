"""Fleet labels on /metrics: a real daemon process, real processes, the fake NVML.

The daemon (``python -m rogue_watchdog run``) reads the fake libnvidia-ml.so.1 through the real
pynvml path with ``FAKE_NVML_RELOAD`` set, so the GPU process lists follow the processes
this test starts and kills.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rogue_watchdog.model import MAX_ORIGIN_LABEL_CHARS, SystemdOrigin, origin_from_json
from tests.conftest import REPO, need_program, poll
from tests.fakenvml.build import CONFIG_NAME, write_config
from tests.fakenvml.fixtures import fake_nvml, library_path

GIB = 1024**3
MIB = 1024**2
SERIES = re.compile(r"^(rogue_watchdog_\w+)(\{.*\})? (\S+)$")


LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def k(name: str, **labels: str) -> str:
    """The canonical key of one series: labels sorted by name."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{n}="{v}"' for n, v in sorted(labels.items())) + "}"


def parse(text: str) -> dict[str, float]:
    """Canonical ``name{labels}`` → value for every rogue_watchdog_ series."""
    out = {}
    for line in text.splitlines():
        m = SERIES.match(line)
        if m:
            labels = dict(LABEL.findall(m.group(2) or ""))
            out[k(m.group(1), **labels)] = float(m.group(3))
    return out


def devices(pids: list[int], hidden: bool = False) -> dict[str, Any]:
    """Two H200s; the PIDs alternate between them, 100 MiB each."""
    devs: list[dict[str, Any]] = [
        {"name": "NVIDIA H200", "uuid": f"GPU-fleet-{i}", "total": 140 * GIB, "used": 3 * GIB}
        for i in range(2)
    ]
    for n, pid in enumerate(pids):
        devs[n % 2].setdefault("processes", []).append({"pid": pid, "mem": 100 * MIB})
    if hidden:
        devs.append({"name": "NVIDIA H200", "uuid": "GPU-fleet-2", "total": 1, "proc_error": 4})
    return {"devices": devs}


class Daemon:
    def __init__(self, tmp_path: Path, token: str, lib_dir: Path) -> None:
        # Port 0: the daemon's own bind picks it, and its log says which. A free port
        # asked for here was free only until the daemon, a Python start-up later, bound
        # it: another test's socket could take it in between (a scrape then timed out
        # or read someone else's server).
        self.port = 0
        self.log_path = tmp_path / "daemon.log"
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(
            f"nvml: {{library: '{library_path(lib_dir)}'}}\n"
            f"training: {{launchers: ['{token}_'], device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
            f"daemon: {{state_dir: '{tmp_path}/state', socket: '{tmp_path}/s.sock',"
            f" interval_s: 0.2, metrics_listen: '127.0.0.1:0'}}\n"
            f"alerts: {{sinks: [{{type: log, path: '{tmp_path}/alerts.jsonl'}}]}}\n"
        )
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.log = open(self.log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rogue_watchdog", "run", "--config", str(cfg)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    def scrape(self) -> dict[str, float]:
        if not self.port:
            self.port = self._listening() or 0
            if not self.port:
                return {}  # not listening yet
        try:
            resp = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5)
        except httpx.HTTPError:
            return {}
        return parse(resp.text) if resp.status_code == 200 else {}

    def _listening(self) -> int | None:
        """The port of the daemon's ``metrics-listening`` log line, once written."""
        for line in self.log_path.read_bytes().splitlines():
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                if isinstance(doc, dict) and doc.get("event") == "metrics-listening":
                    return int(str(doc["address"]).rsplit(":", 1)[1])
        return None

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


@pytest.fixture
def token() -> str:
    return f"fleetjob{uuid.uuid4().hex[:10]}"


@pytest.fixture
def lib_dir(tmp_path: Path) -> Path:
    need_program("gcc")
    return fake_nvml(tmp_path, devices([]))


@pytest.fixture
def daemon(tmp_path: Path, token: str, lib_dir: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path, token, lib_dir)
    try:
        yield d
    finally:
        d.close()


def start_jobs(token: str, first: int, n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` sleeping processes whose command lines all differ (``TOKEN_<i>``)."""
    return [
        subprocess.Popen(
            ["bash", "-c", 'exec -a "$0" sleep 300', f"{token}_{i}"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        for i in range(first, first + n)
    ]


def stop_jobs(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        p.wait()


def labelled(series: dict[str, float], name: str) -> dict[str, float]:
    return {k: v for k, v in series.items() if k.startswith(name + "{")}


def test_labels_per_gpu_and_bounded_over_500_pids(
    daemon: Daemon, lib_dir: Path, token: str
) -> None:
    host = socket.gethostname()
    idle = poll("first tick", lambda: daemon.scrape().get("rogue_watchdog_gpus") == 2, 30)
    assert idle
    base = daemon.scrape()
    held0 = k(
        "rogue_watchdog_gpu_memory_held_bytes",
        host=host, gpu="0", gpu_uuid="GPU-fleet-0", holder="unsanctioned",
    )  # fmt: skip
    assert base[held0] == 0
    assert labelled(base, "rogue_watchdog_jobs_by_gpu") == {}
    names_before = set(base)

    job = {"verdict": "rogue", "user": "root", "origin_kind": "unknown", "origin": ""}
    seen_pids: set[int] = set()
    rounds, per_round = 10, 50
    try:
        for r in range(rounds):
            procs = start_jobs(token, r * per_round, per_round)
            pids = [p.pid for p in procs]
            seen_pids.update(pids)
            write_config(lib_dir / CONFIG_NAME, devices(pids))

            def full(want: int = per_round) -> dict[str, float] | None:
                # Counted once on their GPUs: the jobs start before the stand-in NVML
                # lists them, and a tick (or an exec event) in between sees them on no
                # GPU (`gpu=""`) for a while: a loaded host's CI rehearsal did.
                s = daemon.scrape()
                series = labelled(s, "rogue_watchdog_jobs_by_gpu").items()
                got = sum(v for name, v in series if want == 0 or 'gpu=""' not in name)
                return s if got == want and (want == 0 or len(series) == 2) else None

            s = poll(f"{per_round} jobs in round {r}", full, 30)
            by_gpu = labelled(s, "rogue_watchdog_jobs_by_gpu")
            # 50 jobs, 50 distinct command lines and PIDs: two series, one per GPU.
            assert len(by_gpu) == 2, by_gpu
            for i in range(2):
                gpu = {"host": host, "gpu": str(i), "gpu_uuid": f"GPU-fleet-{i}"}
                key = k("rogue_watchdog_jobs_by_gpu", **gpu, **job)
                assert by_gpu[key] == per_round // 2
                held = k("rogue_watchdog_gpu_memory_held_bytes", **gpu, holder="unsanctioned")
                assert s[held] == per_round // 2 * 100 * MIB
            assert s[k("rogue_watchdog_jobs_by_origin", host=host, **job)] == per_round
            stop_jobs(procs)
            write_config(lib_dir / CONFIG_NAME, devices([]))
            poll(f"round {r} gone", lambda: full(0), 30)
    finally:
        write_config(lib_dir / CONFIG_NAME, devices([]))

    after = daemon.scrape()
    assert len(seen_pids) == rounds * per_round
    # 500 PIDs came and went: no series was added for any of them; only the sink and
    # the finding kinds first seen during the rounds.
    added = set(after) - names_before
    per_kind = ("rogue_watchdog_findings_open{", "rogue_watchdog_finding_instances{")
    # (The sink's counters may already exist: a health finding can be alerted first.)
    assert {x for x in added if not x.startswith(per_kind)} <= {
        'rogue_watchdog_alerts_dead_lettered_total{sink="log"}',
        'rogue_watchdog_alerts_delivered_total{sink="log"}',
        'rogue_watchdog_alerts_failed_total{sink="log"}',
        'rogue_watchdog_alerts_queued{sink="log"}',
    }
    assert 'rogue_watchdog_findings_open{kind="rogue-job"}' in added
    # (8 of them: unknown-memory processes per GPU and holder; jobs_by_class has every
    # verdict and class pair, a fixed 3 x 6 whatever the PIDs.)
    assert len(after) < 90
    assert labelled(after, "rogue_watchdog_jobs_by_gpu") == {}
    assert labelled(after, "rogue_watchdog_jobs_by_origin") == {}
    text = "\n".join(after)
    assert not any(f'"{pid}"' in text or f"{token}_" in text for pid in seen_pids)


def test_hidden_gpu_is_counted(daemon: Daemon, lib_dir: Path) -> None:
    host = socket.gethostname()
    write_config(lib_dir / CONFIG_NAME, devices([], hidden=True))
    s = poll("three GPUs", lambda: daemon.scrape().get("rogue_watchdog_gpus") == 3, 30)
    assert s
    s = daemon.scrape()
    gpu = [{"host": host, "gpu": str(i), "gpu_uuid": f"GPU-fleet-{i}"} for i in range(3)]
    assert s[k("rogue_watchdog_gpus_hidden", host=host)] == 1
    assert s[k("rogue_watchdog_gpu_processes_hidden", **gpu[2])] == 1
    assert s[k("rogue_watchdog_gpu_processes_hidden", **gpu[0])] == 0
    assert s[k("rogue_watchdog_gpu_memory_total_bytes", **gpu[0])] == 140 * GIB
    assert s[k("rogue_watchdog_gpu_memory_used_bytes", **gpu[1])] == 3 * GIB
    info = labelled(s, "rogue_watchdog_info")
    assert len(info) == 1 and f'host="{host}"' in next(iter(info))


def test_unknown_memory_is_nan_and_counted_never_zero(
    daemon: Daemon, lib_dir: Path, token: str
) -> None:
    """Trust IV case 7: memory NVML reports as NVML_VALUE_NOT_AVAILABLE counted as 0 in
    the held-memory gauges. It is NaN there, and counted in a gauge of its own."""
    host = socket.gethostname()
    poll("first tick", lambda: daemon.scrape().get("rogue_watchdog_gpus") == 2, 30)
    procs = start_jobs(token, 0, 1)
    try:
        doc = devices([])
        doc["devices"][0]["processes"] = [{"pid": procs[0].pid, "mem": "NA"}]
        write_config(lib_dir / CONFIG_NAME, doc)
        gpu = {"host": host, "gpu": "0", "gpu_uuid": "GPU-fleet-0"}
        unknown = k("rogue_watchdog_gpu_memory_unknown_processes", **gpu, holder="unsanctioned")
        s = poll("the unknown process counted", lambda: (x := daemon.scrape()).get(unknown) == 1
                 and x, 30)  # fmt: skip
        held = s[k("rogue_watchdog_gpu_memory_held_bytes", **gpu, holder="unsanctioned")]
        assert held != held  # NaN: unknown, not 0
        assert s[k("rogue_watchdog_gpu_memory_held_bytes", **gpu, holder="sanctioned")] == 0
        assert s[k("rogue_watchdog_gpu_memory_unknown_processes", **gpu, holder="sanctioned")] == 0
        by_verdict = s['rogue_watchdog_job_gpu_memory_bytes{verdict="rogue"}']
        assert by_verdict != by_verdict
    finally:
        stop_jobs(procs)
        write_config(lib_dir / CONFIG_NAME, devices([]))


@pytest.mark.parametrize(
    ("kind", "fields", "label"),
    [
        ("cron", {"file": "/etc/cron.d/retrain", "line": 7, "entry": "x"}, "/etc/cron.d/retrain:7"),
        ("systemd", {"unit": "nightly.service", "timer": "nightly.timer"}, "nightly.service"),
        ("systemd", {"unit": "train@4242.service"}, "train@.service"),
        ("systemd", {"unit": "t@gpu3-run17.service", "user": "ana", "uid": 1000}, "t@.service"),
        ("systemd", {"unit": "run-u812.service"}, "run-*.service"),
        ("systemd", {"unit": "run-r0a1b2c3d4e5f60718293a4b5c6d7e8f9.service"}, "run-*.service"),
        ("systemd", {"unit": "run-p4242-i4243.service"}, "run-*.service"),
        ("systemd", {"unit": "rerun-trainer.service"}, "rerun-trainer.service"),
        ("slurm", {"job_id": "4242", "job_name": "big", "account": "ml"}, "ml"),
        ("container", {"container_id": "ab" * 32, "image": "trainer:1"}, "trainer:1"),
        ("supervisor", {"program": "trainer"}, "trainer"),
        ("shell", {"session": "pts/3 (ssh from 10.0.0.1)", "user": "alice"}, ""),
        ("at", {"job": 17, "command": "python3 train.py"}, ""),
        ("orphan", {"parent_pid": 4242}, ""),
        ("unknown", {}, ""),
        ("slurm", {"job_id": "4243", "job_name": "x"}, ""),
    ],
)  # fmt: skip
def test_origin_label_names_the_source_never_an_instance(
    kind: str, fields: dict[str, Any], label: str
) -> None:
    assert origin_from_json({"kind": kind, **fields}).label() == label


def test_origin_label_is_cut() -> None:
    long = "a" * 500 + ".service"
    got = SystemdOrigin(unit=long).label()
    assert len(got) == MAX_ORIGIN_LABEL_CHARS and got.endswith("…")

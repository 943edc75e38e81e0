"""A fleet of three with the real engines: Prometheus and Alertmanager (Debian packages)
on loopback ports, each with its own data directory, and three daemons standing for three
hosts (own UTS namespace and host name, state dir, socket, metrics port, fake NVML).

A rogue job holds two GPUs of gpu-a only. Prometheus scrapes the three, the shipped rule
fires, Alertmanager groups the two GPU alerts into one notification to a local webhook
receiver; gpu-a's native ``alertmanager`` sink reaches Alertmanager directly; ``fleet``
shows the host; every Grafana panel query returns series. Stopping the job resolves both.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, Spawned, need_program, need_root, poll, run_cli
from tests.fakenvml.build import build_library, write_config
from tests.httpreceiver import Receiver

pytestmark = pytest.mark.system

HOSTS = ("gpu-a", "gpu-b", "gpu-c")
GIB = 1024**3
RULES = REPO / "deploy" / "prometheus" / "rogue-watchdog.rules.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "rogue-watchdog-fleet.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nvml_spec(host: str, pids: list[int]) -> dict[str, Any]:
    devs: list[dict[str, Any]] = [
        {"name": "NVIDIA H200", "uuid": f"GPU-{host}-{i}", "total": 140 * GIB, "used": GIB}
        for i in range(2)
    ]
    for dev in devs:
        dev["processes"] = [{"pid": pid, "mem": 4 * GIB} for pid in pids]
    return {"devices": devs}


class Procs:
    """Long-running servers this test started (each in its own process group)."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115
        self.procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True,
        )  # fmt: skip
        log.close()

    def tail(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        for p in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    (tmp_path / "logs").mkdir()
    p = Procs(tmp_path / "logs")
    try:
        yield p
    finally:
        p.stop()


def get_json(url: str, **params: str) -> Any:
    try:
        resp = httpx.get(url, params=params, timeout=5)
    except httpx.HTTPError:
        return None
    return resp.json() if resp.status_code == 200 else None


def notifications(rx: Receiver, alertname: str, status: str) -> list[dict[str, Any]]:
    return [
        b
        for b in rx.bodies("/am")
        if b.get("groupLabels", {}).get("alertname") == alertname and b.get("status") == status
    ]


def test_three_hosts_prometheus_alertmanager_fleet_and_dashboard(
    tmp_path: Path, spawned: Spawned, procs: Procs
) -> None:
    need_root()
    need_program("prometheus", "prometheus-alertmanager", "unshare", "gcc")
    started = time.monotonic()
    lib = build_library(tmp_path / "nvml")
    rx = Receiver()
    try:
        _run(tmp_path, spawned, procs, lib, rx)
    except BaseException:
        for name in procs.procs:
            print(f"--- {name} ---\n{procs.tail(name)}")
        raise
    finally:
        rx.close()
    assert time.monotonic() - started < 60


def _run(tmp_path: Path, spawned: Spawned, procs: Procs, lib: Path, rx: Receiver) -> None:
    am_port, prom_port = free_port(), free_port()
    am, prom = f"http://127.0.0.1:{am_port}", f"http://127.0.0.1:{prom_port}"

    # The rogue job: a process the fake NVML of gpu-a lists on both its GPUs.
    script = tmp_path / "fleet_job.py"
    script.write_text("import time\ntime.sleep(300)\n")
    job = spawned.start([sys.executable, str(script)])

    metrics_ports = {}
    nvml_conf = {}
    for host in HOSTS:
        d = tmp_path / host
        d.mkdir()
        nvml_conf[host] = write_config(
            d / "nvml.conf", nvml_spec(host, [job.pid] if host == "gpu-a" else [])
        )
        metrics_ports[host] = free_port()
        sinks = f"    - {{type: log, path: '{d}/alerts.jsonl'}}\n"
        if host == "gpu-a":
            sinks += (
                f"    - {{type: alertmanager, name: am, urls: ['{am}'], resend_s: 1,"
                " kinds: [rogue-job]}\n"
            )
        (d / "config.yaml").write_text(
            f"nvml: {{library: '{lib}'}}\n"
            # Only NVML makes a training job here: the three daemons share one process
            # table, and only gpu-a's NVML lists the job.
            f"training: {{launchers: ['\\b\\B'], device_glob: '{d}/nodev[0-9]*'}}\n"
            f"daemon: {{state_dir: '{d}/state', socket: '{d}/status.sock', interval_s: 0.5,"
            f" metrics_listen: '127.0.0.1:{metrics_ports[host]}'}}\n"
            f"alerts:\n  sinks:\n{sinks}"
        )
        env = dict(
            os.environ,
            PYTHONPATH=str(REPO),
            FAKE_NVML_CONFIG=str(nvml_conf[host]),
        )
        procs.start(
            host,
            ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', host,
             sys.executable, "-m", "rogue_watchdog", "run", "--config", str(d / "config.yaml")],
            env,
        )  # fmt: skip

    (tmp_path / "am").mkdir()
    (tmp_path / "am" / "alertmanager.yml").write_text(
        "route:\n"
        "  receiver: hook\n"
        "  group_by: [alertname, host]\n"
        "  group_wait: 1s\n"
        "  group_interval: 1s\n"
        "  repeat_interval: 1h\n"
        "receivers:\n"
        "  - name: hook\n"
        "    webhook_configs:\n"
        f"      - url: '{rx.url('/am')}'\n"
        "        send_resolved: true\n"
    )
    procs.start(
        "alertmanager",
        ["prometheus-alertmanager", f"--config.file={tmp_path}/am/alertmanager.yml",
         f"--storage.path={tmp_path}/am/data", f"--web.listen-address=127.0.0.1:{am_port}",
         "--cluster.listen-address=", "--log.level=warn"],
    )  # fmt: skip
    (tmp_path / "prom").mkdir()
    targets = ", ".join(f"'127.0.0.1:{p}'" for p in metrics_ports.values())
    (tmp_path / "prom" / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES}']\n"
        "alerting:\n  alertmanagers:\n"
        f"    - static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]\n"
        "scrape_configs:\n  - job_name: rogue-watchdog\n"
        f"    static_configs: [{{targets: [{targets}]}}]\n"
    )
    procs.start(
        "prometheus",
        ["prometheus", f"--config.file={tmp_path}/prom/prometheus.yml",
         f"--storage.tsdb.path={tmp_path}/prom/data", f"--web.listen-address=127.0.0.1:{prom_port}",
         "--rules.alert.resend-delay=1s", "--log.level=warn"],
    )  # fmt: skip

    def query(expr: str) -> list[dict[str, Any]]:
        doc = get_json(f"{prom}/api/v1/query", query=expr)
        return doc["data"]["result"] if doc and doc.get("status") == "success" else []

    def hosts_up() -> bool:
        return sorted(s["metric"].get("host", "") for s in query("rogue_watchdog_info")) == list(
            HOSTS
        )

    poll("three hosts scraped", hosts_up, 30)

    # The shipped rule fires, once per GPU the job holds; Alertmanager groups them.
    (note,) = poll("rule notification", lambda: notifications(rx, "RogueTrainingJob", "firing"), 30)
    assert note["groupLabels"] == {"alertname": "RogueTrainingJob", "host": "gpu-a"}
    keys = ("host", "gpu", "gpu_uuid", "user")
    got = sorted(tuple(a["labels"][k] for k in keys) for a in note["alerts"])
    assert got == [("gpu-a", "0", "GPU-gpu-a-0", "root"), ("gpu-a", "1", "GPU-gpu-a-1", "root")]
    assert {(a["status"], a["labels"]["severity"]) for a in note["alerts"]} == {("firing", "high")}

    # The native sink's alert reached Alertmanager directly.
    def native() -> list[dict[str, Any]]:
        return get_json(f"{am}/api/v2/alerts", filter='alertname="RogueWatchdogRogueJob"') or []

    (alert,) = poll("native alert in Alertmanager", native, 15)
    labels = alert["labels"]
    assert (labels["host"], labels["gpu"], labels["gpu_uuid"], labels["kind"]) == (
        "gpu-a", "0,1", "GPU-gpu-a-0,GPU-gpu-a-1", "rogue-job",
    )  # fmt: skip
    assert alert["annotations"]["root_pid"] == str(job.pid)
    native_name = "RogueWatchdogRogueJob"
    (nat_note,) = poll("native notification", lambda: notifications(rx, native_name, "firing"), 15)
    assert nat_note["groupLabels"] == {"alertname": "RogueWatchdogRogueJob", "host": "gpu-a"}

    # `fleet` shows the host and its GPUs.
    done = run_cli("fleet", "--prometheus", prom, "--json")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert [h["host"] for h in doc["hosts"]] == list(HOSTS)
    assert [(h["host"], h["rogue_jobs"], h["ticking"]) for h in doc["hosts"]] == [
        ("gpu-a", 2, True), ("gpu-b", 0, True), ("gpu-c", 0, True),
    ]  # fmt: skip
    assert [(r["host"], r["gpu"], r["gpu_uuid"], r["verdict"]) for r in doc["rogue_jobs"]] == [
        ("gpu-a", "0", "GPU-gpu-a-0", "rogue"), ("gpu-a", "1", "GPU-gpu-a-1", "rogue"),
    ]  # fmt: skip
    assert doc["not_ticking"] == []
    text = run_cli("fleet", "--prometheus", prom)
    assert text.returncode == 1
    assert "3 hosts in" in text.stdout and "GPU-gpu-a-1" in text.stdout

    # Every dashboard panel's query returns series from this Prometheus.
    check_dashboard(query)

    # The job stops: both alerts resolve.
    write_config(nvml_conf["gpu-a"], nvml_spec("gpu-a", []))
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    poll("rule resolved", lambda: notifications(rx, "RogueTrainingJob", "resolved"), 30)
    poll("native alert resolved", lambda: notifications(rx, native_name, "resolved"), 30)
    assert native() == []
    assert len(notifications(rx, "RogueTrainingJob", "firing")) == 1
    done = run_cli("fleet", "--prometheus", prom, "--json")
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["rogue_jobs"] == []


def check_dashboard(query: Callable[[str], list[dict[str, Any]]]) -> None:
    dash = json.loads(DASHBOARD.read_text())
    exact = {
        "Hosts with rogue jobs": 1.0,
        "Hosts watched": 3.0,
        "Hosts not ticking (5 min)": 0.0,
        "GPUs hidden from NVML": 0.0,
    }
    titles = []
    for panel in dash["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$host", ".*")
            series = query(expr)
            assert series, f"panel {panel['title']!r}: no series for {expr}"
            if panel["title"] in exact:
                values = [float(s["value"][1]) for s in series]
                assert values == [exact[panel["title"]]], panel["title"]
        titles.append(panel["title"])
    assert set(exact) <= set(titles)
    assert len(titles) == 14

"""Prometheus metrics: scrape the real endpoint on 127.0.0.1 after real ticks."""

from __future__ import annotations

import re
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rogue_watchdog.config import ConfigError, parse_config
from rogue_watchdog.daemon.alerts import DeliveryWorker
from rogue_watchdog.daemon.assemble import build_metrics_workers
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.metrics import MetricsWorker
from tests.conftest import Spawned
from tests.httpreceiver import Receiver


def make(tmp_path: Path, token: str, listen: str | None) -> Daemon:
    text = (
        # settle_s 0: NVML is off and the settle holds a first page without it too
        # (issue 33); the open goes at the first look here.
        "nvml: {enabled: false}\n"
        f"training: {{launchers: ['{token}']}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'"
        + (f", metrics_listen: '{listen}'" if listen else "")
        + "}\n"
        "alerts:\n  retry_base_s: 5\n  settle_s: 0\n  sinks:\n"
        "    - {type: webhook, name: hook, url_env: RW_METRICS_HOOK}\n"
    )
    return Daemon(parse_config(text, "t.yaml"), None)


@pytest.fixture
def rx() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def scrape(w: MetricsWorker) -> list[str]:
    assert w.address is not None
    host, port = w.address
    resp = httpx.get(f"http://{host}:{port}/metrics", timeout=5)
    assert resp.status_code == 200
    return [x for x in resp.text.splitlines() if x.startswith("rogue_watchdog_")]


def scrape_types(w: MetricsWorker) -> dict[str, str]:
    assert w.address is not None
    text = httpx.get(f"http://127.0.0.1:{w.address[1]}/metrics", timeout=5).text
    found = re.findall(r"^# TYPE (rogue_watchdog_\w+) (\w+)$", text, re.M)
    return dict(found)


def test_metrics_endpoint_after_ticks(spawned: Spawned, tmp_path: Path, rx: Receiver) -> None:
    token = f"alertjob_{uuid.uuid4().hex[:10]}"
    script = tmp_path / f"{token}.py"
    script.write_text("import time\ntime.sleep(120)\n")
    d = make(tmp_path, token, "127.0.0.1:0")
    (w,) = build_metrics_workers(d)
    assert isinstance(w, MetricsWorker)
    alerts = DeliveryWorker(
        d.db, lambda: d.config.alerts, jitter=0.0, environ={"RW_METRICS_HOOK": rx.url("/h")}
    )
    w.start()
    try:
        assert w.address is not None and w.address[0] == "127.0.0.1" and w.address[1] > 0
        assert scrape(w) == []  # nothing before the first tick
        proc = spawned.start([sys.executable, str(script)])
        time.sleep(0.3)
        t0 = 6_000_000.0
        d.tick(t0)
        lines = scrape(w)
        expected = [
            "rogue_watchdog_last_tick_timestamp_seconds 6e+06",
            "rogue_watchdog_scan_ok 1.0",
            "rogue_watchdog_nvml_up 0.0",
            "rogue_watchdog_gpus 0.0",
            'rogue_watchdog_jobs{verdict="sanctioned"} 0.0',
            'rogue_watchdog_jobs{verdict="rogue"} 1.0',
            'rogue_watchdog_jobs{verdict="excess"} 0.0',
            'rogue_watchdog_jobs{verdict="ignored"} 0.0',
            'rogue_watchdog_job_gpu_memory_bytes{verdict="rogue"} 0.0',
            'rogue_watchdog_findings_open{kind="rogue-job"} 1.0',
            'rogue_watchdog_alerts_queued{sink="hook"} 1.0',
            'rogue_watchdog_alerts_failed_total{sink="hook"} 0.0',
            'rogue_watchdog_alerts_delivered_total{sink="hook"} 0.0',
            "rogue_watchdog_degraded_components 0.0",
        ]
        for line in expected:
            assert line in lines
        for name in ("tick_duration_seconds", "scan_duration_seconds"):
            (line,) = [x for x in lines if x.startswith(f"rogue_watchdog_{name} ")]
            assert 0 < float(line.split()[1]) < 5
        assert not any("_created" in x for x in lines)

        # One failed attempt (receiver down), then delivered; the job ends.
        rx.set_mode("down")
        alerts.deliver_due(t0)
        rx.set_mode("ok")
        alerts.deliver_due(t0 + 5)
        proc.kill()
        proc.wait()
        d.tick(t0 + 10)
        lines = scrape(w)
        for line in (
            'rogue_watchdog_jobs{verdict="rogue"} 0.0',
            'rogue_watchdog_findings_open{kind="rogue-job"} 0.0',  # stays, at 0
            'rogue_watchdog_alerts_queued{sink="hook"} 1.0',  # the resolve
            'rogue_watchdog_alerts_failed_total{sink="hook"} 1.0',
            'rogue_watchdog_alerts_delivered_total{sink="hook"} 1.0',
        ):
            assert line in lines
        assert scrape_types(w)["rogue_watchdog_alerts_failed_total"] == "counter"
        assert scrape_types(w)["rogue_watchdog_jobs"] == "gauge"
        port = w.address[1] if w.address else 0
    finally:
        w.stop()
        alerts.stop()
    assert w.address is None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_metrics_off_by_default_and_a_taken_port_degrades(tmp_path: Path) -> None:
    assert build_metrics_workers(make(tmp_path, "alertjob_none", None)) == []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        d = make(tmp_path, "alertjob_none", f"127.0.0.1:{port}")
        (w,) = build_metrics_workers(d)
        w.start()  # must not raise: the daemon runs on without metrics
        assert d.degraded == {
            "metrics": f"cannot listen on 127.0.0.1:{port}: Address already in use"
        }
        w.stop()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "daemon: {metrics_listen: '9100'}",
            "expected HOST:PORT (e.g. 127.0.0.1:9101), got '9100'",
        ),
        ("daemon: {metrics_listen: '::1:9100'}", "put an IPv6 address in brackets"),
        ("daemon: {metrics_listen: 'h:70000'}", "expected HOST:PORT"),
        ("alerts: {retry_base_s: 10, retry_max_s: 5}", "must be at least retry_base_s (10.0)"),
        ("alerts: {retry_base_s: 0}", "alerts.retry_base_s: must be greater than 0"),
    ],
)
def test_settings_refused(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text + "\n", "t.yaml")
    assert error in str(info.value)


def test_settings_accepted() -> None:
    c = parse_config(
        "daemon: {metrics_listen: '[::1]:9101'}\nalerts: {retry_base_s: 1, retry_max_s: 30}\n",
        "t.yaml",
    )
    assert c.daemon.metrics_listen == "[::1]:9101"
    assert (c.alerts.retry_base_s, c.alerts.retry_max_s) == (1.0, 30.0)
    default = parse_config("", "t.yaml")
    assert (default.alerts.retry_base_s, default.alerts.retry_max_s) == (5.0, 600.0)
    assert default.daemon.metrics_listen is None

"""``rogue-watchdog fleet`` without a Prometheus: usage and reachability errors, and host
text escaped in the table. tests/system/test_fleet_prometheus.py runs it against a real
Prometheus."""

from __future__ import annotations

import socket

from rogue_watchdog.fleet import Host, Picture, RogueJob, picture_json, picture_text
from tests.conftest import run_cli


def test_not_a_url_is_a_usage_error() -> None:
    done = run_cli("fleet", "--prometheus", "prometheus:9090")
    assert done.returncode == 2
    assert "--prometheus must be an http(s) URL, got 'prometheus:9090'" in done.stderr


def test_unreachable_prometheus_exits_4() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connection refused
        done = run_cli("fleet", "--prometheus", f"http://127.0.0.1:{port}", "--timeout", "5")
    assert done.returncode == 4
    assert done.stderr.startswith(
        f"rogue-watchdog: cannot reach Prometheus at http://127.0.0.1:{port}: ConnectError"
    )
    assert done.stdout == ""


def test_host_text_is_escaped_and_stale_hosts_listed() -> None:
    pic = Picture(prometheus="http://p:9090", time=1.0, stale_after_s=300)
    pic.hosts = [
        Host("gpu-a\n[forged] row", "10.0.0.7:9101", "rogue-watchdog", "0.1.0", 2.0, True, 1),
        Host("gpu-b", "10.0.0.8:9101", "rogue-watchdog", "0.1.0", 420.0, False, 0),
    ]
    pic.rogue = [
        RogueJob(
            "gpu-a\n[forged] row", "0", "GPU-x", "rogue", "eve\x1b[2J", "cron", "/etc/cron.d/x:1", 1
        )
    ]
    text = picture_text(pic)
    assert "\x1b" not in text and "gpu-a\\n[forged] row" in text
    assert "eve\\x1b[2J" in text
    assert text.splitlines()[-1] == "  gpu-b (10.0.0.8:9101): last scan 7m ago"
    assert pic.exit_code() == 1
    doc = picture_json(pic)
    assert doc["not_ticking"] == ["gpu-b"]
    assert [h["ticking"] for h in doc["hosts"]] == [True, False]


def test_the_parser_default_stale_after_is_the_library_default() -> None:
    import rogue_watchdog.cli.fleet as cli_fleet
    import rogue_watchdog.fleet as fleet

    assert cli_fleet.DEFAULT_STALE_AFTER_S == fleet.DEFAULT_STALE_AFTER_S == 300.0

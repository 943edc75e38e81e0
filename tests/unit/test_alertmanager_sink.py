"""The alertmanager sink against a local HTTP receiver standing in for an HA pair:
exact bodies, re-sends before expiry, the resolve, one peer down, both down.

tests/system/test_fleet_prometheus.py sends to a real Alertmanager.
"""

from __future__ import annotations

import socket
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.config import ConfigError, parse_config
from rogue_watchdog.daemon.alerts import DeliveryWorker
from rogue_watchdog.daemon.alerts.alertmanager import AlertmanagerKeeper, alertname
from rogue_watchdog.daemon.loop import Daemon
from tests.conftest import Spawned
from tests.httpreceiver import Receiver

HOST = socket.gethostname()


@pytest.fixture
def pair() -> Iterator[tuple[Receiver, Receiver]]:
    a, b = Receiver(), Receiver()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def make(tmp_path: Path, token: str, urls: list[str], resend_s: float = 10) -> Daemon:
    text = (
        "nvml: {enabled: false}\n"
        f"training: {{launchers: ['{token}']}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        # settle_s 0: NVML is off, and the settle holds a first page without it too
        # (issue 33); these tests are about the sink: the open goes at the first look.
        "alerts:\n  settle_s: 0\n  sinks:\n"
        f"    - {{type: alertmanager, name: am, urls: {urls!r}, resend_s: {resend_s}}}\n"
    )
    return Daemon(parse_config(text, "t.yaml"), None)


def posts(rx: Receiver) -> list[list[dict[str, Any]]]:
    return rx.bodies("/api/v2/alerts")


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_open_resend_resolve_to_an_ha_pair(
    spawned: Spawned, tmp_path: Path, pair: tuple[Receiver, Receiver]
) -> None:
    a, b = pair
    token = f"amjob_{uuid.uuid4().hex[:10]}"
    script = tmp_path / f"{token}.py"
    script.write_text("import time\ntime.sleep(120)\n")
    proc = spawned.start([sys.executable, str(script)])
    time.sleep(0.3)
    d = make(tmp_path, token, [a.url(""), b.url("/")])
    delivery = DeliveryWorker(d.db, lambda: d.config.alerts, jitter=0.0)
    keeper = AlertmanagerKeeper(d.db, lambda: d.config.alerts)
    t0 = time.time()
    d.tick(t0)
    before = time.time()
    assert delivery.deliver_due(t0).delivered
    for rx in (a, b):
        (alerts,) = posts(rx)
        (alert,) = alerts
        labels = alert["labels"]
        finding = labels.pop("finding")
        assert labels == {
            "alertname": "RogueWatchdogRogueJob",
            "host": HOST,
            "severity": "high",
            "kind": "rogue-job",
            "user": "root",
            "origin_kind": labels["origin_kind"],  # the test runner's own lineage
        }
        assert finding.isdigit()
        assert alert["annotations"]["summary"] == f"rogue-job on {HOST}"
        assert alert["annotations"]["message"].startswith(f"rogue training job PID {proc.pid}")
        assert alert["annotations"]["root_pid"] == str(proc.pid)
        assert ts(alert["startsAt"]) == pytest.approx(t0, abs=1)
        # Firing: ends 4 re-send periods after the post, unless sent again.
        assert before + 40 - 1 <= ts(alert["endsAt"]) <= time.time() + 40 + 1

    # Re-sent every resend_s while firing, to both.
    assert keeper.resend_due(t0 + 1) == {"am": 1}
    assert keeper.resend_due(t0 + 5) == {}
    assert keeper.resend_due(t0 + 11) == {"am": 1}
    resent = posts(a)[-1][0]
    assert resent["labels"]["finding"] == finding
    assert ts(resent["endsAt"]) == pytest.approx(t0 + 11 + 40, abs=0.01)
    assert len(posts(a)) == len(posts(b)) == 3

    # One of the pair down: still delivered (the other has it), re-sent to both later.
    b.set_mode("down")
    assert keeper.resend_due(t0 + 21) == {"am": 1}
    assert len(posts(a)) == 4

    # The job ends: the resolve is spooled, and from then on nothing is re-sent, even
    # before the resolve went out (a late re-send would fire the alert again).
    proc.kill()
    proc.wait()
    d.tick(t0 + 30)
    assert keeper.resend_due(t0 + 40) == {"am": 0}
    b.set_mode("ok")
    assert delivery.deliver_due(t0 + 30).delivered
    resolved = posts(a)[-1][0]
    assert resolved["labels"]["finding"] == finding
    assert ts(resolved["endsAt"]) == pytest.approx(t0 + 30, abs=1)
    assert posts(b)[-1] == [resolved]
    assert keeper.resend_due(t0 + 60) == {"am": 0}
    d.db.close()


def test_both_down_is_a_failed_attempt_naming_each(
    spawned: Spawned, tmp_path: Path, pair: tuple[Receiver, Receiver]
) -> None:
    a, b = pair
    token = f"amjob_{uuid.uuid4().hex[:10]}"
    script = tmp_path / f"{token}.py"
    script.write_text("import time\ntime.sleep(120)\n")
    spawned.start([sys.executable, str(script)])
    time.sleep(0.3)
    d = make(tmp_path, token, [a.url(""), b.url("")])
    a.set_mode("down")
    b.fail_status = 400
    b.set_mode("fail")
    delivery = DeliveryWorker(d.db, lambda: d.config.alerts, jitter=0.0)
    d.tick(1_000.0)
    out = delivery.deliver_due(1_000.0)
    (error,) = out.failed.values()
    assert error.startswith(f"127.0.0.1:{a.port}: ConnectError: ")
    assert f"; 127.0.0.1:{b.port}: HTTP 400" in error
    assert delivery._down_until["am"] > 1_000.0  # a receiver down: the sink waits
    d.db.close()


@pytest.mark.parametrize(
    ("sink", "key", "phrase"),
    [
        ("{type: alertmanager, urls: ['http://u:pw@am:9093']}", "alerts.sinks[0].urls[0]",
         "credentials in an inline URL are refused"),
        ("{type: alertmanager, urls: ['am:9093']}", "alerts.sinks[0].urls[0]",
         "expected http(s)://HOST[:PORT][/PREFIX], got 'am:9093'"),
        ("{type: alertmanager, urls: []}", "alerts.sinks[0].urls", "empty"),
        ("{type: webhook, url_env: X, urls: ['http://am:9093']}", "alerts.sinks[0].urls",
         "only an alertmanager sink takes this key"),
        ("{type: alertmanager, urls: ['http://am:9093'], url_env: X}", "alerts.sinks[0]",
         "give urls, or url_env / url_file, not both"),
        ("{type: alertmanager, urls: ['http://am:9093'], resend_s: 0}",
         "alerts.sinks[0].resend_s", "must be greater than 0"),
    ],
)  # fmt: skip
def test_bad_alertmanager_settings(sink: str, key: str, phrase: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(f"alerts:\n  sinks:\n    - {sink}\n", "c.yaml")
    assert (info.value.line, info.value.key) == (3, key)
    assert phrase in info.value.message
    assert "pw" not in str(info.value)


def test_alertname() -> None:
    assert alertname("rogue-job") == "RogueWatchdogRogueJob"
    assert alertname("poisoned-weights") == "RogueWatchdogPoisonedWeights"


def test_a_command_line_that_is_not_utf8_is_sent_inert(
    spawned: Spawned, tmp_path: Path, pair: tuple[Receiver, Receiver]
) -> None:
    # A byte that is not UTF-8 reaches the finding as a lone surrogate; the sink must send
    # it as the escape \xff, not fail to encode the alert.
    a, _ = pair
    token = f"amjob_{uuid.uuid4().hex[:10]}"
    script = tmp_path / f"{token}.py"
    script.write_text("import time\ntime.sleep(120)\n")
    spawned.start([sys.executable.encode(), str(script).encode(), b"epoch\xff"])
    time.sleep(0.3)
    d = make(tmp_path, token, [a.url("")])
    delivery = DeliveryWorker(d.db, lambda: d.config.alerts, jitter=0.0)
    t0 = time.time()
    d.tick(t0)
    result = delivery.deliver_due(t0)
    assert result.delivered and not result.failed and not result.dead
    ((alert,),) = posts(a)
    assert "epoch\\xff" in alert["annotations"]["message"]

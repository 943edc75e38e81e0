"""Webhook URLs come from the environment or a file and never show up in an error."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from rogue_watchdog.config.alerts import SinkSettings
from rogue_watchdog.daemon.alerts.alert import Outgoing
from rogue_watchdog.daemon.alerts.backoff import Backoff
from rogue_watchdog.daemon.alerts.base import SinkContext
from rogue_watchdog.daemon.alerts.secrets import SecretError, read_url, redact
from rogue_watchdog.daemon.alerts.sinks import SendError, slack
from rogue_watchdog.state import Delivery
from tests.httpreceiver import Receiver

TOKEN = "XyZ-very-secret-token-0042"
SLACK = f"https://hooks.slack.com/services/T0001/B0002/{TOKEN}"


def sink(**kw: str) -> SinkSettings:
    return SinkSettings(type="slack", name="team", **kw)  # type: ignore[arg-type]


def test_url_from_env_and_file(tmp_path: Path) -> None:
    assert read_url(sink(url_env="HOOK"), {"HOOK": f"  {SLACK}\n"}) == SLACK
    f = tmp_path / "hook.url"
    f.write_text(SLACK + "\n")
    assert read_url(sink(url_file=str(f)), {}) == SLACK


@pytest.mark.parametrize(
    ("settings", "env", "message"),
    [
        (sink(url_env="HOOK"), {}, "no URL in environment variable HOOK (unset or empty)"),
        (
            sink(url_env="HOOK"),
            {"HOOK": " "},
            "no URL in environment variable HOOK (unset or empty)",
        ),
        (
            sink(url_env="HOOK"),
            {"HOOK": f"ftp://x/{TOKEN}"},
            "the value of environment variable HOOK is not an http(s) URL",
        ),
        (
            sink(url_file="/nonexistent/hook.url"),
            {},
            "cannot read the URL from file /nonexistent/hook.url: No such file or directory",
        ),
    ],
)
def test_unusable_secret_names_the_place_not_the_value(
    settings: SinkSettings, env: dict[str, str], message: str
) -> None:
    with pytest.raises(SecretError) as info:
        read_url(settings, env)
    assert str(info.value) == message


def test_redact_removes_the_url_and_its_pieces_from_httpx_messages() -> None:
    request = httpx.Request("POST", SLACK)
    with pytest.raises(httpx.HTTPStatusError) as info:
        httpx.Response(500, request=request).raise_for_status()
    text = str(info.value)
    assert TOKEN in text  # httpx does put the URL in its messages
    clean = redact(text, SLACK)
    assert TOKEN not in clean and "hooks.slack.com" not in clean
    assert clean.startswith("Server error '500 Internal Server Error' for url '<redacted>'")
    # A piece on its own, a differently-spelled URL, any other URL.
    assert redact(f"bad token {TOKEN}", SLACK) == "bad token <redacted>"
    assert redact("see https://example.org/x?a=1 now", SLACK) == "see <url> now"
    url = "http://bob:hunter22x@127.0.0.1:9/p?key=abcdef123"
    assert redact("auth hunter22x failed, key=abcdef123, token abcdef123", url) == (
        "auth <redacted> failed, <redacted>, token <redacted>"
    )


def test_webhook_sink_errors_carry_no_url() -> None:
    rx = Receiver()
    url = rx.url(f"/services/{TOKEN}")
    rx.close()  # nothing listens: connection refused
    s = slack(sink(url_env="HOOK"), SinkContext(httpx.Client(), {"HOOK": url}))
    row = Delivery(1, 1, "team", "open", {"event": "open", "finding": {}}, 0.0, 0, 0.0, None, None)
    d = Outgoing.from_delivery(row)
    with pytest.raises(SendError) as info:
        s.send(d)
    assert info.value.reason == "ConnectError: [Errno 111] Connection refused"
    assert info.value.sink_down
    bad = slack(sink(url_env="HOOK"), SinkContext(httpx.Client(), {"HOOK": f"http://[::1/{TOKEN}"}))
    with pytest.raises(SendError) as info:
        bad.send(d)
    assert TOKEN not in info.value.reason


def test_backoff_schedule() -> None:
    b = Backoff(base_s=5, cap_s=600)
    assert [b.delay_s(n) for n in range(1, 10)] == [5, 10, 20, 40, 80, 160, 320, 600, 600]
    assert b.delay_s(10_000) == 600
    jittered = Backoff(base_s=5, cap_s=600, jitter=0.2)
    assert jittered.delay_s(2, rand=0.5) == pytest.approx(9.0)
    assert jittered.delay_s(2, rand=0.0) == 10

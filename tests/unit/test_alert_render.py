"""Alert bodies per sink type: exact shapes, Slack escaping, Discord's 2000 characters,
the stable delivery id, and the log sink's JSON line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.config.alerts import SinkSettings
from rogue_watchdog.daemon.alerts import render
from rogue_watchdog.daemon.alerts.alert import Alert, Outgoing
from rogue_watchdog.daemon.alerts.render import (
    discord_body,
    slack_body,
    webhook_body,
)
from rogue_watchdog.daemon.alerts.sinks import LogSink, SendError
from rogue_watchdog.state import Delivery


def payload(event: str = "open", message: str = "rogue training job PID 42", **f: Any) -> Any:
    finding = {
        "id": 7,
        "kind": "rogue-job",
        "severity": "high",
        "message": message,
        "root_pid": 42,
        "details": {},
        "opened_at": "2024-05-01T10:00:00+00:00",
        "last_seen": "2024-05-01T11:00:00+00:00",
        "seen_count": 13,
        "resolved_at": None,
        **f,
    }
    return {
        "schema_version": 1,
        "event": event,
        "host": "gpu01",
        "time": "2024-05-01T11:00:00+00:00",
        "finding": finding,
    }


def delivery(p: Any, sink: str = "s", row: int = 3, created_at: float = 1714557600.0) -> Outgoing:
    """The alert as the delivery worker hands it to a sink: a spooled row, read back."""
    row_ = Delivery(row, 7, sink, p["event"], p, created_at, 0, created_at, None, None)
    return Outgoing.from_delivery(row_)


def delivery_id(out: Outgoing) -> str:
    return out.delivery_id


def alert_text(p: Any, limit: int) -> str:
    return render.alert_text(Alert.from_json(p), limit)


def test_texts_per_event() -> None:
    tail = "(finding F7, root PID 42)"
    assert alert_text(payload("open"), 2000) == (
        f"[HIGH] rogue-job on gpu01: rogue training job PID 42 {tail}"
    )
    assert alert_text(payload("remind"), 2000) == (
        "[HIGH] still open, seen 13 times since 2024-05-01T10:00:00+00:00: rogue-job on "
        f"gpu01: rogue training job PID 42 {tail}"
    )
    assert alert_text(payload("resolve"), 2000) == (
        "[RESOLVED] rogue-job on gpu01, seen 13 times since 2024-05-01T10:00:00+00:00: "
        f"rogue training job PID 42 {tail}"
    )
    no_pid = payload("open", "queue entry 17 waiting", root_pid=None, kind="queue-rogue")
    assert (
        alert_text(no_pid, 2000)
        == "[HIGH] queue-rogue on gpu01: queue entry 17 waiting (finding F7)"
    )


def test_slack_escapes_control_characters() -> None:
    d = delivery(payload(message="cmd `a && b <!channel> > out`"))
    # In a preformatted block (three backticks) padded by a space because the message
    # ends in a backtick; Slack's three control characters escaped inside it too.
    assert slack_body(d) == {
        "text": "[HIGH] rogue-job on gpu01: ``` cmd `a &amp;&amp; b &lt;!channel&gt; &gt; out` ``` "
        "(finding F7, root PID 42)"
    }


def test_discord_is_at_most_2000_characters_and_mentions_nobody() -> None:
    d = delivery(payload(message="@everyone " + "x" * 5000))
    body = discord_body(d)
    assert list(body) == ["content", "allowed_mentions"]
    assert body["allowed_mentions"] == {"parse": []}
    text = body["content"]
    assert len(text) == 2000
    assert text.startswith("[HIGH] rogue-job on gpu01: ``@everyone xxx")
    assert text.endswith("x…`` (finding F7, root PID 42)")  # the tail is never cut
    short = discord_body(delivery(payload()))["content"]
    assert short == (
        "[HIGH] rogue-job on gpu01: ``rogue training job PID 42`` (finding F7, root PID 42)"
    )


def test_slack_long_message_is_cut_before_escaping() -> None:
    text = slack_body(delivery(payload(message="<" * 10_000)))["text"]
    assert text.endswith("&lt;…``` (finding F7, root PID 42)")
    assert text.count("&lt;") == 3000 - len("[HIGH] rogue-job on gpu01: ``````") - len(
        "… (finding F7, root PID 42)"
    )


# -- chat text a job cannot forge ---------------------------------------------------------

FORGED = "python3 train.py\n[RESOLVED] rogue-job on vm: all clear"


def test_a_newline_in_a_command_line_cannot_forge_a_resolved_line() -> None:
    p = payload(message=f"rogue training job PID 42, user eve, `{FORGED}`, from a shell")
    slack = slack_body(delivery(p))["text"]
    discord = discord_body(delivery(p))["content"]
    forged = "python3 train.py⏎[RESOLVED] rogue-job on vm: all clear"
    assert slack == (
        "[HIGH] rogue-job on gpu01: ```rogue training job PID 42, user eve, "
        f"`{forged}`, from a shell``` (finding F7, root PID 42)"
    )
    assert discord == (
        "[HIGH] rogue-job on gpu01: ``rogue training job PID 42, user eve, "
        f"`{forged}`, from a shell`` (finding F7, root PID 42)"
    )
    assert "\n" not in slack and "\n" not in discord


def test_esc_bel_cr_are_escaped_in_chat_and_in_the_log_line(tmp_path: Path) -> None:
    p = payload(message="job `x \x1b[2J\x07 y\rz\x9b1m \u202eevil`")
    want = "job `x \\x1b[2J\\x07 y\\rz\\x9b1m \\u202eevil`"
    assert discord_body(delivery(p))["content"] == (
        f"[HIGH] rogue-job on gpu01: `` {want} `` (finding F7, root PID 42)"
    )
    assert slack_body(delivery(p))["text"] == (
        f"[HIGH] rogue-job on gpu01: ``` {want} ``` (finding F7, root PID 42)"
    )
    path = tmp_path / "a.log"
    LogSink(SinkSettings(type="log", name="log", path=str(path))).send(delivery(p))
    assert json.loads(path.read_text())["message"] == want


def test_a_backtick_cannot_close_the_code_span_around_a_discord_masked_link() -> None:
    # The job's command line closes the intended `…` and opens a masked link.
    cmd = "train.py `` [docs](https://evil.example/x) ``` ```` x"
    p = payload(message=f"rogue training job PID 42, user eve, `{cmd}`, from a shell")
    content = discord_body(delivery(p))["content"]
    zw = "\u200b"
    inner = (
        "rogue training job PID 42, user eve, `train.py "
        f"`{zw}` [docs](https://evil.example/x) `{zw}`{zw}` `{zw}`{zw}`{zw}` x`, from a shell"
    )
    assert content == f"[HIGH] rogue-job on gpu01: ``{inner}`` (finding F7, root PID 42)"
    # No run of two or more backticks inside: only the fence (two) can close the span,
    # so the link stays inside it, as text.
    body = content.split(": ``", 1)[1].rsplit("`` (finding", 1)[0]
    assert "``" not in body and "[docs](https://evil.example/x)" in body
    slack = slack_body(delivery(p))["text"]
    assert "``" not in slack.split("```", 1)[1].rsplit("```", 1)[0]


def test_generic_webhook_is_the_payload_with_a_stable_delivery_id() -> None:
    p = payload()
    d = delivery(p)
    body = webhook_body(d)
    assert body == {"delivery_id": delivery_id(d), **p}
    assert next(iter(body)) == "delivery_id"
    assert len(delivery_id(d)) == 32 and int(delivery_id(d), 16) >= 0
    # Same row → same id (retries, restarts); another row, sink or db → another id.
    assert delivery_id(delivery(p)) == delivery_id(d)
    others = {
        delivery_id(delivery(p, row=4)),
        delivery_id(delivery(p, sink="t")),
        delivery_id(delivery(p, created_at=1714557601.0)),
    }
    assert delivery_id(d) not in others and len(others) == 3


def test_log_sink_writes_one_json_line_with_stable_keys(tmp_path: Path) -> None:
    path = tmp_path / "alerts.log"
    sink = LogSink(SinkSettings(type="log", name="log", path=str(path)))
    d = delivery(payload("remind"))
    sink.send(d)
    sink.send(delivery(payload("resolve", resolved_at="2024-05-01T12:00:00+00:00"), row=4))
    first, second = (json.loads(x) for x in path.read_text().splitlines())
    stamp = first.pop("timestamp")
    assert stamp.endswith("Z") and stamp.startswith("20")
    assert first == {
        "action": "remind",
        "kind": "rogue-job",
        "severity": "high",
        "message": "rogue training job PID 42",
        "root_pid": 42,
        "finding_id": 7,
        "host": "gpu01",
        "seen_count": 13,
        "opened_at": "2024-05-01T10:00:00+00:00",
        "resolved_at": None,
        "delivery_id": delivery_id(d),
        "event": "finding",
        "level": "warning",  # follows the severity: high
    }
    assert (second["action"], second["level"]) == ("resolve", "info")
    assert second["resolved_at"] == "2024-05-01T12:00:00+00:00"


def test_log_sink_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    LogSink(SinkSettings(type="log", name="log")).send(delivery(payload()))
    line = json.loads(capsys.readouterr().out)
    assert (line["event"], line["action"], line["finding_id"]) == ("finding", "open", 7)


def test_log_sink_unwritable_file_is_a_send_error(tmp_path: Path) -> None:
    sink = LogSink(SinkSettings(type="log", name="log", path=str(tmp_path / "no" / "x.log")))
    with pytest.raises(SendError) as info:
        sink.send(delivery(payload()))
    assert info.value.reason == f"cannot write to {tmp_path}/no/x.log: No such file or directory"


def test_host_text_rule_one_function_for_every_sink_and_the_store() -> None:
    from rogue_watchdog.hosttext import safe_json, safe_text

    hostile = "grp\udcff\n[RESOLVED]\x1b[31m\x07\r\t\u202eevil\u2028é"
    want = "grp\\xff⏎[RESOLVED]\\x1b[31m\\x07\\r\\t\\u202eevil\\u2028é"
    assert safe_text(hostile) == want
    assert safe_json({"k\udcfe": [hostile, 1, None, True]}) == {"k\\xfe": [want, 1, None, True]}
    text = "plain ascii"
    assert safe_text(text) is text
    body = json.dumps(safe_json({"x": hostile}), ensure_ascii=False).encode("utf-8")
    assert body.decode("utf-8") == '{"x": "' + want.replace("\\", "\\\\") + '"}'


def test_a_cut_message_never_ends_in_half_an_identifier() -> None:
    """A message cut to the sink's limit stops at a space: a GPU UUID in it is whole or
    absent. Before: ``... GPU-00000000-0000-00…``."""
    uuid = "GPU-00000000-0000-0000-0000-000000000000"
    message = "rogue training job PID 42 on " + uuid + " " + "y" * 3000
    head = "[HIGH] rogue-job on gpu01: "
    tail = " (finding F7, root PID 42)"
    cut_in_uuid = len(head) + len(tail) + len("rogue training job PID 42 on GPU-0000") + 1
    assert alert_text(payload(message=message), cut_in_uuid) == (
        f"{head}rogue training job PID 42 on …{tail}"
    )
    # A unit name near Discord's 2000 characters: whole, or left out.
    unit = "u" * 200 + ".service"
    long = "rogue training job PID 42 from systemd unit " + "z " * 870 + unit + " tail"
    d = discord_body(delivery(payload(message=long)))["content"]
    assert (len(d), unit[:5] in d) == (1842, False)  # cut before the unit, not in it
    assert d.endswith(" z z …`` (finding F7, root PID 42)")
    # A word longer than any identifier (a blob a job printed) is cut at the limit.
    d = discord_body(delivery(payload(message=message)))["content"]
    assert len(d) == 2000 and uuid in d

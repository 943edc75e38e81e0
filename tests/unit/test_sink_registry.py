"""A sink kind is one factory plus a line in each of two typed lists (docs/architecture.md,
"Adding a sink"): a throwaway kind defined here, handed in through the same lists the
package's own kinds are in (``config.sinks.SINK_KINDS``, ``delivery.SINK_FACTORIES``),
gets the daemon's alerts
through the real path (tracker → spool → delivery worker), no other module edited. The
typed alert record reads back exactly the document the tracker spooled."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from rogue_watchdog.config import ConfigError, parse_config, sinks
from rogue_watchdog.config.alerts import SinkSettings
from rogue_watchdog.config.sinks import SINK_KINDS, SinkKind, sink_kind, sink_names
from rogue_watchdog.daemon.alerts import delivery
from rogue_watchdog.daemon.alerts.alert import Alert, Outgoing
from rogue_watchdog.daemon.alerts.base import Sink, SinkContext
from rogue_watchdog.daemon.alerts.delivery import SINK_FACTORIES, make_sink
from tests.conftest import Spawned
from tests.unit.test_alert_delivery import Job, make, rows, worker


class Throwaway:
    """A sink that keeps what it is given (defined here, in no module of the package)."""

    got: ClassVar[list[Outgoing]] = []

    def __init__(self, settings: SinkSettings, context: SinkContext) -> None:
        self.settings = settings

    def send(self, out: Outgoing) -> None:
        type(self).got.append(out)


@pytest.fixture
def throwaway(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Throwaway]]:
    Throwaway.got = []
    # The two lines a new kind adds, handed in in place of the package's own lists.
    monkeypatch.setattr(sinks, "SINK_KINDS", (*SINK_KINDS, SinkKind("throwaway", receiver="none")))
    monkeypatch.setattr(delivery, "SINK_FACTORIES", {**SINK_FACTORIES, "throwaway": Throwaway})
    yield Throwaway


def test_every_built_in_kind_is_listed_once_and_builds_a_sink() -> None:
    assert sink_names() == ("log", "slack", "discord", "webhook", "alertmanager")
    assert list(SINK_FACTORIES) == list(sink_names())
    for kind in SINK_KINDS:
        settings = SinkSettings(type=kind.name, name=kind.name, urls=("http://127.0.0.1:9",))
        sink = make_sink(settings, client=None)  # type: ignore[arg-type]  # none posts here
        assert isinstance(sink, Sink) and sink.settings is settings
    assert sink_kind("slack") == SinkKind("slack", min_interval_s=1.0)


def test_the_configuration_knows_a_listed_kind_and_its_rules(
    tmp_path: Path, throwaway: type[Throwaway], monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = parse_config("alerts:\n  sinks:\n    - {type: throwaway, name: tw}\n")
    (sink,) = cfg.alerts.sinks
    assert (sink.type, sink.name, sink.interval_s) == ("throwaway", "tw", 0.0)
    with pytest.raises(ConfigError, match="only an alertmanager sink takes this key"):
        parse_config("alerts:\n  sinks:\n    - {type: throwaway, urls: ['http://a:1']}\n")
    with pytest.raises(ConfigError, match="a throwaway sink takes path, not url_env"):
        parse_config("alerts:\n  sinks:\n    - {type: throwaway, url_env: X}\n")
    monkeypatch.setattr(sinks, "SINK_KINDS", SINK_KINDS)
    with pytest.raises(ConfigError, match="unknown sink type 'throwaway'"):
        parse_config("alerts:\n  sinks:\n    - {type: throwaway}\n")


def test_the_daemon_delivers_to_a_throwaway_sink(
    spawned: Spawned, tmp_path: Path, throwaway: type[Throwaway]
) -> None:
    job = Job(spawned, tmp_path, procs=2)
    pid = job.start()
    d = make(tmp_path, job.token, "    - {type: throwaway, name: tw}\n")
    w = worker(d, {})
    t0 = 1_000_000.0

    d.tick(t0)
    (finding,) = d.db.open_findings()
    res = w.deliver_due(t0)
    (row,) = rows(d, "tw")
    assert res.delivered == [row.id]
    (got,) = throwaway.got
    assert (got.sink, got.row, got.created_at) == ("tw", row.id, row.created_at)
    assert got.alert.event == "open" and got.alert.host == d.scanner.host
    f = got.alert.finding
    assert (f.id, f.kind, f.severity, f.root_pid) == (finding.id, "rogue-job", "high", pid)
    assert f.message == finding.message and f.instances == 1 and f.change is None

    job.kill()
    d.tick(t0 + 1)
    assert w.deliver_due(t0 + 1).delivered == [rows(d, "tw")[1].id]
    assert [o.alert.event for o in throwaway.got] == ["open", "resolve"]
    assert throwaway.got[1].alert.finding.resolved_at is not None
    # A delivered row is never sent again.
    assert w.deliver_due(t0 + 3600).delivered == [] and len(throwaway.got) == 2
    w.stop()


def test_the_record_reads_back_the_spooled_document_exactly(
    spawned: Spawned, tmp_path: Path, throwaway: type[Throwaway]
) -> None:
    job = Job(spawned, tmp_path)
    job.start()
    d = make(tmp_path, job.token, "    - {type: throwaway, name: tw}\n")
    d.tick(1_000_000.0)
    (row,) = rows(d, "tw")
    (stored,) = d.db.conn.execute("SELECT payload_json FROM deliveries").fetchone()
    doc = json.loads(stored)
    # `config`: the configuration that spooled it (issue 33: a shared state directory).
    assert list(doc) == ["schema_version", "event", "host", "time", "config", "finding"]
    assert doc["config"] == str(tmp_path / "config.yaml")
    assert list(doc["finding"]) == [
        "id", "kind", "severity", "message", "root_pid", "details", "opened_at",
        "last_seen", "seen_count", "resolved_at", "instances",
    ]  # fmt: skip
    assert Alert.from_json(doc).to_json() == doc == row.payload
    # Built from the record, read back from its JSON: the same alert.
    (rec,) = d.db.open_findings()
    built = Alert.from_record("open", rec, d.scanner.host, 1_000_000.0)
    assert Alert.from_json(built.to_json()) == built
    job.kill()
    # A row spooled by an earlier version (no instances, an extra key) goes out as it was.
    old = {"event": "open", "host": "h", "finding": {"id": 1, "kind": "k", "x": [1]}}
    alert = Alert.from_json(old)
    assert alert.to_json() == old and alert.finding.instances is None
    assert (alert.finding.severity, alert.finding.seen_count) == (None, None)


def test_the_recipe_names_the_lists_the_fixture_hands_in() -> None:
    # docs/architecture.md, "Adding a sink": the files and lists it names are the ones
    # this module's fixture extends.
    text = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    recipe = text.split("### Adding a sink", 1)[1].split("\n## ", 1)[0]
    for named in (
        "watchdog/daemon/alerts/teams.py", "watchdog/config/sinks.py", "`SINK_KINDS`",
        "watchdog/daemon/alerts/delivery.py", "`SINK_FACTORIES`",
    ):  # fmt: skip
        assert named in recipe, named
    assert sinks.SINK_KINDS is SINK_KINDS and delivery.SINK_FACTORIES is SINK_FACTORIES

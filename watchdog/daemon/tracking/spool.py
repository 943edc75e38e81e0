"""The alert spool's documents: one record per alert event, the same document for every
sink whose severity floor and kind filter accept the finding (docs/alerts.md,
"Payloads")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...config.alerts import SinkSettings
from ...model import SEVERITIES
from ...state import FindingRecord
from ..alerts.alert import Alert, AlertEvent


def sink_accepts(sink: SinkSettings, finding: FindingRecord) -> bool:
    """True when ``sink``'s severity floor and kind filter let ``finding`` through."""
    if SEVERITIES.index(finding.severity) < SEVERITIES.index(sink.min_severity):
        return False
    return not sink.kinds or finding.kind in sink.kinds


def deliveries(
    event: AlertEvent,
    finding: FindingRecord,
    host: str,
    now: float,
    sinks: Iterable[SinkSettings],
    change: dict[str, Any] | None = None,
    config: str | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """``(sink name, payload)`` of each delivery one alert event spools (``config``: the
    spooling daemon's configuration file, :attr:`Alert.config`)."""
    payload = Alert.from_record(event, finding, host, now, change, config).to_json()
    return [(sink.name, payload) for sink in sinks if sink_accepts(sink, finding)]

"""SIGHUP applies every configuration section, or says which key waits for a restart.

Each case writes a base file, starts a daemon with its real parts (``attach_parts``:
queue sources, enforcers, ship gates), rewrites one section and reloads, then looks at
the part that section drives. Before: a reload logged `config-reloaded` and status
showed the new checksum while `ship_gates` stayed as they were until a restart.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.config import config_checksum, load_config
from rogue_watchdog.daemon.assemble import attach_parts
from rogue_watchdog.daemon.loop import RESTART_ONLY, Daemon
from rogue_watchdog.daemon.status import build_status, render_status
from rogue_watchdog.weights.shipwatch import ShipGateSource

T0 = 3_000_000.0


def base(tmp: Path) -> str:
    return (
        "nvml: {enabled: false}\n"
        f"paths: {{cron_d: '{tmp}/cron.d'}}\n"
        f"daemon: {{state_dir: '{tmp}/state', socket: '{tmp}/s.sock', events: 'off'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{tmp}/alerts.log'}}]}}\n"
    )


def start(tmp: Path, text: str) -> tuple[Daemon, Path]:
    path = tmp / "config.yaml"
    path.write_text(text)
    d = Daemon(load_config(str(path)), str(path))
    attach_parts(d)
    return d, path


def gates(d: Daemon) -> list[str]:
    return [s.gate.name for s in d.sources if isinstance(s, ShipGateSource)]


# (section, text added to the base file, what the daemon's part shows, expected value)
APPLIED: list[tuple[str, str, Callable[[Daemon], Any], Any]] = [
    ("sanctioned",
     "sanctioned: [{name: r1, cmdline: '*/train.py', origin: {any: true}, user: root}]\n",
     lambda d: [r.name for r in d.scanner.config.sanctioned], ["r1"]),
    ("training", "training: {launchers: ['xyz_launcher']}\n",
     lambda d: [r.pattern for r in d.scanner.config.training.launchers], ["xyz_launcher"]),
    ("ignore", "ignore: [{name: tool, exe: /usr/bin/tool}]\n",
     lambda d: [e.name for e in d.scanner.config.ignore][-1:], ["tool"]),
    ("ignore_defaults", "ignore_defaults: false\n",
     lambda d: [e.name for e in d.scanner.config.ignore], []),
    ("workloads", "workloads: {severity: high}\n",
     lambda d: d.scanner.config.workloads.severity_of("serving"), "high"),
    ("nvml", "nvml: {enabled: false, unexplained_memory_slack_bytes: 12345}\n",
     lambda d: d.scanner.config.nvml.unexplained_memory_slack_bytes, 12345),
    ("paths", "paths: {cron_d: /srv/other-cron.d}\n",
     lambda d: d.scanner.config.paths.cron_d, "/srv/other-cron.d"),
    ("daemon.interval_s", "daemon: {interval_s: 7.5}\n",
     lambda d: d.config.daemon.interval_s, 7.5),
    ("daemon.retention_jobs_s", "daemon: {retention_jobs_s: 3600}\n",
     lambda d: d.config.daemon.retention_jobs_s, 3600.0),
    ("daemon.fd_sweep_interval_s", "daemon: {fd_sweep_interval_s: 11}\n",
     lambda d: d.scanner.config.daemon.fd_sweep_interval_s, 11.0),
    ("alerts", "alerts: {reminder_after_s: 99}\n",
     lambda d: d.tracker.alerts.reminder_after_s, 99.0),
    # The daemon sees the whole host: terminate mode as a dry run (decided and recorded,
    # nothing signalled), or it would stop every rogue-looking process there.
    ("enforcement", "enforcement: {mode: terminate, dry_run: true}\n",
     lambda d: d.enforcers[0].settings.mode, "terminate"),  # type: ignore[attr-defined]
    ("queue", "queue: {slurm: false, command: [/bin/true]}\n",
     lambda d: [type(s).__name__ for s in d.sources if s.name.startswith("queue")],
     ["QueueSource"]),
    ("services", "services: {sanctioned_ports: [{name: tb, port: 6006}]}\n",
     lambda d: [p.name for p in d.scanner.config.services.sanctioned_ports], ["tb"]),
    # A node no Slurm knows: a host's rogue job never drains a real node.
    ("slurm", "slurm: {drain_on: [rogue], node_name: rwtest-no-such-node}\n",
     lambda d: [type(e).__name__ for e in d.enforcers][-1:], ["SlurmDrainer"]),
]  # fmt: skip


def merged(tmp: Path, extra: str) -> str:
    """The base file with one section replaced or added (``daemon``/``nvml``/``paths``
    entries are merged into the base's mapping)."""
    import yaml

    doc = yaml.safe_load(base(tmp))
    for key, value in yaml.safe_load(extra).items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return yaml.safe_dump(doc)


@pytest.mark.parametrize(("section", "extra", "look", "want"), APPLIED, ids=[a[0] for a in APPLIED])
def test_a_reload_applies_the_section(
    tmp_path: Path, section: str, extra: str, look: Callable[[Daemon], Any], want: Any
) -> None:
    d, path = start(tmp_path, base(tmp_path))
    try:
        d.tick(T0)
        assert look(d) != want
        path.write_text(merged(tmp_path, extra))
        assert d.reload() is True
        assert look(d) == want
        d.tick(T0 + 5)
        assert d.needs_restart == {}
        assert [f for f in d.db.open_findings() if f.kind == "needs-restart"] == []
        assert build_status(d)["config"]["checksum"] == config_checksum(str(path))
    finally:
        d.db.close()


def test_ship_gates_added_by_a_reload_watch_from_the_next_tick(tmp_path: Path) -> None:
    d, path = start(tmp_path, base(tmp_path))
    try:
        d.tick(T0)
        assert gates(d) == []
        missing = tmp_path / "deploy"  # absent: the gate says so at once
        path.write_text(base(tmp_path) + f"ship_gates: [{{name: prod, deploy_dir: '{missing}'}}]\n")
        assert d.reload() is True
        assert gates(d) == ["prod"]  # before: [] until a restart
        d.tick(T0 + 5)
        [f] = [f for f in d.db.open_findings() if f.kind == "ship-gate-degraded"]
        assert str(missing) in f.message
        kept = next(s for s in d.sources if isinstance(s, ShipGateSource))
        # An unchanged gate keeps its source (what it verified) across another reload.
        path.write_text(path.read_text() + "training: {launchers: ['xyz']}\n")
        d.reload()
        assert next(s for s in d.sources if isinstance(s, ShipGateSource)) is kept
        path.write_text(base(tmp_path))
        d.reload()
        assert gates(d) == []
    finally:
        d.db.close()


# Restart-only keys: the value written, and how to read what is in force.
RESTART: list[tuple[str, str]] = [
    ("daemon.state_dir", "daemon: {state_dir: /srv/other-state}\n"),
    ("daemon.socket", "daemon: {socket: /srv/other.sock}\n"),
    ("daemon.socket_group", "daemon: {socket_group: root}\n"),
    ("daemon.metrics_listen", "daemon: {metrics_listen: '127.0.0.1:9911'}\n"),
    ("daemon.events", "daemon: {events: auto}\n"),
    ("daemon.events_rcvbuf_bytes", "daemon: {events_rcvbuf_bytes: 1048576}\n"),
    ("paths.proc_root", "paths: {proc_root: /srv/proc}\n"),
    ("nvml.library", "nvml: {library: /srv/lib/libnvidia-ml.so.1}\n"),
]


def test_every_restart_only_key_is_tested() -> None:
    assert [k for k, _ in RESTART_ONLY] == [k for k, _ in RESTART]


@pytest.mark.parametrize(("key", "extra"), RESTART, ids=[k for k, _ in RESTART])
def test_a_restart_only_key_keeps_its_value_and_says_so(
    tmp_path: Path, key: str, extra: str
) -> None:
    d, path = start(tmp_path, base(tmp_path))
    get = dict(RESTART_ONLY)[key]
    try:
        running = get(d.config)
        d.tick(T0)
        path.write_text(merged(tmp_path, extra + "training: {launchers: ['xyz']}\n"))
        assert d.reload() is True
        wanted = get(load_config(str(path)))
        assert get(d.config) == running  # still in use
        # The rest applies.
        assert [r.pattern for r in d.scanner.config.training.launchers] == ["xyz"]
        d.tick(T0 + 5)
        [f] = [f for f in d.db.open_findings() if f.kind == "needs-restart"]
        assert (f.severity, f.details["keys"]) == ("warning", [key])
        assert f.message == (
            f"the configuration was reloaded, but {key} take(s) effect only at a restart "
            f"({key}: {running!r} in use, {wanted!r} in the file); restart the daemon "
            f"(stop it and start ``rogue-watchdog run --config {path}`` again)"
        )
        doc = build_status(d)
        assert doc["config"]["needs_restart"] == [key]
        assert f"(in force but for {key}: those wait for a restart)" in render_status(doc)
        # The file's value put back: nothing waits, the finding resolves.
        path.write_text(base(tmp_path))
        d.reload()
        d.tick(T0 + 10)
        assert [f for f in d.db.open_findings() if f.kind == "needs-restart"] == []
        assert build_status(d)["config"]["needs_restart"] == []
    finally:
        d.db.close()

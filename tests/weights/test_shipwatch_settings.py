"""The ``ship_gates:`` configuration section."""

from __future__ import annotations

import pytest

from rogue_watchdog.config import ConfigError, parse_config
from rogue_watchdog.config.ship_gates import DEFAULT_PATTERNS, ShipGate


def test_defaults_and_every_key() -> None:
    cfg = parse_config(
        "ship_gates:\n"
        "  - name: prod\n"
        "    deploy_dir: /srv/models/prod/\n"
        "  - name: canary\n"
        "    deploy_dir: /srv/models/canary\n"
        "    train_dir: /data/runs/canary\n"
        "    stale_after_s: 7200\n"
        "    quarantine: true\n"
        "    quarantine_dir: /srv/models/.quarantine\n"
        "    patterns: ['*.safetensors', 'shards/*.bin']\n"
        "    settle_s: 30\n",
        "c.yaml",
    )
    prod, canary = cfg.ship_gates
    assert prod == ShipGate(name="prod", deploy_dir="/srv/models/prod")
    assert prod.quarantine_path == "/srv/models/prod/.rogue-watchdog-quarantine"
    # settle_s: 10 s on the wall clock (issue 32, case 10b; it was 0: any two polls)
    assert (prod.stale_after_s, prod.quarantine, prod.settle_s) == (86400.0, False, 10.0)
    assert "*.safetensors" in DEFAULT_PATTERNS and "*.onnx" in DEFAULT_PATTERNS
    assert "*.index.json" in DEFAULT_PATTERNS
    assert canary == ShipGate(
        name="canary",
        deploy_dir="/srv/models/canary",
        train_dir="/data/runs/canary",
        stale_after_s=7200.0,
        quarantine=True,
        quarantine_dir="/srv/models/.quarantine",
        patterns=("*.safetensors", "shards/*.bin"),
        settle_s=30.0,
    )
    assert canary.quarantine_path == "/srv/models/.quarantine"
    assert (prod.enforce, prod.open_timeout_s) == ("off", 5.0)


@pytest.mark.parametrize(
    ("written", "mode"), [("open", "open"), ("audit", "audit"), ("off", "off")]
)
def test_enforce_at_open(written: str, mode: str) -> None:
    timeout = "    open_timeout_s: 2.5\n" if mode != "off" else ""
    cfg = parse_config(
        f"ship_gates:\n  - name: p\n    deploy_dir: /m\n    enforce: {written}\n{timeout}",
        "c.yaml",
    )
    assert cfg.ship_gates[0].enforce == mode
    assert cfg.ship_gates[0].open_timeout_s == (2.5 if mode != "off" else 5.0)


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("  - name: a\n", "c.yaml:2: ship_gates[0].deploy_dir: required key missing"),
        (
            "  - name: a\n    deploy_dir: models\n",
            "c.yaml:3: ship_gates[0].deploy_dir: must be an absolute path, got 'models'",
        ),
        (
            "  - name: a\n    deploy_dir: /m\n    stale_after_s: 60\n",
            "c.yaml:4: ship_gates[0].stale_after_s: needs train_dir beside it",
        ),
        (
            "  - name: a\n    deploy_dir: /m\n    quarantine_dir: /q\n",
            "c.yaml:4: ship_gates[0].quarantine_dir: has no effect without 'quarantine: true'",
        ),
        (
            "  - name: a\n    deploy_dir: /m\n    quarantine: true\n    quarantine_dir: /m/\n",
            "c.yaml:5: ship_gates[0].quarantine_dir: must not be deploy_dir",
        ),
        (
            "  - name: a\n    deploy_dir: /m\n  - name: a\n    deploy_dir: /n\n",
            "c.yaml:4: ship_gates[1].name: duplicate gate name 'a'",
        ),
        (
            "  - name: a\n    deploy_dir: /m\n    settle_s: -1\n",
            "c.yaml:4: ship_gates[0].settle_s: must be >= 0, got -1",
        ),
        (
            "  - name: a\n    deploy_dir: /m\n    patterns: []\n",
            "c.yaml:4: ship_gates[0].patterns: must name at least one glob",
        ),
        (
            "  - name: a\n    deploy_dir: /m\n    quarantine: yes please\n",
            "c.yaml:4: ship_gates[0].quarantine: expected true or false, got a string",
        ),
        (
            "  - name: a\n    deploy_dir: /m\n    enforce: always\n",
            "c.yaml:4: ship_gates[0].enforce: must be off, open or audit, got 'always'",
        ),
        (
            "  - name: a\n    deploy_dir: /m\n    open_timeout_s: 3\n",
            "c.yaml:4: ship_gates[0].open_timeout_s: has no effect without 'enforce: open'",
        ),
        (
            "  - name: a\n    deploy_dir: /m\n    enforce: open\n    open_timeout_s: 0\n",
            "c.yaml:5: ship_gates[0].open_timeout_s: must be greater than 0",
        ),
        (
            "  - name: a\n    deploy_dir: /m\n    verify: true\n",
            "c.yaml:4: ship_gates[0].verify: unknown key 'verify'",
        ),
    ],
)
def test_errors_name_file_line_and_key(body: str, where: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config("ship_gates:\n" + body, "c.yaml")
    assert str(exc.value).startswith(where)

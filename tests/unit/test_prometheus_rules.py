"""The shipped Prometheus rules: ``promtool test rules`` passes, and every metric a rule
reads is one the daemon really exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.metrics import MetricsWorker
from tests.conftest import REPO, need_program

RULES_DIR = REPO / "deploy" / "prometheus"
RULES = RULES_DIR / "rogue-watchdog.rules.yml"
ALERTS = {
    "RogueTrainingJob",
    "ExcessTrainingJob",
    "RogueJobRespawned",
    "PoisonedWeights",
    "DeployStale",
    "RogueWatchdogNotTicking",
    "RogueWatchdogAlertsStuck",
    "RogueWatchdogNvmlDown",
}


def rules() -> list[dict[str, object]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def test_promtool_check_and_test_rules() -> None:
    need_program("promtool")
    check = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 8 rules found" in check.stdout
    test = subprocess.run(
        ["promtool", "test", "rules", "rogue-watchdog.test.yml"],
        cwd=RULES_DIR, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert test.returncode == 0, test.stdout + test.stderr
    assert "SUCCESS" in test.stdout


def test_promtool_fails_a_broken_rule(tmp_path: Path) -> None:
    """The unit tests bite: the rogue rule reading the wrong verdict fails them."""
    need_program("promtool")
    shutil.copy(RULES_DIR / "rogue-watchdog.test.yml", tmp_path)
    text = RULES.read_text().replace('verdict="rogue"', 'verdict="sanctioned"')
    (tmp_path / RULES.name).write_text(text)
    test = subprocess.run(
        ["promtool", "test", "rules", "rogue-watchdog.test.yml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert test.returncode == 1
    assert "alertname: RogueTrainingJob" in test.stdout + test.stderr


def test_every_alert_is_shipped_with_a_severity() -> None:
    got = {str(r["alert"]): r for r in rules()}
    assert set(got) == ALERTS
    for rule in got.values():
        labels = rule["labels"]
        assert isinstance(labels, dict)
        assert labels["severity"] in ("warning", "high", "critical")


def exported_names(tmp_path: Path) -> set[str]:
    """Every metric name the daemon's /metrics can carry (families and samples)."""
    config = parse_config(
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n", "t.yaml"
    )
    daemon = Daemon(config, None)
    worker = MetricsWorker(daemon, "127.0.0.1:0")  # never started: the registry suffices
    daemon.tick(1_000_000.0)
    names: set[str] = set()
    for family in worker.registry.collect():
        names.add(family.name + ("_total" if family.type == "counter" else ""))
        names.update(s.name for s in family.samples)
    daemon.db.close()
    return names


def test_rules_read_only_metrics_the_daemon_exports(tmp_path: Path) -> None:
    exported = exported_names(tmp_path)
    used = set()
    for rule in rules():
        used.update(re.findall(r"\b(rogue_watchdog_\w+)", str(rule["expr"])))
    assert used, "no rogue_watchdog_ metric in the rules"
    assert used <= exported, sorted(used - exported)
    doc = (REPO / "docs/metrics.md").read_text()
    documented = set(re.findall(r"^\| `(rogue_watchdog_\w+)`", doc, re.M))
    assert used <= documented, sorted(used - documented)

"""Every configuration example the documentation gives is valid for what it configures.

A user copies what docs/ shows. ``daemon.events: off`` once read as a YAML boolean and
``check-config`` refused it: a test that runs each example through the real checker catches
that class, not only that one line.

What is checked:

- every fenced ```` ```yaml ```` block in docs/*.md and README.md. Without a marker it is a
  rogue-watchdog configuration (a partial one: every section has defaults) and
  ``rogue-watchdog check-config`` must answer OK. A marker comment on the line before the
  fence names another program: ``<!-- doc-check: prometheus -->`` (``promtool check
  config --syntax-only``: the rule file it names lives on the Prometheus server) or
  ``<!-- doc-check: alertmanager-route -->`` (``amtool check-config`` over the route merged
  into a configuration that defines the receivers it names).
- every inline code span of the form ``section.key: value`` whose first part is a
  top-level configuration key, turned into the nested YAML it stands for. The few the
  docs give as examples of an error are listed in :data:`DOCUMENTED_ERRORS` with the
  exact error they produce.

A rogue-watchdog example is checked as it would be deployed: in a configuration directory
(the docs' ``/etc/rogue-watchdog/`` becomes the test's directory), with the ``url_file``
files it names present (mode 0600) and its ``url_env`` variables set in ``secrets.env``
beside it, the way docs/alerts.md tells users to provide them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rogue_watchdog.config import TOP_LEVEL_KEYS
from tests.conftest import REPO, need_program, run_cli

DOCS = (*sorted((REPO / "docs").glob("*.md")), REPO / "README.md")
KINDS = ("rogue-watchdog", "prometheus", "alertmanager-route")
_FENCE = re.compile(r"^(?P<indent>\s*)```yaml(?:\s.*)?$")
_MARKER = re.compile(r"<!-- doc-check: (?P<kind>[a-z-]+) -->")
_INLINE = re.compile(r"`(?P<key>[a-z_]+(?:\.[a-z_]+)+): (?P<value>[^`]+)`")

#: Inline spans the docs show as what ``check-config`` refuses, with its exact message.
DOCUMENTED_ERRORS = {
    "daemon.interval_s: 86400000": "daemon.interval_s: must be at most 3600 s, got 86400000",
}


@dataclass(frozen=True)
class Snippet:
    """One example: where it is (``docs/x.md:LINE``, the first line of its text), what it
    configures (one of :data:`KINDS`) and its YAML text."""

    where: str
    kind: str
    text: str


def fenced_snippets() -> list[Snippet]:
    """Every ```` ```yaml ```` block of :data:`DOCS`, its fence's indentation removed."""
    out = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = _FENCE.match(lines[i])
            if m is None:
                i += 1
                continue
            indent = len(m.group("indent"))
            marker = _MARKER.fullmatch(lines[i - 1].strip()) if i else None
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            body = "".join(line[indent:] + "\n" for line in lines[i + 1 : end])
            kind = marker.group("kind") if marker else "rogue-watchdog"
            out.append(Snippet(f"{path.relative_to(REPO)}:{i + 2}", kind, body))
            i = end + 1
    return out


def inline_snippets() -> list[Snippet]:
    """Every inline ``section.key: value`` span whose section is a configuration key."""
    out = []
    for path in DOCS:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in _INLINE.finditer(line):
                parts = m.group("key").split(".")
                if parts[0] not in TOP_LEVEL_KEYS:
                    continue  # a JSON field (details.exited) or a metric label
                text = "".join(f"{'  ' * d}{p}:\n" for d, p in enumerate(parts[:-1]))
                text += f"{'  ' * (len(parts) - 1)}{parts[-1]}: {m.group('value')}\n"
                out.append(Snippet(f"{path.relative_to(REPO)}:{n}", m.group(0)[1:-1], text))
    return out


FENCED = fenced_snippets()
INLINE = inline_snippets()


def test_the_scan_finds_the_examples() -> None:
    # Not vacuous: the docs hold a dozen configuration examples, the inline one that
    # started this among them, and the markers name known checkers only.
    assert len([s for s in FENCED if s.kind == "rogue-watchdog"]) >= 11
    assert {s.kind for s in FENCED} == set(KINDS)
    assert "daemon.events: off" in {s.kind for s in INLINE}
    assert set(DOCUMENTED_ERRORS) <= {s.kind for s in INLINE}


def _deploy(snippet: Snippet, config_dir: Path) -> Path:
    """Write ``snippet`` as ``config_dir/config.yaml`` with the secrets it names."""
    text = snippet.text.replace("/etc/rogue-watchdog/", f"{config_dir}/")
    doc: Any = yaml.safe_load(text) or {}
    sinks = (doc.get("alerts") or {}).get("sinks") or [] if isinstance(doc, dict) else []
    env_lines = []
    for sink in sinks:
        if sink.get("url_env"):
            env_lines.append(f"{sink['url_env']}=https://hooks.example.invalid/{sink['type']}\n")
        if sink.get("url_file"):
            secret = Path(sink["url_file"])
            secret.parent.mkdir(parents=True, exist_ok=True)
            secret.write_text(f"https://hooks.example.invalid/{sink['type']}\n")
            secret.chmod(0o600)
    if env_lines:
        secrets = config_dir / "secrets.env"
        secrets.write_text("".join(env_lines))
        secrets.chmod(0o600)
    config = config_dir / "config.yaml"
    config.write_text(text)
    config.chmod(0o640)
    return config


@pytest.mark.parametrize(
    "snippet",
    [s for s in FENCED if s.kind == "rogue-watchdog"]
    + [s for s in INLINE if s.kind not in DOCUMENTED_ERRORS],
    ids=lambda s: s.where,
)
def test_rogue_watchdog_example_passes_check_config(snippet: Snippet, tmp_path: Path) -> None:
    config = _deploy(snippet, tmp_path)
    res = run_cli("check-config", str(config))
    assert (res.returncode, res.stderr) == (0, ""), f"{snippet.where}:\n{snippet.text}"
    assert res.stdout.startswith(f"{config}: OK: ")


@pytest.mark.parametrize(
    "snippet", [s for s in INLINE if s.kind in DOCUMENTED_ERRORS], ids=lambda s: s.where
)
def test_documented_error_example_is_refused_as_documented(
    snippet: Snippet, tmp_path: Path
) -> None:
    config = _deploy(snippet, tmp_path)
    res = run_cli("check-config", str(config))
    assert res.returncode == 2
    assert res.stderr == (
        f"rogue-watchdog: config error: {config}:2: {DOCUMENTED_ERRORS[snippet.kind]}\n"
        f"rogue-watchdog: {config}: 1 error\n"
    )


@pytest.mark.parametrize(
    "snippet", [s for s in FENCED if s.kind == "prometheus"], ids=lambda s: s.where
)
def test_prometheus_example_passes_promtool(snippet: Snippet, tmp_path: Path) -> None:
    need_program("promtool")
    path = tmp_path / "prometheus.yml"
    path.write_text(snippet.text)
    res = subprocess.run(
        [shutil.which("promtool") or "promtool", "check", "config", "--syntax-only", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr


def _receivers(route: dict[str, Any]) -> set[str]:
    names = {route["receiver"]} if "receiver" in route else set()
    for child in route.get("routes") or []:
        names |= _receivers(child)
    return names


@pytest.mark.parametrize(
    "snippet", [s for s in FENCED if s.kind == "alertmanager-route"], ids=lambda s: s.where
)
def test_alertmanager_route_example_passes_amtool(snippet: Snippet, tmp_path: Path) -> None:
    need_program("amtool")
    doc = yaml.safe_load(snippet.text)
    assert set(doc) == {"route"}, "an alertmanager-route example holds a route only"
    doc["receivers"] = [{"name": n} for n in sorted(_receivers(doc["route"]))]
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(doc))
    res = subprocess.run(
        [shutil.which("amtool") or "amtool", "check-config", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout

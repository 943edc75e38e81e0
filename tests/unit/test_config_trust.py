"""A configuration others can write runs commands as root: the config file, the files it
names (url_file, secrets.env, the NVML library, the queue command) and every directory on
their paths must be changeable by root (or the daemon's user) alone, like sshd's
StrictModes. Refused at start (exit 2), on reload (the old config stays, and says so), by
check-config, and for a url_file at every read."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from rogue_watchdog.config import ConfigError, load_config
from rogue_watchdog.config.alerts import SinkSettings
from rogue_watchdog.daemon.alerts.secrets import SecretError, read_url
from rogue_watchdog.safeio import untrusted_reason
from tests.conftest import Spawned, run_cli
from tests.unit.test_status import config_file
from tests.unit.test_status_run import events, status, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown test files")

NOBODY = 65534
ADVICE = "only root (or the daemon's user) may be able to change what the daemon obeys"


@pytest.fixture
def base(tmp_path: Path) -> Path:
    tmp_path.chmod(0o755)
    return tmp_path


# -- the test itself -----------------------------------------------------------------


def test_untrusted_reason_names_the_file_or_directory_and_why(base: Path) -> None:
    f = base / "config.yaml"
    f.write_text("")
    f.chmod(0o644)
    assert untrusted_reason(f) is None
    f.chmod(0o666)
    assert untrusted_reason(f) == f"{f} is writable by others (mode 0666)"
    f.chmod(0o664)
    assert untrusted_reason(f) == f"{f} is writable by group root (mode 0664)"
    f.chmod(0o644)
    os.chown(f, NOBODY, NOBODY)
    assert untrusted_reason(f) == (
        f"{f} is owned by uid 65534 (nobody), not by root or the daemon's user"
    )
    # The daemon's own user is trusted (a daemon not running as root).
    assert untrusted_reason(f, frozenset({0, NOBODY})) is None
    os.chown(f, 0, 0)
    d = base / "conf.d"
    d.mkdir()
    g = d / "x.yaml"
    g.write_text("")
    d.chmod(0o777)
    assert untrusted_reason(g) == f"directory {d} is writable by others (mode 0777)"
    d.chmod(0o755)
    os.chown(d, NOBODY, NOBODY)
    assert untrusted_reason(g) == (
        f"directory {d} is owned by uid 65534 (nobody), not by root or the daemon's user"
    )


def test_sticky_directory_is_trusted_only_for_an_entry_root_owns(base: Path) -> None:
    t = base / "tmp"
    t.mkdir()
    t.chmod(0o1777)  # like /tmp: others may create entries but not replace root's
    owned = t / "hook.url"
    owned.write_text("x")
    assert untrusted_reason(owned) is None
    assert untrusted_reason(t / "missing.url") == (
        f"{t}/missing.url does not exist and directory {t} lets others create it (mode 1777)"
    )
    link = t / "link.url"
    link.symlink_to(owned)
    os.lchown(link, NOBODY, NOBODY)  # nobody could point it elsewhere
    assert untrusted_reason(link) == (
        f"symlink {link} is owned by uid 65534 (nobody), not by root or the daemon's user"
    )


def test_a_symlinked_config_is_judged_where_it_resolves(base: Path) -> None:
    real = base / "real"
    real.mkdir()
    (real / "config.yaml").write_text("")
    (base / "etc").mkdir()
    (base / "etc" / "config.yaml").symlink_to(real / "config.yaml")
    assert untrusted_reason(base / "etc" / "config.yaml") is None
    real.chmod(0o777)
    assert untrusted_reason(base / "etc" / "config.yaml") == (
        f"directory {real} is writable by others (mode 0777)"
    )


# -- the configuration and what it names ---------------------------------------------


def test_world_writable_config_is_refused(base: Path) -> None:
    cfg = base / "config.yaml"
    cfg.write_text("queue: {command: [/usr/bin/touch, /tmp/x]}\n")
    cfg.chmod(0o666)
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert str(info.value) == (f"{cfg}: refused: {cfg} is writable by others (mode 0666); {ADVICE}")
    # A caller that only reads it (status looking for the socket) may ask not to check.
    assert load_config(cfg, check_trust=False).queue.command == ("/usr/bin/touch", "/tmp/x")


def test_config_owned_by_another_user_is_refused(base: Path) -> None:
    cfg = base / "config.yaml"
    cfg.write_text("")
    os.chown(cfg, NOBODY, NOBODY)
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert str(info.value) == (
        f"{cfg}: refused: {cfg} is owned by uid 65534 (nobody), not by root or the "
        f"daemon's user; {ADVICE}"
    )


def test_files_the_config_names_are_refused_with_line_and_key(base: Path) -> None:
    bad = base / "shared"
    bad.mkdir()
    bad.chmod(0o777)
    hook = base / "hook.url"
    hook.write_text("https://hooks.example/T/B/secret\n")
    hook.chmod(0o666)
    cfg = base / "config.yaml"
    cfg.write_text(
        f"nvml: {{library: {bad}/libnvidia-ml.so.1}}\n"
        f"queue: {{command: [{bad}/gpuq, list]}}\n"
        "alerts:\n"
        "  sinks:\n"
        f"    - {{type: webhook, url_file: {hook}}}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert str(info.value).splitlines() == [
        f"{cfg}:1: nvml.library: refused: {bad}/libnvidia-ml.so.1 does not exist and "
        f"directory {bad} lets others create it (mode 0777); {ADVICE}",
        f"{cfg}:2: queue.command: refused: {bad}/gpuq does not exist and directory {bad} "
        f"lets others create it (mode 0777); {ADVICE}",
        f"{cfg}:5: alerts.sinks[0].url_file: refused: {hook} is writable by others "
        f"(mode 0666); {ADVICE}",
    ]


def test_secrets_env_beside_the_config_is_refused(base: Path) -> None:
    cfg = base / "config.yaml"
    cfg.write_text("")
    secrets = base / "secrets.env"
    secrets.write_text("HOOK=https://attacker.example/x\n")
    secrets.chmod(0o666)
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert str(info.value) == (
        f"{cfg}: refused: {secrets} is writable by others (mode 0666); {ADVICE}"
    )
    secrets.chmod(0o600)
    assert load_config(cfg).source == str(cfg)


def test_url_file_made_writable_later_is_refused_at_send_time(base: Path) -> None:
    hook = base / "hook.url"
    hook.write_text("https://hooks.example/T/B/secret\n")
    sink = SinkSettings(type="webhook", name="hook", url_file=str(hook))
    assert read_url(sink) == "https://hooks.example/T/B/secret"
    hook.chmod(0o666)
    with pytest.raises(SecretError) as info:
        read_url(sink)
    assert str(info.value) == (
        f"refused the URL in file {hook}: {hook} is writable by others (mode 0666)"
    )


def test_check_config_reports_an_untrusted_config(base: Path) -> None:
    cfg = base / "config.yaml"
    cfg.write_text("sanctioned: []\n")
    cfg.chmod(0o646)
    res = run_cli("check-config", str(cfg))
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == (
        f"rogue-watchdog: config error: {cfg}: refused: {cfg} is writable by others "
        f"(mode 0646); {ADVICE}\n"
        f"rogue-watchdog: {cfg}: 1 error\n"
    )


# -- the daemon: at start and on SIGHUP ----------------------------------------------


def test_run_refuses_an_untrusted_config_at_start(base: Path) -> None:
    cfg = config_file(base)
    cfg.chmod(0o666)
    res = run_cli("run", "--config", str(cfg), timeout=30)
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == (
        f"rogue-watchdog: config error: {cfg}: refused: {cfg} is writable by others "
        f"(mode 0666); {ADVICE}\n"
    )
    assert not (base / "s.sock").exists()


def test_reload_of_a_config_others_can_write_keeps_the_old_one(
    spawned: Spawned, base: Path
) -> None:
    cfg = config_file(base, "  interval_s: 0.2\n")
    log = base / "out.log"
    p = spawned.daemon(cfg, log)
    wait_for("the first scan", lambda: events(log, "daemon-started") and status(cfg)[0] == 0)

    # An unprivileged user who can write the file adds a command the root daemon runs.
    marker = base / "ran-as-root"
    cfg.chmod(0o666)
    with open(cfg, "a") as fh:
        fh.write(f"queue: {{command: [/usr/bin/touch, '{marker}']}}\n")
    p.send_signal(signal.SIGHUP)
    refused = wait_for("refusal", lambda: events(log, "config-reload-refused"))
    reason = f"{cfg}: refused: {cfg} is writable by others (mode 0666); {ADVICE}"
    assert refused[0]["error"] == reason
    doc = wait_for(
        "degraded config-reload",
        lambda: (d := json.loads(status(cfg, "--json")[1]))["degraded"] and d,
    )
    assert doc["degraded"] == {
        "config-reload": f"refused, the previous one stays in force: {reason}"
    }
    assert doc["config"]["changed_on_disk"] is True
    wait_for(
        "the component-degraded finding",
        lambda: [
            f
            for f in json.loads(status(cfg, "--json")[1])["findings"]
            if f["kind"] == "component-degraded"
        ],
    )
    assert not marker.exists()  # ticks later: the command never ran

    # Fixed by root: the next reload is accepted and the component recovers.
    cfg.chmod(0o644)
    cfg.write_text(
        cfg.read_text().replace(f"queue: {{command: [/usr/bin/touch, '{marker}']}}\n", "")
    )
    p.send_signal(signal.SIGHUP)
    wait_for("reload", lambda: events(log, "config-reloaded"))
    wait_for("recovered", lambda: json.loads(status(cfg, "--json")[1])["degraded"] == {})
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=20) == 0
    assert not marker.exists()

"""Configuration that can hurt: every configured regex runs in RE2 (linear time against
command lines any user controls), and check-config catches bad globs, unit pins without a
unit suffix, unknown users (a warning), unreadable sink URLs, and lists every error."""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from rogue_watchdog.config import ConfigError, ConfigErrors, parse_config
from rogue_watchdog.config.base import Regex, glob_problem
from rogue_watchdog.config.enforcement import Protect
from rogue_watchdog.daemon.alerts import DeliveryWorker
from rogue_watchdog.daemon.assemble import build_metrics_workers
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.status import build_status, render_status
from rogue_watchdog.model import Proc
from rogue_watchdog.policy.allowlist import cmdline_matches
from rogue_watchdog.policy.jobs import is_launcher
from tests.conftest import Spawned, run_cli

HOSTILE = ["python3", "train.py", "a" * 40 + "!"]
RE2_REFUSAL = (
    "configured patterns run in linear time against command lines any user controls, so "
    "backreferences, lookaround, atomic groups and possessive quantifiers are refused"
)


def error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "/etc/rw/config.yaml")
    return info.value


def rule(extra: str) -> str:
    return f"sanctioned:\n  - name: a\n    origin: {{any: true}}\n{extra}"


def proc(cmdline: list[str]) -> Proc:
    return Proc(pid=10, ppid=1, start_ticks=1, state="S", comm="python3", cmdline=cmdline)


# -- 1. regexes run in RE2 ------------------------------------------------------------


def test_nested_quantifier_against_a_hostile_command_line_answers_correctly() -> None:
    cfg = parse_config(rule('    cmdline_regex: "(a+)+$"\n'), "c.yaml")
    (r,) = cfg.sanctioned
    assert isinstance(r.cmdline_regex, Regex)
    # Python's re backtracks 2^40 ways here (stalls every scan); RE2 answers at once.
    assert cmdline_matches(r, HOSTILE) is False
    assert cmdline_matches(r, ["python3", "train.py", "a" * 40]) is True
    assert cmdline_matches(r, ["python3", "train.py", "aaaa"]) is True


def test_launcher_patterns_run_in_re2_too() -> None:
    cfg = parse_config("training:\n  launchers: ['(a+)+$', '^(x|xx)+y$']\n", "c.yaml")
    assert all(isinstance(p, Regex) for p in cfg.training.launchers)
    assert is_launcher(proc(HOSTILE), cfg.training.launchers) is False
    assert is_launcher(proc(["x" * 40 + "y"]), cfg.training.launchers) is True
    # An undecodable byte (kept as a lone surrogate) is searched, not an exception.
    odd = proc(["/opt/run\udcffaaa"])
    assert is_launcher(odd, cfg.training.launchers) is True


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        (rule('    cmdline_regex: "(a)\\\\1"\n'), 4, "sanctioned[0].cmdline_regex"),
        ("training:\n  launchers: ['ok', '(a)\\1']\n", 2, "training.launchers[1]"),
        ("enforcement:\n  protect:\n    - {cmdline_regex: '(a)\\1'}\n", 3,
         "enforcement.protect[0].cmdline_regex"),
        ("enforcement:\n  rules:\n    - {name: r, cmdline_regex: '(a)\\1', mode: terminate}\n",
         3, "enforcement.rules[0].cmdline_regex"),
    ],
)  # fmt: skip
def test_every_configured_regex_refuses_a_backreference(text: str, line: int, key: str) -> None:
    e = error(text)
    assert (e.path, e.line, e.key) == ("/etc/rw/config.yaml", line, key)
    assert str(e) == (
        f"/etc/rw/config.yaml:{line}: {key}: RE2 cannot express it (invalid escape "
        f"sequence: \\1): {RE2_REFUSAL}"
    )


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("foo(?=bar)", "invalid perl operator: (?="),
        ("(?<!x)train", "invalid perl operator: (?<"),
        ("(?>a+)b", "invalid perl operator: (?>"),
        ("a++", "bad repetition operator: ++"),
        ("(?P<n>a)(?P=n)", "invalid perl operator: (?P"),
    ],
)
def test_lookaround_atomic_and_possessive_are_refused(pattern: str, why: str) -> None:
    e = error(rule(f"    cmdline_regex: '{pattern}'\n"))
    assert (e.line, e.key) == (4, "sanctioned[0].cmdline_regex")
    assert e.message.startswith("RE2 cannot express it (")
    assert why in e.message


def test_invalid_in_every_dialect_is_just_invalid() -> None:
    e = error(rule("    cmdline_regex: '[abc'\n"))
    assert e.message == "invalid regular expression: missing ]: [abc"
    # RE2 would read this as a literal; Python's re refuses it: refused, not reinterpreted.
    e = error(rule("    cmdline_regex: 'a{99999999999}'\n"))
    assert e.message.startswith("invalid regular expression: ")


def test_protect_regex_matches_with_re2() -> None:
    cfg = parse_config("enforcement:\n  protect:\n    - {cmdline_regex: '^pg_(a+)+$'}\n", "c")
    (p,) = cfg.enforcement.protect
    assert isinstance(p, Protect) and isinstance(p.cmdline_regex, Regex)
    assert p.matches(["pg_" + "a" * 40 + "!"], None, None) is False
    assert p.matches(["pg_aaa"], None, None) is True


# -- 2. globs, unit pins, users ----------------------------------------------------


def test_bad_glob_is_refused_with_file_line_key() -> None:
    e = error(rule('    cmdline: "[abc*"\n'))
    assert str(e) == (
        "/etc/rw/config.yaml:4: sanctioned[0].cmdline: bad glob '[abc*': unclosed '[' at "
        "offset 0: fnmatch would match a literal '[' there; write '[[]' for a literal '['"
    )


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("ignore:\n  - {name: x, exe: '/usr/[abc*'}\n", 2, "ignore[0].exe"),
        ("ignore:\n  - '[abc*'\n", 2, "ignore[0]"),
        ("training: {device_glob: '/dev/nvidia[0-9*'}\n", 1, "training.device_glob"),
        (rule("    cmdline: x\n").replace("{any: true}", "{cron_file: '/etc/cron.d/[ab'}"),
         3, "sanctioned[0].origin.cron_file"),
        ("enforcement:\n  protect:\n    - '[abc*'\n", 3, "enforcement.protect[0]"),
        ("enforcement:\n  protect:\n    - {exe: '[abc*'}\n", 3, "enforcement.protect[0].exe"),
        ("queue:\n  sanctioned:\n    - {name: q, account: '[ab'}\n", 3,
         "queue.sanctioned[0].account"),
        ("services:\n  sanctioned_ports:\n    - {name: s, port: 1, address: '[ab'}\n", 3,
         "services.sanctioned_ports[0].address"),
        ("ship_gates:\n  - {name: g, deploy_dir: /d, patterns: ['*.[ab']}\n", 2,
         "ship_gates[0].patterns[0]"),
    ],
)  # fmt: skip
def test_every_glob_key_refuses_an_unclosed_bracket(text: str, line: int, key: str) -> None:
    e = error(text)
    assert (e.line, e.key) == (line, key)
    assert e.message.startswith("bad glob ") and "unclosed '['" in e.message


def test_glob_problem_names_an_empty_range_and_accepts_good_globs() -> None:
    assert glob_problem("[z-a]*") == "range 'z-a' in '[z-a]' is empty"
    for good in ("*", "/dev/nvidia[0-9]*", "[[]x", "[!]]", "[]]", "a[!b-d]?", "train@*.service"):
        assert glob_problem(good) is None, good


def test_systemd_unit_without_a_unit_suffix_is_refused() -> None:
    e = error(rule("    cmdline: x\n").replace("{any: true}", "{systemd_unit: train}"))
    assert str(e) == (
        "/etc/rw/config.yaml:3: sanctioned[0].origin.systemd_unit: 'train' has no unit type "
        "suffix, so it never matches a unit (units are named with their type: "
        "train.service); known types: .service, .socket, .device, .mount, .automount, "
        ".swap, .target, .path, .timer, .slice, .scope"
    )
    for good in ("train.service", "train@*.service", "train-*", "nightly.timer", "x.scope"):
        text = rule("    cmdline: x\n").replace("{any: true}", f"{{systemd_unit: '{good}'}}")
        assert parse_config(text, "c").sanctioned[0].origin.get("systemd_unit") == good


def test_unknown_user_is_a_warning_not_an_error(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(rule("    cmdline: x\n    user: no-such-user-rw\n"))
    res = run_cli("check-config", str(cfg))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == (
        f"{cfg}: OK: 1 sanctioned rule, 6 launcher patterns, 6 ignore entries, 1 warning"
    )
    assert res.stderr == (
        f"rogue-watchdog: config warning: {cfg}:5: sanctioned[0].user: user "
        "'no-such-user-rw' is not on this host yet (passwd): this entry matches no job "
        "until that user exists\n"
    )
    # A uid that has a name would never match: jobs carry the name.
    w = parse_config(rule("    cmdline: x\n    user: '0'\n"), "c").warnings
    assert [str(x) for x in w] == [
        "c:5: sanctioned[0].user: uid 0 is user 'root' here and jobs carry the name: "
        "write 'root', or the rule never matches"
    ]
    assert parse_config(rule("    cmdline: x\n    user: root\n"), "c").warnings == ()


def test_unset_url_env_is_an_error_at_check_config(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("alerts:\n  sinks:\n    - {type: slack, url_env: RW_TEST_UNSET_HOOK}\n")
    env = {k: v for k, v in os.environ.items() if k != "RW_TEST_UNSET_HOOK"}
    res = run_cli("check-config", str(cfg), env=env)
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == (
        f"rogue-watchdog: config error: {cfg}:3: alerts.sinks[0].url_env: environment "
        f"variable RW_TEST_UNSET_HOOK is unset or empty here and {tmp_path}/secrets.env does "
        "not set it: the sink could not send alerts\n"
        f"rogue-watchdog: {cfg}: 1 error\n"
    )
    # Set in the environment, or in secrets.env beside the config (the unit's
    # EnvironmentFile=): valid.
    with_var = dict(env, RW_TEST_UNSET_HOOK="https://h.example/x")
    assert run_cli("check-config", str(cfg), env=with_var).returncode == 0
    secrets = tmp_path / "secrets.env"
    secrets.write_text("# webhook\nRW_TEST_UNSET_HOOK='https://hooks.example/T/B/x'\n")
    secrets.chmod(0o600)
    res = run_cli("check-config", str(cfg), env=env)
    assert (res.returncode, res.stderr) == (0, "")


def test_url_file_missing_is_an_error_at_check_config(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"alerts:\n  sinks:\n    - {{type: discord, url_file: {tmp_path}/d.url}}\n")
    res = run_cli("check-config", str(cfg))
    assert res.returncode == 2
    assert res.stderr.splitlines()[0] == (
        f"rogue-watchdog: config error: {cfg}:3: alerts.sinks[0].url_file: cannot read the "
        f"URL from file {tmp_path}/d.url: No such file or directory"
    )


def test_every_error_is_reported_in_one_run(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "sanctioned:\n"
        "  - name: a\n"
        '    cmdline_regex: "(a)\\\\1"\n'
        "    origin: {systemd_unit: train}\n"
        "  - name: b\n"
        '    cmdline: "[abc*"\n'
        "    origin: {any: true}\n"
        "    max_instances: two\n"
        "nvml: {enabled: maybe}\n"
        "alerts:\n"
        "  sinks:\n"
        "    - {type: slack, url_env: RW_TEST_UNSET_HOOK}\n"
        "bogus: 1\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RW_TEST_UNSET_HOOK"}
    res = run_cli("check-config", str(cfg), env=env)
    assert res.returncode == 2
    lines = res.stderr.splitlines()
    assert [x.split(": ")[2] for x in lines[:-1]] == [
        f"{cfg}:3",
        f"{cfg}:4",
        f"{cfg}:6",
        f"{cfg}:8",
        f"{cfg}:9",
        f"{cfg}:12",
        f"{cfg}:13",
    ]
    keys = [x.split(": ")[3] for x in lines[:-1]]
    assert keys == [
        "sanctioned[0].cmdline_regex",
        "sanctioned[0].origin.systemd_unit",
        "sanctioned[1].cmdline",
        "sanctioned[1].max_instances",
        "nvml.enabled",
        "alerts.sinks[0].url_env",
        "bogus",
    ]
    assert lines[-1] == f"rogue-watchdog: {cfg}: 7 errors"
    with pytest.raises(ConfigErrors) as info:
        parse_config(cfg.read_text(), str(cfg))
    assert len(info.value.errors) == 6  # the unset variable is a check of this host


# -- 2. an unreadable sink URL at runtime ---------------------------------------------


def test_sink_without_its_url_is_degraded_in_status_findings_and_metrics(
    spawned: Spawned, tmp_path: Path
) -> None:
    token = f"alertjob_{uuid.uuid4().hex[:10]}"
    script = tmp_path / f"{token}.py"
    script.write_text("import time\ntime.sleep(120)\n")
    text = (
        "nvml: {enabled: false}\n"
        f"training: {{launchers: ['{token}']}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', metrics_listen: '127.0.0.1:0'}}\n"
        "alerts:\n  sinks:\n"
        "    - {type: slack, name: oncall, url_env: RW_TEST_UNSET_HOOK}\n"
    )
    d = Daemon(parse_config(text, "t.yaml"), None)
    (metrics,) = build_metrics_workers(d)
    alerts = DeliveryWorker(
        d.db, lambda: d.config.alerts, jitter=0.0, environ={}, degraded=d.degraded
    )
    metrics.start()
    try:
        spawned.start([sys.executable, str(script)])
        time.sleep(0.3)
        d.tick(7_000_000.0)
        res = alerts.deliver_due(7_000_000.0)
        assert (res.delivered, res.failed, res.paused) == ([], {}, {"oncall"})
        assert d.degraded == {
            "alert-sink:oncall": "no URL in environment variable RW_TEST_UNSET_HOOK "
            "(unset or empty)"
        }
        d.tick(7_000_005.0)
        doc = build_status(d)
        kinds = sorted(f["kind"] for f in doc["findings"])
        assert kinds == ["component-degraded", "rogue-job"]
        (deg,) = [f for f in doc["findings"] if f["kind"] == "component-degraded"]
        assert deg["message"] == (
            "alert-sink:oncall is failing and being retried: no URL in environment variable "
            "RW_TEST_UNSET_HOOK (unset or empty)"
        )
        text_status = render_status(doc)
        assert "degraded: none" not in text_status
        assert (
            "  alert-sink:oncall: no URL in environment variable RW_TEST_UNSET_HOOK "
            "(unset or empty)"
        ) in text_status.splitlines()
        assert metrics.address is not None
        host, port = metrics.address
        body = httpx.get(f"http://{host}:{port}/metrics", timeout=5).text
        assert "rogue_watchdog_degraded_components 1.0" in body.splitlines()
        # Nothing was attempted: the alerts wait in the spool for the URL.
        row = d.db.conn.execute(
            "SELECT COUNT(*), SUM(attempts) FROM deliveries WHERE delivered_at IS NULL"
        ).fetchone()
        assert tuple(row) == (2, 0)  # the rogue-job alert and the component-degraded one
        # The URL arrives (url_env is read per round): delivered, degraded cleared.
        alerts.environ = {"RW_TEST_UNSET_HOOK": "http://127.0.0.1:9/x"}
        alerts.deliver_due(7_000_010.0)
        assert "alert-sink:oncall" not in d.degraded
    finally:
        metrics.stop()
        alerts.stop(timeout_s=1)
        d.db.close()


def test_each_failing_item_of_every_list_is_reported() -> None:
    text = (
        "sanctioned:\n"
        "  - {name: a, cmdline: '[x', origin: {any: true}}\n"  # 2
        "  - {name: b, cmdline: x, origin: {any: true}}\n"
        "  - {name: b, cmdline: y, origin: {any: true}}\n"  # 4: duplicate of the 2nd
        "alerts:\n"
        "  sinks:\n"
        "    - {type: pager}\n"  # 7
        "    - {type: slack, url_env: 'https://x'}\n"  # 8
        "enforcement:\n"
        "  protect: ['[a', {exe: '[b'}]\n"  # 10 (twice)
        "queue:\n"
        "  sanctioned:\n"
        "    - {name: q}\n"  # 13
        "    - {name: r, user: '[z'}\n"  # 14
        "services:\n"
        "  sanctioned_ports:\n"
        "    - {name: s, port: 0}\n"  # 17
        "    - {name: t, port: 70000}\n"  # 18
        "ship_gates:\n"
        "  - {name: g, deploy_dir: rel}\n"  # 20
        "  - {name: h}\n"  # 21
    )
    with pytest.raises(ConfigErrors) as info:
        parse_config(text, "c.yaml")
    assert [(e.line, e.key) for e in info.value.errors] == [
        (2, "sanctioned[0].cmdline"),
        (4, "sanctioned[2].name"),
        (7, "alerts.sinks[0].type"),
        (8, "alerts.sinks[1].url_env"),
        (10, "enforcement.protect[0]"),
        (10, "enforcement.protect[1].exe"),
        (13, "queue.sanctioned[0]"),
        (14, "queue.sanctioned[1].user"),
        (17, "services.sanctioned_ports[0].port"),
        (18, "services.sanctioned_ports[1].port"),
        (20, "ship_gates[0].deploy_dir"),
        (21, "ship_gates[1].deploy_dir"),
    ]


def test_every_bad_value_of_one_section_is_reported() -> None:
    # Before: only the first (daemon.interval_s); the other two surfaced one fix at a time.
    text = "daemon: {interval_s: [1], socket: {a: 1}, state_dir: null}\n"
    with pytest.raises(ConfigErrors) as info:
        parse_config(text, "c.yaml")
    assert [str(e) for e in info.value.errors] == [
        "c.yaml:1: daemon.interval_s: expected a number, got a list",
        "c.yaml:1: daemon.socket: expected a string, got a mapping",
        "c.yaml:1: daemon.state_dir: expected a string, got nothing",
    ]

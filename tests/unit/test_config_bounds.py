"""Configuration that would break the daemon or decide nothing is refused at load.

Durations have an upper bound (a scan interval of 1e308 s crashed the loop with an
OverflowError on the first tick; 86400000 s silently stopped scanning), and patterns
that match every command line, executable or file descriptor are refused where they
would sanction, ignore or launch everything.
"""

from __future__ import annotations

import pytest

from rogue_watchdog.config import DEFAULT_IGNORE, ConfigError, parse_config


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "c.yaml")
    return str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "daemon:\n  interval_s: 1.0e+308\n",
            "c.yaml:2: daemon.interval_s: must be at most 315360000 s (10 years), got 1.0e+308",
        ),
        (
            "daemon:\n  interval_s: 86400000\n",
            "c.yaml:2: daemon.interval_s: must be at most 3600 s, got 86400000",
        ),
        (
            "daemon:\n  fd_sweep_interval_s: 3600.5\n",
            "c.yaml:2: daemon.fd_sweep_interval_s: must be at most 3600 s, got 3600.5",
        ),
        (
            "daemon:\n  retention_jobs_s: 1.0e+12\n",
            "c.yaml:2: daemon.retention_jobs_s: must be at most 315360000 s (10 years), "
            "got 1.0e+12",
        ),
        (
            "alerts:\n  reminder_after_s: 1.0e+18\n",
            "c.yaml:2: alerts.reminder_after_s: must be at most 315360000 s (10 years), "
            "got 1.0e+18",
        ),
        (
            "alerts:\n  reminder_after_s: 40000000\n",
            "c.yaml:2: alerts.reminder_after_s: must be at most 3.1536e+07 s, got 40000000",
        ),
        (
            "alerts:\n  retry_max_s: 100000\n",
            "c.yaml:2: alerts.retry_max_s: must be at most 86400 s, got 100000",
        ),
        (
            "alerts:\n  sinks:\n    - {type: webhook, url_env: HOOK, timeout_s: 601}\n",
            "c.yaml:3: alerts.sinks[0].timeout_s: must be at most 600 s, got 601",
        ),
        (
            "enforcement:\n  grace_s: 3601\n",
            "c.yaml:2: enforcement.grace_s: must be at most 3600 s, got 3601",
        ),
        (
            "queue:\n  command_timeout_s: 601\n",
            "c.yaml:2: queue.command_timeout_s: must be at most 600 s, got 601",
        ),
    ],
)
def test_durations_have_an_upper_bound(text: str, message: str) -> None:
    assert _error(text) == message


def test_durations_at_their_bounds_are_accepted() -> None:
    config = parse_config(
        "daemon:\n  interval_s: 3600\n  fd_sweep_interval_s: 3600\nenforcement:\n  grace_s: 3600\n",
        "c.yaml",
    )
    assert (config.daemon.interval_s, config.daemon.fd_sweep_interval_s) == (3600.0, 3600.0)
    assert config.enforcement.grace_s == 3600.0


EVERY_JOB = (
    "the rule would sanction every training job on the host; name the program it runs "
    "(e.g. '*/train.py *')"
)


@pytest.mark.parametrize(
    ("pattern", "key"),
    [
        ('cmdline_regex: "|x"', "cmdline_regex"),
        ('cmdline_regex: "(?i)"', "cmdline_regex"),
        ('cmdline_regex: ".*"', "cmdline_regex"),
        ('cmdline_regex: "."', "cmdline_regex"),
        ('cmdline: "*"', "cmdline"),
        ('cmdline: "?*"', "cmdline"),
    ],
)
def test_any_origin_rule_matching_every_command_line_is_refused(pattern: str, key: str) -> None:
    text = f"sanctioned:\n  - name: all\n    {pattern}\n    origin: {{any: true}}\n"
    shown = pattern.split(": ", 1)[1].strip('"')
    assert _error(text) == (
        f"c.yaml:3: sanctioned[0].{key}: {shown!r} matches every command line and the origin "
        f"is 'any: true': {EVERY_JOB}"
    )


def test_match_all_command_line_pinned_to_an_origin_is_a_warning() -> None:
    config = parse_config(
        'sanctioned:\n  - name: unit\n    cmdline: "*"\n    origin: {systemd_unit: t.service}\n',
        "c.yaml",
    )
    assert [str(w) for w in config.warnings] == [
        "c.yaml:3: sanctioned[0].cmdline: '*' matches every command line: only the rule's "
        "origin and user pins decide what it sanctions"
    ]


def test_ordinary_patterns_are_not_match_all() -> None:
    config = parse_config(
        "sanctioned:\n"
        "  - name: t\n    cmdline_regex: '(^|/)python3? .*train[^ ]*\\.py'\n"
        "    origin: {any: true}\n"
        "ignore:\n  - /usr/*/Xorg\n  - {name: smi, cmdline: '*nvidia-smi*'}\n"
        "training:\n  device_glob: '/dev/nvidia*'\n  launchers: ['(^|/)torchrun(\\s|$)']\n",
        "c.yaml",
    )
    assert config.warnings == ()
    # The shipped defaults stay beside the two entries given (issue 35).
    assert len(config.ignore) == len(DEFAULT_IGNORE) + 2
    assert config.training.device_glob == "/dev/nvidia*"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'ignore: ["*"]\n',
            "c.yaml:1: ignore[0]: '*' matches every executable: every GPU job would be "
            "ignored (no finding, never terminated); name the program (e.g. '/usr/*/Xorg')",
        ),
        (
            "ignore:\n  - /*\n",
            "c.yaml:2: ignore[0]: '/*' matches every executable: every GPU job would be "
            "ignored (no finding, never terminated); name the program (e.g. '/usr/*/Xorg')",
        ),
        (
            "ignore:\n  - {name: x, cmdline: '*'}\n",
            "c.yaml:2: ignore[0].cmdline: '*' matches every command line: every GPU job "
            "would be ignored (no finding, never terminated); name the program "
            "(e.g. '/usr/*/Xorg')",
        ),
        (
            'training:\n  device_glob: "*"\n',
            "c.yaml:2: training.device_glob: '*' matches '/dev/null', which is no GPU: every "
            "process holding one would count as a GPU user (host services become rogue "
            "jobs); match the GPU device nodes only (default '/dev/nvidia[0-9]*')",
        ),
        (
            'training:\n  device_glob: "/dev/*"\n',
            "c.yaml:2: training.device_glob: '/dev/*' matches '/dev/null', which is no GPU: "
            "every process holding one would count as a GPU user (host services become "
            "rogue jobs); match the GPU device nodes only (default '/dev/nvidia[0-9]*')",
        ),
        (
            'training:\n  launchers: ["."]\n',
            "c.yaml:2: training.launchers[0]: '.' matches every command line: every process "
            "(cron, shells, host services) would be a training job, rogue unless "
            "sanctioned; name the launcher (e.g. '(^|[\\s/])torchrun(\\s|$)')",
        ),
    ],
)
def test_patterns_matching_everything_are_refused(text: str, message: str) -> None:
    assert _error(text) == message

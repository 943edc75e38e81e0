"""Help, completion and the man page, all generated from the one parser."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rogue_watchdog.cli import build_parser
from tests.conftest import REPO, run_cli


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(subs.choices)


def leaves(parser: argparse.ArgumentParser, name: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command a person runs, nested verbs included (``allowlist suggest``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {name: parser}
    return {
        k: v
        for a in subs
        for verb, sp in a.choices.items()
        for k, v in leaves(sp, f"{name} {verb}".strip()).items()
    }


def test_every_command_has_a_description_examples_and_exit_codes() -> None:
    # Before (issue 33): `allowlist suggest --help` and `allowlist diff --help` had
    # neither examples nor exit codes (only `allowlist --help` had).
    assert {"allowlist suggest", "allowlist diff"} <= set(leaves(build_parser()))
    for name, sub in leaves(build_parser()).items():
        text = sub.format_help()
        assert sub.description, name
        assert "\nexamples:\n  rogue-watchdog " in text, name
        assert "\nexit codes:\n  0   " in text or "\nexit codes:\n  N   " in text, name


def test_every_argument_has_help_text() -> None:
    missing = [
        f"{name} {action.dest}"
        for name, sub in subcommands().items()
        for action in sub._actions
        if not action.help and not isinstance(action, argparse._HelpAction)
    ]
    assert missing == []


def test_scan_help_names_the_gpu_question() -> None:
    done = run_cli("scan", "--help")
    assert done.returncode == 0
    assert "  rogue-watchdog scan --gpu 3          # who is on GPU 3, and how to stop it" in (
        done.stdout.splitlines()
    )
    top = run_cli("--help").stdout.splitlines()
    i = top.index("  what is on GPU 3, who started it, how do I stop it coming back?")
    assert top[i + 1] == "      rogue-watchdog scan --gpu 3"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_complete_every_command(shell: str) -> None:
    done = run_cli("completion", shell)
    assert done.returncode == 0, done.stderr
    for name in subcommands():
        assert name in done.stdout, (shell, name)
    assert "--gpu" in done.stdout
    if shell == "bash":  # the script at least parses in a real bash
        check = subprocess.run(
            ["bash", "-n"], input=done.stdout, text=True, capture_output=True, check=False
        )
        assert check.returncode == 0, check.stderr


def test_completion_refuses_other_shells() -> None:
    done = run_cli("completion", "csh")
    assert done.returncode == 2
    assert "invalid choice: 'csh'" in done.stderr


def test_man_page_is_generated_from_the_parser_and_current(tmp_path: Path) -> None:
    out = tmp_path / "rogue-watchdog.1"
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_manpage.py"), "--outfile", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert page.startswith('.TH ROGUE\\-WATCHDOG "1" "version ')
    assert ".SH NAME\nrogue\\-watchdog \\- find rogue GPU training jobs" in page
    for name in subcommands():
        assert f".SS rogue\\-watchdog {name.replace('-', chr(92) + '-')}\n" in page, name
    committed = (REPO / "man" / "rogue-watchdog.1").read_text()
    assert page == committed, (
        "man/rogue-watchdog.1 is stale: run .venv/bin/python scripts/build_manpage.py"
    )
    if shutil.which("man") is not None:  # and it renders as a manual page
        shown = subprocess.run(
            ["man", "-l", str(out)],
            capture_output=True,
            text=True,
            env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin", "MANPAGER": "cat"},
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        headings = [ln for ln in shown.stdout.splitlines() if ln[:1].isalpha() and ln.isupper()]
        # The sections systemd's and cron's pages have, after the options, in this order.
        assert headings[-7:] == [
            "COMMENTS", "EXIT STATUS", "ENVIRONMENT", "FILES", "SIGNALS", "EXAMPLES", "SEE ALSO",
        ]  # fmt: skip


def test_man_page_sections_say_what_the_code_does() -> None:
    from rogue_watchdog.cli.common import DEFAULT_CONFIG
    from rogue_watchdog.daemon.notify import ENV_KEYS
    from rogue_watchdog.hostpaths import DEFAULT_SOCKET

    page = (REPO / "man" / "rogue-watchdog.1").read_text()
    sections = dict(
        (part.split("\n", 1)[0], part.split("\n", 1)[1]) for part in page.split("\n.SH ")[1:]
    )
    files = sections["FILES"]
    for path in (DEFAULT_CONFIG, DEFAULT_SOCKET, "/etc/rogue-watchdog/secrets.env",
                 "/var/lib/rogue-watchdog/state.db"):  # fmt: skip
        assert f".B {path.replace('-', chr(92) + '-')}\n" in files, path
    assert f".B {', '.join(ENV_KEYS)}\n" in sections["ENVIRONMENT"]
    assert ".B SIGHUP\nrun: reload the configuration" in sections["SIGNALS"]
    # EXIT STATUS lists each command's codes as its --help does.
    status = sections["EXIT STATUS"]
    assert ".SS rogue\\-watchdog status\n.TP\n.B 0\nrunning, nothing open\n" in status
    assert ".TP\n.B 3\nnot running\n.TP\n.B 4\nstate unknown: permission denied" in status
    for name in subcommands():
        assert f".SS rogue\\-watchdog {name.replace('-', chr(92) + '-')}\n" in status, name
    assert sections["SEE ALSO"].startswith("\\fBsystemd.service\\fR(5),\n\\fBsystemctl\\fR(1),")


def test_every_help_example_parses_as_printed() -> None:
    """Issue 33, item 5 re-checked: `explain $(pgrep -f train_big.py)` gave two PIDs on a
    cron host (cron's `sh -c` wrapper matches too): "unrecognized arguments". Every
    example's words (a `$(...)` as the one word it stands for, a redirection or pipe
    dropped) parse with the parser that prints them."""
    import re
    import shlex

    for name, sub in leaves(build_parser()).items():
        examples = (sub.epilog or "").split("examples:\n")[1].split("\nexit codes:")[0]
        for line in examples.splitlines():
            command = re.split(r"\s(?:>|\||&&|#)\s?", line.strip())[0]
            if not command.startswith("rogue-watchdog "):
                continue
            assert "$(" not in command or command.count('"$(') == command.count("$("), line
            words = shlex.split(re.sub(r'"\$\([^)]*\)"', "4242", command))
            try:
                build_parser().parse_args(words[1:])
            except SystemExit as exc:
                raise AssertionError(f"{name}: {line}") from exc

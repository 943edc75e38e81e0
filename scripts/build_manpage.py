"""Generate man/rogue-watchdog.1 from the command line's own parser (argparse-manpage).

Usage: .venv/bin/python scripts/build_manpage.py [--outfile man/rogue-watchdog.1]

Run it after changing a command, an option or its help; tests/unit/test_cli_help.py fails
while the committed page differs from what this prints. The package installs the page as
share/man/man1/rogue-watchdog.1 (pyproject.toml, data-files).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def render() -> str:
    """The man page text (roff), reproducible: dated by the version, not the clock."""
    from argparse_manpage.manpage import Manpage

    from rogue_watchdog import __version__
    from rogue_watchdog.cli import build_parser

    parser = build_parser()
    page = Manpage(
        parser,
        _data={
            "project_name": "rogue-watchdog",
            # NAME's one line: what whatis(1) and apropos(1) find.
            "description": "find rogue GPU training jobs, their origin, and poisoned weights",
            "manual_title": "rogue-watchdog manual",
            "version": __version__,
            "date": f"version {__version__}",
            "url": "",
            "author": "",
        },
    )
    # The sections systemd's and cron's pages have, in man-pages(7) order after OPTIONS.
    page.add_section("exit status", "=", _exit_status(parser))
    page.add_section("environment", "=", _environment())
    page.add_section("files", "=", _files())
    page.add_section("signals", "=", SIGNALS)
    page.add_section("examples", "=", _epilogs(parser))
    page.add_section("see also", "=", SEE_ALSO)
    return str(page)


def _tp(term: str, text: str) -> str:
    """One ``.TP`` entry: ``term`` in bold (written as is), ``text`` below it."""
    return f".TP\n.B {term}\n{text}"


def _exit_status(parser: argparse.ArgumentParser) -> str:
    """The common meaning of the codes, then each command's own (from its ``--help``)."""
    parts = [
        "Every command answers with the same few codes:",
        _tp("0", "nothing to report, or done."),
        _tp("1", "something found: a rogue or excess job, non\\-finite weights, a refused action."),
        _tp("2", "a usage or configuration error (the message names file, line and key)."),
        _tp("3", "status: the daemon is not running."),
        _tp("4", "status, fleet: state unknown (no answer, permission denied, a garbled one)."),
        ".PP",
        "Each command's own list (its \\-\\-help shows the same):",
    ]
    for name, sub in _subcommands(parser).items():
        codes = _exit_codes(sub.epilog or "")
        if codes:
            parts.append(f".SS {_roff_literal(f'rogue-watchdog {name}')}")
            parts += [_tp(_roff_literal(code), _roff_literal(meaning)) for code, meaning in codes]
    return "\n".join(parts)


def _environment() -> str:
    from rogue_watchdog.daemon.notify import ENV_KEYS

    entries = [
        (
            ", ".join(ENV_KEYS),
            "Set by systemd for the service (Type=notify, WatchdogSec=): the daemon reports "
            "READY=1, STATUS= and WATCHDOG=1 pings there (sd_notify(3)).",
        ),
        (
            "the url_env variables of alert sinks",
            "Webhook URLs, kept out of the configuration: set them in secrets.env (FILES), "
            "which the unit reads with EnvironmentFile=; check\\-config looks there too.",
        ),
        ("SLURM_CONF", "Where Slurm's configuration is (queue.slurm: auto looks for it)."),
        ("COLUMNS", "Width of scan and status tables; whole lines when unset and not a tty."),
        ("NO_COLOR, TERM", "NO_COLOR set, or TERM=dumb: no colour in terminal output."),
        ("SUDO_USER", "Recorded as the actor of terminate, disable\\-source and undo."),
    ]
    return "\n".join(_tp(_roff_literal(k), v) for k, v in entries)


def _files() -> str:
    from rogue_watchdog.cli.common import DEFAULT_CONFIG
    from rogue_watchdog.config.daemon import DaemonSettings
    from rogue_watchdog.hostpaths import DEFAULT_SOCKET

    config_dir = str(Path(DEFAULT_CONFIG).parent)
    state_dir = DaemonSettings().state_dir
    entries = [
        (DEFAULT_CONFIG, "The configuration (the allowlist of sanctioned jobs and their "
         "origins); \\-\\-config names another. Refused when others can write it."),
        (f"{config_dir}/secrets.env", "Webhook URLs for url_env sinks, mode 0600; read by "
         "the unit (EnvironmentFile=) and by check\\-config."),
        (f"{state_dir}/state.db", "The daemon's state (daemon.state_dir): jobs, findings, "
         "alert deliveries and the recorded actions undo restores."),
        (DEFAULT_SOCKET, "The status socket (daemon.socket) status and top ask."),
        ("/etc/systemd/system/rogue\\-watchdog.service",
         "The unit scripts/install.sh writes (the Debian package: /lib/systemd/system)."),
        ("/etc/crontab, /etc/cron.d/, /var/spool/cron/crontabs/",
         "Read to name a cron origin; disable\\-source comments a line out of them."),
        ("/proc/PID/", "Each process's command line, environment, cgroup, maps and fds."),
        ("/dev/nvidia*, libnvidia\\-ml.so.1", "NVML: which process holds which GPU."),
    ]  # fmt: skip
    return "\n".join(_tp(_roff_literal(k) if "\\" not in k else k, v) for k, v in entries)


SIGNALS = "\n".join(
    [
        _tp("SIGHUP", "run: reload the configuration (systemctl reload); a file that does "
            "not validate is refused and the one in force is kept."),
        _tp("SIGTERM, SIGINT", "run: finish the current scan, stop and exit 0."),
        ".PP",
        "Signals the watchdog sends, only to the processes of a rogue job the guard let it "
        "target (terminate, or enforcement.mode: terminate): SIGSTOP to freeze the job's "
        "tree, SIGTERM, SIGCONT so it can exit, SIGKILL after enforcement.grace_s to what "
        "is left. Never to a sanctioned job or anything outside the job, but for one "
        "SIGCONT to a relay above the job that stopped itself when the freeze stopped its "
        "child (util-linux script, sudo): it is continued and listed as continued.",
    ]
)  # fmt: skip

SEE_ALSO = (
    ",\n".join(
        f"\\fB{name}\\fR({section})"
        for name, section in [
            ("systemd.service", 5), ("systemctl", 1), ("sd_notify", 3), ("cron", 8),
            ("crontab", 5), ("atd", 8), ("nvidia\\-smi", 1), ("squeue", 1),
            ("scontrol", 1), ("prometheus", 1), ("podman", 1),
        ]
    )
    + "\n.PP\nThe guides, in /opt/rogue\\-watchdog/share/doc/ (install.md, status.md) and "
    "docs/ of the source: config.md, operations.md, alerts.md, weights.md."
)  # fmt: skip


def _subcommands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> dict[str, argparse.ArgumentParser]:
    """Every command by name, a nested verb after its command (``allowlist suggest``)."""
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[f"{prefix}{name}"] = sub
                out.update(_subcommands(sub, f"{prefix}{name} "))
    return out


def _exit_codes(epilog: str) -> list[tuple[str, str]]:
    """The ``(code, meaning)`` lines under ``exit codes:`` (rogue_watchdog.cli.help's layout)."""
    lines = epilog.splitlines()
    if "exit codes:" not in lines:
        return []
    out = []
    for line in lines[lines.index("exit codes:") + 1 :]:
        code, _, meaning = line.strip().partition(" ")
        out.append((code, meaning.strip()))
    return out


def _examples(epilog: str) -> str:
    """The lines under ``examples:``, up to the exit codes."""
    lines = epilog.splitlines()
    if "examples:" not in lines:
        return ""
    body = lines[lines.index("examples:") + 1 :]
    if "exit codes:" in body:
        body = body[: body.index("exit codes:")]
    return "\n".join(line.removeprefix("  ") for line in body).strip("\n")


def _roff_literal(text: str) -> str:
    """Text shown as written (``.nf``): backslashes and dashes escaped, and no line
    starting with a control character."""
    out = []
    for line in text.splitlines():
        line = line.replace("\\", "\\e").replace("-", "\\-")
        out.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(out)


def _epilogs(parser: argparse.ArgumentParser) -> str:
    """Each command's examples (from its ``--help`` epilog), one subsection each."""
    parts = []
    for name, sub in _subcommands(parser).items():
        examples = _examples(sub.epilog or "")
        if examples:
            title = _roff_literal(f"rogue-watchdog {name}")
            parts += [f".SS {title}", ".nf"]
            parts += [_roff_literal(examples), ".fi"]
    return "\n".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outfile", default=str(REPO / "man" / "rogue-watchdog.1"))
    args = ap.parse_args()
    out = Path(args.outfile)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

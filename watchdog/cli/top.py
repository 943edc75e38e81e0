"""``rogue-watchdog top`` (also ``status --watch``): a live view for the person at the terminal.

Every refresh asks the daemon over its status socket (docs/status.md); when no daemon runs
it scans this host itself, and says which. The screen shows the GPUs with the memory
sanctioned and unsanctioned jobs hold, the jobs (verdict, GPU, origin, command) and the
open findings. Keys act on the selected job through the ordinary commands, so every guard
of ``terminate`` and ``disable-source`` applies, and both ask for confirmation first.

The terminal is put in cbreak mode (no echo, keys one at a time) and drawn with plain ANSI
sequences on the alternate screen; it is restored on exit, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import shlex
import sys
import termios
import time
import tty
from collections.abc import Iterator
from typing import Any

from watchdog import command
from watchdog.cli.common import configure_logging, resolve_config_path, socket_path
from watchdog.render import paint, printable, shorten_command, use_colour

KEYS = "↑/↓ or j/k select  e explain  t terminate  d disable-source  r refresh  q quit"
#: The keys line while an explanation is shown: q and Esc go back to the list there.
EXPLAIN_KEYS = "q/Esc: back to the list  ↑/↓ or j/k select  t terminate  d disable-source"


def local_doc(config_path: str | None) -> dict[str, Any]:
    """A status-shaped document from one local scan (no daemon running).

    Raises:
        ConfigError: The configuration does not validate.
    """
    from watchdog.config import load_config
    from watchdog.render import gpu_json
    from watchdog.scan import Scanner

    config = load_config(config_path)
    result = Scanner(config).scan()
    return {
        "host": result.host,
        "nvml": {"available": result.nvml.available, "error": result.nvml.error},
        "gpus": [gpu_json(g) for g in result.gpus],
        "jobs": [
            {
                "root_pid": j.root_pid,
                "pids": list(j.pids),
                "user": j.user,
                "cmdline": list(j.cmdline),
                "verdict": j.verdict,
                "origin": j.origin.describe(),
                "gpu_memory_bytes": j.gpu_memory_bytes,
                "gpus": [g.to_json() for g in j.gpus],
                "restarts": (
                    j.advice.restarts.line() if j.unsanctioned and j.advice.restarts else None
                ),
            }
            for j in result.jobs
        ],
        "findings": [
            {"id": None, "severity": f.severity, "kind": f.kind, "message": f.message}
            for f in result.findings
        ],
    }


def fetch(socket: str, config_path: str | None, timeout_s: float) -> tuple[dict[str, Any], str]:
    """The daemon's status document, else a local scan's; and where it came from."""
    from watchdog.daemon.ipc import StatusError, query_status

    try:
        return query_status(socket, timeout_s=timeout_s), f"daemon ({socket})"
    except StatusError as exc:
        if exc.exit_code != 3:
            raise
    return local_doc(config_path), "local scan (no daemon running)"


def frame(
    doc: dict[str, Any],
    source: str,
    selected: int,
    width: int,
    colour: bool,
    note: str = "",
    explaining: bool = False,
) -> list[str]:
    """The screen's lines for one refresh; the selected job is marked ``>``.

    Args:
        doc: The status document shown.
        source: Where it came from (the daemon's socket, or a local scan).
        selected: Index of the selected job.
        width: Terminal columns.
        colour: Colour verdicts and severities.
        note: A command's output, shown under the findings.
        explaining: ``note`` is an explanation: the keys line and the note's first line
            say that q and Esc go back to the list.
    """
    from watchdog.daemon.status import status_gpu_lines
    from watchdog.model import finding_ref
    from watchdog.render import fit

    # Wrapped, never cut: the host, the socket, PIDs and unit names identify things.
    out = [
        *fit(
            printable(
                f"rogue-watchdog top  host {doc.get('host') or '-'}  {time.strftime('%H:%M:%S')}"
                f"  from {source}"
            ),
            width,
            "  ",
        ),
        *fit(EXPLAIN_KEYS if explaining else KEYS, width, "  "),
        "",
    ]
    jobs = doc.get("jobs") or []
    out += status_gpu_lines(doc, width)
    if not doc.get("gpus"):
        nvml = doc.get("nvml") or {}
        out += fit(
            printable(f"  no GPUs listed (NVML: {nvml.get('error') or 'none'})"), width, "    "
        )
    out += ["", f"  {'VERDICT':<10} {'PID':>7} {'USER':<10} {'GPU':<5} ORIGIN / COMMAND"]
    if not jobs:
        out.append("  no training jobs")
    for i, j in enumerate(jobs):
        mark = ">" if i == selected else " "
        on = ",".join(str(h.get("index")) for h in j.get("gpus") or []) or "-"
        verdict = str(j.get("verdict") or "-")
        user = printable(str(j.get("user") or "-"))
        head = f"{mark} {paint(f'{verdict:<10}', verdict, colour)} {j.get('root_pid'):>7} "
        head += f"{user:<10} {on:<5} "
        # A long user name or GPU list shifts the origin right rather than being cut.
        pad = 36 + max(0, len(user) - 10) + max(0, len(on) - 5)
        room = max(20, width - pad)
        origin = fit(printable(str(j.get("origin") or "-")), room, " " * 36)
        out.append(head + origin[0])
        out += [" " * 36 + x.lstrip() for x in origin[1:]]
        out.append(" " * 36 + shorten_command(j.get("cmdline") or [], max(20, width - 36)))
        if j.get("restarts") and i == selected:  # the selected job's: the list stays short
            again = fit(printable(str(j["restarts"])), max(20, width - 36))
            out += [" " * 36 + x for x in again]
    findings = doc.get("findings") or []
    out += ["", f"  open findings: {len(findings)}"]
    for f in findings:
        sev = str(f.get("severity") or "-")
        text = fit(printable(f"{f.get('kind')}: {f.get('message')}"), max(20, width - 17))
        out.append(f"  {finding_ref(f.get('id')):<5} {paint(f'{sev:<8}', sev, colour)} " + text[0])
        out += [" " * 17 + x for x in text[1:]]
    if note:  # a command's output: wrapped, never cut
        out.append("")
        if explaining:
            out.append("── explanation (q/Esc: back) ──")
        for x in note.splitlines():
            x = printable(x)
            out += [x[i : i + width] for i in range(0, len(x), width)] or [""]
    return out


@contextlib.contextmanager
def _cbreak(fd: int) -> Iterator[None]:
    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        sys.stdout.write("\x1b[?1049h\x1b[?25l")  # alternate screen, hide the cursor
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)
        sys.stdout.write("\x1b[?25h\x1b[?1049l")
        sys.stdout.flush()


def _key(fd: int, timeout_s: float) -> str:
    ready, _, _ = select.select([fd], [], [], timeout_s)
    if not ready:
        return ""
    data = os.read(fd, 16).decode(errors="replace")
    return {"\x1b[A": "k", "\x1b[B": "j"}.get(data, data[:1])


def fit_rows(lines: list[str], rows: int, width: int = 80) -> list[str]:
    """The frame cut to the terminal's ``rows``: the header (title and keys, up to the
    first blank line) and the newest lines stay, one line says how many were left out.

    A frame taller than the terminal used to scroll the header off the screen, keys and
    all; what a person acts on (an explanation, a plan before ``y``) is at the bottom.
    On a terminal too short for the whole header, its last line (the keys) is kept.

    Args:
        lines: :func:`frame`'s lines (already wrapped to ``width``).
        rows: Terminal rows.
        width: Terminal columns: the note about hidden lines is cut to fit one row.

    Returns:
        At most ``rows`` lines (none for a terminal without rows).
    """
    if len(lines) <= rows:
        return lines
    if rows <= 0:
        return []
    head = lines.index("") if "" in lines else 0
    header = lines[:head]
    if len(header) + 2 > rows:
        header = header[-1:] if rows >= 3 else []
    keep = max(1, rows - len(header) - 1)
    hidden = len(lines) - len(header) - keep
    note = f"… {hidden} line(s) hidden: the terminal has {rows} rows"[: max(1, width)]
    return [*header, note, *lines[-keep:]][-rows:]


def _draw(lines: list[str]) -> None:
    size = os.get_terminal_size(sys.stdout.fileno())
    sys.stdout.write("\x1b[H\x1b[2J" + "\r\n".join(fit_rows(lines, size.lines, size.columns)))
    sys.stdout.flush()


def _run_command(argv: list[str]) -> str:
    """Run one of our commands; its output (both streams) for the screen."""
    return _run(argv)[1]


def _run(argv: list[str]) -> tuple[int, str]:
    """Run one of our commands: its exit status, and its output for the screen."""
    # Its stderr is a pipe here but its reader is a person: human log lines. Its stdin
    # is /dev/null: the terminal's keys are the live view's.
    done = command.run([sys.executable, "-m", "watchdog", "--log-format", "human", *argv], 120)
    text = (done.stdout + done.stderr).rstrip()
    return done.returncode, f"exit {done.returncode}: rogue-watchdog {shlex.join(argv)}\n{text}"


def run(args: argparse.Namespace) -> int:
    """The live view's loop; returns the exit code (0 on ``q``, 2 without a terminal)."""
    from watchdog.daemon.ipc import StatusError

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("rogue-watchdog: the live view needs a terminal; use `status`", file=sys.stderr)
        return 2
    socket = socket_path(args)
    # A local scan's log events would scribble over the screen; what matters is drawn.
    configure_logging(open(os.devnull, "w"))  # noqa: SIM115 - for the process's lifetime
    config_path = resolve_config_path(args.config)
    common = [*(["--config", config_path] if config_path else [])]
    fd = sys.stdin.fileno()
    selected, note, explaining = 0, "", False
    colour = use_colour()
    with _cbreak(fd):
        while True:
            try:
                doc, source = fetch(socket, config_path, args.timeout)
            except StatusError as exc:
                doc, source = {}, f"nowhere: {exc}"
            if config_path is None:
                # The daemon's own file, named: the commands judge under it, as they
                # would after asking the daemon, without saying so on the screen.
                daemon_path = (doc.get("config") or {}).get("path")
                common = ["--config", daemon_path] if daemon_path else []
            jobs = doc.get("jobs") or []
            selected = max(0, min(selected, len(jobs) - 1))
            width = os.get_terminal_size(sys.stdout.fileno()).columns
            _draw(frame(doc, source, selected, width, colour, note, explaining))
            key = _key(fd, args.interval)
            if explaining and key in ("q", "\x1b"):
                note, explaining = "", False
                continue
            if key in ("q", "\x03"):
                return 0
            explaining = False
            if key in ("j", "k"):
                selected += 1 if key == "j" else -1
                note = ""
            elif key == "r":
                note = ""
            elif key in ("e", "t", "d") and jobs:
                job = jobs[selected]
                pid = str(job.get("root_pid"))
                if key == "e":
                    note, explaining = _run_command(["explain", pid, *common]), True
                    continue
                verb = "terminate" if key == "t" else "disable-source"
                what = shorten_command(job.get("cmdline") or [], 60)
                # The plan first, from the command itself (the one guard decides): a
                # refusal is shown and nothing is asked; else the plan is what `y` does.
                code, plan = _run([verb, pid, "--dry-run", *common])
                if code != 0:
                    note = plan
                    continue
                _draw(
                    [
                        *frame(doc, source, selected, width, colour, plan),
                        "",
                        printable(f"{verb} the {job.get('verdict')} job PID {pid} `{what}`?"),
                        "press y to do what the dry run above says, any other key to cancel",
                    ]
                )
                answer = _key(fd, 60.0)
                if answer == "y":
                    note = _run_command([verb, pid, *common])
                else:
                    note = f"{verb} PID {pid}: cancelled"

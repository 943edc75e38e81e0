"""Scan results as JSON (the documented contract) and as a table for people.

The JSON shape is specified in docs/scan-json-schema.md; its key names are a contract.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .hosttext import command_text
from .spelling import fmt_bytes

if TYPE_CHECKING:
    from .model import Finding, GpuHeld, GpuInfo, Job, ScanResult

SCHEMA_VERSION = 1


def gpu_json(gpu: GpuInfo) -> dict[str, Any]:
    """One ``gpus[]`` entry."""
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "memory_total_bytes": gpu.memory_total_bytes,
        "memory_used_bytes": gpu.memory_used_bytes,
        "mig_index": gpu.mig_index,
    }


def job_json(job: Job) -> dict[str, Any]:
    """One ``jobs[]`` entry."""
    return {
        "root_pid": job.root_pid,
        "pids": list(job.pids),
        "user": job.user,
        "cmdline": list(job.cmdline),
        "gpu_memory_bytes": job.gpu_memory_bytes,
        "gpu_uuids": list(job.gpu_uuids),
        "devices": list(job.devices),
        "listening": list(job.listening),
        "gpus": [g.to_json() for g in job.gpus],
        "verdict": job.verdict,
        "rule": job.rule,
        "reason": job.reason,
        "evidence": list(job.evidence),
        "workload": job.workload,
        "workload_evidence": list(job.workload_evidence),
        "origin": job.origin.to_json(),
        "advice": job.advice.to_json(job.root_pid),
        "lineage": [{"pid": p.pid, "exe": p.exe, "cmdline": list(p.cmdline)} for p in job.lineage],
    }


def finding_json(f: Finding) -> dict[str, Any]:
    """One ``findings[]`` entry."""
    return {
        "kind": f.kind,
        "severity": f.severity,
        "message": f.message,
        "root_pid": f.root_pid,
        "details": f.details,
    }


def result_json(result: ScanResult) -> dict[str, Any]:
    """The whole ``scan --json`` document."""
    return {
        "schema_version": SCHEMA_VERSION,
        "host": result.host,
        "time": result.time.isoformat(timespec="seconds"),
        "duration_s": round(result.duration_s, 4),
        "nvml": {
            "available": result.nvml.available,
            "driver_version": result.nvml.driver_version,
            "error": result.nvml.error,
        },
        "gpus": [gpu_json(g) for g in result.gpus],
        "jobs": [job_json(j) for j in result.jobs],
        "findings": [finding_json(f) for f in result.findings],
    }


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """Make text safe for a terminal or a log line.

    Command lines are attacker-controlled bytes: non-UTF-8 bytes (kept as surrogates by
    ``surrogateescape``) become ``\\xNN`` and control characters (newlines that would
    forge table rows, terminal escapes) become backslash escapes.
    """
    if text.isprintable():
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            out.append(_ESCAPES.get(ch) or f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return "".join(out)


#: Width used when output is piped and ``COLUMNS`` is not set: whole lines are kept.
UNLIMITED = 100_000
#: Below this many columns for ORIGIN and COMMAND together, each job wraps onto lines.
_MIN_SIDE_BY_SIDE = 56

_COLOURS = {
    "rogue": "31;1",
    "excess": "33;1",
    "sanctioned": "32",
    "ignored": "2",
    "critical": "31;1",
    "high": "31",
    "warning": "33",
    "info": "2",
}


def output_width(stream: Any = None) -> int:
    """Columns to lay tables out in: ``COLUMNS`` when set, else the terminal's width on a
    tty, else unlimited (piped output keeps whole command lines for logs and mail)."""
    stream = sys.stdout if stream is None else stream
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if stream is not None and stream.isatty():
        return shutil.get_terminal_size((120, 24)).columns
    return UNLIMITED


def use_colour(stream: Any = None) -> bool:
    """Colour only on a terminal, and never with ``NO_COLOR`` set (https://no-color.org)."""
    stream = sys.stdout if stream is None else stream
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    return stream is not None and stream.isatty()


def paint(text: str, key: str, colour: bool) -> str:
    """``text`` in the colour of a verdict or severity ``key`` when ``colour`` is on.

    Call it on text already padded to its column: escapes take no columns on screen.
    """
    code = _COLOURS.get(key.strip())
    return f"\x1b[{code}m{text}\x1b[0m" if colour and code else text


def shorten_command(argv: Sequence[str], width: int) -> str:
    """A command line in at most ``width`` characters, keeping what tells jobs apart,
    host text escaped (:func:`watchdog.hosttext.command_text` of the printable words)."""
    return command_text([printable(a) for a in argv], width)


def shorten_path_words(text: str, width: int) -> str:
    """Origin text in at most ``width`` characters where it can be: path words keep their
    last part (``…/train.service``). Never cut further: the rest names a unit, a crontab
    entry or a container, and a cut name identifies nothing, so the result may be longer
    than ``width`` (callers wrap it or give it a line of its own)."""
    if len(text) <= width:
        return text
    words = text.split(" ")
    for i, word in enumerate(words):
        head, sep, base = word.rpartition("/")
        if sep and head and base:
            words[i] = "…/" + base
            if len(" ".join(words)) <= width:
                break
    return " ".join(words)


def gpu_label(held: GpuHeld, gpus: Sequence[GpuInfo]) -> str:
    """``3`` for GPU 3, ``3/1`` for its MIG instance 1."""
    info = next((g for g in gpus if g.uuid == held.uuid), None)
    if info is not None and info.mig_index is not None:
        return f"{info.index}/{info.mig_index}"
    return str(held.index)


def _mem(n: int | None) -> str:
    return "-" if n is None else fmt_bytes(n)


def gpu_lines(
    label: str,
    name: str,
    used: int | None,
    total: int | None,
    uuid: str,
    held: Iterable[tuple[str, int | None]] | None,
    width: int = UNLIMITED,
) -> list[str]:
    """One GPU's summary line (two when narrow): memory used of total, and how much of it
    sanctioned jobs hold, unsanctioned ones hold, ignored ones hold (shown when one is
    there), and what no job accounts for.

    Args:
        label: ``3`` or ``3 MIG 1``.
        name: Product name.
        used: Memory NVML counts as used, bytes, or None.
        total: Framebuffer size, bytes, or None.
        uuid: The device UUID.
        held: ``(verdict, memory_bytes or None)`` per job on this device; None when
            which job is on which device is not known (a daemon too old to say).
        width: Columns.

    Returns:
        Printable lines; an unknown figure is ``-`` (not attributable is unknown when
        ``used`` or any job's figure is).
    """
    ok = bad = ignored = 0
    unknown = any_ignored = False
    for verdict, memory in held or ():
        any_ignored = any_ignored or verdict == "ignored"
        if memory is None:
            unknown = True
        elif verdict == "sanctioned":
            ok += memory
        elif verdict == "ignored":
            ignored += memory
        else:
            bad += memory
    rest = None if used is None or unknown else max(0, used - ok - bad - ignored)
    head = printable(f"  GPU {label}  {name}  {_mem(used)} used of {_mem(total)}")
    # Ignored holders (a display server, an exempted notebook) are neither sanctioned
    # nor unsanctioned: a holder of their own, shown where one is on the GPU.
    also = f", ignored {fmt_bytes(ignored)}" if any_ignored else ""
    split = (
        f"sanctioned {fmt_bytes(ok)}, unsanctioned {fmt_bytes(bad)}{also}, "
        f"not attributable {_mem(rest)}"
        if held is not None
        else "sanctioned -, unsanctioned -, not attributable -"
    )
    uuid = printable(uuid)
    one = f"{head}: {split}  {uuid}"
    if len(one) <= width:
        return [one]
    # A cut UUID identifies nothing: it goes whole on a line of its own when it does not
    # fit beside the head.
    if len(head) + 2 + len(uuid) <= width:
        return [f"{head}  {uuid}", "    " + split]
    return [head, "    " + uuid, "    " + split]


def gpu_summary(gpu: GpuInfo, jobs: Sequence[Job], width: int = UNLIMITED) -> list[str]:
    """:func:`gpu_lines` for one device of a scan."""
    mig = f" MIG {gpu.mig_index}" if gpu.mig_index is not None else ""
    held = [(j.verdict, h.memory_bytes) for j in jobs for h in j.gpus if h.uuid == gpu.uuid]
    return gpu_lines(
        f"{gpu.index}{mig}",
        gpu.name,
        gpu.memory_used_bytes,
        gpu.memory_total_bytes,
        gpu.uuid,
        held,
        width,
    )


#: Findings about what this scan could not see on any GPU: a one-GPU view keeps them, so
#: an empty view never reads as "nothing on GPU N" when the scan was blind.
BLIND_SPOT_KINDS = ("nvml-unavailable", "pid-namespace", "proc-unavailable", "limited-visibility")


#: Findings that mean NVML may not place every job on its GPU: a ``--gpu N`` view then
#: lists the jobs it cannot place as well, rather than calling the GPU clear.
PLACEMENT_BLIND_KINDS = (
    *BLIND_SPOT_KINDS,
    "gpu-processes-hidden",
    "gpu-query-failed",
    "gpu-query-hung",
)


def placement_blind(kinds: Iterable[str]) -> bool:
    """True when a finding of one of ``kinds`` means some job's GPU may be unknown."""
    return any(k in PLACEMENT_BLIND_KINDS for k in kinds)


def gpu_view_note(result: ScanResult, index: int) -> str | None:
    """Why a ``--gpu N`` view of a scan may be empty or wider than GPU ``index``; None
    when NVML placed every job and GPU ``index`` was seen."""
    return view_note(
        index,
        nvml_available=result.nvml.available,
        blind=placement_blind(f.kind for f in result.findings),
        gpu_indexes={g.index for g in result.gpus},
    )


def missing_gpu(result: ScanResult, index: int) -> str | None:
    """Why a scan's ``--gpu index`` names no GPU here (:func:`no_such_gpu`), or None."""
    return no_such_gpu(
        index,
        nvml_available=result.nvml.available,
        blind=placement_blind(f.kind for f in result.findings),
        gpu_indexes={g.index for g in result.gpus},
    )


def view_note(
    index: int, *, nvml_available: bool, blind: bool, gpu_indexes: set[int]
) -> str | None:
    """The one rule behind ``scan --gpu N`` and ``status --gpu N``: why the view of GPU
    ``index`` may be empty or list more than that GPU's jobs; None when it is exact.

    Args:
        index: The GPU asked for (NVML index).
        nvml_available: NVML answered.
        blind: Some GPU processes could not be placed (:func:`placement_blind`).
        gpu_indexes: The NVML indexes of the GPUs listed.
    """
    if not nvml_available:
        return (
            f"GPU {index}: NVML is unavailable, so no job can be placed on a GPU: "
            "every training job is listed"
        )
    if blind:
        return (
            f"GPU {index}: NVML cannot list every GPU process here (see the findings): "
            "jobs it places on no GPU are listed too"
        )
    return no_such_gpu(index, nvml_available=nvml_available, blind=blind, gpu_indexes=gpu_indexes)


def no_such_gpu(
    index: int, *, nvml_available: bool, blind: bool, gpu_indexes: set[int]
) -> str | None:
    """Why ``--gpu index`` names a GPU that is not here (``scan`` and ``status`` refuse it,
    exit 2), or None. Only said when NVML answered and placed every process: while it is
    unavailable or blind, a GPU it does not list may still be there.

    Args:
        index: The GPU asked for (NVML index).
        nvml_available: NVML answered.
        blind: Some GPU processes could not be placed (:func:`placement_blind`).
        gpu_indexes: The NVML indexes of the GPUs listed.
    """
    if not nvml_available or blind or index in gpu_indexes:
        return None
    listed = ", ".join(str(i) for i in sorted(gpu_indexes)) or "none"
    return f"GPU {index}: NVML lists no such GPU here (GPUs: {listed})"


def on_gpu(job: Job, index: int) -> bool:
    """True when NVML lists a member of ``job`` on GPU ``index`` (or a MIG instance of it)."""
    return index in job.gpu_indexes


def filter_gpu(result: ScanResult, index: int) -> ScanResult:
    """The part of a scan about GPU ``index``: that GPU (and its MIG instances), the jobs
    on it, their findings and the findings that name the GPU."""
    from dataclasses import replace

    # A job NVML does not place may be on this GPU when NVML cannot see every process:
    # listed too, so a blind view is never reported as a clear one.
    blind = not result.nvml.available or placement_blind(f.kind for f in result.findings)
    jobs = [j for j in result.jobs if on_gpu(j, index) or (blind and not j.gpu_indexes)]
    roots = {j.root_pid for j in jobs}
    findings = [
        f
        for f in result.findings
        if (f.root_pid is not None and f.root_pid in roots)
        or f.details.get("gpu_index") == index
        or index in (f.details.get("gpu_indexes") or ())
        or f.kind in PLACEMENT_BLIND_KINDS
    ]
    gpus = [g for g in result.gpus if g.index == index]
    return replace(result, gpus=gpus, jobs=jobs, findings=findings)


#: Programs whose invocations the product prints as advice (hints, stop lines, undo lines):
#: from one of these words a command runs to the end of its clause and is never wrapped
#: inside itself (a pasted half of `sed -i '1s/^/...' FILE` ran `-i: command not found`).
COMMAND_WORDS = frozenset(
    {"rogue-watchdog", "sed", "kill", "systemctl", "crontab", "scancel", "atrm", "docker",
     "podman", "kubectl", "sudo", "journalctl"}
)  # fmt: skip

#: A shell word: quoted parts and bare characters, up to unquoted whitespace.
_SHELL_WORD = re.compile(r"""(?:'[^']*'|"[^"]*"|[^\s'"])+""")
#: Spans never wrapped inside: a quoted command (`rogue-watchdog ...`, see
#: :func:`_glue_atom`), and a short group in parentheses such as a cron schedule
#: `(* * * * *)` (was wrapped to `(* * * *` / `*)`).
_ATOM = re.compile(r"`[^`\n]+`|\([^()\n]{1,22}\)")
#: Stands for a space inside an atom while textwrap splits at the others.
_GLUE = "\x00"


#: Words after a program's name that make it prose ("its crontab entry was removed").
_PROSE_NEXT = frozenset(
    {"a", "an", "the", "is", "was", "are", "entry", "line", "lines", "unit", "job", "jobs",
     "container", "containers", "and", "or", "of", "to", "in", "on", "it", "its", "will"}
)  # fmt: skip


def _looks_like_a_command(span: str) -> bool:
    """A program's name with arguments (a flag, a path, a number, or a subcommand of
    ``rogue-watchdog``), not the name used as a word of prose."""
    words = span.split()
    if len(words) < 2 or words[1].rstrip(";,") in _PROSE_NEXT:
        return False
    if words[0] == "rogue-watchdog":
        return re.fullmatch(r"[a-z][a-z-]*[;,]?", words[1]) is not None
    return any(
        w.startswith("-") or "/" in w or w.rstrip(";,").isdigit() or re.search(r"\w\.\w", w)
        for w in words[1:]
    )


def _glue_atom(m: re.Match[str]) -> str:
    """A short group in parentheses, or a backtick-quoted command the product advises
    (`rogue-watchdog status --config ...`), glued; a quoted job's command line (`python3
    /long/path/train.py ...`) is what ran, not advice: it wraps at its spaces."""
    span = m.group(0)
    if span.startswith("`") and not (
        span[1:].split(" ", 1)[0] in COMMAND_WORDS and _looks_like_a_command(span[1:-1])
    ):
        return span
    return span.replace(" ", _GLUE)


def _glue_commands(text: str) -> str:
    """``text`` with each unwrappable span's spaces glued (:data:`_GLUE`)."""
    text = _ATOM.sub(_glue_atom, text)
    out: list[str] = []
    pos = 0
    for m in re.finditer(r"(?:(?<=\s)|^)([\w.-]+)(?=\s)", text):
        if m.start() < pos or m.group(1) not in COMMAND_WORDS:
            continue
        # The command's words up to the end of its clause: a word ending in `;` or `,`
        # (kept), a `(` or `#` that begins an aside, or the end of the text.
        end = m.end()
        for w in _SHELL_WORD.finditer(text, m.end()):
            if text[end : w.start()].strip():
                break
            if w.group(0)[0] in "(#" or w.group(0) in ("or", "and"):
                break
            end = w.end()
            if w.group(0)[-1] in ";,":
                break
        span = text[m.start() : end]
        if not _looks_like_a_command(span):
            continue
        out.append(text[pos : m.start()])
        out.append(span.replace(" ", _GLUE))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def fit(text: str, width: int, indent: str = "", first: str = "") -> list[str]:
    """Prose (a finding, a reason) wrapped to ``width`` columns at spaces only; whole when
    it fits. A command in it (from a word of :data:`COMMAND_WORDS`, or quoted in
    backticks), a short parenthesised group and any word are never broken: one that does
    not fit the rest of a line starts the next, and one longer than a line has that line
    to itself, longer than ``width`` (the caller shows it whole or cuts it visibly).

    Args:
        text: Already made printable.
        width: Columns.
        indent: Prefix of continuation lines.
        first: Prefix of the first line.
    """
    if len(first) + len(text) <= width:
        return [first + text]
    lines = textwrap.wrap(
        _glue_commands(text),
        width=max(len(indent) + 20, width),
        initial_indent=first,
        subsequent_indent=indent,
        # Never at a hyphen (UUIDs, unit names), never inside a word: a path or a
        # command pasted from two lines does not work.
        break_on_hyphens=False,
        break_long_words=False,
    ) or [first]
    return [line.replace(_GLUE, " ") for line in lines]


def _job_rows(jobs: Sequence[Job], gpus: Sequence[GpuInfo], width: int, colour: bool) -> list[str]:
    cells = []
    for j in jobs:
        cells.append(
            (
                j.verdict,
                str(j.root_pid),
                printable(j.user or "-"),
                str(len(j.pids)),
                ",".join(gpu_label(g, gpus) for g in j.gpus) or "-",
                _mem(j.gpu_memory_bytes),
                printable(j.origin.describe()),
                j,
            )
        )
    # User names and GPU lists are never cut: a long one widens its column.
    w_user = max(4, *(len(c[2]) for c in cells))
    w_gpu = max(3, *(len(c[4]) for c in cells))
    w_mem = max(7, *(len(c[5]) for c in cells))
    fixed = f"{'VERDICT':<10} {'PID':>7} {'USER':<{w_user}} {'PROCS':>5} {'GPU':<{w_gpu}} "
    fixed += f"{'GPU MEM':>{w_mem}}  "
    room = width - len(fixed)
    longest_origin = max(6, *(len(c[6]) for c in cells))
    # Wide: ORIGIN and COMMAND side by side. Narrow: COMMAND in the row (on a line of its
    # own when even that does not fit) and the origin on the next line.
    wide = room >= _MIN_SIDE_BY_SIDE
    w_origin = min(longest_origin, max(20, room * 2 // 5)) if wide else 0
    own_line = not wide and room < 24
    if wide:
        lines = [fixed + f"{'ORIGIN':<{w_origin}}  COMMAND"]
    else:
        lines = [(fixed + ("" if own_line else "COMMAND")).rstrip()]
    for verdict, pid, user, procs, gpu, mem, origin, job in cells:
        head = (
            paint(f"{verdict:<10}", verdict, colour)
            + f" {pid:>7} {user:<{w_user}} {procs:>5} "
            + f"{gpu:<{w_gpu}} {mem:>{w_mem}}  "
        )
        inner = max(20, width - 4)
        text = shorten_path_words(origin, w_origin if wide else inner - 5)
        if wide and len(text) <= w_origin:
            cmd_w = max(20, room - w_origin - 2)
            lines.append(head + f"{text:<{w_origin}}  " + shorten_command(job.cmdline, cmd_w))
            text = ""
        elif wide:  # an origin too long for its column gets a line of its own, whole
            cmd_w = max(20, room - w_origin - 2)
            lines.append(head + f"{'(below)':<{w_origin}}  " + shorten_command(job.cmdline, cmd_w))
            text = shorten_path_words(origin, inner - 5)
        elif own_line:
            lines.append(head.rstrip())
            lines.append("    " + shorten_command(job.cmdline, inner))
        else:
            lines.append(head + shorten_command(job.cmdline, room))
        if text:
            lines.extend(fit(text, width, " " * 9, "    from "))
        if job.verdict != "sanctioned" and job.reason:
            lines.extend(fit(printable(job.reason), width, " " * 9, "    why: "))
        if job.workload != "training":
            lines.extend(fit(printable(class_text(job)), width, " " * 11, "    class: "))
        if not job.may_train and job.verdict == "rogue":
            # Not training: no stop advice (it may serve others); how to exempt it instead.
            lines.extend(fit(printable(job.exemption()), width, " " * 12, "    exempt: "))
            continue
        again = job.advice.restarts if job.unsanctioned else None
        if again is not None:
            lines.extend(fit(printable(again.line()), width, " " * 9, "    "))
        copies = job.advice.copies if job.unsanctioned else None
        if copies is not None:  # the other rows its terminate stops (taken as its copies)
            lines.extend(fit(printable(copies.text()), width, " " * 9, "    "))
        stop = stop_text(job) if job.unsanctioned else None
        if stop:
            # The command stays whole on its line and the note is comment lines: what a
            # person pastes runs as printed (a wrapped "(--dry-run …)" was a syntax error).
            whole = "    stop: " + printable(stop)
            command, sep, note = stop.partition("  # ")
            if len(whole) <= width or not sep:
                lines.append(whole)  # all on one line: the note is a comment there too
            else:
                lines.append("    stop: " + printable(command))
                lines.extend(fit(printable(note), width, " " * 10 + "# ", " " * 10 + "# "))
    return lines


def class_text(job: Job) -> str:
    """``serving (module vllm.entrypoints.openai.api_server)``: a job's class and why."""
    why = "; ".join(job.workload_evidence)
    return f"{job.workload} ({why})" if why else job.workload


def stop_text(job: Job) -> str | None:
    """What a person runs to stop a rogue job and keep it from coming back, as the guard
    decided it (:meth:`watchdog.model.Advice.stop_line`): ``disable-source`` first where
    it may act on the source, ``terminate`` alone where the source is a sanctioned
    rule's; None for a job nothing may be done about."""
    return job.advice.stop_line(job.root_pid)


def result_table(
    result: ScanResult,
    *,
    config_line: str | None = None,
    width: int | None = None,
    colour: bool | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The human view of a scan: header, GPUs, one row per job, findings.

    Args:
        result: The scan (possibly narrowed by :func:`filter_gpu`).
        config_line: Which configuration was used, shown under the header.
        width: Columns to fit; default :func:`output_width`.
        colour: Colour verdicts and severities; default :func:`use_colour`.
        notes: Lines shown under the GPUs (why a ``--gpu`` view may be empty).

    Returns:
        Lines joined with ``\\n``; host text escaped by :func:`printable`.
    """
    width = output_width() if width is None else width
    colour = use_colour() if colour is None else colour
    lines = [
        printable(
            f"rogue-watchdog scan  host {result.host}  {result.time.isoformat(timespec='seconds')}"
        )
    ]
    if config_line:
        lines.extend(fit(printable(config_line), width, "  "))
    if result.nvml.available:
        lines.append(
            printable(
                f"NVML: driver {result.nvml.driver_version or '-'}, {len(result.gpus)} GPU(s)"
            )
        )
        for g in result.gpus:
            lines.extend(gpu_summary(g, result.jobs, width))
    else:
        lines.extend(
            fit(
                printable(f"NVML: unavailable ({result.nvml.error or '-'}); OS sources only"),
                width,
                "  ",
            )
        )
    for note in notes:
        lines.extend(fit(printable(note), width, "  "))
    lines.append("")
    if not result.jobs:
        lines.append("No training jobs found.")
    else:
        lines.extend(_job_rows(result.jobs, result.gpus, width, colour))
    lines.append("")
    if result.findings:
        lines.append(f"Findings ({len(result.findings)}):")
        for f in result.findings:
            sev = f"[{f.severity}]"
            text = fit(f"{sev} {printable(f.kind)}: {printable(f.message)}", width, "    ", "  ")
            text[0] = text[0].replace(sev, paint(sev, f.severity, colour), 1)
            lines.extend(text)
    else:
        lines.append("No findings.")
    return "\n".join(lines)

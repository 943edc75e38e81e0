"""``scan``, ``explain`` and ``check-config``: one look at this host, one process, one file."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from ..hosttext import command_text
from .common import DEFAULT_CONFIG, config_parent, emit, gpu_index, look_config
from .complete import completers
from .help import command_help

if TYPE_CHECKING:
    from ..config import Config
    from ..model import Job, ScanResult


def _config(path: str | None) -> Config:
    return look_config(path)[1]


def config_line(path: str | None, config: Config) -> str:
    """Which configuration a one-shot command used, for the top of its report."""
    if path is None:
        return (
            f"config: none (no --config, and {DEFAULT_CONFIG} does not exist): "
            "nothing is sanctioned, so every training job is rogue"
        )
    n = len(config.sanctioned)
    return f"config: {path} ({n} sanctioned rule{'' if n == 1 else 's'})"


def learning_note(config: Config, now: float) -> str | None:
    """While the instance of ``config`` is in its learning period (``daemon.learn_until``,
    counted as the daemon counts it: from ``meta`` ``learning_started``, else its first
    start with the state directory, else now: no daemon started with it yet), the line a
    one-shot look says it under; None otherwise.

    Args:
        config: The configuration the look judges under.
        now: POSIX time.
    """
    learn = config.daemon.learn_until
    if learn is None:
        return None
    from ..daemon.loop import FIRST_STARTED, LEARNING_STARTED, learning_started_at
    from ..state import read_meta

    state_dir = config.daemon.state_dir
    try:
        first_raw = read_meta(state_dir, FIRST_STARTED)
        first = float(first_raw) if first_raw is not None else None
    except ValueError:
        first = None
    started = learning_started_at(first, read_meta(state_dir, LEARNING_STARTED))
    end = learn.end(now if started is None else started)
    if now >= end:
        return None
    until = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(end))
    return (
        f"learning until {until} (daemon.learn_until): findings about unsanctioned jobs "
        "at info, as the daemon reports them"
    )


def cmd_scan(args: argparse.Namespace) -> int:
    """``scan``: one pass over the host; exit 1 when a finding of warning or above is open."""
    import json

    from ..model import REPORTED_SEVERITIES
    from ..queue.source import one_shot_queue_findings
    from ..render import filter_gpu, gpu_view_note, missing_gpu, result_json, result_table
    from ..scan import Scanner

    path, config = look_config(args.config)
    result = Scanner(config, one_shot=True).scan()
    result.findings.extend(one_shot_queue_findings(config))
    notes: list[str] = []
    learning = learning_note(config, time.time())
    if learning is not None:
        # Judged as the daemon reports them: a look during learning pages nothing the
        # daemon would not (issue 33: `scan` said [high] rogue-job, `status` info).
        import dataclasses

        from ..daemon.loop import learned

        result = dataclasses.replace(result, findings=[learned(f) for f in result.findings])
        notes.append(learning)
    if args.gpu is not None:
        missing = missing_gpu(result, args.gpu)
        if missing is not None:  # a typo is not an empty view
            print(f"rogue-watchdog: {missing}", file=sys.stderr)
            return 2
        note = gpu_view_note(result, args.gpu)
        notes += [note] if note else []
        result = filter_gpu(result, args.gpu)
    code = 1 if any(f.severity in REPORTED_SEVERITIES for f in result.findings) else 0
    if args.json:
        emit(json.dumps(result_json(result), indent=2))
    else:
        emit(result_table(result, config_line=config_line(path, config), notes=notes))
    return code


def cmd_explain(args: argparse.Namespace) -> int:
    """``explain PID``: the lineage of one process, its job and its origin, in words.

    When the PID belongs to a training job, the job's verdict is shown and the origin is
    the job root's (a worker's own parent is the launcher, not the spawner).
    """
    from ..render import printable
    from ..scan import Scanner, resolve_origin

    config = _config(args.config)
    scanner = Scanner(config)
    result = scanner.scan()
    lineage = scanner.table.ancestors(args.pid)
    if not lineage:
        print(
            f"rogue-watchdog: PID {args.pid} is not visible in {config.paths.proc_root}",
            file=sys.stderr,
        )
        return 2
    job = next((j for j in result.jobs if args.pid in j.pids), None)
    if job is not None:
        origin = job.origin
    else:
        origin = resolve_origin(lineage, scanner.context(result.time), scanner.resolvers)

    lines: list[str] = []
    out = lines.append

    out(f"PID {args.pid}: {lineage[0].args_text}")
    if job is None:
        out("Not a training job (no GPU, no device fd, no launcher command line).")
    else:
        root = (
            "" if job.root_pid == args.pid else f" (member of the job rooted at PID {job.root_pid})"
        )
        out(f"Training job{root}: {len(job.pids)} process(es), verdict {job.verdict}")
        out(f"  why: {job.reason}")
        out(f"  counted as training because: {', '.join(job.evidence)}")
        why = "; ".join(job.workload_evidence)
        out(f"  class: {job.workload}" + (f" ({why})" if why else ""))
        out(gpu_memory_line(job, result))
    out("Lineage (nearest first):")
    for depth, p in enumerate(lineage):
        argv = command_text(p.cmdline, 100) or p.args_text
        out(f"  {'  ' * depth}{p.pid:>7} {p.user or '-':<10} {p.exe or '-'}  {argv}")
    said = origin.describe()
    # Each fact once: the kind when the description does not start with it, and no field
    # or evidence line that only repeats the description ("orphan (parent exited)").
    kind = "" if said.lower().startswith(origin.kind) else f" (kind {origin.kind})"
    out(f"Origin: {said}{kind}")
    for key, value in origin.fields.items():
        if value is not None and value != "" and str(value) != said:
            out(f"  {key}: {value}")
    for e in origin.evidence:
        if e != said:
            out(f"  evidence: {e}")
    if job is not None and job.unsanctioned:
        again = job.advice.restarts
        if again is None:
            out("Restarts: nothing rogue-watchdog can see starts it again")
        else:
            stops = f" (what stops it: {again.stops})" if again.stops else ""
            out(f"Restarts: {again.said()}{stops}")
    out(f"Remediation: {_remediation(job, result)}")
    emit("\n".join(printable(line) for line in lines))
    return 0


def gpu_memory_line(job: Job, result: ScanResult) -> str:
    """The ``GPU memory:`` line of ``explain``: what NVML lists the job's members as
    holding, the same figures as the job's row in ``scan`` (``GPU MEM``, ``jobs[].gpus``).

    Args:
        job: The job, from ``result``.
        result: The scan that found it (its GPUs name each device).

    Returns:
        ``  GPU memory: 5.0 GiB: GPU 0 GPU-aaaa 4.0 GiB, GPU 1 GPU-bbbb 1.0 GiB``; an
        unknown figure is ``unknown``; without NVML, why none is known.
    """
    from ..model import fmt_bytes
    from ..render import gpu_label

    if not result.nvml.available:
        return f"  GPU memory: unknown (NVML unavailable: {result.nvml.error or '-'})"
    if not job.gpus:
        return "  GPU memory: none (NVML lists no member of the job on any GPU)"
    each = ", ".join(
        f"GPU {gpu_label(h, result.gpus)} {h.uuid} {fmt_bytes(h.memory_bytes)}" for h in job.gpus
    )
    return f"  GPU memory: {fmt_bytes(job.gpu_memory_bytes)}: {each}"


def _remediation(job: Job | None, result: ScanResult | None = None) -> str:
    """The ``Remediation:`` line of ``explain``, from the guard: a job's advice; for a
    process of no job, none (its origin's command would stop or disable something that
    is not training: the daemon itself, a shell, a service). A run a rogue service
    launched (its origin names no spawner) names that service as its source."""
    from ..policy.services import service_source

    if job is None:
        return "none: not a training job (advice is only given for training jobs)"
    found = next(
        (
            f
            for f in (result.findings if result is not None else [])
            if f.kind == "rogue-service" and f.root_pid == job.root_pid
            and f.details.get("service_pids")
        ),
        None,
    )  # fmt: skip
    if (
        found is not None
        and job.advice.refused is None
        and job.origin.kind
        in (
            "unknown",
            "orphan",
        )
    ):
        svc = found.details["service_pids"][0]
        # The terminate of this run takes its copies in as every other form says.
        copies = f"; {job.advice.copies.text()}" if job.advice.copies is not None else ""
        return (
            f"its source is {service_source(found)}: to stop the service and its run: "
            f"rogue-watchdog terminate{job.advice.cli_args} {svc} (or by hand: kill -TERM "
            f"{svc} {job.root_pid}); to stop this run only: rogue-watchdog "
            f"terminate{job.advice.cli_args} {job.root_pid}{copies}"
        )
    return job.advice.explain_line(job.root_pid if job.unsanctioned else None)


def cmd_check_config(args: argparse.Namespace) -> int:
    """``check-config FILE``: validate and summarise a configuration file.

    Every error is listed (one ``config error:`` line each, on stderr), not only the
    first; warnings (``config warning:``) do not change the exit code. Besides
    :func:`~watchdog.config.load_config` (syntax, values, trust of the file and of the
    files it names), it checks what only matters on the running host: each webhook
    sink's URL can be read (:func:`~watchdog.daemon.alerts.secrets.check_sink_secrets`),
    each ship gate's ``quarantine_dir`` is on its deploy directory's file system
    (:func:`~watchdog.weights.quarantine.check_quarantine_dirs`).

    Returns:
        0 valid, 2 invalid.
    """
    from ..config import load_config
    from ..config.base import ConfigError, errors_of
    from ..daemon.alerts.secrets import check_sink_secrets
    from ..render import printable
    from ..weights.quarantine import check_quarantine_dirs

    config: Config | None = None
    try:
        config = load_config(args.file)
        errors, warnings, refs = [], list(config.warnings), config.refs
    except ConfigError as exc:  # go on: the sinks that parsed are still checked
        errors, warnings, refs = errors_of(exc), list(exc.warnings), exc.refs
    more_errors, more_warnings = check_sink_secrets(args.file, refs)
    said = {e.key for e in errors}  # an untrusted url_file is already one error
    errors += [e for e in more_errors if e.key not in said]
    warnings += more_warnings
    if config is not None:
        errors += check_quarantine_dirs(args.file, config.ship_gates)
    for w in sorted(warnings, key=lambda e: e.line or 0):
        print(printable(f"rogue-watchdog: config warning: {w}"), file=sys.stderr)
    if errors:
        for e in sorted(errors, key=lambda e: e.line or 0):
            print(printable(f"rogue-watchdog: config error: {e}"), file=sys.stderr)
        print(
            printable(f"rogue-watchdog: {args.file}: {_count(len(errors), 'error')}"),
            file=sys.stderr,
        )
        return 2
    assert config is not None
    emit(
        f"{printable(args.file)}: OK: {_count(len(config.sanctioned), 'sanctioned rule')}, "
        f"{_count(len(config.training.launchers), 'launcher pattern')}, "
        f"{_count(len(config.ignore), 'ignore entry', 'ignore entries')}"
        + (f", {_count(len(warnings), 'warning')}" if warnings else "")
    )
    for line in effective_lines(config):
        emit(printable(line))
    return 0


def gpu_open_lines(config: Config) -> list[str]:
    """``enforcement.gpu_open`` when the default or a rule is not ``off``: the mode, the
    rules that set it, the device rules its globs give on this host, and whether this
    host can enforce it (docs/operations.md, "GPU open")."""
    from ..actions.gpudeny import device_rules, find_controller

    s = config.enforcement
    rules = [r for r in s.rules if r.gpu_open is not None]
    if s.gpu_open == "off" and all(r.gpu_open == "off" for r in rules):
        return []
    by_rule = "".join(f", {r.gpu_open} by rule {r.name!r}" for r in rules)
    out = [
        f"gpu_open: {s.gpu_open} by default{by_rule}" + (" (dry_run: audit)" if s.dry_run else "")
    ]
    nodes = device_rules(s.gpu_devices)
    out.append(
        f"  devices {', '.join(s.gpu_devices)}: "
        + ("; ".join(nodes) if nodes else "no device node matches on this host")
    )
    ctl = find_controller(config.paths.cgroup_root)
    how = {
        "cgroup-v1": "cgroup v1 devices controller",
        "cgroup-v2": "cgroup v2 device program, BPF_CGROUP_DEVICE",
    }.get(ctl.kind, ctl.kind)
    out.append(f"  this host: {ctl.why or f'can enforce ({how} under {ctl.hierarchy})'}")
    return out


def effective_lines(config: Config) -> list[str]:
    """What ``check-config`` shows in force beyond the counts: the ignore list (the
    shipped defaults marked, or said dropped), the severity of each class's
    ``unsanctioned-gpu-use`` findings and ``enforcement.gpu_open`` when it is on."""
    from ..config import DEFAULT_IGNORE

    defaults = {(e["name"], e.get("exe")) for e in DEFAULT_IGNORE}
    kept = (
        "the shipped defaults kept; 'ignore_defaults: false' drops them"
        if config.ignore_defaults
        else "the shipped defaults dropped by 'ignore_defaults: false'"
    )
    out = [f"ignore ({kept}):"]
    for entry in config.ignore:
        default = (entry.name, entry.exe) in defaults and not entry.per_job
        mark = " (default)" if default else ""
        out.append(f"  {entry.describe()}{mark}")
    if not config.ignore:
        out.append("  (none)")
    sev = ", ".join(f"{c} {s}" for c, s in config.workloads.severity)
    out.append(f"unsanctioned-gpu-use severity: {sev}")
    out += ship_gate_lines(config)
    out += gpu_open_lines(config)
    return out


def ship_gate_lines(config: Config) -> list[str]:
    """``ship_gates``: each gate's folder and what it does (a gate added to the file is
    said in force, fresh user G, issue 33: check-config named only rules, launchers and
    ignore entries)."""
    if not config.ship_gates:
        return []
    out = [f"ship_gates: {len(config.ship_gates)}"]
    for g in config.ship_gates:
        does = "quarantine" if g.quarantine else "alert only"
        at_open = f", enforce at open: {g.enforce}" if g.enforce != "off" else ""
        out.append(f"  {g.name}: {g.deploy_dir} ({does}{at_open})")
    return out


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``scan``, ``explain`` and ``check-config`` to the CLI."""
    p = sub.add_parser(
        "scan",
        parents=[config_parent()],
        **command_help(
            "scan this host once and report training jobs",
            "Scan this host once: every training job (NVML compute processes, device fds, "
            "launcher command lines), the GPU it is on and the memory it holds, its origin "
            "(cron line, systemd unit, Slurm job, container, shell...), its verdict against "
            "the allowlist, and how to stop it. Without --config, the running daemon's "
            f"configuration is used, else {DEFAULT_CONFIG} when it exists; otherwise "
            "nothing is sanctioned.",
            [
                "rogue-watchdog scan --gpu 3          # who is on GPU 3, and how to stop it",
                "rogue-watchdog scan --config /etc/rogue-watchdog/config.yaml",
                "rogue-watchdog scan --json | jq '.jobs[] | {root_pid, verdict, gpus}'",
                "COLUMNS=200 rogue-watchdog scan | less -S",
            ],
            [
                (0, "nothing to report"),
                (
                    1,
                    "a finding of severity warning or above (a rogue training job, say; "
                    "during the learning period such findings are info, as the daemon's)",
                ),
                (
                    2,
                    "usage or configuration error; --gpu N names a GPU that NVML, "
                    "answering, does not list (the error names those it lists; while NVML "
                    "is unavailable every job is listed, with a note, and the exit code "
                    "follows the findings)",
                ),
            ],
        ),
    )
    p.add_argument("--json", action="store_true", help="print the JSON of docs/scan-json-schema.md")
    p.add_argument(
        "--gpu",
        type=gpu_index,
        metavar="N",
        help="only GPU N (NVML index, MIG instances included): its jobs and their findings",
    )
    p.set_defaults(func=cmd_scan)

    p = sub.add_parser(
        "explain",
        parents=[config_parent()],
        **command_help(
            "show the lineage and origin of one process",
            "The parent chain of one process up to PID 1, the training job it belongs to "
            "(verdict, why it counts as training) and its origin with the evidence and the "
            "command that stops the source.",
            ["rogue-watchdog explain 48213", 'rogue-watchdog explain "$(pgrep -nf train_big.py)"'],
            [(0, "explained"), (2, "the PID is not visible, or a configuration error")],
        ),
    )
    pid = p.add_argument("pid", type=int, metavar="PID", help="any process ID visible in /proc")
    pid.complete = completers()["pids"]  # shtab reads it
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser(
        "check-config",
        **command_help(
            "validate a configuration file",
            "Validate a configuration file and count its rules; an error names the file, "
            "the line and the key.",
            ["rogue-watchdog check-config /etc/rogue-watchdog/config.yaml"],
            [(0, "valid"), (2, "invalid (the message names file, line and key)")],
        ),
    )
    p.add_argument("file", metavar="FILE", help="the YAML configuration to check")
    p.set_defaults(func=cmd_check_config)

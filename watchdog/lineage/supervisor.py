"""Supervisor origin: a process supervisor (re)starts the job.

Recognised supervisors, by executable name, ``argv[0]``, or ``argv[1]`` when ``argv[0]``
is an interpreter (supervisord and circusd are Python scripts, so their exe is python):

* supervisord: the program name is ``SUPERVISOR_PROCESS_NAME`` (and group
  ``SUPERVISOR_GROUP_NAME``) that supervisord puts in every child's environment
  (supervisord docs, "Subprocess Environment"), else the child's command line; the
  config file is supervisord's ``-c``/``--configuration`` argument;
* runit's ``runsv NAME`` (started by ``runsvdir DIR`` in DIR, runsvdir(8));
* s6's ``s6-supervise NAME`` (under ``s6-svscan DIR``, s6-svscan docs);
* daemontools' ``supervise NAME`` (under ``svscan DIR``, default ``/service``);
* PM2's God daemon (title ``PM2 vX: God Daemon (HOME)``; app name in env ``name``);
* circusd (watchers; the command line identifies the watcher).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..hosttext import clip, code_span, plain_or_code
from ..model import Origin, Proc, SupervisorOrigin
from .base import ResolveContext, command, comment, exe_name
from .supervisorconf import config_file, read_program

_INTERPRETERS = ("python", "node", "perl", "ruby", "sh", "bash", "dash")
_KINDS = {
    "supervisord": "supervisord",
    "runsv": "runsv",
    "s6-supervise": "s6-supervise",
    "supervise": "supervise",
    "circusd": "circusd",
}
_SCANNERS = {"runsv": "runsvdir", "s6-supervise": "s6-svscan", "supervise": "svscan"}
_DEFAULT_SCANDIR = {
    "runsv": "/etc/service",
    "s6-supervise": "/run/service",
    "supervise": "/service",
}


def command_names(proc: Proc) -> set[str]:
    """Names a process goes by: exe basename, argv[0] basename, and the script run by
    an interpreter (argv[1] basename when argv[0] is python, node, perl, sh...).

    Args:
        proc: Any process.

    Returns:
        The set of candidate names.
    """
    names = {exe_name(proc)}
    argv = proc.cmdline
    if argv:
        first = argv[0].rsplit("/", 1)[-1]
        names.add(first)
        interpreted = first.startswith(_INTERPRETERS) or exe_name(proc).startswith(_INTERPRETERS)
        if interpreted:
            if "-m" in argv[1:-1]:  # python -m supervisor.supervisord
                names.add(argv[argv.index("-m", 1) + 1].rsplit(".", 1)[-1])
            script = next((a for a in argv[1:] if not a.startswith("-")), None)
            if script is not None:
                names.add(script.rsplit("/", 1)[-1])
    return names


def supervisor_kind(proc: Proc) -> str | None:
    """``supervisord``, ``runsv``, ``s6-supervise``, ``supervise``, ``pm2`` or ``circusd``.

    Args:
        proc: Candidate supervisor process.

    Returns:
        The supervisor kind, or None when ``proc`` is none of them.
    """
    if proc.cmdline and proc.cmdline[0].startswith("PM2 ") and "God Daemon" in proc.cmdline[0]:
        return "pm2"
    names = command_names(proc)
    for name, kind in _KINDS.items():
        if name in names:
            return kind
    return None


def _option(argv: Sequence[str], short: str, long: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg in (short, long) and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(long + "="):
            return arg[len(long) + 1 :]
        if arg.startswith(short) and len(arg) > len(short) and not arg.startswith("--"):
            return arg[len(short) :]
    return None


def _first_operand(argv: Sequence[str]) -> str | None:
    return next((a for a in argv[1:] if not a.startswith("-")), None)


@dataclass(frozen=True)
class _Program:
    name: str
    known: bool  # False when only the child's command line stands in for the name
    config: str | None
    remediation: str
    evidence: tuple[str, ...]
    settings: dict[str, str | None] = field(default_factory=dict)


def _config(sup: Proc, ctx: ResolveContext) -> str | None:
    """The configuration file this supervisord reads, as an absolute path
    (:func:`~watchdog.lineage.supervisorconf.config_file`)."""
    try:
        cwd: str | None = os.readlink(f"{ctx.table.proc_root}/{sup.pid}/cwd")
    except OSError:
        cwd = None
    return config_file(list(sup.cmdline), cwd)


def _settings(path: str | None, group: str | None, name: str) -> dict[str, str | None]:
    """The program's supervisord settings (:mod:`~watchdog.lineage.supervisorconf`), as
    SupervisorOrigin fields; ``settings_unread`` says why when they could not be read."""
    read = read_program(path, group, name)
    if read.section is None:
        return {"settings_unread": read.unread}
    return {
        "section": read.section,
        "section_file": read.file,
        "autostart": read.value("autostart"),
        "autostart_at": read.where("autostart"),
        "autorestart": read.value("autorestart"),
        "autorestart_at": read.where("autorestart"),
        "startretries": read.value("startretries"),
        "exitcodes": read.value("exitcodes"),
    }


def _supervisord(sup: Proc, child: Proc, job: Proc, ctx: ResolveContext) -> _Program:
    # The file it reads, absolute (its -c relative to its working directory, or the
    # first of its search path); the -c text as given when that cannot be told.
    config = _config(sup, ctx) or _option(sup.cmdline, "-c", "--configuration")
    for proc in (child, job):
        env = ctx.table.environ(proc.pid) or {}
        name = env.get("SUPERVISOR_PROCESS_NAME")
        if name:
            group = env.get("SUPERVISOR_GROUP_NAME")
            target = f"{group}:{name}" if group and group != name else name
            ctl = ["supervisorctl", "-c", config] if config else ["supervisorctl"]
            settings = _settings(config, group, name)
            where = settings.get("section_file") or config or "the supervisord config"
            return _Program(
                name=name,
                known=True,
                config=config,
                remediation=(
                    f"{command(*ctl, 'stop', target)}  # then delete "
                    f"{comment(f'[program:{name}]')} from {comment(where)} and run: "
                    f"{comment(command(*ctl, 'update'))}"
                ),
                evidence=(
                    f"SUPERVISOR_PROCESS_NAME={plain_or_code(name)} in the environment of PID "
                    f"{proc.pid}",
                ),
                settings=settings,
            )
    ctl = ["supervisorctl", "-c", config] if config else ["supervisorctl"]
    return _Program(
        name=child.args_text,
        known=False,
        config=config,
        remediation=(
            f"{command(*ctl, 'status')}  # find the program running "
            f"{comment(code_span(child.args_text))}, stop it and delete its [program:NAME] section"
        ),
        evidence=("no SUPERVISOR_PROCESS_NAME readable: program named by its command line",),
        settings={"settings_unread": "the program's name could not be read"},
    )


def _service_dir(sup: Proc, kind: str, ctx: ResolveContext) -> tuple[str, str]:
    """(service name, service directory path) for runsv / s6-supervise / supervise."""
    arg = _first_operand(sup.cmdline) or "?"
    name = arg.rstrip("/").rsplit("/", 1)[-1]
    if arg.startswith("/"):
        return name, arg.rstrip("/")
    scanner = ctx.table.get(sup.ppid)
    scandir = None
    if scanner is not None and _SCANNERS[kind] in command_names(scanner):
        scandir = _first_operand(scanner.cmdline)
    return name, f"{(scandir or _DEFAULT_SCANDIR[kind]).rstrip('/')}/{name}"


def _dir_program(sup: Proc, kind: str, ctx: ResolveContext) -> _Program:
    name, path = _service_dir(sup, kind, ctx)
    if kind == "runsv":
        fix = f"{command('sv', 'down', path)} && {command('rm', path)}"
    elif kind == "s6-supervise":
        fix = (
            f"{command('s6-svc', '-d', path)}  # then remove {comment(path)} and run: "
            f"{comment(command('s6-svscanctl', '-an', f'{path}/..'))}"
        )
    else:
        fix = (
            f"{command('svc', '-d', path)}  # then remove {comment(path)} and run: "
            f"{comment(command('svc', '-x', path))}"
        )
    return _Program(
        name, True, path, fix, (f"{kind} argument names service {plain_or_code(name)}",)
    )


def _pm2(child: Proc, job: Proc, ctx: ResolveContext) -> _Program:
    for proc in (child, job):
        env = ctx.table.environ(proc.pid) or {}
        name = env.get("name")
        if name and "pm_id" in env:
            return _Program(
                name,
                True,
                env.get("PM2_HOME"),
                f"{command('pm2', 'delete', name)} && pm2 save",
                (
                    f"PM2 app name={plain_or_code(name)} pm_id={plain_or_code(env['pm_id'])} in "
                    f"the environment of PID {proc.pid}",
                ),
            )
    return _Program(
        child.args_text,
        False,
        None,
        f"pm2 list  # find the app running {comment(code_span(child.args_text))}, then: "
        "pm2 delete NAME && pm2 save",
        ("no PM2 app name readable: app named by its command line",),
    )


class SupervisorResolver:
    """Names the supervised program a process belongs to.

    Origin fields: ``program`` (supervisorctl name, service directory name or PM2 app;
    the child's command line when no name is readable), ``supervisor`` (kind),
    ``supervisor_pid``, ``config`` (supervisord config file or service directory).
    """

    name = "supervisor"

    def resolve(self, lineage: Sequence[Proc], ctx: ResolveContext) -> Origin | None:
        """See :class:`~watchdog.lineage.base.OriginResolver`."""
        for idx in range(1, len(lineage)):
            kind = supervisor_kind(lineage[idx])
            if kind is not None:
                return self._origin(lineage, idx, kind, ctx)
        return None

    def _origin(self, lineage: Sequence[Proc], idx: int, kind: str, ctx: ResolveContext) -> Origin:
        sup, child, job = lineage[idx], lineage[idx - 1], lineage[0]
        if kind == "supervisord":
            prog = _supervisord(sup, child, job, ctx)
        elif kind == "pm2":
            prog = _pm2(child, job, ctx)
        elif kind == "circusd":
            prog = _Program(
                child.args_text,
                False,
                next((a for a in sup.cmdline[1:] if a.endswith(".ini")), None),
                f"circusctl status  # find the watcher running "
                f"{comment(code_span(child.args_text))}, "
                "then: circusctl rm WATCHER and delete it from the circus config",
                (),
            )
        else:
            prog = _dir_program(sup, kind, ctx)
        evidence = (
            f"ancestor PID {sup.pid} is {kind}: {code_span(clip(sup.args_text, 200))}",
            *prog.evidence,
        )
        return SupervisorOrigin(
            evidence=evidence,
            remediation=prog.remediation,
            program=prog.name,
            supervisor=kind,
            supervisor_pid=sup.pid,
            config=prog.config,
            **prog.settings,
        )

"""``disable-source`` for the sources that are not files cron or systemd reads (issue 31,
item 4): a Docker or Podman container's restart policy, a supervisord program, and the
queued copies of an ``at`` job that re-queues itself.

Like the others (:mod:`watchdog.actions.disable`), each planner reads the source live
(read-only queries run in a dry run too), checks it against the recorded origin, and
says in words what it would do; :meth:`~watchdog.actions.disable.DisablePlan.execute`
does it through the :class:`~watchdog.actions.effects.Effects` (journaled ahead of
each change) and returns the undo ops; :func:`undo_ops` gives the same ops from the
steps an interrupted run made (:mod:`watchdog.actions.recovery`).

- **Docker**: ``docker update --restart=no ID`` (docker-update(1)), then ``docker stop
  ID`` when it runs. Undo: ``docker update --restart=POLICY ID`` (the policy it had,
  ``on-failure:N`` included) and ``docker start ID`` when it ran.
- **Podman** (4.x has no ``update --restart``): ``podman stop ID``; podman-run(1):
  "restart policy does not take effect if a container is stopped via the podman kill
  or podman stop commands". The policy stays; an ``always`` container starts again at
  boot only through ``podman-restart.service``, which the plan says. Undo: ``podman
  start ID`` when it ran.
- **supervisord**: ``supervisorctl -c CONF stop GROUP:NAME`` when it runs; every file
  that sets the program's ``autostart``/``autorestart`` is backed up and the setting
  line rewritten to ``false`` (a line inserted after the section header where the
  default applied); then ``supervisorctl reread`` and ``update GROUP``, as
  supervisorctl(1) documents for a changed config. Undo: the files back, byte for byte,
  ``reread``, ``update GROUP``, and ``start``/``stop`` so it runs as it did.
- **at**: each queued job running the same commands (read live from the spool) is saved
  from the spool to the backup folder, then ``atrm N``. Undo re-queues each saved job
  with ``at -q QUEUE -t TIME`` (as its owner), its script as it was; the running job is
  not touched (``terminate`` stops it).
"""

from __future__ import annotations

import json
import os
import pwd
import re
from collections.abc import Sequence
from datetime import UTC
from typing import Any

from .. import safeio
from ..hosttext import code_span, plain_or_code
from ..lineage import at as at_lineage
from ..lineage.at import job_commands, parse_job_name
from ..lineage.base import command
from ..lineage.supervisorconf import ProgramSettings, read_program
from ..model import AtOrigin, ContainerOrigin, Origin, SupervisorOrigin
from ..safeio import unread_reason
from ..state import ActionStep
from .disable import (
    DisablePlan,
    DisableResult,
    PlanRequest,
    backup_path,
    iso,
    one_line,
    sha256,
    tool_said,
)
from .effects import Effects

_CID = re.compile(r"[0-9a-f]{64}")
# docker-inspect(1) / podman-inspect(1): JSON values, so hostile text arrives escaped.
# Go field names: Docker's container JSON has ``Id``, podman's Go struct ``ID``.
_INSPECT = (
    "{{json .%s}} {{json .HostConfig.RestartPolicy.Name}} "
    "{{json .HostConfig.RestartPolicy.MaximumRetryCount}} {{json .State.Running}}"
)
_ID_FIELD = {"docker": "Id", "podman": "ID"}
_MAX_CONF_BYTES = 1 << 20
_MAX_AT_JOB_BYTES = 1 << 20


def _refuse(target: str, why: str, origin: Origin) -> DisablePlan:
    by_hand = f"; by hand: {origin.remediation}" if origin.remediation else ""
    return DisablePlan("none", target, refused=f"{why}{by_hand}")


def _ran(out: Any) -> bool:
    return bool(out.returncode == 0)


# -- Docker / Podman ---------------------------------------------------------------------


def plan_container(origin: Origin, req: PlanRequest) -> DisablePlan:
    """The planner of ``container`` origins (Docker, Podman; not a Kubernetes pod's)."""
    assert isinstance(origin, ContainerOrigin)
    cid = origin.container_id or ""
    runtime = origin.runtime or "?"
    if origin.pod_uid is not None:
        return _refuse(
            cid[:12],
            "a Kubernetes pod's container: its owner recreates it, "
            "which disable-source does not change",
            origin,
        )
    if runtime not in ("docker", "podman"):
        return _refuse(cid[:12], f"disabling a {runtime} container is not supported", origin)
    if not _CID.fullmatch(cid):
        return _refuse(
            "-", f"the recorded container id {plain_or_code(cid)} is not 64 hex digits", origin
        )
    out = req.effects.query([runtime, "inspect", "--format", _INSPECT % _ID_FIELD[runtime], cid])
    try:
        got_id, name, retries, running = (json.loads(t) for t in out.stdout.split())
    except ValueError:
        said = out.stderr or out.stdout
        why = tool_said(said) if one_line(said) else f"exit {out.returncode}"
        return _refuse(
            cid[:12],
            f"`{runtime} inspect {cid[:12]}` did not answer ({why}): its restart policy is unknown",
            origin,
        )
    if got_id != cid:
        return _refuse(
            cid[:12],
            f"{runtime} names another container {plain_or_code(str(got_id)[:12])} for {cid[:12]}",
            origin,
        )
    policy = str(name or "no")
    if policy == "on-failure" and isinstance(retries, int) and retries > 0:
        policy = f"on-failure:{retries}"
    commands: list[list[str]] = []
    if runtime == "docker" and policy != "no":
        commands.append([runtime, "update", "--restart=no", cid])
    if running is True:
        commands.append([runtime, "stop", cid])
    target = f"{cid[:12]} ({runtime})"
    if not commands:
        return DisablePlan(
            "none",
            target,
            refused=f"{runtime} container {cid[:12]} is not running and its restart "
            "policy is no: nothing starts it again",
        )
    steps = [f"before: restart policy {policy}, {'running' if running else 'not running'}"]
    steps += [" ".join(c) for c in commands]
    if runtime == "podman" and policy != "no":
        steps.append(
            f"(podman 4 cannot change a restart policy: {policy} stays, and does not act on a "
            "container stopped by podman stop; an always container starts again at boot only "
            "through podman-restart.service)"
        )
    data = {
        "runtime": runtime,
        "cid": cid,
        "policy": policy,
        "running": running is True,
        "commands": commands,
    }
    return DisablePlan("container", target, steps, data=data, runner=exec_container)


def _container_undo(d: dict[str, Any], done: Sequence[list[str]]) -> list[dict[str, Any]]:
    runtime, cid = d["runtime"], d["cid"]
    ops: list[dict[str, Any]] = []
    if [runtime, "update", "--restart=no", cid] in done:
        ops.append({"op": runtime, "argv": ["update", f"--restart={d['policy']}", cid]})
    if [runtime, "stop", cid] in done:
        ops.append({"op": runtime, "argv": ["start", cid]})
    return ops


def _said_command(argv: Sequence[str]) -> str:
    # A supervisorctl command names the program and its configuration (host text): each
    # argument that is not one plain word is quoted, a Docker command reads as it was.
    return " ".join(plain_or_code(a) for a in argv)


def _run_all(
    commands: Sequence[list[str]], effects: Effects, res: DisableResult, done: list[list[str]]
) -> bool:
    """Run ``commands`` in order until one fails; False when one did."""
    for argv in commands:
        out = effects.run(argv)
        if not _ran(out):
            ran = _said_command(argv)
            said = tool_said(out.stderr or out.stdout)
            res.error = res.error or f"{ran} exited {out.returncode}: {said}"
            res.done.append(f"FAILED {ran}: {said}")
            return False
        done.append(list(argv))
        res.done.append(_said_command(argv))
    return True


def exec_container(plan: DisablePlan, effects: Effects) -> DisableResult:
    """Run a container plan (see the module doc)."""
    d = plan.data
    assert isinstance(d, dict)  # this module's kinds keep their facts in a mapping
    res = DisableResult("ok")
    done: list[list[str]] = []
    _run_all(d["commands"], effects, res, done)
    res.undo = _container_undo(d, done)
    if res.error is not None:
        res.outcome = "partial" if done else "failed"
    return res


# -- supervisord -------------------------------------------------------------------------

_HEADER = re.compile(r"\s*\[(?P<header>.+)\]\s*$")
_OPTION = re.compile(r"(?P<name>[^=:\s][^=:]*?)\s*[=:]")


def _target(origin: SupervisorOrigin) -> tuple[str, str, str]:
    """(group, process name, supervisorctl name) of the program."""
    program = origin.program or ""
    group, _, name = program.rpartition(":")
    group = group or name
    return group, name, program if group != name else name


def _edit(text: str, section: str, changes: dict[int, str], inserts: list[str]) -> str:
    """``text`` with the numbered lines replaced (their line ending kept) and the
    ``inserts`` lines put right after ``section``'s header."""
    out = text.splitlines(keepends=True)
    for number, line in changes.items():
        ending = out[number - 1][len(out[number - 1].rstrip("\r\n")) :] or "\n"
        out[number - 1] = line + ending
    if inserts:
        for i, raw in enumerate(out):
            head = _HEADER.match(raw)
            if head is not None and head.group("header") == section:
                out.insert(i + 1, "".join(f"{line}\n" for line in inserts))
                break
    return "".join(out)


def _live_settings(origin: SupervisorOrigin) -> ProgramSettings | str:
    """The program's settings as supervisord reads them now, or why it is not disabled.

    Program, group and section names and paths are the host's (a supervisord
    configuration anyone may have written): each is quoted unless one plain word.
    """
    shown = plain_or_code(origin.program or "?")
    if origin.supervisor != "supervisord":
        return f"disabling a {plain_or_code(str(origin.supervisor))} program is not supported"
    if not origin.section or not origin.config or not os.path.isabs(origin.config):
        why = origin.settings_unread or "its configuration was not read"
        return f"supervisord's settings of {shown} are unknown ({why})"
    group, name, _ = _target(origin)
    live = read_program(origin.config, group, name)
    if live.section != origin.section:
        now_in = f"the program is now in [{plain_or_code(str(live.section))}]"
        return f"{plain_or_code(origin.config)} no longer reads as it did: {live.unread or now_in}"
    if live.section.partition(":")[2] != group:
        # `update GROUP` re-adds the whole group: its other programs would be stopped and
        # started again with it (bystanders).
        return (
            f"{shown} runs in supervisord group {plain_or_code(group)} "
            f"([{plain_or_code(live.section)}] is one of its "
            f"programs): {code_span(f'supervisorctl update {group}')} would restart the "
            "group's other programs too"
        )
    return live


def plan_supervisor(origin: Origin, req: PlanRequest) -> DisablePlan:
    """The planner of ``supervisor`` origins (supervisord programs only)."""
    assert isinstance(origin, SupervisorOrigin)
    program = origin.program or "?"
    live = _live_settings(origin)
    if isinstance(live, str):
        return _refuse(program, live, origin)
    assert origin.config is not None and live.section is not None  # as _live_settings checked
    group, _, ctl_name = _target(origin)
    conf = origin.config
    ctl = ["supervisorctl", "-c", conf]
    status = req.effects.query([*ctl, "status", ctl_name])
    running = " RUNNING " in f" {status.stdout} " or " STARTING " in f" {status.stdout} "
    marker = f"rogue-watchdog: was %s ({one_line(req.reason, 100)}, {iso(req.now)})"
    per_file: dict[str, dict[int, str]] = {}
    was: dict[str, str] = {}
    for option in ("autostart", "autorestart"):
        where = live.where(option)
        was[option] = live.value(option)
        if where == "default":
            per_file.setdefault(live.file or conf, {})[0] = option
        else:
            path, _, number = where.rpartition(":")
            per_file.setdefault(path, {})[int(number)] = option
    files: list[dict[str, Any]] = []
    steps: list[str] = [
        f"before: [{live.section}] autostart={was['autostart']} ({live.where('autostart')}), "
        f"autorestart={was['autorestart']} ({live.where('autorestart')}), "
        f"{'running' if running else 'not running'}"
    ]
    pre: list[list[str]] = [[*ctl, "stop", ctl_name]] if running else []
    steps += [command(*c) for c in pre]  # host text (names, paths): quoted
    for path, lines in per_file.items():
        try:
            data = safeio.read_regular(path, _MAX_CONF_BYTES)
            st = os.stat(path)
        except (OSError, ValueError) as exc:
            return _refuse(
                program, f"cannot read {plain_or_code(path)}: {unread_reason(exc)}", origin
            )
        text = data.decode("utf-8", "surrogateescape")
        setting = {opt: f"{opt}=false ; {marker % was[opt]}" for opt in lines.values()}
        changes = {n: setting[opt] for n, opt in lines.items() if n > 0}
        had = text.splitlines()
        for n, opt in lines.items():
            m = _OPTION.match(had[n - 1]) if 0 < n <= len(had) else None
            if n and (m is None or m.group("name").strip().lower() != opt):
                return _refuse(
                    program, f"{plain_or_code(path)} changed since it was read (line {n})", origin
                )
        new = _edit(text, live.section, changes, [setting[o] for n, o in lines.items() if n == 0])
        backup = backup_path(req.backup_dir, path, req.now)
        files.append(
            {
                "path": path,
                "backup": backup,
                "uid": st.st_uid,
                "gid": st.st_gid,
                "mode": st.st_mode & 0o7777,
                "sha256": sha256(data),
                "mtime_ns": st.st_mtime_ns,
                "new": new.encode("utf-8", "surrogateescape"),
            }
        )
        steps.append(f"copy {path} to {backup}")
        for n, opt in sorted(lines.items()):
            where = f"line {n}" if n else f"a new line after [{live.section}]"
            steps.append(f"set {opt}=false in {path} ({where}; was {was[opt]})")
    post = [[*ctl, "reread"], [*ctl, "update", group]]
    steps += [command(*c) for c in post]
    data_out = {
        "conf": conf,
        "group": group,
        "name": ctl_name,
        "running": running,
        "autostart": was["autostart"],
        "pre": pre,
        "files": files,
        "post": post,
    }
    return DisablePlan(
        "supervisord", f"program {ctl_name}", steps, data=data_out, runner=exec_supervisor
    )


def _restore(f: dict[str, Any]) -> dict[str, Any]:
    keys = ("path", "backup", "uid", "gid", "mode", "sha256", "mtime_ns")
    return {"op": "restore_file", **{k: f[k] for k in keys}}


def _supervisor_undo(
    d: dict[str, Any], done: Sequence[list[str]], written: Sequence[str]
) -> list[dict[str, Any]]:
    ops = [_restore(f) for f in d["files"] if f["path"] in written]
    if ops:
        ctl_args = ["-c", d["conf"]]
        ops.append({"op": "supervisorctl", "argv": [*ctl_args, "reread"]})
        ops.append({"op": "supervisorctl", "argv": [*ctl_args, "update", d["group"]]})
        # `update` starts it again when autostart was true; else start it by hand.
        if d["running"] and d["autostart"] not in ("true", "yes", "on", "1"):
            ops.append({"op": "supervisorctl", "argv": [*ctl_args, "start", d["name"]]})
        if not d["running"] and d["autostart"] in ("true", "yes", "on", "1"):
            ops.append({"op": "supervisorctl", "argv": [*ctl_args, "stop", d["name"]]})
    elif any(c[-2:] == ["stop", d["name"]] for c in done):
        ops.append({"op": "supervisorctl", "argv": ["-c", d["conf"], "start", d["name"]]})
    return ops


def exec_supervisor(plan: DisablePlan, effects: Effects) -> DisableResult:
    """Run a supervisord plan (see the module doc)."""
    d = plan.data
    assert isinstance(d, dict)  # this module's kinds keep their facts in a mapping
    res = DisableResult("ok")
    done: list[list[str]] = []
    written: list[str] = []
    if _run_all(d["pre"], effects, res, done):
        for f in d["files"]:
            effects.copy_backup(f["path"], f["backup"])
            res.done.append(f"backup {f['backup']}")
            effects.write_file_atomic(f["path"], f["new"], f["uid"], f["gid"], f["mode"])
            written.append(f["path"])
            res.done.append(f"set autostart/autorestart=false in {f['path']}")
        _run_all(d["post"], effects, res, done)
    res.undo = _supervisor_undo(d, done, written)
    if res.error is not None:
        res.outcome = "partial" if done or written else "failed"
    return res


# -- at ----------------------------------------------------------------------------------


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def plan_at(origin: Origin, req: PlanRequest) -> DisablePlan:
    """The planner of ``at`` origins: the queued jobs with the same commands, read live."""
    assert isinstance(origin, AtOrigin)
    spool = os.path.dirname(origin.file or "")
    spools = at_lineage.AT_SPOOLS  # read at call time: one list for the resolver and here
    if os.path.realpath(spool) not in {os.path.realpath(s) for s in spools}:
        return _refuse(
            "-", f"{spool or 'the job file'} is not an at spool ({', '.join(spools)})", origin
        )
    if not origin.command:
        return _refuse("-", "the at job's commands were not read", origin)
    try:
        names = sorted(os.listdir(spool))
    except OSError as exc:
        return _refuse(spool, f"cannot list {spool}: {exc.strerror}", origin)
    jobs: list[dict[str, Any]] = []
    for fname in names:
        parsed = parse_job_name(fname)
        if parsed is None or parsed[0] == "=":
            continue  # not a job, or a running one (terminate stops it)
        path = os.path.join(spool, fname)
        try:
            data = safeio.read_regular(path, _MAX_AT_JOB_BYTES)
            st = os.stat(path)
        except (OSError, ValueError):
            continue
        if job_commands(data.decode("utf-8", "surrogateescape")) != origin.command:
            continue
        queue, number, when = parsed
        jobs.append(
            {
                "job": number,
                "queue": queue,
                "path": path,
                "sha256": sha256(data),
                "backup": backup_path(req.backup_dir, path, req.now),
                "uid": st.st_uid,
                "user": _owner(st.st_uid),
                "time": when.astimezone().strftime("%Y%m%d%H%M"),
                "when": when.astimezone(UTC).isoformat(),
            }
        )
    if not jobs:
        return DisablePlan(
            "none",
            f"at job {origin.job}",
            refused=f"no queued at job runs the commands of at job {origin.job} now (read "
            f"from {spool}): nothing will start it again; the running job is stopped with "
            "terminate",
        )
    steps = []
    for j in jobs:
        steps.append(
            f"save {j['path']} (job {j['job']}, queue {j['queue']}, at {j['when']}, "
            f"owner {j['user']}) to {j['backup']}"
        )
        steps.append(f"atrm {j['job']}")
    steps.append("(the running job is left to terminate: atrm does not stop it)")
    target = "job(s) " + " ".join(str(j["job"]) for j in jobs)
    return DisablePlan("at", target, steps, data={"jobs": jobs}, runner=exec_at)


def _requeue(j: dict[str, Any]) -> dict[str, Any]:
    keys = ("backup", "sha256", "queue", "time", "user", "path")
    return {"op": "at_requeue", **{k: j[k] for k in keys}}


def _at_undo(d: dict[str, Any], done: Sequence[list[str]]) -> list[dict[str, Any]]:
    return [_requeue(j) for j in d["jobs"] if ["atrm", str(j["job"])] in done]


def exec_at(plan: DisablePlan, effects: Effects) -> DisableResult:
    """Run an at plan (see the module doc)."""
    d = plan.data
    assert isinstance(d, dict)  # this module's kinds keep their facts in a mapping
    res = DisableResult("ok")
    done: list[list[str]] = []
    for j in d["jobs"]:
        effects.copy_backup(j["path"], j["backup"])
        res.done.append(f"saved job {j['job']} to {j['backup']}")
        if not _run_all([["atrm", str(j["job"])]], effects, res, done):
            break
    res.undo = _at_undo(d, done)
    if res.error is not None:
        res.outcome = "partial" if done else "failed"
    return res


def requeue_argv(op: dict[str, Any]) -> list[str]:
    """``at -q QUEUE -t TIME`` of an ``at_requeue`` undo op, as its owner when not root."""
    argv = ["at", "-q", str(op["queue"]), "-t", str(op["time"])]
    if op["user"] != "root":
        argv = ["runuser", "-u", str(op["user"]), "--", *argv]
    return argv


# -- shared ------------------------------------------------------------------------------


def restore_plan(plan: DisablePlan) -> dict[str, Any]:
    """The JSON part of a plan of these kinds (its file bytes left out), recorded before
    its first change: :func:`undo_ops` works from it."""
    assert isinstance(plan.data, dict)  # this module's kinds keep their facts in a mapping
    d = dict(plan.data)
    if plan.stops_service:
        d["stops_service"] = plan.stops_service  # as recorded before it was a field
    if plan.kind == "supervisord":
        d["files"] = [{k: v for k, v in f.items() if k != "new"} for f in d["files"]]
    return {"sources": {"kind": plan.kind, "data": d}}


def post_steps(plan: DisablePlan) -> list[list[str]]:
    """The commands after which the source's daemon loads the files the plan rewrites
    (supervisord's ``reread`` and ``update GROUP``: supervisorctl(1), "reread: Reload
    the daemon's configuration files, without add/remove"; "update: Reload config and
    add/remove as necessary, and will restart affected programs"), or [] for a kind
    whose change takes effect as made. Recorded with the action
    (``details["post"]``): :func:`unloaded` reads it back."""
    if plan.kind == "supervisord" and isinstance(plan.data, dict):
        return [list(argv) for argv in plan.data["post"]]
    return []


def argv_of(value: Any) -> list[str]:
    """A recorded argv as a list of strings, whatever the database holds (a hand-edited
    or damaged row must not crash a reader): a non-list is one word (``None`` too)."""
    if isinstance(value, (list, tuple)):
        return [str(a) for a in value]
    return [str(value)]


def recorded_post(details: dict[str, Any]) -> list[list[str]] | None:
    """A disable-source record's post steps (:func:`post_steps`), or None when it has
    none (a kind without post steps); a value not a list is one command.

    ``details["post"]`` since it was recorded; before that (an older database), the
    supervisord plan's own ``post``, recorded in ``details["restore"]`` before the first
    change: an interrupted record of an older version still says what it left. Each
    entry is read as an argv of strings (:func:`argv_of`): one that is not a list
    matches no command that ran, so it counts as not run.
    """
    post = details.get("post")
    if post is None:
        restore = details.get("restore")
        sources = restore.get("sources") if isinstance(restore, dict) else None
        data = sources.get("data") if isinstance(sources, dict) else None
        if isinstance(sources, dict) and sources.get("kind") == "supervisord":
            post = data.get("post") if isinstance(data, dict) else None
    if post is None:
        return None
    return [argv_of(argv) for argv in post] if isinstance(post, list) else [argv_of(post)]


def unloaded(post: Sequence[Sequence[str]], steps: Sequence[ActionStep]) -> list[list[str]]:
    """The post steps (:func:`post_steps`) a disable-source's steps do not show made,
    when it rewrote a file (or may have): until they run, the daemon runs the settings
    it loaded before the rewrite, whatever the file says now.

    Args:
        post: The recorded post commands (full argv each).
        steps: The action's journaled steps.

    Returns:
        Each post command with no ``run`` step marked done with exit status 0 (one
        written and not marked, or failed, counts as not made), in order; [] when no
        file was rewritten or every post command ran.
    """
    if not rewrote(steps):
        return []
    ran = [
        argv_of(s.detail.get("argv"))
        for s in steps
        if s.op == "run" and s.status == "done" and (s.result or {}).get("returncode") == 0
    ]
    return [list(argv) for argv in post if list(argv) not in ran]


def rewrote(steps: Sequence[ActionStep]) -> bool:
    """Whether a disable-source's steps show a file written (or begun and not marked
    failed: it may have been): one that wrote none changed nothing its daemon loads."""
    return any(s.op == "write" and s.status != "failed" for s in steps)


def unloaded_words(argvs: Sequence[Sequence[str]]) -> str:
    """:func:`unloaded`'s commands in words: what was not run and what that leaves."""
    shown = ", ".join(command(*a) for a in argvs)  # names and paths: host text, quoted
    return (
        f"{shown} not run: the file says autostart/autorestart=false, but supervisord "
        "still runs the configuration it had loaded (it may start the job again) until "
        "they run, or until the undo"
    )


def matches(details: dict[str, Any], origin: Origin) -> bool:
    """Whether an action's recorded ``origin`` (:func:`~watchdog.actions.remedy.job_details`)
    names the same source as ``origin``: its kind, its source fields (the supervisord
    program) and the file it reads (the configuration). The settings read from that file
    are left out: a rewrite changed them."""
    was = details.get("origin")
    if not isinstance(was, dict) or was.get("kind") != origin.kind:
        return False
    now = origin.to_json()
    keys = (*origin.SOURCE_FIELDS, "config")
    return all(was.get(k) == now.get(k) for k in keys)


def undo_ops(
    kind: str, data: dict[str, Any], done: Sequence[list[str]], written: Sequence[str]
) -> list[dict[str, Any]]:
    """The undo ops of a plan of these kinds from what was (or may have been) done.

    Args:
        kind: ``container``, ``supervisord`` or ``at``.
        data: :func:`restore_plan`'s ``data``.
        done: The full argv of each command that ran (or may have).
        written: The files rewritten (or that may have been).
    """
    if kind == "container":
        return _container_undo(data, done)
    if kind == "supervisord":
        return _supervisor_undo(data, done, written)
    if kind == "at":
        return _at_undo(data, done)
    return []

"""Host text in the actions' own lines is quoted: what an external tool wrote, a
supervisord program's names, a crontab line, a Slurm sweep's lines, a ship gate's listing
errors and host text once shown as Python's repr never read as the product's own words
(helper wt10-hosttext, session k).

Before (main 5fd19c4), each site below put the host's text outside every code span:
docker's and podman's stderr (``… did not answer (x `verdict: sanctioned; to stop it:
rogue-watchdog terminate --config /tmp/evil 1)``), systemctl's and crontab's, supervisord
program, group and section names in disable-source refusals, a crontab line as Python's
``repr`` (a repr is no quote: its backtick stayed), an invalid unit name likewise, the
command line and user of each Slurm sweep line, Slurm's own error text (sinfo, scontrol,
squeue), a ship gate's unreadable or linked file names, a user unit's owner, a
slurmstepd look-alike's title, a CronJob's schedule, an unnamed supervisord program's
command line, a queue action's job name and error, a learned script's name, a
checkpoint's metric, and the command lines of ``allowlist suggest`` and ``diff``.
Each test fails with its site put back as it was (checked one site at a time).
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from rogue_watchdog.actions.disable import PlanRequest, unit_name_problem
from rogue_watchdog.actions.effects import RecordingEffects
from rogue_watchdog.actions.planners import plan_disable
from rogue_watchdog.actions.slurmnode import drain, node_state
from rogue_watchdog.actions.slurmrecord import JobEntry, RecordedProc, check_entry
from rogue_watchdog.actions.slurmsweep import Leftover, SweepReport, job_evidence
from rogue_watchdog.actions.sources import plan_container, plan_supervisor
from rogue_watchdog.command import CommandResult, RecordingRunner
from rogue_watchdog.config import parse_config
from rogue_watchdog.hosttext import outside_code
from rogue_watchdog.lineage import default_resolvers
from rogue_watchdog.lineage.base import split_answer
from rogue_watchdog.lineage.kubernetes import KubernetesResolver
from rogue_watchdog.lineage.slurm import SlurmResolver, query_job, squeue_refused
from rogue_watchdog.model import ContainerOrigin, SupervisorOrigin, SystemdOrigin, origin_from_json
from rogue_watchdog.policy.learn import (
    Group,
    Script,
    _unresolved_text,
    render_changes,
    render_yaml,
    replay,
    suggest,
)
from rogue_watchdog.queue.slurm import QueueError, SlurmQueue
from rogue_watchdog.render import printable
from rogue_watchdog.scan import resolve_origin
from rogue_watchdog.weights.fallback import _judge
from rogue_watchdog.weights.quarantine import FileOps, QuarantineError, quarantine_file
from rogue_watchdog.weights.shipwatch import list_files
from rogue_watchdog.weights.verifyworker import FileKey
from tests.fixtures.proc.fakeproc import FakeProc, lineage, make_context
from tests.kubeapi import FIX, serve
from tests.unit.test_allowlist_suggest import PY, SCRIPT, cron, run, tmux
from tests.unit.test_allowlist_suggest import T0 as LEARN_T0
from tests.unit.test_kubernetes import CJ_CGROUP, ROUTES, _api, _resolve
from tests.unit.test_queue_policy import SCAN, T0, _setup, entry

EVIL = "/tmp/evil"
PRODUCT = f"rogue-watchdog terminate --config {EVIL} 1"
# A backtick, a right-to-left override and the product's own words, on one line (what a
# tool's one_line, a crontab line or a section header can hold) ...
LINE = f"x `verdict: sanctioned\u202e; to stop it: {PRODUCT}"
# ... and with a newline, as a tool's stderr or a process's argv can.
HOSTILE = f"x\n`verdict: sanctioned\u202e; to stop it: {PRODUCT}"
FORGED = ("verdict", "rogue-watchdog terminate", EVIL)
CID = "c" * 64
INSPECT = (
    "{{json .%s}} {{json .HostConfig.RestartPolicy.Name}} "
    "{{json .HostConfig.RestartPolicy.MaximumRetryCount}} {{json .State.Running}}"
)


def _check(text: str | None) -> None:
    """``text`` holds the hostile text (not vacuous), all of it in code spans, and shows
    as one inert line."""
    assert text is not None
    assert "verdict" in text, text
    # An odd backtick (host text's, unescaped) turns the product's words that follow into
    # a "span" and the host text into the product's words.
    assert text.count("`") % 2 == 0, text
    own = outside_code(text)
    assert [m for m in FORGED if m in own] == [], text
    shown = printable(text)
    assert "\n" not in shown and "\u202e" not in shown, shown


def _req(effects: RecordingEffects, tmp_path: Path) -> PlanRequest:
    return PlanRequest("rogue job", 1_800_000_000.0, str(tmp_path / "b"), effects, ("", "", ()))


# -- external tools' stderr ---------------------------------------------------------------


def test_a_container_engines_error_text_is_quoted(tmp_path: Path) -> None:
    inspect = ("docker", "inspect", "--format", INSPECT % "Id", CID)
    origin = ContainerOrigin(container_id=CID, runtime="docker", restart_policy="always")
    down = RecordingEffects(answers={inspect: CommandResult(1, "", HOSTILE)})
    _check(plan_container(origin, _req(down, tmp_path)).refused)
    # The engine answers, then fails to stop the container, echoing its command.
    stop = ("docker", "stop", CID)
    fx = RecordingEffects(
        answers={
            inspect: CommandResult(0, f'"{CID}" "no" 0 true', ""),
            stop: CommandResult(1, "", HOSTILE),
        }
    )
    res = plan_container(origin, _req(fx, tmp_path)).execute(fx)
    assert res.outcome == "failed"
    _check(res.error)
    _check(res.done[-1])
    said = f"x \\x60verdict: sanctioned\u202e; to stop it: {PRODUCT}"
    assert res.error == f"docker stop {CID} exited 1: `{said}`"


def test_systemctls_and_crontabs_error_text_is_quoted(tmp_path: Path) -> None:
    def systemctl(argv: tuple[str, ...]) -> CommandResult:
        failed = argv[1] == "disable"
        return CommandResult(1, "", HOSTILE) if failed else CommandResult(0, "enabled\n", "")

    fx = RecordingEffects(answer=systemctl)
    p = plan_disable(
        origin_from_json({"kind": "systemd", "unit": "svc.service"}), reason="r", now=0.0,
        backup_dir=str(tmp_path), effects=fx,
    )  # fmt: skip
    res = p.execute(fx)
    _check(res.error)
    spool = tmp_path / "crontabs"
    spool.mkdir()
    tab = spool / "bob"
    entry = "0 3 * * * /usr/bin/python3 /home/bob/train.py"
    tab.write_text(f"{entry}\n")
    fx = RecordingEffects(answers={("crontab", "-u", "bob", "-"): CommandResult(1, "", HOSTILE)})
    p = plan_disable(
        origin_from_json({"kind": "cron", "file": str(tab), "line": 1, "user": "bob",
                          "entry": entry}),
        reason="r", now=0.0, backup_dir=str(tmp_path / "bk"), effects=fx,
        spool_dirs=(str(spool),), cron_d=str(tmp_path / "cron.d"),
    )  # fmt: skip
    assert p.refused is None, p.refused
    res = p.execute(fx)
    assert res.outcome == "failed"
    _check(res.error)


def test_a_container_id_that_is_not_one_is_quoted(tmp_path: Path) -> None:
    bad = ContainerOrigin(container_id=LINE, runtime="docker", restart_policy="always")
    _check(plan_container(bad, _req(RecordingEffects(), tmp_path)).refused)
    # The engine names another container: its id is a JSON string, any text without
    # white space, of which the message shows 12 characters.
    inspect = ("docker", "inspect", "--format", INSPECT % "Id", CID)
    said = f'{json.dumps("x`verdict;ab")} "no" 0 true'
    fx = RecordingEffects(answers={inspect: CommandResult(0, said, "")})
    origin = ContainerOrigin(container_id=CID, runtime="docker", restart_policy="always")
    refused = plan_container(origin, _req(fx, tmp_path)).refused
    _check(refused)
    assert refused is not None and refused.startswith(
        "docker names another container `x\\x60verdict;ab` for "
    )


# -- supervisord's names ----------------------------------------------------------------


def test_supervisord_names_in_refusals_are_quoted(tmp_path: Path) -> None:
    # A program name has no colon here: supervisorctl reads GROUP:NAME.
    name = LINE.replace(":", "")
    unread = SupervisorOrigin(program=name, supervisor="supervisord", remediation="x",
                              settings_unread="gone")  # fmt: skip
    _check(plan_supervisor(unread, _req(RecordingEffects(), tmp_path)).refused)
    conf = tmp_path / "s.conf"
    conf.write_text(
        f"[supervisord]\n[group:{name}]\nprograms=train,web\n"
        "[program:train]\ncommand=/usr/bin/python3 /srv/train.py\n"
        "[program:web]\ncommand=/usr/bin/python3 /srv/web.py\n"
    )
    grouped = SupervisorOrigin(
        program=f"{name}:train", supervisor="supervisord", config=str(conf),
        section="program:train", remediation="x",
    )  # fmt: skip
    refused = plan_supervisor(grouped, _req(RecordingEffects(), tmp_path)).refused
    _check(refused)
    assert refused is not None and "`supervisorctl update x \\x60verdict" in refused
    # The configuration no longer has the program: supervisorconf's own sentence.
    gone = SupervisorOrigin(program=name, supervisor="supervisord", config=str(conf),
                            section=f"program:{name}", remediation="x")  # fmt: skip
    _check(plan_supervisor(gone, _req(RecordingEffects(), tmp_path)).refused)


# -- a crontab line, a unit name ------------------------------------------------------------


def test_a_crontab_line_is_quoted_not_repred(tmp_path: Path) -> None:
    entry = f"0 3 * * * root /usr/bin/python3 /srv/{LINE}"
    tab = tmp_path / "retrain"
    tab.write_text(f"SHELL=/bin/sh\n{entry}\n")
    kw = {"reason": "r", "now": 0.0, "backup_dir": str(tmp_path / "bk"),
          "effects": RecordingEffects(), "cron_d": str(tmp_path)}  # fmt: skip
    same = {"kind": "cron", "file": str(tab), "line": 2, "entry": entry, "user": "root"}
    plan = plan_disable(origin_from_json(same), **kw)
    assert plan.refused is None, plan.refused
    said = [s for s in plan.steps if "verdict" in s]
    assert len(said) == 2  # the line, and the comment it becomes
    for step in said:
        _check(step)
    changed = plan_disable(origin_from_json({**same, "entry": entry + " --x"}), **kw)
    _check(changed.refused)


def test_an_invalid_unit_name_is_quoted() -> None:
    _check(unit_name_problem(LINE, (".service",)))


# -- Slurm --------------------------------------------------------------------------------


def test_a_sweeps_lines_quote_the_command_line_and_the_user() -> None:
    lo = Leftover(41, 1, ("/usr/bin/python3", HOSTILE), LINE, 7, ("/dev/nvidia0",),
                  "recorded below slurmstepd while the job ran")  # fmt: skip
    report = SweepReport(leftovers=[lo], foreign=[lo], unconfirmed=[lo], unchecked=[lo])
    lines = [ln for ln in report.lines() if ln.startswith("PID 41")]
    assert len(lines) == 4
    for line in lines:
        _check(line)


# A job cgroup's own folders may be the job's (cgroup v2 delegation): its name is host text.
CGROUP = "0::/system.slice/slurmstepd.scope/job_7/step_0/user/" + LINE.replace("/", "")


def test_a_job_cgroup_named_as_proof_is_quoted(tmp_path: Path) -> None:
    procs = [FakeProc(1, 0, ["/sbin/init"]), FakeProc(41, 1, ["/usr/bin/python3", "x"],
             cgroup=(CGROUP,))]  # fmt: skip
    table = make_context(tmp_path / "proc", procs).table
    (ev,) = job_evidence(table, {}).values()
    _check(ev.proof)
    # The drain's record, checking a job it drained for, finds the same process.
    rp = RecordedProc(5, 50, "survived", 1001, "cgroup x", None, ())
    found = check_entry(JobEntry(7, [rp], 0, ()), table).found
    assert [f.pid for f in found] == [41]
    _check(found[0].proof)


def test_slurms_error_text_is_quoted(tmp_path: Path) -> None:
    def fail(argv: object, timeout_s: float) -> CommandResult:
        # One line: the resolver shows the first line of what Slurm wrote.
        return CommandResult(1, "", LINE + "\n")

    state = node_state("n1", fail, 2.0)
    assert isinstance(state, str)
    _check(state)
    _check(drain("n1", "r", fail, 2.0))
    ctx = make_context(tmp_path / "proc", [FakeProc(1, 0, ["/sbin/init"])], fail)
    _check(query_job(12, ctx, 2.0).via)
    refused = squeue_refused(f'{{"errors": [{{"description": "{LINE}"}}], "jobs": []}}')
    _check(refused)
    try:
        SlurmQueue(fail).entries()
    except QueueError as exc:
        _check(str(exc))
    else:
        raise AssertionError("no answer read as an empty queue")


# -- a ship gate's listing ----------------------------------------------------------------


def test_a_watched_directorys_file_names_are_quoted_in_its_errors(tmp_path: Path) -> None:
    name = LINE.replace("/", "")  # one file name
    (tmp_path / name).write_text("")
    listing = list_files(tmp_path / name, ["*.safetensors"])
    assert len(listing.errors) == 1
    _check(listing.errors[0])
    # A deploy folder's link to a file outside it, named by whoever wrote the link.
    outside = tmp_path / "out"
    outside.mkdir()
    (outside / f"{name}.safetensors").write_bytes(b"")
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    os.symlink(outside / f"{name}.safetensors", deploy / "m.safetensors")
    listing = list_files(deploy, ["*.safetensors"])
    (how,) = listing.outside.values()
    _check(how)


class _NoRename(FileOps):
    def rename(self, src: Path, dst: Path) -> None:
        raise OSError(errno.EACCES, "Permission denied")


def test_a_weights_file_that_cannot_be_moved_is_named_quoted(tmp_path: Path) -> None:
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    path = deploy / f"{LINE.replace('/', '')}.safetensors"
    path.write_bytes(b"")
    with pytest.raises(QuarantineError) as exc:
        quarantine_file(FileKey.of(path), deploy, tmp_path / "q", 0.0, _NoRename())
    _check(exc.value.strerror)


# -- reprs of host text -------------------------------------------------------------------


def test_a_user_units_owner_and_name_are_quoted_in_the_pin_refusal() -> None:
    origin = SystemdOrigin(unit=LINE, user_unit=True, user=LINE)
    pin = origin.owner_pin({"systemd_unit"})
    assert pin is not None
    _check(pin[1])


def test_a_slurmstepd_lookalikes_title_is_quoted(tmp_path: Path) -> None:
    # exec -a "slurmstepd: [4242.0] …": the title is the process's own.
    fake = FakeProc(400, 1, [f"slurmstepd: [4242.0] {LINE}"], exe="/usr/bin/python3", uid=1000)
    procs = [FakeProc(1, 0, ["/sbin/init"]), fake,
             FakeProc(60, 400, ["/usr/bin/python3", "/tmp/t.py"], uid=1000)]  # fmt: skip
    ctx = make_context(tmp_path, procs, RecordingRunner({}))
    origin, notes = split_answer(SlurmResolver().resolve(lineage(ctx, 60), ctx))
    assert origin is None and len(notes) == 1
    _check(notes[0])


def test_a_queue_actions_failure_quotes_the_job_name_and_slurms_error(tmp_path: Path) -> None:
    e = entry("7", state="RUNNING", name=LINE, user=LINE.replace(" ", ""))
    source, enf, db, runner = _setup(tmp_path, [e], {"7": e}, "cancel", rc=1)
    runner.default = CommandResult(1, "", HOSTILE)
    source.findings(T0, None)
    (failed,) = enf.act(T0, SCAN, None)
    _check(failed.message)
    (action,) = db.actions()
    _check(action.outcome)


def test_a_learned_scripts_name_is_quoted() -> None:
    group = Group.__new__(Group)
    group.script = Script(LINE, None, "no working directory recorded")
    _check(_unresolved_text(group))


def test_a_checkpoints_metric_is_quoted(tmp_path: Path) -> None:
    _check(_judge(tmp_path / "ckpt", LINE, None).reason)


def test_a_cronjobs_schedule_is_quoted_in_the_evidence(tmp_path: Path) -> None:
    path = "/apis/batch/v1/namespaces/ml-team/cronjobs/nightly-retrain"
    doc = json.loads((FIX / "cronjob-nightly-retrain.json").read_text())
    doc["spec"]["schedule"] = LINE
    with serve({**ROUTES, path: (200, json.dumps(doc).encode())}) as api:
        origin = _resolve(tmp_path, KubernetesResolver(_api(api.url)), CJ_CGROUP)
    assert origin is not None
    (said,) = [e for e in origin.evidence if e.startswith("CronJob ")]
    _check(said)


def test_an_unnamed_supervisor_programs_command_is_quoted_in_the_remediation(
    tmp_path: Path,
) -> None:
    """No SUPERVISOR_PROCESS_NAME: the by-hand line names the program by its command line
    (was its repr, in every refusal's ``by hand:`` part)."""
    sup = FakeProc(300, 1, ["/usr/bin/python3", "/usr/bin/supervisord"])
    procs = [FakeProc(1, 0, ["/sbin/init"]), sup,
             FakeProc(310, 300, ["/usr/bin/python3", "/srv/train.py", LINE])]  # fmt: skip
    (tmp_path / "cron.d").mkdir()
    ctx = make_context(
        tmp_path / "proc", procs, cron_files=(), cron_d_dir=str(tmp_path / "cron.d"),
        cron_spool_dirs=(),
    )  # fmt: skip
    origin = resolve_origin(lineage(ctx, 310), ctx, default_resolvers())
    assert origin.kind == "supervisor"
    _check(origin.remediation)


def test_allowlist_suggest_and_diff_quote_a_runs_command_line() -> None:
    """``# seen, not proposed: CMD (user U, …)`` and ``… rogue -> sanctioned: CMD (user U,
    …)`` named the command line as it was (escaped, not quoted)."""
    t0 = LEARN_T0
    odd = [PY, SCRIPT, LINE]
    # The comment names the program and script (no arguments): the script's name is odd.
    script = f"/home/alice/{LINE.replace('/', '')}.py"
    by_hand = run(201, t0 + 50, t0 + 90, tmux(), [PY, script, "--lr", "1"], "alice")
    (seen,) = [
        line
        for line in render_yaml(suggest([by_hand], t0 - 1)).splitlines()
        if line.startswith("# seen, not proposed: ")
    ]
    _check(seen)
    cfg = parse_config(
        "sanctioned:\n- name: p\n"
        "  cmdline_regex: '^/opt/pipeline/venv/bin/python /opt/pipeline/train\\.py( |$)'\n"
        "  user: mlops\n  origin: {cron_file: /etc/cron.d/pipeline, cron_line: 2}\n",
        "c.yaml",
    )
    runs = [run(101 + i, t0 + 300 * i, t0 + 300 * i + 200, cron(), odd) for i in range(2)]
    changed = [ln for ln in render_changes(replay(runs, cfg)).splitlines() if " PID " in ln]
    assert len(changed) == 2
    for line in changed:
        _check(line)

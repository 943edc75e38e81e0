"""What brings a rogue back, per origin kind (issue 31): each kind's answer, exactly, as
the record gives it (:meth:`rogue_watchdog.model.Origin.restarts`), and the shell loops the
guard reads from a wrapper's command text. The real components are in
tests/system/test_restart_sources.py."""

from __future__ import annotations

import pytest

from rogue_watchdog.model import (
    AtOrigin,
    ContainerOrigin,
    CronOrigin,
    Job,
    KubernetesOrigin,
    Origin,
    OrphanOrigin,
    Proc,
    ShellOrigin,
    SupervisorOrigin,
    SystemdOrigin,
)
from rogue_watchdog.policy.guard import shell_loop

CID = "a" * 64


@pytest.mark.parametrize(
    ("origin", "line"),
    [
        (CronOrigin(file="/etc/cron.d/x", line=2, schedule="0 2 * * 0"),
         "restarts it: on schedule, its cron line (0 2 * * 0)"),
        (CronOrigin(file="/etc/cron.d/x", line=2, schedule="@reboot"),
         "restarts it: on boot, its cron line (@reboot)"),
        (CronOrigin(file="/etc/cron.d/x", line=2, schedule="* * * * *", entry_state="disabled"),
         None),
        (SystemdOrigin(unit="t.service", restart="always"),
         "restarts it: at once, systemd Restart=always"),
        (SystemdOrigin(unit="t.service", restart="on-failure"),
         "restarts it: on failure (not after a clean exit or SIGTERM), systemd Restart=on-failure"),
        (SystemdOrigin(unit="t.service", restart="no", timer="t.timer", timer_schedule="daily"),
         "restarts it: on schedule, timer t.timer (daily)"),
        (SystemdOrigin(unit="t.service", restart="no"), None),
        # Restart= not read (no bus, no unit file): unknown, not "never" (a terminate
        # said ok while the unit could start the job again; wt8-at's finding).
        (SystemdOrigin(unit="t.service"),
         "restarts it: unknown, systemd unit t.service (its Restart= was not read: neither "
         "systemctl nor its unit file answered)"),
        (SystemdOrigin(unit="t.service", timer="t.timer", timer_schedule="daily"),
         "restarts it: on schedule, timer t.timer (daily)"),
        (SystemdOrigin(unit="t.service", restart="no",
                       evidence=("also triggered by t.socket (TriggeredBy)",)),
         "restarts it: on demand, t.socket (on demand)"),
        (ContainerOrigin(container_id=CID, runtime="docker", restart_policy="always"),
         "restarts it: at once, Docker restart policy always of container aaaaaaaaaaaa"),
        (ContainerOrigin(container_id=CID, runtime="podman", restart_policy="on-failure:3"),
         # The trust simulator (issue 31, seed 777): terminate's SIGTERM is a non-zero
         # exit (143), so on-failure brings it back too. BEFORE: "on failure (a non-zero
         # exit)", after_terminate False (terminate said ok, the container came back).
         "restarts it: on failure (a non-zero exit; a kill by a signal is one), Podman "
         "restart policy on-failure:3 of container aaaaaaaaaaaa"),
        (ContainerOrigin(container_id=CID, runtime="docker", restart_policy="no"), None),
        (ContainerOrigin(container_id=CID, runtime="docker"),
         "restarts it: unknown, Docker restart policy unknown (the engine did not answer for "
         "aaaaaaaaaaaa)"),
        (KubernetesOrigin(pod_uid="u", owner_kind="Deployment", owner_name="web"),
         "restarts it: at once, Kubernetes Deployment web recreates the pod"),
        (KubernetesOrigin(pod_uid="u", owner_kind="Pod"), None),
        # Issue 31, case 6. BEFORE (bd663fe): every supervisord program was "restarts it:
        # unknown, supervisord program p (its autorestart is not read; supervisors restart
        # their programs by default)".
        (SupervisorOrigin(program="p", supervisor="supervisord",
                          settings_unread="/etc/s.conf could not be read: no such file"),
         "restarts it: unknown, supervisord program p (autorestart unknown: /etc/s.conf could "
         "not be read: no such file; autorestart=unexpected, the default, restarts it after a "
         "signal)"),
        (SupervisorOrigin(program="p", supervisor="supervisord", section="program:p",
                          autostart="true", autostart_at="default", autorestart="true",
                          autorestart_at="/etc/s.conf:4", exitcodes="0"),
         "restarts it: at once, will return: autorestart=true (supervisord program:p, "
         "/etc/s.conf:4)"),
        (SupervisorOrigin(program="p", supervisor="supervisord", section="program:p",
                          autostart="true", autostart_at="default", autorestart="unexpected",
                          autorestart_at="default", exitcodes="0,2"),
         "restarts it: at once after a signal or an exit code not in exitcodes=0,2, will "
         "return: autorestart=unexpected (supervisord program:p, default)"),
        (SupervisorOrigin(program="p", supervisor="supervisord", section="program:p",
                          autostart="true", autostart_at="default", autorestart="false",
                          autorestart_at="/etc/s.conf:5"),
         "restarts it: when supervisord starts (not after it ends), won't return: "
         "autorestart=false (supervisord program:p, /etc/s.conf:5); autostart=true (default) "
         "starts it when supervisord starts"),
        (SupervisorOrigin(program="p", supervisor="supervisord", section="program:p",
                          autostart="no", autostart_at="/etc/s.conf:6", autorestart="off",
                          autorestart_at="/etc/s.conf:5"), None),
        (SupervisorOrigin(program="p", supervisor="runsv"),
         "restarts it: unknown, runsv program p (its autorestart is not read; supervisors "
         "restart their programs by default)"),
        (AtOrigin(job=6, pending_same_command=(7,)),
         "restarts it: on schedule, at job(s) 7 queued with the same commands (it re-queues "
         "itself)"),
        # Simulator seed 67601 (I15): not read is not "never again". BEFORE (603682b):
        # None for both, and a run that already ended was terminated "ok".
        (AtOrigin(job=6),
         "restarts it: unknown, atd (neither this run's job file nor atd's queue was read: a "
         "queued copy may run it again)"),
        (AtOrigin(pending_same_command=(8,), queued_match="/srv/train_at.py", uid=0,
                  queue_read=True),
         "restarts it: on schedule, at job(s) 8 of the same user queued that run "
         "`/srv/train_at.py` (it re-queues itself; this run's own job file was not read)"),
        # Hostile tester i: a job of the same user not ruled out (not read, a program in a
        # variable) is "unknown", never a named copy; none at all is None.
        (AtOrigin(queued_match="train_at.py", uid=0, queued_unsure=(9,), queue_read=True),
         "restarts it: unknown, atd (at job(s) 9 of the same user queued, not ruled out as "
         "runs of `train_at.py`; this run's own job file was not read)"),
        (AtOrigin(uid=0, queue_read=True), None),
        (AtOrigin(uid=0, queue_read=False),
         "restarts it: unknown, atd (neither this run's job file nor atd's queue was read: a "
         "queued copy may run it again)"),
        (AtOrigin(job=6, command="python3 train_at.py"), None),
        (AtOrigin(queued_match="train_at.py"), None),
        (ShellOrigin(session="ssh"), None),
        (OrphanOrigin(), None),
        (Origin(), None),
    ],
)  # fmt: skip
def test_each_kind_answers_for_itself(origin: Origin, line: str | None) -> None:
    answer = origin.restarts()
    assert (answer.line() if answer else None) == line


def _job(*shells: tuple[int, tuple[str, ...]]) -> Job:
    root = Proc(900, shells[0][0], 1, "S", "python3", cmdline=("python3", "train_loop.py"),
                exe="/usr/bin/python3")  # fmt: skip
    lineage = [root] + [
        Proc(pid, 1, 1, "S", "bash", cmdline=argv, exe="/usr/bin/bash") for pid, argv in shells
    ]
    return Job(900, [900], "u", root.cmdline, 1, None, [], lineage)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("while true; do python3 train_loop.py; sleep 5; done", "while true"),
        ("while :; do python3 train_loop.py; done", "while :"),
        ("until false; do python3 train_loop.py; done", "until false"),
        ("for ((;;)); do python3 train_loop.py; done", "for ((;;))"),
        ("while sleep 60; do python3 train_loop.py; done", "while sleep 60"),
        ("python3 train_loop.py; echo done", None),  # runs it once
        ("while true; do python3 other.py; done", None),  # a loop of something else
    ],
)
def test_a_shell_loop_is_read_from_the_wrappers_command_text(text: str, found: str | None) -> None:
    job = _job((812, ("bash", "-c", text)))
    shared = shell_loop(job, stop_pids=(900,))
    assert (shared.how if shared else None) == (
        f"shell loop `{found}` in PID 812" if found else None
    )
    if shared is not None:
        assert shared.after_terminate and shared.stops == (
            "stop the loop first: kill -TERM 812 (its shell alone: what else it started "
            "keeps running)"
        )
        own = shell_loop(job, stop_pids=(900, 812))
        assert own is not None and not own.after_terminate


@pytest.mark.parametrize(
    ("argv", "found"),
    [
        # The job once, then a loop of other work. BEFORE: any loop in the text plus the
        # job's name anywhere in it: "restarts it: ... shell loop `while true`".
        (("bash", "-c", "python3 train_loop.py; while true; do python3 -m http.server 8765; "
          "sleep 60; done"), None),
        (("bash", "-c", "while true; do serve; done >log; python3 train_loop.py"), None),
        # A loop that is data (a string, a comment, a here-document), not code.
        (("bash", "-c", "echo 'while true; do python3 train_loop.py; done' >l.sh; "
          "python3 train_loop.py"), None),
        (("bash", "-c", "python3 train_loop.py # was: while true; do python3 train_loop.py; "
          "done"), None),
        (("sh", "-c", "cat <<EOF >l.sh\nwhile :; do python3 train_loop.py; done\nEOF\n"
          "python3 train_loop.py"), None),
        # Loops that run it: nested, after another loop, after a `#` that is no comment's
        # or a comment's apostrophe, given it as arguments (`"$@"`), options before -c.
        (("bash", "-c", "while :; do for i in 1 2; do echo $i; done; python3 train_loop.py; "
          "done"), "while :"),
        (("bash", "-c", "while true; do a; done & while sleep 3; do python3 train_loop.py; "
          "done"), "while sleep 3"),
        (("bash", "-c", 'echo "step #1"; until false; do python3 train_loop.py; done'),
         "until false"),
        (("bash", "-c", "# don't stop\nfor ((;;)); do python3 train_loop.py; done"),
         "for ((;;))"),
        (("bash", "-ec", 'while :; do "$@"; sleep 3; done', "sh", "python3", "train_loop.py"),
         "while :"),
        (("bash", "--norc", "-c", "-x", "while true; do python3 train_loop.py; done"),
         "while true"),
    ],
)  # fmt: skip
def test_only_a_loop_whose_body_runs_the_job_in_c_text_restarts_it(
    argv: tuple[str, ...], found: str | None
) -> None:
    """The rule script files follow (:func:`~rogue_watchdog.policy.guard.loop_around`,
    tests/unit/test_script_loop.py), for ``-c`` text: a loop restarts the job only when
    its body runs it."""
    loop = shell_loop(_job((812, argv)), stop_pids=(900,))
    assert (loop.how if loop else None) == (f"shell loop `{found}` in PID 812" if found else None)


def test_a_wrapper_carrying_c_text_is_read_by_the_same_rule() -> None:
    """``nohup bash -c TEXT`` above the job's shell: its TEXT is read as the shell's, so a
    commented-out loop is no loop there either (BEFORE: the whole command line was
    searched for a loop)."""
    root = Proc(900, 811, 1, "S", "python3", cmdline=("python3", "train_loop.py"))

    def nohup(text: str) -> Proc:
        return Proc(811, 1, 1, "S", "nohup", cmdline=("nohup", "bash", "-c", text),
                    exe="/usr/bin/nohup")  # fmt: skip

    said = nohup("python3 train_loop.py # while true; do python3 train_loop.py; done")
    assert shell_loop(Job(900, [900], "u", root.cmdline, 1, None, [], [root, said]), (900,)) is None
    runs = nohup("while true; do python3 train_loop.py; sleep 5; done")
    loop = shell_loop(Job(900, [900], "u", root.cmdline, 1, None, [], [root, runs]), (900,))
    assert loop is not None and loop.line() == (
        "restarts it: after about 5 s, shell loop `while true` in PID 811"
    )


@pytest.mark.parametrize(
    ("argv", "exe", "text"),
    [
        (("bash", "-c", "a; b", "sh", "x"), None, ("a; b", ("sh", "x"))),
        (("/bin/sh", "-ec", "a"), None, ("a", ())),
        (("bash", "-c", "-x", "a"), None, ("a", ())),  # bash takes options after -c
        (("bash", "-o", "pipefail", "-c", "a"), None, ("a", ())),
        (("bash", "-c", "--", "-a"), None, ("-a", ())),
        (("bash", "--norc", "run.sh"), None, None),  # a script file, no -c
        (("bash", "-c"), None, None),  # no text
        (("python3", "-c", "a"), None, None),  # no shell
        (("x", "-c", "a"), "/usr/bin/dash", ("a", ())),  # named by its executable
    ],
)
def test_the_c_text_of_a_shell_command_line(
    argv: tuple[str, ...], exe: str | None, text: tuple[str, tuple[str, ...]] | None
) -> None:
    from rogue_watchdog.lineage.scriptfile import command_string

    assert command_string(argv, exe) == text

"""Shell loops inside script files (``bash retrain.sh``, a ``#!/bin/bash`` script run as
``/bin/bash /opt/x/run.sh``). BEFORE: a run under ``bash -c 'while true; do python3
train.py; sleep 5; done'`` was named as a loop that restarts it, but the same loop in a
script file was not read: the advice said nothing would start it again.

Real bash processes run real script files in ``tmp_path``; each shell is left to PID 1
(``sh -c 'bash ... & exit 0'``) so that no launcher above it answers instead.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from rogue_watchdog.actions.effects import Effects
from rogue_watchdog.actions.guards import Expected, SignalGuard, read_live
from rogue_watchdog.actions.terminate import plan_tree, terminate_tree
from rogue_watchdog.lineage.scriptfile import (
    MAX_SCRIPT_BYTES,
    ScriptFiles,
    read_script,
    script_path,
)
from rogue_watchdog.model import Job, Proc, Restarts
from rogue_watchdog.policy.guard import (
    STOPS_WITH_LOOP,
    ScanProtection,
    script_doubt,
    script_loops,
    with_advice,
)
from rogue_watchdog.sources.procfs import ProcessTable, read_proc
from tests.conftest import Spawned, poll, process_picture

TRAINER = "import time\ntime.sleep(300)\n"


def trainer_under(
    spawned: Spawned, tmp_path: Path, shell_argv: Sequence[str]
) -> tuple[Job, ProcessTable]:
    """Run ``shell_argv`` in ``tmp_path`` (left to PID 1) and wait for the ``python3
    train_loop.py`` it starts as its child; the job of that run, with its lineage, and
    the table it was read from. Also test_loop_left.py's."""
    (tmp_path / "train_loop.py").write_text(TRAINER)
    spawned.start(
        ["/bin/sh", "-c", f"{shlex.join(shell_argv)} >/dev/null 2>&1 & exit 0"],
        cwd=tmp_path, env=dict(os.environ, PATH="/usr/bin:/bin"),
    ).wait(timeout=10)  # fmt: skip
    # A fresh table each look: a kept one reads a process's command line again only
    # once its stat's comm changed, so a command line read before an exec that kept the
    # comm is kept for good (test_merged_loop_copy.py met that: `bash` -> `nohup` ->
    # `bash`). Whether that is this helper's unreproduced CI timeout is not known.
    table = ProcessTable()

    def trainer() -> Proc | None:
        nonlocal table
        table = ProcessTable()
        table.refresh()
        for proc in table.procs.values():
            parent = table.get(proc.ppid)
            if (
                proc.cmdline == ("python3", "train_loop.py")
                and parent is not None
                and parent.cmdline == tuple(shell_argv)
            ):
                return proc
        return None

    try:
        root = poll("the trainer", trainer, 30)
    except AssertionError as exc:
        picture = process_picture(" ".join(shell_argv))  # the shell and its children
        raise AssertionError(f"{exc}\n{picture}") from None
    job = Job(root.pid, [root.pid], "root", root.cmdline, root.start_ticks, None, [],
              table.ancestors(root.pid))  # fmt: skip
    return job, table


def _restarts(job: Job, table: ProcessTable) -> Restarts | None:
    (advised,) = with_advice([job], ScanProtection(), table)
    return advised.advice.restarts


def _identity(pid: int) -> Expected:
    live = read_live(pid)
    assert live is not None
    return Expected(pid, live.start_ticks, live.cmdline)


def _kill_first(pid: int) -> str:
    return f"kill -TERM {pid} (its shell alone: what else it started keeps running)"


def test_a_loop_in_the_script_a_shell_runs_is_named_and_stopped_with_its_run(
    spawned: Spawned, tmp_path: Path
) -> None:
    """The shell runs only the loop: it is the job's own wrapper, and a real terminate
    stops it with the run (as `bash -c 'while ...'` is, test_terminate.py)."""
    script = tmp_path / "retrain.sh"
    script.write_text(
        '#!/bin/bash\n# while true; do echo commented out; done\ncd "$(dirname "$0")"\n'
        "while true\ndo\n    python3 train_loop.py\n    sleep 7\ndone\n"
    )
    job, table = trainer_under(spawned, tmp_path, ["/bin/bash", str(script)])
    shell = job.lineage[1].pid
    (advised,) = with_advice([job], ScanProtection(), table)
    assert advised.advice.stop_pids == (job.root_pid, shell)
    assert advised.advice.restarts == Restarts(
        "after about 7 s",
        f"shell loop `while true` in the script `{script}` of PID {shell} (as the file reads now)",
        STOPS_WITH_LOOP,
        False,
    )
    root = _identity(job.root_pid)
    out = terminate_tree([root], SignalGuard(), Effects(), grace_s=5.0)
    assert [(x.pid, x.result) for x in out.procs] == [(job.root_pid, "exited"), (shell, "exited")]
    assert out.outcome == "ok"


def test_a_script_loop_whose_shell_runs_something_else_is_never_signalled(
    spawned: Spawned, tmp_path: Path
) -> None:
    """The same loop, its shell also running a `sleep` in the background: shared, so
    never signalled; the advice says to stop the loop first."""
    script = tmp_path / "retrain.sh"
    script.write_text("sleep 300 &\nwhile true; do python3 train_loop.py; sleep 7; done\n")
    job, table = trainer_under(spawned, tmp_path, ["/bin/bash", str(script)])
    shell = job.lineage[1].pid
    (advised,) = with_advice([job], ScanProtection(), table)
    assert advised.advice.stop_pids == (job.root_pid,)
    assert advised.advice.restarts == Restarts(
        "after about 7 s",
        f"shell loop `while true` in the script `{script}` of PID {shell} (as the file reads now)",
        f"stop the loop first: {_kill_first(shell)}",
    )
    out = terminate_tree([_identity(job.root_pid)], SignalGuard(), Effects(), grace_s=5.0)
    assert [x.pid for x in out.procs] == [job.root_pid]
    assert read_live(shell) is not None  # the loop runs on


def test_a_script_without_a_loop_claims_no_restart(spawned: Spawned, tmp_path: Path) -> None:
    script = tmp_path / "once.sh"
    script.write_text("#!/bin/bash\npython3 train_loop.py\necho finished\n")
    job, table = trainer_under(spawned, tmp_path, ["/bin/bash", str(script)])
    # Nothing above the shell launched it (its parent is PID 1) and its script runs the
    # trainer once: no restart at all.
    assert _restarts(job, table) is None


def test_a_script_too_large_to_read_is_unsure_not_nothing(spawned: Spawned, tmp_path: Path) -> None:
    script = tmp_path / "big.sh"
    padding = "# " + "x" * 78 + "\n"
    script.write_text(padding * (MAX_SCRIPT_BYTES // len(padding) + 1) + "python3 train_loop.py\n")
    size = script.stat().st_size
    job, table = trainer_under(spawned, tmp_path, ["/bin/bash", str(script)])
    shell = job.lineage[1].pid
    found = _restarts(job, table)
    assert found == Restarts(
        "unknown",
        f"the script `{script}` of PID {shell} could not be read (too large: {size} bytes, "
        f"limit {MAX_SCRIPT_BYTES}): whether it runs the job again is unknown",
        f"if it loops, stop its shell first: {_kill_first(shell)}",
    )
    assert not found.known


def test_a_vanished_script_is_unsure(tmp_path: Path) -> None:
    # A shell that holds no descriptor of its script, whose file is gone: a proc tree in
    # tmp_path (fd/ empty, root/ without the file) stands in for it.
    proc_root = tmp_path / "proc"
    (proc_root / "77" / "fd").mkdir(parents=True)
    (proc_root / "77" / "root").mkdir()
    shell = Proc(77, 1, 100, "S", "bash", cmdline=("/bin/bash", "/opt/x/run.sh"),
                 exe="/usr/bin/bash")  # fmt: skip
    read = read_script(shell, ProcessTable(str(proc_root)))
    assert read is not None
    assert (read.path, read.text, read.unread) == (
        "/opt/x/run.sh", None, "no such file or directory",
    )  # fmt: skip
    (proc_root / "77" / "root" / "opt" / "x").mkdir(parents=True)
    (proc_root / "77" / "root" / "opt" / "x" / "run.sh").write_text("while :; do x; done\n")
    read = read_script(shell, ProcessTable(str(proc_root)))
    assert read is not None and read.text == "while :; do x; done\n"
    # Read by its path, not through the shell's descriptor: named as a loop, but never
    # what makes the shell the job's wrapper (a symlink on the path resolves in our root).
    assert not read.own_fd and not script_loops(read, "x")
    assert script_loops(dataclasses.replace(read, own_fd=True), "x")


def test_a_script_changed_after_its_shell_started_is_said_to_be(
    spawned: Spawned, tmp_path: Path
) -> None:
    script = tmp_path / "retrain.sh"
    script.write_text("while true; do python3 train_loop.py; sleep 5; done\n")
    job, table = trainer_under(spawned, tmp_path, ["/bin/bash", str(script)])
    shell = job.lineage[1].pid
    later = time.time() + 30  # well past the start time's one-second grain
    os.utime(script, (later, later))
    # What it runs now is not known: its shell is not taken for the job's own.
    assert [e.pid for e, _d in plan_tree([_identity(job.root_pid)], SignalGuard())] == [
        job.root_pid
    ]
    assert _restarts(job, table) == Restarts(
        "unknown",
        f"shell loop `while true` in the script `{script}` of PID {shell} (as the file reads "
        "now); the file changed after the shell started, so whether it still loops is unsure",
        f"stop the loop first: {_kill_first(shell)}",
    )
    # Changed to text with no loop: unsure still, never "nothing starts it again".
    script.write_text("python3 train_loop.py\n")
    os.utime(script, (later, later))
    found = _restarts(job, table)
    assert found == Restarts(
        "unknown",
        f"the script `{script}` of PID {shell} changed after the shell started: whether it "
        "runs the job again is unknown",
        f"if it loops, stop its shell first: {_kill_first(shell)}",
    )


def test_which_argv_names_a_script() -> None:
    assert script_path(("/bin/bash", "/opt/x/run.sh")) == "/opt/x/run.sh"
    assert script_path(("bash", "-e", "-o", "pipefail", "retrain.sh")) == "retrain.sh"
    assert script_path(("sh", "--", "-odd.sh")) == "-odd.sh"
    assert script_path(("bash", "-c", "while true; do x; done")) is None
    assert script_path(("bash", "-ec", "x")) is None
    assert script_path(("bash", "-s")) is None
    assert script_path(("-bash",)) is None
    assert script_path(("python3", "train.py")) is None
    assert script_path(("x", "run.sh"), exe="/usr/bin/dash") == "run.sh"


def test_a_script_named_by_its_own_descriptor_is_read_through_the_shells(
    spawned: Spawned, tmp_path: Path
) -> None:
    """``bash /dev/fd/3 3<run.sh``: through the reader's own /dev/fd the path would be
    the watchdog's descriptor 3, never the shell's."""
    script = tmp_path / "run.sh"
    script.write_text("while sleep 9; do python3 train_loop.py; done\n")
    (tmp_path / "train_loop.py").write_text(TRAINER)
    bash = spawned.start(
        ["/bin/bash", "-c", 'exec 3<"$0"; exec /bin/bash /dev/fd/3', str(script)],
        cwd=tmp_path, env=dict(os.environ, PATH="/usr/bin:/bin"), stdout=subprocess.DEVNULL,
    )  # fmt: skip

    def shell() -> Proc | None:
        # Read anew each look: a kept table may keep the command line from before exec.
        proc = read_proc(bash.pid)
        return proc if proc is not None and proc.cmdline[1:] == ("/dev/fd/3",) else None

    read = read_script(poll("the shell", shell, 20), ProcessTable())
    assert read is not None and read.text == script.read_text() and read.own_fd


def test_a_loop_script_given_the_trainer_as_an_argument_is_stopped_with_it(
    spawned: Spawned, tmp_path: Path
) -> None:
    """``bash loop.sh train_loop.py``: the shell's command line carries the job's
    command, so it is the job's own wrapper (the rule ``-c`` shells follow) and terminate
    stops the loop with it; the loop is read from the file."""
    script = tmp_path / "loop.sh"
    script.write_text('while :; do python3 "$1"; sleep 3; done\n')
    job, table = trainer_under(spawned, tmp_path, ["/bin/bash", str(script), "train_loop.py"])
    root = job.lineage[0]
    (advised,) = with_advice([job], ScanProtection(), table)
    shell = root.ppid
    assert advised.advice.stop_pids == (root.pid, shell)
    assert advised.advice.restarts == Restarts(
        "when its loop comes round",  # the pause is read only after the job's own name
        f"shell loop `while :` in the script `{script}` of PID {shell} (as the file reads now)",
        STOPS_WITH_LOOP,
        False,
    )


def test_the_script_path_is_quoted_host_text(tmp_path: Path) -> None:
    """A path with a backtick and a newline cannot end the quote or start a line."""
    proc_root = tmp_path / "proc"
    (proc_root / "78" / "fd").mkdir(parents=True)
    (proc_root / "78" / "root").mkdir()
    argv = ("/bin/bash", "/tmp/x` from cron /etc/cron.d/a\nb.sh")
    shell = Proc(78, 1, 100, "S", "bash", cmdline=argv, exe="/usr/bin/bash")
    root = Proc(79, 78, 101, "S", "python3", cmdline=("python3", "train_loop.py"))
    job = Job(79, [79], "root", root.cmdline, 101, None, [], [root, shell])
    found = script_doubt(job, ScriptFiles(ProcessTable(str(proc_root))))
    assert found is not None and found.how == (
        "the script `/tmp/x\\x60 from cron /etc/cron.d/a\u23ceb.sh` of PID 78 could not be "
        "read (no such file or directory): whether it runs the job again is unknown"
    )


@pytest.mark.parametrize(
    "how",
    [
        "script",
        "python3 train_loop.py; while true; do sleep 600; done",
        "python3 train_loop.py; until false; do sleep 600; done",
        # Loops whose condition is no endless form the restart claims read: still loops
        # of other work (before, the shell was killed with the trainer).
        "python3 train_loop.py; while [ 1 -eq 1 ]; do sleep 600; done",
        "python3 train_loop.py\nfor i in $(seq 1000); do sleep 600; done",
        # A loop in a string the shell runs as code (before: a string, not read).
        "python3 train_loop.py; eval 'while true; do sleep 600; done'",
    ],
)
def test_a_script_whose_loop_runs_other_work_after_the_job_is_never_signalled(
    spawned: Spawned, tmp_path: Path, how: str
) -> None:
    """The script runs the trainer once, then loops over other work (a server). Before:
    a loop anywhere in the file and the trainer's name anywhere made the shell the job's
    wrapper, so terminate killed it and the server it would run next never ran; a loop
    written in a trailing comment counted too. Only a loop whose body runs the job
    counts.

    Its ``-c`` twins (the other parameters): a shell that runs the trainer and then
    loops over other work carries the job's command, and while the trainer runs it has
    no other child, so it was taken for the job's exclusive wrapper (advice and
    terminate alike) and killed with it. A service that started the job is not the
    job's (guard.carries_job, one rule for both)."""
    if how == "script":
        script = tmp_path / "serve.sh"
        script.write_text(
            "python3 train_loop.py  # was: while true; do python3 train_loop.py; done\n"
            "while true; do python3 -m http.server 8765; sleep 60; done\n"
        )
        argv = ["/bin/bash", str(script)]
    else:
        argv = ["/bin/bash", "-c", how]
    job, table = trainer_under(spawned, tmp_path, argv)
    shell = job.lineage[1].pid
    (advised,) = with_advice([job], ScanProtection(), table)
    assert advised.advice.stop_pids == (job.root_pid,)
    assert advised.advice.restarts is None
    out = terminate_tree([_identity(job.root_pid)], SignalGuard(), Effects(), grace_s=5.0)
    assert [x.pid for x in out.procs] == [job.root_pid]
    assert read_live(shell) is not None  # it goes on to its own work


def test_a_dash_c_shell_that_loops_over_the_job_is_still_its_wrapper(
    spawned: Spawned, tmp_path: Path
) -> None:
    """What the rule above must keep: a ``-c`` loop whose body runs the job (with other
    steps beside it) is the job's, stopped with it."""
    text = "while true; do python3 train_loop.py; echo done >>log; sleep 60; done"
    job, table = trainer_under(spawned, tmp_path, ["/bin/bash", "-c", text])
    shell = job.lineage[1].pid
    (advised,) = with_advice([job], ScanProtection(), table)
    assert advised.advice.stop_pids == (job.root_pid, shell)
    restarts = advised.advice.restarts
    assert restarts is not None and restarts.shell == (shell, job.lineage[1].start_ticks)


def test_carries_job_reads_the_loops_of_dash_c_text() -> None:
    from rogue_watchdog.policy.guard import carries_job

    def carries(*argv: str) -> bool:
        return carries_job(argv, None, "train.py", lambda: None)

    assert carries("sh", "-c", "cd /srv && python3 train.py >>log 2>&1")  # cron's
    assert carries("sh", "-c", "python3 train.py; python3 upload.py")  # no loop: as before
    assert carries("bash", "-c", "while :; do python3 train.py; sleep 5; done")
    assert carries("bash", "-c", 'while true; do "$@"; done', "sh", "python3", "train.py")
    assert carries("bash", "-c", 'echo "while true; do serve; done"; python3 train.py')
    assert carries("timeout", "300", "python3", "train.py")
    assert not carries("bash", "-c", "python3 train.py; while true; do serve; done")
    assert not carries("bash", "-c", "python3 train.py; until false; do serve; done")
    assert not carries("nohup", "bash", "-c", "python3 train.py; while sleep 60; do backup; done")
    assert not carries("bash", "-c", "while :; do train.py; done; while :; do serve; done")
    assert not carries("bash", "-c", "python3 serve.py")  # not the job's command at all
    # Any loop of other work, whatever its condition (the restart claims read only the
    # endless forms), is other work.
    for loop in (
        "while [ 1 -eq 1 ]", "while test 1", "while true 2>/dev/null", "while ! false",
        "while read -r l", "until [ -e /stop ]", "for ((i=0;;i++))", "for x in $(seq 9)",
        "select x in a b",
    ):  # fmt: skip
        assert not carries("bash", "-c", f"python3 train.py; {loop}; do serve; done"), loop
        assert carries("bash", "-c", f"{loop}; do python3 train.py; done"), loop
    assert carries("bash", "-c", "while :; do for x in a b; do echo; done; python3 train.py; done")
    assert carries("sh", "-c", "python3 train.py --for x; echo while")  # no loop: arguments
    # Quotes read as bash reads them: a `$'...'` string ends at its unescaped quote, a
    # `<<` in a string or in arithmetic opens no here-document (before, each hid the loop
    # after it: the shell was the job's exclusive wrapper).
    serve = "python3 train.py\nwhile true; do serve; done"
    assert not carries("bash", "-c", "echo $'it\\'s over'; " + serve)
    assert not carries("bash", "-c", 'echo "use <<EOF for docs"\n' + serve)
    assert not carries("bash", "-c", "echo '<<EOF'\n" + serve)
    assert not carries("bash", "-c", "n=$((1<<N))\n" + serve)
    assert carries("bash", "-c", "cat <<EOF\nwhile true; do serve; done\nEOF\npython3 train.py")
    # A string may be code: eval's, a nested shell's (only what echo or printf prints is
    # data, as long as no command substitution runs in it).
    assert not carries("bash", "-c", "python3 train.py; eval 'while true; do serve; done'")
    assert not carries("sh", "-c", 'python3 train.py; eval "while :; do serve; done"')
    assert not carries("bash", "-c", "python3 train.py\nexec sh -c 'until false; do serve; done'")
    assert not carries("bash", "-c", 'python3 train.py; echo "$(while :; do serve; done)"')
    assert carries("bash", "-c", "python3 train.py; printf '%s\\n' 'for x in a; do'")
    assert carries("bash", "-c", "eval 'while true; do python3 train.py; done'")
    assert carries("sh", "-c", 'python3 train.py --note "for the paper" --tag "while ok"')
    # A body that only prints the job's name runs other work (before: the job's loop).
    for body in ('echo "train.py ended"; serve', "if true; then printf '%s' train.py; fi; serve"):
        assert not carries("bash", "-c", f"python3 train.py; while :; do {body}; done"), body
    assert carries("bash", "-c", 'while :; do echo "run train.py"; python3 train.py; done')
    # A here-document a shell reads is code (before: dropped as data, its loop unseen).
    fed = "python3 train.py\nbash <<'EOF'\nwhile true; do serve; done\nEOF\n"
    assert not carries("bash", "-c", fed)
    assert not carries("bash", "-c", fed.replace("bash <<", "sudo /bin/sh -s <<"))
    assert carries("bash", "-c", fed.replace("bash <<", "cat >loop.sh <<"))


def test_the_loop_around_the_job_is_the_one_whose_body_runs_it() -> None:
    from rogue_watchdog.policy.guard import loop_around, shell_code

    assert loop_around("while true; do python3 train.py; sleep 5; done", "train.py")
    assert loop_around(
        "while :\ndo\n  for x in a b; do echo; done\n  python3 train.py\ndone", "train.py"
    )
    assert loop_around("python3 train.py\nwhile true; do serve; done", "train.py") is None
    assert loop_around("while true; do serve; done\npython3 train.py", "train.py") is None
    assert loop_around("while true; do serve; done>log\npython3 train.py", "train.py") is None
    assert loop_around("echo $'it\\'s'\nwhile true; do python3 train.py; done", "train.py")
    fed = shell_code("sh <<'EOF'\nwhile true; do python3 train.py; done # x\nEOF\necho")
    assert fed == "sh <<'EOF'\nwhile true; do python3 train.py; done \necho"
    assert loop_around(fed, "train.py")
    assert loop_around("while true; do a; done; while sleep 3; do train.py; done", "train.py")
    from rogue_watchdog.lineage.scriptfile import ScriptRead

    said = ScriptRead("x.sh", "train.py  # while true; do train.py; done\n", own_fd=True)
    assert not script_loops(said, "train.py")  # a loop in a trailing comment
    runs = ScriptRead("x.sh", "#!/bin/sh\nwhile :; do train.py # again\ndone\n", own_fd=True)
    assert script_loops(runs, "train.py")
    # Data, not code: a loop in a string or a here-document (before: counted).
    for data in (
        'echo "while true; do python3 train.py; done"\npython3 train.py\n',
        "cat <<'EOF' >loop.sh\nwhile true; do python3 train.py; done\nEOF\npython3 train.py\n",
        "cat <<-END\n\twhile :; do train.py; done\n\tEND\ntrain.py\n",
    ):
        assert not script_loops(ScriptRead("x.sh", data, own_fd=True), "train.py"), data
    quoted = 'while true; do python3 "train.py" --tag "done"; sleep 5; done\n'
    assert script_loops(ScriptRead("x.sh", quoted, own_fd=True), "train.py")
    after = "cat <<EOF\nhi\nEOF\nwhile true; do train.py; done\n"
    assert script_loops(ScriptRead("x.sh", after, own_fd=True), "train.py")
    # A `#` inside quotes starts no comment, nor does a `<<` in a comment open a
    # here-document (before: each hid the loop after it).
    for code in (
        'echo "step #1"; while true; do train.py; done\n',
        "# see cat <<EOF in x.sh\nwhile true; do train.py; done\n",
        "# don't stop it\nwhile true; do train.py; done\n",
    ):
        assert script_loops(ScriptRead("x.sh", code, own_fd=True), "train.py"), code


def test_a_file_that_says_it_is_empty_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """procfs and tracefs files a read consumes (``/proc/kmsg``: the kernel log syslog
    reads; ``trace_pipe``) are regular files of size 0, and a user's symlink on the
    script's path (``ln -s /proc/kmsg k; bash ./k``) reaches them through the shell's
    cwd, where the ``/proc``-path check never sees them. Before, the daemon (root) read
    them, taking kernel messages from syslog; a file of size 0 is now never read (an
    empty script runs no loop). ``os.pread`` stands in for the read: this test must not
    read the host's /proc/kmsg."""
    from rogue_watchdog.lineage import scriptfile

    proc_root = tmp_path / "proc"
    (proc_root / "77" / "fd").mkdir(parents=True)
    (proc_root / "77" / "cwd").mkdir()
    (proc_root / "77" / "cwd" / "k").write_bytes(b"")
    reads: list[int] = []
    real = os.pread

    def pread(fd: int, n: int, at: int) -> bytes:
        reads.append(fd)
        return real(fd, n, at)

    monkeypatch.setattr(scriptfile.os, "pread", pread)
    shell = Proc(77, 1, 100, "S", "bash", cmdline=("bash", "./k"), exe="/usr/bin/bash")
    read = read_script(shell, ProcessTable(str(proc_root)))
    assert read is not None and (read.text, read.unread, reads) == ("", None, [])


def test_a_script_given_the_trainer_that_then_loops_over_other_work_is_never_signalled(
    spawned: Spawned, tmp_path: Path
) -> None:
    """``bash serve.sh train_loop.py``: the command line carries the job's command, but
    what runs is the file, and it runs the trainer once and then a loop of other work.
    Before: its command line alone made it the job's wrapper (the file was not read),
    so advice and terminate killed it with the trainer and its loop never ran."""
    script = tmp_path / "serve.sh"
    script.write_text('python3 "$1"\nwhile true; do sleep 600; done\n')
    job, table = trainer_under(spawned, tmp_path, ["/bin/bash", str(script), "train_loop.py"])
    shell = job.lineage[1].pid
    (advised,) = with_advice([job], ScanProtection(), table)
    assert advised.advice.stop_pids == (job.root_pid,)
    out = terminate_tree([_identity(job.root_pid)], SignalGuard(), Effects(), grace_s=5.0)
    assert [x.pid for x in out.procs] == [job.root_pid]
    assert read_live(shell) is not None  # it goes on to its own work


def test_carries_job_reads_the_script_a_shell_is_given_the_job_by() -> None:
    from rogue_watchdog.lineage.scriptfile import ScriptRead
    from rogue_watchdog.policy.guard import carries_job

    def carries(text: str | None, *argv: str) -> bool:
        read = ScriptRead("run.sh", text, own_fd=True)
        return carries_job(("bash", "run.sh", *argv), None, "train.py", lambda: read)

    assert carries('python3 "$1"', "train.py")  # cron's `sh -c CMD` as a file
    assert carries('while :; do python3 "$1"; done', "train.py")
    assert carries("while :; do python3 train.py; done")
    assert not carries('python3 "$1"; while :; do serve; done', "train.py")
    assert not carries('while :; do "$@"; done; until false; do serve; done', "train.py")
    assert not carries("while :; do python3 train.py; done\nwhile :; do serve; done")
    assert not carries('python3 "$1"')  # not given the job, and no loop of it
    assert not carries(None, "train.py")  # unread: what it runs is not known


@pytest.mark.parametrize(
    ("head", "when"),
    [("while [ 1 -eq 1 ]", "after about 5 s"), ("until [ -e stop ]", "after about 5 s")],
)
def test_a_loop_of_any_condition_around_the_job_is_a_restart(
    spawned: Spawned, tmp_path: Path, head: str, when: str
) -> None:
    """A shell that runs other work too (its `sleep 300` child) is left by terminate, and
    its loop starts the trainer again. Before: only the endless forms (`while true`...)
    were read, so the advice said nothing restarts it."""
    text = f"sleep 300 & {head}; do python3 train_loop.py; sleep 5; done"
    job, table = trainer_under(spawned, tmp_path, ["/bin/bash", "-c", text])
    shell = job.lineage[1].pid
    assert _restarts(job, table) == Restarts(
        when, f"shell loop `{head}` in PID {shell}", f"stop the loop first: {_kill_first(shell)}"
    )

"""ShellResolver: login and interactive clues only; a plain ``bash -c`` is not a shell origin."""

from __future__ import annotations

import os
import pty
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rogue_watchdog.command import CommandResult, RecordingRunner
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.lineage.shell import ShellResolver, tty_name
from rogue_watchdog.model import Origin
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import Spawned
from tests.fixtures.proc.fakeproc import FakeProc, lineage, make_context

INIT = FakeProc(1, 0, ["/sbin/init"])
SSHD = FakeProc(90, 1, ["/usr/sbin/sshd", "-D"])
TRAIN = ["/usr/bin/python3", "/home/alice/train.py"]
PTS3 = (136 << 8) | 3


def _resolve(ctx: ResolveContext, pid: int) -> Origin | None:
    return ShellResolver().resolve(lineage(ctx, pid), ctx)


@pytest.mark.parametrize(
    ("tty_nr", "name"),
    [
        (0, None),
        ((136 << 8) | 3, "/dev/pts/3"),
        ((137 << 8) | 44, "/dev/pts/300"),  # second pts major
        ((136 << 8) | 4 | (1 << 20), "/dev/pts/260"),  # minor bits 8+ live at bit 20
        ((4 << 8) | 1, "/dev/tty1"),
        ((4 << 8) | 64, "/dev/ttyS0"),
        ((5 << 8) | 1, None),  # /dev/console: not a login terminal
    ],
)
def test_tty_name(tty_nr: int, name: str | None) -> None:
    assert tty_name(tty_nr) == name


PANES_ARGV = (
    "tmux", "-S", "/tmp/tmux-1000/default", "list-panes", "-a", "-F",
    "#{pane_pid}\t#{session_id}\t#{session_name}",
)  # fmt: skip


def test_ssh_and_tmux_from_environment(tmp_path: Path) -> None:
    # TMUX's last part is the session *id* ($0). A second session literally named "0"
    # ($1) must not be taken for it: the server says which pane is whose.
    env = {
        "SSH_CONNECTION": "10.0.0.5 51234 10.0.0.1 22",
        "TMUX": "/tmp/tmux-1000/default,4321,0",
    }
    procs = [
        INIT,
        FakeProc(4321, 1, ["tmux"], exe="/usr/bin/tmux", uid=1000),
        FakeProc(500, 4321, ["-bash"], exe="/usr/bin/bash", uid=1000, tty_nr=PTS3, sid=500),
        FakeProc(510, 500, TRAIN, uid=1000, environ=env, tty_nr=PTS3, pgid=510, sid=500),
    ]
    panes = CommandResult(0, "500\t$0\twork\n777\t$1\t0\n", "")
    ctx = make_context(tmp_path, procs, RecordingRunner({PANES_ARGV: panes}))
    origin = _resolve(ctx, 510)
    assert origin is not None and origin.kind == "shell"
    user = ctx.table.user_name(1000)
    session = "ssh from 10.0.0.5 port 51234, tmux session `work` ($0) on `/tmp/tmux-1000/default`"
    assert origin.fields == {
        "session": session,
        "user": user,
        "client": "10.0.0.5",
        "tty": "/dev/pts/3",
        "login_session": None,
        "tmux_socket": "/tmp/tmux-1000/default",
        "tmux_session": "work",
        "tmux_session_id": "$0",
    }
    assert origin.remediation == "kill -TERM -- -510"
    assert (
        origin.evidence[0]
        == "SSH_CONNECTION=`10.0.0.5 51234 10.0.0.1 22` in the environment of PID 510"
    )
    assert f"ask {user}; the job was started by hand from {session}" in origin.evidence


def test_tmux_that_does_not_answer_says_the_name_is_unknown(tmp_path: Path) -> None:
    env = {"TMUX": "/tmp/tmux-1000/default,4321,3"}
    procs = [
        INIT,
        FakeProc(4321, 1, ["tmux"], exe="/usr/bin/tmux", uid=1000),
        FakeProc(510, 4321, TRAIN, uid=1000, environ=env, pgid=510, sid=510),
    ]
    ctx = make_context(tmp_path, procs)  # the recorder answers nothing: tmux missing
    origin = _resolve(ctx, 510)
    assert origin is not None
    assert origin.fields["session"] == "tmux session $3 (name unknown) on `/tmp/tmux-1000/default`"


def test_sshd_ancestor_without_readable_environment(tmp_path: Path) -> None:
    procs = [
        INIT,
        SSHD,
        FakeProc(100, 90, ["sshd: alice@pts/0"], exe="/usr/sbin/sshd"),
        FakeProc(110, 100, ["-bash"], exe="/usr/bin/bash", sid=110),
        # Started with `ssh host python3 train.py`: same group as the session leader.
        FakeProc(120, 110, TRAIN, pgid=110, sid=110),
    ]
    ctx = make_context(tmp_path, procs)
    origin = _resolve(ctx, 120)
    assert origin is not None
    assert origin.fields["session"] == "ssh session (`sshd: alice@pts/0`)"
    assert origin.remediation == "kill -TERM 120"


def test_screen_session(tmp_path: Path) -> None:
    procs = [
        INIT,
        FakeProc(300, 1, ["SCREEN", "-S", "exp"], exe="/usr/bin/screen"),
        FakeProc(310, 300, TRAIN, environ={"STY": "300.exp"}, pgid=310, sid=301),
    ]
    ctx = make_context(tmp_path, procs)
    origin = _resolve(ctx, 310)
    assert origin is not None and origin.fields["session"] == "screen session `300.exp`"


def test_console_login(tmp_path: Path) -> None:
    procs = [
        INIT,
        FakeProc(200, 1, ["/bin/login", "--"], exe="/usr/bin/login"),
        FakeProc(210, 200, ["-bash"], exe="/usr/bin/bash", tty_nr=(4 << 8) | 1, sid=210),
        FakeProc(220, 210, TRAIN, tty_nr=(4 << 8) | 1, pgid=220, sid=210),
    ]
    ctx = make_context(tmp_path, procs)
    origin = _resolve(ctx, 220)
    assert origin is not None and origin.fields["session"] == "login on /dev/tty1"


def test_session_scope_only(tmp_path: Path) -> None:
    cg = ("0::/user.slice/user-1000.slice/session-4.scope",)
    procs = [INIT, FakeProc(50, 1, ["/bin/sh"]), FakeProc(60, 50, TRAIN, cgroup=cg, pgid=60)]
    ctx = make_context(tmp_path, procs)
    origin = _resolve(ctx, 60)
    assert origin is not None
    assert origin.fields["session"] == "session-4.scope"
    assert origin.fields["login_session"] == "session-4.scope"


def test_fd0_on_a_pty_counts_as_terminal(tmp_path: Path) -> None:
    procs = [INIT, FakeProc(50, 1, ["/bin/bash"]), FakeProc(60, 50, TRAIN, fd0="/dev/pts/7")]
    ctx = make_context(tmp_path, procs)
    origin = _resolve(ctx, 60)
    assert origin is not None and origin.fields["session"] == "terminal /dev/pts/7"


def test_bash_c_under_a_service_is_not_a_shell(tmp_path: Path) -> None:
    cg = ("9:name=systemd:/system.slice/retrain.service", "0::/system.slice/retrain.service")
    procs = [
        INIT,
        FakeProc(50, 1, ["/bin/bash", "-c", "python3 /srv/train.py"], cgroup=cg, environ={}),
        FakeProc(60, 50, TRAIN, cgroup=cg, environ={"PATH": "/usr/bin"}, fd0="/dev/null"),
    ]
    ctx = make_context(tmp_path, procs)
    assert _resolve(ctx, 60) is None


def _wait_child(table: ProcessTable, pid: int) -> int:
    # Watched: a PID seen before its exec (Popen's fork) keeps its inode, and only watched
    # PIDs (or the rotating slice) get their stat line read again on a refresh.
    table.watched.add(pid)
    for _ in range(100):
        table.refresh()
        p = table.get(pid)
        if p is not None and p.cmdline[:1] == ("/usr/bin/python3",):
            return pid
        time.sleep(0.05)
    raise AssertionError(f"PID {pid} never ran python3")


def test_real_process_on_a_pty_with_ssh_environment(tmp_path: Path, spawned: Spawned) -> None:
    train = tmp_path / "train_fake.py"
    train.write_text("import time\ntime.sleep(60)\n")
    master, slave = pty.openpty()
    try:
        env = {"PATH": "/usr/bin:/bin", "SSH_CLIENT": "192.0.2.7 40022 22"}
        p = spawned.start(["/usr/bin/python3", str(train)], env=env, stdin=slave)
        table = ProcessTable()
        _wait_child(table, p.pid)
        ctx = ResolveContext(table=table, now=datetime.now(UTC), run_cmd=RecordingRunner())
        origin = ShellResolver().resolve(table.ancestors(p.pid), ctx)
        assert origin is not None
        assert origin.fields["session"] == "ssh from 192.0.2.7 port 40022"
        assert origin.fields["tty"] == os.ttyname(slave)
        # start_new_session: the trainer leads its own session and group.
        assert origin.remediation == f"kill -TERM -- -{p.pid}"
    finally:
        os.close(master)
        os.close(slave)


def test_real_process_without_clues_is_not_a_shell(tmp_path: Path, spawned: Spawned) -> None:
    train = tmp_path / "train_fake.py"
    train.write_text("import time\ntime.sleep(60)\n")
    p = spawned.start(["/usr/bin/python3", str(train)], env={"PATH": "/usr/bin:/bin"})
    table = ProcessTable()
    _wait_child(table, p.pid)
    # The test runner's own ancestry may be interactive (a developer's ssh/tmux):
    # judge the trainer alone.
    chain = table.ancestors(p.pid)[:1]
    ctx = ResolveContext(table=table, now=datetime.now(UTC), run_cmd=RecordingRunner())
    assert ShellResolver().resolve(chain, ctx) is None


def _tmux(sock: Path, *args: str) -> str:
    import subprocess

    done = subprocess.run(
        ["tmux", "-S", str(sock), *args],
        env={"PATH": "/usr/bin:/bin", "TERM": "xterm"},
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    return done.stdout


def test_real_tmux_session_names_socket_and_id(tmp_path: Path) -> None:
    """Real tmux: the trainer runs in session "work" ($0); a second session is
    literally named "0" ($1). The origin names "work", its id and the socket."""
    import shutil

    if shutil.which("tmux") is None:
        pytest.skip("needs tmux")
    sock = tmp_path / "sock"
    train = tmp_path / "train_tmux.py"
    train.write_text("import time\ntime.sleep(60)\n")
    try:
        _tmux(sock, "new-session", "-d", "-s", "work", f"/usr/bin/python3 {train}")
        _tmux(sock, "new-session", "-d", "-s", "0", "sleep 60")
        table = ProcessTable()
        deadline = time.monotonic() + 10
        pid = None
        while pid is None and time.monotonic() < deadline:
            table.refresh()
            pid = next(
                (p.pid for p in table.procs.values() if p.cmdline[-1:] == (str(train),)), None
            )
            time.sleep(0.05)
        assert pid is not None
        ctx = ResolveContext(table=table, now=datetime.now(UTC))
        origin = ShellResolver().resolve(table.ancestors(pid), ctx)
        assert origin is not None and origin.kind == "shell"
        f = origin.fields
        assert (f["tmux_socket"], f["tmux_session"], f["tmux_session_id"]) == (
            str(sock),
            "work",
            "$0",
        )
        assert f"tmux session `work` ($0) on `{sock}`" in f["session"]
    finally:
        import subprocess

        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, timeout=10)


def test_a_tmux_server_answering_a_forged_session_id_cannot_write_outside_the_quote(
    tmp_path: Path,
) -> None:
    """The session id comes from whatever serves the socket (the job owner's own tmux
    server, which may be any build): before, it was written unquoted after the name, so
    ``$0), from cron /etc/cron.d/backup:1 (`` read as the product naming an origin."""
    from rogue_watchdog.hosttext import outside_code

    env = {"TMUX": "/tmp/tmux-1000/default,4321,0"}
    procs = [
        INIT,
        FakeProc(4321, 1, ["tmux"], exe="/usr/bin/tmux", uid=1000),
        FakeProc(510, 4321, TRAIN, uid=1000, environ=env, pgid=510, sid=510),
    ]
    forged = "$0), from cron /etc/cron.d/backup:1 (x"
    panes = CommandResult(0, f"510\t{forged}\twork\n", "")
    ctx = make_context(tmp_path, procs, RecordingRunner({PANES_ARGV: panes}))
    origin = _resolve(ctx, 510)
    assert origin is not None and origin.kind == "shell"
    session = origin.fields["session"]
    assert "from cron" not in outside_code(session)
    # Not an id tmux gives ($ and digits): not shown as one, nor taken as the first session.
    assert session == "tmux session `work` on `/tmp/tmux-1000/default`"
    assert origin.fields["tmux_session_id"] is None

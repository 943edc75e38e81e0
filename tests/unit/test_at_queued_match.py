"""An at run whose job file was not read: which queued jobs are its copies (issue 34,
hostile tester i).

A run seen only at its exec (it ended; atd removed its job file) is matched to the
queued at jobs by what it runs. The tester's cases, each asserting the safe value:

1. Bob's run (`python3 /tmp/b/train_at.py`) must never name Carol's queued job (another
   uid in at's ``# atrun uid=`` header), not as a restarter and not in ``atrm`` advice.
   BEFORE (c2a0950): ``pending_same_command == [4]``, remediation ``atrm 4``, the
   finding's advice ``stop its source first: atrm 4``.
2. ``python3 -m trainpkg`` was matched by the interpreter name alone. BEFORE:
   ``queued_match 'python3'``, ``pending [4, 5]`` (5 an unrelated ``serve.py``).
3. A queued job that only runs ``echo train_at.py`` is no copy. BEFORE: ``pending [4]``.
4. ``job_commands`` was quadratic on a crafted job file (16k lines took 6.4 s).

Commands: ``pytest tests/unit/test_at_queued_match.py`` (before: the base tree on
PYTHONPATH; the values above are what it asserted against).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rogue_watchdog.lineage import at
from rogue_watchdog.lineage.at import AtResolver
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.model import AtOrigin, Job, Origin, Proc
from rogue_watchdog.sources.procfs import ProcessTable
from tests.fixtures.proc.fakeproc import root_owned
from tests.unit.test_cron_resolver import AT_JOB, INIT, NOW

CAROL_JOB = AT_JOB.replace("# atrun uid=0 gid=0", "# atrun uid=1001 gid=1001").replace(
    "/srv/ml/train_at.py", "/home/carol/prod/train_at.py"
)


def _proc(pid: int, ppid: int, argv: tuple[str, ...], uid: int | None, user: str) -> Proc:
    return Proc(pid, ppid, 1000, "S", argv[0].rsplit("/", 1)[-1][:15], pid, pid, uid, user,
                argv[0], argv, ("0::/",))  # fmt: skip


def _ended_run(
    tmp_path: Path, argv: tuple[str, ...], uid: int | None = 0, user: str = "bob",
    wrapper: tuple[str, ...] | None = None,
) -> Origin | None:  # fmt: skip
    """A run of an at job seen only at its exec: its shell's fds are gone."""
    (tmp_path / "proc").mkdir(exist_ok=True)
    ctx = ResolveContext(table=ProcessTable(str(tmp_path / "proc")), now=NOW, exe_owner=root_owned)
    atd = _proc(50, 1, ("/usr/sbin/atd",), 1, "daemon")
    child = _proc(51, 50, ("/usr/sbin/atd",), 1, "daemon")
    shell = _proc(52, 51, ("sh",), uid, user)
    below = [_proc(54, 52, wrapper, uid, user)] if wrapper else []
    trainer = _proc(53, below[0].pid if below else 52, argv, uid, user)
    return AtResolver().resolve([trainer, *below, shell, child, atd, INIT], ctx)


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "atjobs"
    path.mkdir()
    monkeypatch.setattr(at, "AT_SPOOLS", (str(path),))
    return path


def _fields(origin: Origin | None) -> tuple[object, ...]:
    assert isinstance(origin, AtOrigin)
    again = origin.restarts()
    return (
        list(origin.pending_same_command), list(origin.queued_unsure), origin.remediation,
        again.line() if again else None,
    )  # fmt: skip


def test_bobs_unread_run_never_names_carols_queued_job(spool: Path) -> None:
    (spool / "a0000401c8c100").write_text(CAROL_JOB)
    origin = _ended_run(spool.parent, ("/usr/bin/python3", "/tmp/b/train_at.py"))
    assert _fields(origin) == ([], [], None, None)
    # Her job is not Bob's copy even when it runs the very same script.
    (spool / "a0000401c8c100").write_text(CAROL_JOB.replace("/home/carol/prod", "/tmp/b"))
    origin = _ended_run(spool.parent, ("/usr/bin/python3", "/tmp/b/train_at.py"))
    assert _fields(origin) == ([], [], None, None)


def test_bobs_finding_never_advises_atrm_of_carols_job(spool: Path) -> None:
    from rogue_watchdog.policy.guard import ScanProtection, with_advice

    (spool / "a0000401c8c100").write_text(CAROL_JOB)
    argv = ("/usr/bin/python3", "/tmp/b/train_at.py")
    origin = _ended_run(spool.parent, argv)
    assert isinstance(origin, AtOrigin)
    (job,) = with_advice(
        [Job(53, [53], "bob", argv, 1000, None, [], [], origin, "rogue")], ScanProtection()
    )
    text = job.advice.finding_text(53)
    assert "atrm" not in text and "restarts it" not in text, text


def test_a_module_run_is_never_matched_by_the_interpreter_name(spool: Path) -> None:
    (spool / "a0000401c8c100").write_text(CAROL_JOB)
    (spool / "a0000501c8c100").write_text(AT_JOB.replace("train_at.py", "serve.py"))
    origin = _ended_run(spool.parent, ("/usr/bin/python3", "-m", "trainpkg"))
    assert _fields(origin) == ([], [], None, None)
    assert isinstance(origin, AtOrigin) and origin.queued_match == "python3 -m trainpkg"
    # The same interpreter and module, the same owner: a copy.
    (spool / "a0000601c8c100").write_text(
        AT_JOB.replace("/usr/bin/python3 /srv/ml/train_at.py", "python3 -u -m trainpkg --lr 1")
    )
    origin = _ended_run(spool.parent, ("/usr/bin/python3", "-m", "trainpkg"))
    assert _fields(origin)[:3] == ([6], [], "atrm 6")


def test_a_job_that_only_mentions_the_script_is_no_copy(spool: Path) -> None:
    for n, line in enumerate([
        "echo train_at.py",
        "echo /usr/bin/python3 /srv/ml/train_at.py",
        "grep -c x /srv/ml/train_at.py",
        "# /usr/bin/python3 /srv/ml/train_at.py",
        "true # ; /usr/bin/python3 /srv/ml/train_at.py",
        "cat <<EOF\n/usr/bin/python3 /srv/ml/train_at.py\nEOF",
        "echo '\n/usr/bin/python3 /srv/ml/train_at.py\n'",
        "/usr/bin/python3 /srv/ml/other.py /srv/ml/train_at.py",
        "/usr/bin/python3 '/srv/ml/train_at.py'2>/dev/null",
        "/usr/bin/python3 /srv/ml/train_at.py#x",
    ]):  # fmt: skip
        (spool / f"a{n + 1:05x}01c8c100").write_text(
            AT_JOB.replace("/usr/bin/python3 /srv/ml/train_at.py", line)
        )
    origin = _ended_run(spool.parent, ("/usr/bin/python3", "/srv/ml/train_at.py"))
    assert _fields(origin) == ([], [], None, None)


@pytest.mark.parametrize(
    "line",
    [
        "/usr/bin/python3 /srv/ml/train_at.py",
        "python3 train_at.py",  # resolved against at's `cd /srv/ml`
        "cd /srv && nohup python3 ./ml/train_at.py --epochs 3 >log 2>&1",
        "X=1 exec /srv/ml/train_at.py",
        "if true; then\n  python3 \\\n    /srv/ml/train_at.py\nfi",
        "at now + 5 minutes <<'EOF'\nsomething\nEOF\npython3 '/srv/ml/train_at.py'",
    ],
)
def test_a_copy_of_the_same_owner_and_script_is_named(spool: Path, line: str) -> None:
    (spool / "a0000401c8c100").write_text(
        AT_JOB.replace("/usr/bin/python3 /srv/ml/train_at.py", line)
    )
    origin = _ended_run(spool.parent, ("/usr/bin/python3", "/srv/ml/train_at.py"))
    assert _fields(origin) == (
        [4], [], "atrm 4",
        "restarts it: on schedule, at job(s) 4 of the same user queued that run "
        "`/srv/ml/train_at.py` (it re-queues itself; this run's own job file was not read)",
    )  # fmt: skip
    assert isinstance(origin, AtOrigin) and not origin.disable_handled()


@pytest.mark.parametrize(
    "line",
    [
        "python3 $HOME/train_at.py",  # the path is the shell's to expand
        "nice -n 5 python3 /srv/ml/train_at.py",  # a wrapper's options are not read
        "python3 -c 'import runpy; runpy.run_path(\"train_at.py\")'",  # the program is code
        "echo 'unterminated train_at.py",  # not parsed
        "cd $D && python3 train_at.py",  # the directory is not known
        "python3 /opt/other/train_at.py",  # another path, the same name: a link?
    ],
)
def test_a_same_owner_job_not_ruled_out_says_unknown(spool: Path, line: str) -> None:
    """A job of the same owner whose file names the program, but not so that the
    program is proven (one that never names it runs it only through another file, which
    is not followed: ruled out, as ``serve.py`` above)."""
    (spool / "a0000401c8c100").write_text(
        AT_JOB.replace("/usr/bin/python3 /srv/ml/train_at.py", line)
    )
    (spool / "a0000501c8c100").write_text(CAROL_JOB.replace("/home/carol/prod/train_at", "$X"))
    origin = _ended_run(spool.parent, ("/usr/bin/python3", "/srv/ml/train_at.py"))
    assert _fields(origin) == (
        [], [4], None,
        "restarts it: unknown, atd (at job(s) 4 of the same user queued, not ruled out as "
        "runs of `/srv/ml/train_at.py`; this run's own job file was not read)",
    )  # fmt: skip


def test_unknown_owner_or_program_never_names_a_copy(spool: Path) -> None:
    (spool / "a0000401c8c100").write_text(AT_JOB)
    # The owner is unknown: the same script is not proven a copy, and may be one.
    origin = _ended_run(spool.parent, ("/usr/bin/python3", "/srv/ml/train_at.py"), uid=None)
    assert _fields(origin)[:3] == ([], [4], None)
    assert isinstance(origin, AtOrigin)
    assert "the run's owner is unknown: no queued job is matched to it" in origin.evidence
    # A relative script of a run whose directory is unknown: not proven.
    origin = _ended_run(spool.parent, ("python3", "train_at.py"))
    assert _fields(origin)[:3] == ([], [4], None)
    # A job file not readable by us (here: not a regular file) of the same owner.
    (spool / "a0000401c8c100").unlink()
    os.mkfifo(spool / "a0000701c8c100")
    origin = _ended_run(spool.parent, ("/usr/bin/python3", "/srv/ml/train_at.py"))
    assert _fields(origin)[:3] == ([], [7], None)
    os.chown(spool / "a0000701c8c100", 1001, 1001)  # another owner's: ruled out
    origin = _ended_run(spool.parent, ("/usr/bin/python3", "/srv/ml/train_at.py"))
    assert _fields(origin) == ([], [], None, None)


def test_kept_origin_read_live_by_owner_and_program(spool: Path) -> None:
    (spool / "a0000401c8c100").write_text(AT_JOB)
    origin = _ended_run(spool.parent, ("/usr/bin/python3", "/srv/ml/train_at.py"))
    assert isinstance(origin, AtOrigin) and origin.pending_same_command == (4,)
    assert at.with_live_queue(origin) is origin
    # The copy ran; another user queued the same script; a same-owner job in doubt.
    (spool / "a0000401c8c100").rename(spool / "=0000401c8c100")
    (spool / "a0000501c8c100").write_text(CAROL_JOB.replace("/home/carol/prod", "/srv/ml"))
    (spool / "a0000601c8c100").write_text(AT_JOB.replace("/srv/ml/", "$S/"))
    now = at.with_live_queue(origin)
    assert _fields(now)[:3] == ([], [6], None)
    assert not any(e.startswith("queued jobs 4") for e in now.evidence)


def _line_events(call: Callable[[], object], name: str) -> int:
    """Python line events run inside functions called ``name``: the work, not a time."""
    count = 0

    def trace(frame, event, arg):  # type: ignore[no-untyped-def]
        nonlocal count
        if frame.f_code.co_name not in (name, "<genexpr>"):
            return None

        def local(frame, event, arg):  # type: ignore[no-untyped-def]
            nonlocal count
            count += event == "line"
            return local

        return local

    sys.settrace(trace)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


def test_job_commands_is_linear_on_a_crafted_job_file() -> None:
    """A working directory with a newline (at.c writes `cd /tmp/x"` / `"y || {`, which
    is not recognised) and many `cd a || {` lines with no `}`: BEFORE, each line scanned
    the rest of the file (16k lines: 6.4 s). The work on 4n lines is within 4x (and a
    constant) of that on n; the answer is the whole text, as before."""
    pre = AT_JOB.replace("cd /srv/ml || {", 'cd /tmp/x"\n"y || {')

    def crafted(n: int) -> str:
        return pre + "cd a || {\n" * n

    small = _line_events(lambda: at.job_commands(crafted(400)), "job_commands")
    large = _line_events(lambda: at.job_commands(crafted(1600)), "job_commands")
    assert large <= 4 * small + 50, (small, large)
    assert at.job_commands(crafted(16000)) == crafted(16000).strip()
    # Real at(1) job files keep their answers.
    assert at.job_commands(AT_JOB) == "/usr/bin/python3 /srv/ml/train_at.py"
    saved = AT_JOB.replace("/usr/bin/python3 /srv/ml/train_at.py", AT_JOB.replace("/srv", "/x"))
    assert at.job_commands(saved) == "/usr/bin/python3 /x/ml/train_at.py"


def test_a_crafted_job_file_is_parsed_within_a_budget_and_not_ruled_out(spool: Path) -> None:
    """Each queued job of the owner is parsed once per queue read; past 50,000 shell
    tokens (a 1 MiB file of `;`, of here-documents) the jobs left are not ruled out."""
    crafted = [";" * 200_000, "cat <<E\n" + "x\n" * 60_000 + "E", "true <<E\n" * 30_000]
    for n, junk in enumerate(crafted):
        (spool / f"a{n + 1:05x}01c8c100").write_text(AT_JOB + junk + "\n# train_at.py\n")
    origin = _ended_run(spool.parent, ("/usr/bin/python3", "/srv/ml/train_at.py"))
    assert _fields(origin)[:3] == ([], [1, 2, 3], None)


@pytest.mark.parametrize(
    ("argv", "program"),
    [
        (("/usr/bin/python3", "-u", "/srv/x/train.py", "--lr", "1"), ("path", "/srv/x/train.py")),
        (("python3", "train.py"), ("path", "/w/train.py")),
        (("python3.11", "-m", "pkg.train"), ("module", "python3.11 -m pkg.train")),
        (("bash", "-e", "/srv/x.sh"), ("path", "/srv/x.sh")),
        (("bash", "-o", "pipefail", "x.sh"), ("path", "/w/x.sh")),
        (("./trainer", "--x"), ("path", "/w/trainer")),
        (("trainer",), ("name", "trainer")),  # found on PATH: proves nothing
        (("python3",), None),
        (("python3", "-c", "import train"), None),
        (("sh", "-ec", "python3 train.py"), None),
        (("nice", "-n", "5", "python3", "/srv/x/train.py"), None),
    ],
)
def test_what_a_command_line_runs(argv: tuple[str, ...], program: object) -> None:
    assert at.program_of(argv, "/w") == program

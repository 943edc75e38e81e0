"""A real supervisord on a private config (issue 31, case 6 and item 4): what its config
says brings each program back, read from the file and line that say it.

One supervisord for the module (tests/system/supervisorharness.py), its programs in an
``[include]``d ``conf.d``: ``train_always`` (autorestart=true), ``train_default`` (no
autorestart line: supervisord's ``unexpected``) and ``train_once`` (autorestart=false,
autostart=true). Each runs ``/usr/bin/python3 DIR/train_sup.py NAME`` (a trainer by its
script name; it sleeps). Only those programs, by the PIDs supervisorctl gives, are acted on.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rogue_watchdog.config import parse_config
from rogue_watchdog.model import Job
from rogue_watchdog.scan import Scanner
from tests.system.supervisorharness import BIN, Supervisord

pytestmark = pytest.mark.system

TRAINER = "import sys, time\ntime.sleep(600)\n"


def _program(name: str, root: Path, extra: str) -> str:
    return (
        f"[program:{name}]\ncommand=/usr/bin/python3 {root}/train_sup.py {name}\n"
        f"startsecs=0\nstopwaitsecs=2\n{extra}"
    )


@pytest.fixture(scope="module")
def sup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisord]:
    root = tmp_path_factory.mktemp("rwtest-supervisord")
    (root / "train_sup.py").write_text(TRAINER)
    programs = {
        "always.conf": _program("train_always", root, "autorestart=true ; on any exit\n"),
        "default.conf": _program("train_default", root, ""),
        "once.conf": _program("train_once", root, "autorestart = false\n"),
    }
    s = Supervisord(root, programs)
    try:
        yield s
    finally:
        s.stop()


def _job(pid: int) -> Job:
    jobs = Scanner(parse_config("nvml: {enabled: false}\n", "t.yaml")).scan().jobs
    [job] = [j for j in jobs if j.root_pid == pid]
    return job


def test_what_brings_each_program_back_is_read_from_its_config(sup: Supervisord) -> None:
    """BEFORE (bd663fe): each said "restarts it: unknown, supervisord program NAME (its
    autorestart is not read; supervisors restart their programs by default)"."""
    d = sup.root / "conf.d"
    lines = {}
    for name in ("train_always", "train_default", "train_once"):
        job = _job(sup.program_pid(name))
        assert job.origin.kind == "supervisor"
        again = job.advice.restarts
        lines[name] = again.line() if again else None
    assert lines == {
        "train_always": "restarts it: at once, will return: autorestart=true (supervisord "
        f"program:train_always, {d}/always.conf:5)",
        "train_default": "restarts it: at once after a signal or an exit code not in "
        "exitcodes=0, will return: autorestart=unexpected (supervisord program:train_default, "
        "default)",
        "train_once": "restarts it: when supervisord starts (not after it ends), won't "
        f"return: autorestart=false (supervisord program:train_once, {d}/once.conf:5); "
        "autostart=true (default) starts it when supervisord starts",
    }


def _cli(sup: Supervisord, *args: str, fault: str = "") -> tuple[int, str]:
    """``python -m rogue_watchdog ARGS --config`` with this supervisord's supervisorctl on
    PATH; ``fault``: the fault point it kills itself at (watchdog/faults.py), exit -9."""
    config = sup.root / "config.yaml"
    if not config.exists():
        config.write_text(f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{sup.root}/state'}}\n")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    if fault:
        env["ROGUE_WATCHDOG_FAULT"] = fault
    done = subprocess.run(
        [sys.executable, "-m", "rogue_watchdog", *args, "--config", str(config)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode in ((-9,) if fault else (0, 1)), done.stderr[-3000:]
    return done.returncode, done.stdout


def test_disable_source_turns_autorestart_off_and_undo_puts_it_back(sup: Supervisord) -> None:
    """Issue 31, item 4: disable-source of a supervisord program stops it, sets
    autostart/autorestart=false in the file that set them (a backup kept), and has
    supervisord reread it; it stays stopped. Undo restores the file byte for byte and the
    program runs again. BEFORE (bd663fe): "cannot disable the source of …: disabling a
    supervisor source is not supported; run the remediation by hand: …" (exit 1)."""
    conf = sup.root / "conf.d" / "always.conf"
    before = conf.read_bytes()
    pid = sup.program_pid("train_always")
    ctl = f"supervisorctl -c {sup.conf}"
    rc, out = _cli(sup, "disable-source", str(pid), "--dry-run")
    plan = out.splitlines()
    assert (rc, plan[0].split(": ")[-1], plan[1:3], plan[-3:]) == (
        0,
        "supervisord program train_always",
        [
            "  before: [program:train_always] autostart=true (default), autorestart=true "
            f"({conf}:5), running",
            f"  {ctl} stop train_always",
        ],
        [
            f"  set autorestart=false in {conf} (line 5; was true)",
            f"  {ctl} reread",
            f"  {ctl} update train_always",
        ],
    ), out
    assert plan[4] == (
        f"  set autostart=false in {conf} (a new line after [program:train_always]; was true)"
    )
    assert conf.read_bytes() == before  # a dry run changes nothing
    rc, out = _cli(sup, "disable-source", str(pid))
    assert rc == 0, out
    assert out.splitlines()[-1] == "the running job has stopped too (it ended with its source)"
    lines = conf.read_text().splitlines()
    assert [ln.split(" ; ")[0] for ln in lines if ln.startswith("auto")] == [
        "autostart=false", "autorestart=false",
    ]  # fmt: skip
    assert lines[5].split(" ; ")[1].startswith("rogue-watchdog: was true (rogue job, signature ")
    assert "STOPPED" in sup.ctl("status", "train_always")
    aid = re.search(r"undo with: rogue-watchdog undo --config \S+ (\d+)", out)
    assert aid is not None, out
    rc, out = _cli(sup, "undo", aid.group(1))
    assert (rc, out.splitlines()[-1]) == (0, "outcome: ok"), out
    assert conf.read_bytes() == before
    assert sup.program_pid("train_always", other_than=pid) != pid  # running again


def test_terminate_says_whether_supervisord_brings_it_back(sup: Supervisord) -> None:
    """Issue 31, case 4 and item 2 with supervisord: `terminate` of a program whose
    autorestart is the default (unexpected: a death by signal is unexpected) ends
    `will-return` and supervisord starts it again; of one with autorestart=false it ends
    `ok` and the program stays stopped. BEFORE (bd663fe): the first ended `will-return`
    on an "unknown" answer; the second too, though nothing starts it again."""
    pid = sup.program_pid("train_default")
    rc, out = _cli(sup, "terminate", str(pid))
    assert (rc, out.splitlines()[-2:]) == (
        1,
        ["outcome: will-return", "will come back: its source restarts it; disable-source first"],
    ), out
    assert sup.program_pid("train_default", other_than=pid) != pid  # back
    once = sup.program_pid("train_once")
    rc, out = _cli(sup, "terminate", str(once))
    assert (rc, out.splitlines()[-1]) == (0, "outcome: ok"), out
    assert "EXITED" in sup.ctl("status", "train_once") or "STOPPED" in sup.ctl(
        "status", "train_once"
    )


def test_a_rewrite_supervisord_has_not_loaded_never_lets_terminate_say_ok(
    sup: Supervisord,
) -> None:
    """Seed 69401 (I15) on a real supervisord: disable-source killed after its rewrite
    of ``always.conf`` and before ``reread``/``update``; a person starts the program
    again; supervisord runs the configuration it had (autorestart=true) while the file
    says false. `terminate` ends `may-return`, naming the commands not run, and
    supervisord does start it again. BEFORE (08a8d2b): "outcome: ok" (the file's word),
    and the program came back all the same."""
    conf = sup.root / "conf.d" / "always.conf"
    before = conf.read_bytes()
    pid = sup.program_pid("train_always")
    try:
        _cli(sup, "disable-source", str(pid), fault="effects:write:done")
        assert b"autorestart=false" in conf.read_bytes()  # rewritten, not loaded
        sup.ctl("start", "train_always")  # the person (`disable-source` had stopped it)
        again = sup.program_pid("train_always", other_than=pid)
        rc, out = _cli(sup, "terminate", str(again))
        ctl = f"supervisorctl -c {sup.conf}"
        assert (rc, out.splitlines()[-1]) == (
            1,
            "may come back: could not tell whether its source starts it again "
            f"(disable-source {_last_disable(sup)} left {ctl} reread, {ctl} update "
            "train_always not run: the file says autostart/autorestart=false, but "
            "supervisord still runs the configuration it had loaded (it may start the job "
            "again) until they run, or until the undo); disable-source first",
        ), out
        assert sup.program_pid("train_always", other_than=again) != again  # back
    finally:
        conf.write_bytes(before)  # never loaded: the file alone is put back


def _last_disable(sup: Supervisord) -> int:
    rc, out = _cli(sup, "actions", "--json")
    assert rc == 0, out
    return max(a["id"] for a in json.loads(out) if a["kind"] == "disable-source")

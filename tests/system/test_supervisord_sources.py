"""A real supervisord on a private config (issue 31, case 6 and item 4): what its config
says brings each program back, read from the file and line that say it.

One supervisord for the module (tests/system/supervisorharness.py), its programs in an
``[include]``d ``conf.d``: ``train_always`` (autorestart=true), ``train_default`` (no
autorestart line: supervisord's ``unexpected``) and ``train_once`` (autorestart=false,
autostart=true). Each runs ``/usr/bin/python3 DIR/train_sup.py NAME`` (a trainer by its
script name; it sleeps). Only those programs, by the PIDs supervisorctl gives, are acted on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.system.supervisorharness import Supervisord
from watchdog.config import parse_config
from watchdog.model import Job
from watchdog.scan import Scanner

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

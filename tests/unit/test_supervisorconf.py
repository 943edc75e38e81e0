"""supervisord's configuration read as supervisord reads it (issue 31, case 6): the
program's autostart/autorestart/startretries/exitcodes with the FILE:LINE that set them,
across ``[include]`` globs; checked against supervisor's own parser where it is
installed (the test extra installs it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rogue_watchdog.lineage.supervisorconf import config_file, read_program

MAIN = """\
[supervisord]
logfile=%(here)s/sd.log ; inline comment

[include]
files = conf.d/*.conf extra.ini

[program:train]
command=/usr/bin/python3 /srv/train.py
autorestart = true   ; restart on any exit
startretries=5
"""
CONF_D = """\
[program:other]
command=/bin/sleep 1000
autostart=false

[program:train]
# a later file wins, as in supervisord (strict=False, one parser)
autorestart=unexpected
exitcodes=0,2
"""
EXTRA = """\
[group:pool]
programs=worker

[program:worker]
command=/usr/bin/python3 /srv/w.py
process_name=%(program_name)s_%(process_num)02d
numprocs=2
autorestart=false
"""


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "supervisord.conf").write_text(MAIN)
    (tmp_path / "conf.d" / "10-train.conf").write_text(CONF_D)
    (tmp_path / "extra.ini").write_text(EXTRA)
    return tmp_path / "supervisord.conf"


def test_a_later_include_wins_and_each_value_names_its_line(conf: Path) -> None:
    d = conf.parent
    got = read_program(str(conf), "train", "train")
    assert got.unread is None
    assert got.section == "program:train"
    assert got.file == str(conf)
    assert got.files == (str(conf), str(d / "conf.d/10-train.conf"), str(d / "extra.ini"))
    assert {k: (got.value(k), got.where(k)) for k in got.values} == {
        "autorestart": ("unexpected", f"{d}/conf.d/10-train.conf:7"),
        "startretries": ("5", f"{conf}:10"),
        "exitcodes": ("0,2", f"{d}/conf.d/10-train.conf:8"),
    }
    assert (got.value("autostart"), got.where("autostart")) == ("true", "default")


def test_a_group_member_and_a_program_that_is_not_there(conf: Path) -> None:
    got = read_program(str(conf), "pool", "worker_01")
    assert (got.section, got.value("autorestart"), got.where("autorestart")) == (
        "program:worker", "false", f"{conf.parent}/extra.ini:8",
    )  # fmt: skip
    missing = read_program(str(conf), "nope", "nope")
    assert missing.section is None
    assert missing.unread == (
        f"no [program:nope] section in {conf}, {conf.parent}/conf.d/10-train.conf, "
        f"{conf.parent}/extra.ini"
    )


def test_unreadable_configurations_say_why(tmp_path: Path) -> None:
    assert read_program(None, "a", "a").unread == "no supervisord configuration file was found"
    gone = tmp_path / "gone.conf"
    assert read_program(str(gone), "a", "a").unread == (
        f"{gone} could not be read: no such file or directory"
    )
    bad = tmp_path / "bad.conf"
    bad.write_text("no section header\n")
    assert (read_program(str(bad), "a", "a").unread or "").startswith(
        f"{bad} could not be read: `File contains no section headers."
    )
    fifo = tmp_path / "fifo.conf"
    os.mkfifo(fifo)  # never opened blocking
    assert (read_program(str(fifo), "a", "a").unread or "").startswith(f"{fifo} could not be read")


def test_the_file_supervisord_reads(tmp_path: Path) -> None:
    assert config_file(["supervisord", "-c", "s.conf"], "/srv") == "/srv/s.conf"
    assert config_file(["python3", "/x/supervisord", "--configuration=/e/s.conf"], "/") == (
        "/e/s.conf"
    )
    assert config_file(["supervisord", "-c/e/s.conf"], None) == "/e/s.conf"
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "supervisord.conf").write_text("[supervisord]\n")
    # No -c: HERE/etc/supervisord.conf first (HERE: two levels above argv[0]).
    assert config_file([str(tmp_path / "bin" / "supervisord"), "-n"], "/") == str(
        tmp_path / "etc" / "supervisord.conf"
    )


def test_the_same_values_as_supervisors_own_parser(conf: Path) -> None:
    options = pytest.importorskip("supervisor.options")
    from supervisor.datatypes import RestartUnconditionally, RestartWhenExitUnexpected

    server = options.ServerOptions()
    server.configfile = str(conf)
    server.here = str(conf.parent)
    server.process_config(do_usage=False)
    theirs = {}
    for group in server.process_group_configs:
        for proc in group.process_configs:
            restart = {RestartUnconditionally: "true", RestartWhenExitUnexpected: "unexpected",
                       False: "false"}[proc.autorestart]  # fmt: skip
            theirs[(group.name, proc.name)] = (
                "true" if proc.autostart else "false", restart, str(proc.startretries),
                ",".join(map(str, proc.exitcodes)),
            )  # fmt: skip
    ours = {}
    for group, name in theirs:
        got = read_program(str(conf), group, name)
        truth = {"true": "true", "yes": "true", "false": "false", "no": "false"}
        ours[(group, name)] = (
            truth[got.value("autostart")], got.value("autorestart"), got.value("startretries"),
            got.value("exitcodes"),
        )  # fmt: skip
    assert len(theirs) == 4
    assert ours == theirs

"""Cases a tester found by attacking the CLI with bad input; each must fail cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rogue_watchdog.config import ConfigError, load_config, parse_config
from rogue_watchdog.scan import Scanner
from tests.conftest import REPO, Spawned, need_program, run_cli
from tests.fakenvml.fixtures import fake_nvml, library_path
from tests.unit.test_procfs import write_proc


@pytest.mark.parametrize(
    ("text", "line", "key", "phrase"),
    [
        ("sanctioned:\n  - {name: a, cmdline: x, origin: {any: true}, max_instances: !!int abc}\n",
         2, "sanctioned[0].max_instances", "expected an integer, got 'abc'"),
        ("sanctioned:\n  - {name: a, cmdline: x, origin: {any: true}, max_instances: "
         + "9" * 5000 + "}\n", 2, "sanctioned[0].max_instances", "integer too large"),
        ("training:\n  launchers: ['a{99999999999}']\n", 2, "training.launchers[0]",
         "invalid regular expression"),
        ("training:\n  launchers: ['" + "(" * 2000 + ")" * 2000 + "']\n", 2,
         "training.launchers[0]", "invalid regular expression"),
        ('paths: {proc_root: "/pr\\0oc"}\n', 1, "paths.proc_root", "NUL"),
        ('paths: {proc_root: "/pr\\ud800oc"}\n', 1, "paths.proc_root", "surrogate"),
        ("nvml: {enabled: !!bool maybe}\n", 1, "nvml.enabled", "expected true or false"),
        ("sanctioned: []\nnvml: {enabled: true}\n# \x07 bell\n", 3, "", "is not allowed"),
        ("alerts:\n  sinks:\n    - {type: slack, url: 'https://hooks.example/T/B/x'}\n", 3,
         "alerts.sinks[0].url", "inline webhook URLs are refused"),
    ],
)  # fmt: skip
def test_bad_config_values_are_errors_with_a_line(
    text: str, line: int, key: str, phrase: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "c.yaml")
    assert (info.value.line, info.value.key) == (line, key)
    assert phrase in info.value.message


def test_yaml_11_integers_are_read_as_yaml_reads_them() -> None:
    cfg = parse_config(
        "sanctioned:\n  - {name: a, cmdline: x, origin: {any: true}, max_instances: 010}\n", "c"
    )
    assert cfg.sanctioned[0].max_instances == 8


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    with pytest.raises(ConfigError, match="nesting is too deep"):
        parse_config("training:\n  launchers: " + "[" * 100_000 + "]" * 100_000 + "\n", "c")


def test_special_files_are_refused_as_config(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(ConfigError, match="not a regular file"):
            load_config(path)


def test_garbage_proc_tree_does_not_crash_or_hang(tmp_path: Path) -> None:
    write_proc(tmp_path, 1, ppid=0, start=1, comm="init", argv=["/sbin/init"])
    write_proc(tmp_path, 200, ppid=200, start=5, comm="py", argv=["python3", "train.py"])
    write_proc(tmp_path, 300, ppid=301, start=6, comm="a", argv=["python3", "train_a.py"])
    write_proc(tmp_path, 301, ppid=300, start=7, comm="b", argv=["python3", "train_b.py"])
    write_proc(tmp_path, 400, ppid=1, start=8, comm="c", argv=["python3", "train_c.py"])
    (tmp_path / "400" / "status").write_text("Uid:\tabc\nNSpid:\t12 x\n")
    (tmp_path / "\u00b2").mkdir()  # isdigit() but not a number int() reads
    cfg = parse_config(f"nvml: {{enabled: false}}\npaths: {{proc_root: '{tmp_path}'}}\n", "c")
    result = Scanner(cfg, resolvers=[]).scan()
    roots = sorted(j.root_pid for j in result.jobs)
    assert 400 in roots and 200 in roots
    c = next(j for j in result.jobs if j.root_pid == 400)
    assert c.user is None


def test_unreadable_proc_root_is_a_critical_finding(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"nvml: {{enabled: false}}\npaths: {{proc_root: '{tmp_path}/nonexistent'}}\n")
    done = run_cli("scan", "--json", "--config", str(cfg))
    assert done.returncode == 1
    kinds = [(f["kind"], f["severity"]) for f in json.loads(done.stdout)["findings"]]
    assert ("proc-unavailable", "critical") in kinds


def test_nvml_listing_init_is_not_a_job(tmp_path: Path) -> None:
    need_program("gcc")
    lib = fake_nvml(
        tmp_path,
        {"devices": [{"uuid": "GPU-a", "total": 10**10, "processes": [{"pid": 1, "mem": 10**9}]}]},
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"nvml: {{library: '{library_path(lib)}'}}\n")
    doc = json.loads(run_cli("scan", "--json", "--config", str(cfg)).stdout)
    assert not [j for j in doc["jobs"] if j["root_pid"] == 1 or 1 in j["pids"]]
    mism = [f for f in doc["findings"] if f["kind"] == "binding-mismatch"]
    assert [f["details"]["pid"] for f in mism] == [1]


def test_output_failures_exit_2_and_a_closed_pipe_keeps_the_code(
    spawned: Spawned, tmp_path: Path
) -> None:
    script = tmp_path / "train_pipe.py"
    script.write_text("import time\ntime.sleep(60)\n")
    spawned.start([sys.executable, str(script)])
    cfg = tmp_path / "c.yaml"
    cfg.write_text("nvml: {enabled: false}\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    base = [sys.executable, "-m", "rogue_watchdog", "scan", "--config", str(cfg)]
    with open("/dev/full", "w") as full:
        done = subprocess.run(base, stdout=full, stderr=subprocess.PIPE, env=env, check=False)
    assert done.returncode == 2
    assert b"cannot write the output: No space left on device" in done.stderr
    closed = subprocess.run(
        ["/bin/sh", "-c", '"$@" >&-', "sh", *base], capture_output=True, env=env, check=False
    )
    assert closed.returncode == 2
    assert b"standard output is closed" in closed.stderr
    piped = subprocess.run(
        ["/bin/bash", "-c", '"$@" --json | head -c 1 >/dev/null; echo "${PIPESTATUS[0]}"',
         "sh", *base],
        capture_output=True, env=env, check=False,
    )  # fmt: skip
    assert piped.stdout.strip() == b"1"


@pytest.mark.parametrize(
    "argv",
    [
        ["verify-weights", "{npy}"],
        ["verify-weights", "--json", "{npy}"],
        ["actions", "--config", "{cfg}"],
        ["actions", "--json", "--config", "{cfg}"],
        ["status", "--json", "--socket", "{sock}"],
    ],
)
def test_every_report_fails_loudly_when_stdout_cannot_take_it(
    tmp_path: Path, argv: list[str]
) -> None:
    # Before: a traceback (OSError: No space left on device) and exit 1 on /dev/full, and
    # exit 0 with no word at all when stdout was closed.
    import numpy as np

    np.save(tmp_path / "w.npy", np.ones(4, np.float32))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n")
    fill = {"npy": str(tmp_path / "w.npy"), "cfg": str(cfg), "sock": str(tmp_path / "no.sock")}
    cmd = [sys.executable, "-m", "rogue_watchdog", *(a.format(**fill) for a in argv)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with open("/dev/full", "w") as full:
        done = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, env=env, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.endswith(
        b"rogue-watchdog: cannot write the output: No space left on device\n"
    )
    closed = subprocess.run(
        ["/bin/sh", "-c", '"$@" >&-', "sh", *cmd], capture_output=True, env=env, check=False
    )
    assert closed.returncode == 2, closed.stderr
    assert closed.stderr.endswith(b"rogue-watchdog: standard output is closed\n")


@pytest.mark.parametrize("argv", [["--help"], ["scan", "--help"], ["--version"], []])
@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_help_and_version_fail_loudly_when_stdout_cannot_take_them(
    argv: list[str], unbuffered: str
) -> None:
    # Before: argparse wrote them, outside the command's output handling: on /dev/full
    # "Exception ignored ... OSError" and exit 120 (block-buffered stdout) or exit 0 with
    # nothing said (PYTHONUNBUFFERED); with stdout closed, help on stderr and exit 0.
    cmd = [sys.executable, "-m", "rogue_watchdog", *argv]
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED=unbuffered)
    with open("/dev/full", "w") as full:
        done = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, env=env, check=False)
    assert (done.returncode, done.stderr) == (
        2, b"rogue-watchdog: cannot write the output: No space left on device\n"
    )  # fmt: skip
    closed = subprocess.run(
        ["/bin/sh", "-c", '"$@" >&-', "sh", *cmd], capture_output=True, env=env, check=False
    )
    assert (closed.returncode, closed.stderr) == (2, b"rogue-watchdog: standard output is closed\n")
    piped = subprocess.run(
        ["/bin/bash", "-c", '"$@" | head -c 1 >/dev/null; echo "${PIPESTATUS[0]}"', "sh", *cmd],
        capture_output=True, env=env, check=False,
    )  # fmt: skip
    assert (piped.stdout.strip(), piped.stderr) == (b"2" if not argv else b"0", b"")

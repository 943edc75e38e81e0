"""Shell completion of finding ids and PIDs, from a real daemon, through real bash.

A daemon (``rogue-watchdog run``) watches two real processes that the fake
libnvidia-ml.so.1 says hold GPU memory: an unknown ``train_ghost.py`` (rogue: a finding
opens) and a sanctioned ``train_ok.py``. The completion script ``rogue-watchdog completion
bash`` prints is sourced into bash, and its completion function is called the way
bash calls it on TAB (``COMP_WORDS``, ``COMP_CWORD``), with ``--config`` on the command
line pointing at the test's daemon.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.cli.complete import candidates
from tests.conftest import REPO, Spawned, need_program, run_cli
from tests.fakenvml.fixtures import fake_nvml, library_path
from tests.unit.test_status_run import events, wait_for

GIB = 1024**3


def _trainer(spawned: Spawned, tmp_path: Path, name: str) -> int:
    script = tmp_path / name
    script.write_text("import time\ntime.sleep(300)\n")
    return spawned.start([sys.executable, str(script)]).pid


@pytest.fixture
def daemon(spawned: Spawned, tmp_path: Path) -> dict[str, Any]:
    """A running daemon with one rogue job (an open finding) and one sanctioned job."""
    need_program("gcc", "bash")
    ghost = _trainer(spawned, tmp_path, "train_ghost.py")
    ok = _trainer(spawned, tmp_path, "train_ok.py")
    procs = [{"pid": ghost, "mem": 4 * GIB}, {"pid": ok, "mem": 2 * GIB}]
    gpu = {"name": "NVIDIA H200", "uuid": "GPU-c0", "total": 140 * GIB, "used": 6 * GIB}
    lib = fake_nvml(tmp_path, {"driver": "550.54.15", "devices": [{**gpu, "processes": procs}]})
    config = tmp_path / "config.yaml"
    config.write_text(
        f"nvml: {{library: '{library_path(lib)}'}}\n"
        f"training: {{device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
        f"daemon:\n  state_dir: '{tmp_path}/state'\n  socket: '{tmp_path}/s.sock'\n"
        "  interval_s: 0.5\n"
        "sanctioned:\n  - name: ok\n    cmdline: '*train_ok.py'\n    origin: {any: true}\n"
    )
    log = tmp_path / "out.log"
    spawned.daemon(config, log)

    def settled() -> dict[str, Any] | None:
        if not events(log, "daemon-started"):
            return None
        res = run_cli("status", "--json", "--config", str(config))
        doc = json.loads(res.stdout) if res.stdout.startswith("{") else {}
        ids = [f["id"] for f in doc.get("findings") or [] if f.get("root_pid") == ghost]
        jobs = {j["root_pid"] for j in doc.get("jobs") or []}
        return doc if ids and {ghost, ok} <= jobs else None

    doc = wait_for("the ghost's finding in status", settled)
    finding = next(f["id"] for f in doc["findings"] if f["root_pid"] == ghost)
    return {"config": config, "ghost": ghost, "ok": ok, "finding": finding, "doc": doc}


def bash_complete(script: str, words: list[str]) -> list[str]:
    """COMPREPLY after bash's completion function for the command ran on ``words`` (the
    last one being completed), as bash runs it on TAB."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    driver = (
        f"{script}\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
        'COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}\n'
        "_shtab_rogue_watchdog\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile"], input=driver, capture_output=True, text=True,
        timeout=60, check=False,
        env=dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_bash_completes_finding_ids_and_pids_from_the_daemon(daemon: dict[str, Any]) -> None:
    script = run_cli("completion", "bash").stdout
    cfg, ghost, ok = str(daemon["config"]), daemon["ghost"], daemon["ok"]
    # The command word is the checkout's own entry point, as a user's .venv/bin/... is.
    exe = shutil.which("rogue-watchdog", path=str(Path(sys.executable).parent))
    assert exe is not None
    fid = daemon["finding"]

    def ours(got: list[str]) -> list[str]:
        # The daemon watches the whole host, which may run trainers of its own (another
        # test's, a user's): keep the candidates that name this test's two jobs.
        doc = json.loads(run_cli("status", "--json", "--config", cfg).stdout)
        mine = {ghost, ok}
        fids = {f"F{f['id']}" for f in doc["findings"] if f.get("root_pid") in mine}
        return [g for g in got if g in fids or (g.isdigit() and int(g) in mine)]

    # terminate / disable-source: the open finding and the rogue job's PID; never the
    # sanctioned job's.
    for command in ("terminate", "disable-source"):
        got = bash_complete(script, [exe, command, "--config", cfg, ""])
        assert str(ok) not in got, command
        assert ours(got) == [f"F{fid}", str(ghost)], command
    got = bash_complete(script, [exe, "terminate", "--config", cfg, "F"])
    assert all(g.startswith("F") for g in got) and ours(got) == [f"F{fid}"]
    # explain: every current training job's PIDs, the sanctioned one's too.
    got = bash_complete(script, [exe, "explain", "--config", cfg, ""])
    assert sorted(ours(got)) == sorted([str(ghost), str(ok)])
    # What the completer asks is what `status --json` says.
    assert ours(candidates(daemon["doc"], "targets")) == [f"F{fid}", str(ghost)]


def test_completion_without_a_daemon_offers_nothing_and_says_nothing(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"daemon:\n  socket: '{tmp_path}/absent.sock'\n")
    res = run_cli("_complete", "targets", "--", "terminate", "--config", str(config))
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    config.write_text("daemon: [\n")  # not YAML: no candidates either, and no message
    res = run_cli("_complete", "targets", "--", "terminate", "--config", str(config))
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    res = run_cli("_complete", "no-such-kind")
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")


def test_the_hidden_command_is_nowhere_in_help_or_completion() -> None:
    assert "_complete" not in run_cli("--help").stdout
    script = run_cli("completion", "bash").stdout
    subparsers = next(
        ln for ln in script.splitlines() if ln.startswith("_shtab_rogue_watchdog_subparsers=")
    )
    assert "_complete" not in subparsers
    assert "_complete " not in (REPO / "man" / "rogue-watchdog.1").read_text()


def test_zsh_script_defines_the_completers() -> None:
    script = run_cli("completion", "zsh").stdout
    for kind in ("targets", "pids"):
        assert f"_rogue_watchdog_complete_{kind}() {{\n" in script
    assert (
        ":a PID of the job, or a finding id F12 (or \\#12):_rogue_watchdog_complete_targets"
        in script
    )
    if shutil.which("zsh"):  # and it parses in a real zsh
        check = subprocess.run(
            ["zsh", "-n"], input=script, text=True, capture_output=True, check=False
        )
        assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("stdout", ["/dev/full", "closed"])
def test_completion_to_an_unwritable_stdout_says_nothing_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdout: str
) -> None:
    """Before: candidates written to a full or closed stdout raised the CliError of
    emit outside the command's error handling: a traceback and exit 70 (internal error)
    on the terminal the person was pressing TAB in."""
    import rogue_watchdog.cli.common as common
    import rogue_watchdog.daemon.ipc as ipc
    from rogue_watchdog.cli import main

    doc = {"findings": [{"id": 3}], "jobs": [{"root_pid": 42, "stop": "kill 42"}]}
    monkeypatch.setattr(ipc, "query_status", lambda *a, **k: doc)
    monkeypatch.setattr(common, "socket_path", lambda *a, **k: "/nowhere.sock")
    assert main(["_complete", "targets", "--", "terminate"]) == 0
    assert capsys.readouterr().out == "F3\n42\n"  # what is offered when it can be written
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full if stdout == "/dev/full" else None)
        assert main(["_complete", "targets", "--", "terminate"]) == 0
        monkeypatch.undo()
    assert capsys.readouterr().err == ""

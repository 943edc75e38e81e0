"""Issue 31 (sim seed 3131) on a real shell: a trainer its shell has not reaped.

NVML keeps listing a dead process until its parent reaps it; the fake NVML library
(tests/fakenvml) lists the zombie's real PID. The shell is a real ``bash -c`` that
stops itself (``kill -STOP $$``): a stopped process never calls wait(2), so the trainer
that exits after it stays a zombie. When the shell also runs something else
(``sleep 300 &``, the web server of the simulator's case) it is no job for the zombie:
nothing plans or advises a signal to it or to what it runs. When it runs only the
trainer it is an exclusive wrapper and the job, as before: ``terminate`` ends it and the
memory is freed.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.hosttext import command_text
from tests.conftest import Spawned, need_program, need_root, poll, run_cli
from tests.fakenvml.fixtures import fake_nvml, library_path

pytestmark = pytest.mark.system

GIB = 1 << 30
# Exits once its parent shell is stopped, so the shell never reaps it.
TRAINER = """
import os, time
parent = f"/proc/{os.getppid()}/stat"
while open(parent).read().rsplit(")", 1)[1].split()[0] != "T":
    time.sleep(0.02)
"""


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _shell_text(tmp_path: Path, prefix: str, width: int) -> str:
    """The shell's command line as a message shows it in ``width`` characters: the script
    is one argument with spaces, clipped at its end, never cut to its last path."""
    text = f"{prefix}python3 {tmp_path / 'train_z.py'} & kill -STOP $$"
    return command_text(["bash", "-c", text], width)


def _start(spawned: Spawned, tmp_path: Path, prefix: str) -> tuple[int, int, list[int]]:
    """``bash -c 'PREFIX python3 train_z.py & kill -STOP $$'`` with the trainer left a
    zombie: ``(shell PID, zombie PID, the shell's other children)``."""
    (tmp_path / "train_z.py").write_text(TRAINER)
    text = f"{prefix}python3 {tmp_path / 'train_z.py'} & kill -STOP $$"
    shell = spawned.start(["bash", "-c", text], env={"PATH": "/usr/bin:/bin"}).pid

    def zombie() -> int | None:
        return next((k for k in _children(shell) if _state(k) == "Z"), None)

    dead = poll("the trainer left a zombie", zombie, 20, 0.05)
    assert _state(shell) == "T", shlex.join(["bash", "-c", text])
    return shell, dead, [k for k in _children(shell) if k != dead]


def _scan(tmp_path: Path, zombie: int) -> tuple[Path, dict[str, Any]]:
    procs = [{"pid": zombie, "mem": 3 * GIB}]
    lib = fake_nvml(
        tmp_path, {"devices": [{"uuid": "GPU-z", "total": 80 * GIB, "processes": procs}]}
    )
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        f"nvml: {{library: '{library_path(lib)}'}}\n"
        f"training: {{device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
    )
    done = run_cli("scan", "--json", "--config", str(cfg))
    assert done.returncode in (0, 1), done.stderr
    return cfg, json.loads(done.stdout)


def test_a_shell_that_also_runs_sleep_is_no_job_for_its_zombie_trainer(
    spawned: Spawned, tmp_path: Path
) -> None:
    """``bash -c 'sleep 300 & python3 train_z.py & kill -STOP $$'``.

    BEFORE (ab15ff4): a rogue-job finding (high) rooted at the shell, members [shell,
    sleep, zombie], 3.0 GiB, stop PIDs all three; `terminate --dry-run SHELL` (exit 0):
    "would send SIGSTOP (the whole tree frozen first), SIGTERM, then SIGKILL" to the
    shell and to `sleep 300`. AFTER: no job holds any of them; the zombie-gpu-memory
    finding names the shell and says it runs other work; `terminate --dry-run SHELL`
    exits 2: "PID SHELL is not part of a training job".
    """
    need_root()
    need_program("gcc", "bash", "sleep")
    shell, zombie, others = _start(spawned, tmp_path, "sleep 300 & ")
    [sleeper] = others
    cfg, doc = _scan(tmp_path, zombie)
    mine = {shell, zombie, sleeper}
    assert [j["pids"] for j in doc["jobs"] if mine & set(j["pids"])] == []
    [z] = [f for f in doc["findings"] if f["kind"] == "zombie-gpu-memory"]
    assert (z["root_pid"], z["details"]["holder_pid"], z["details"]["parent_pid"]) == (
        None, None, shell
    )  # fmt: skip
    assert z["message"] == (
        f"zombie PID {zombie} holds 3.0 GiB on GPU 0; it has exited, not reaped by its "
        f"parent PID {shell} `{_shell_text(tmp_path, 'sleep 300 & ', 80)}`: "
        f"the memory is freed when PID {shell} reaps it (wait(2)) or exits. PID {shell} is "
        f"no job for it: it runs other work: PID {sleeper} `sleep 300`; nothing is "
        "signalled for it (signalling the zombie does nothing)"
    )
    assert [f for f in doc["findings"] if f["kind"] == "rogue-job" and f["root_pid"] in mine] == []
    done = run_cli("terminate", str(shell), "--dry-run", "--config", str(cfg))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines()[-1] == (
        f"rogue-watchdog: PID {shell} is not part of a training job "
        f"(see `rogue-watchdog explain --config {cfg} {shell}`)"
    )
    assert (_state(shell), _state(sleeper), _state(zombie)) == ("T", "S", "Z")


def test_a_shell_that_runs_only_the_trainer_is_its_job_and_terminate_frees_it(
    spawned: Spawned, tmp_path: Path
) -> None:
    """``bash -c 'python3 train_z.py & kill -STOP $$'``: an exclusive wrapper of the
    trainer, the job as before (members [shell, zombie]); `terminate` signals the shell
    only, it ends and the zombie with it. Before and after alike (kept): `terminate
    --dry-run` would signal the shell, the zombie "gone"."""
    need_root()
    need_program("gcc", "bash")
    shell, zombie, others = _start(spawned, tmp_path, "")
    assert others == []
    cfg, doc = _scan(tmp_path, zombie)
    [job] = [j for j in doc["jobs"] if shell in j["pids"]]
    assert (job["root_pid"], job["pids"], job["gpu_memory_bytes"]) == (
        shell, [shell, zombie], 3 * GIB
    )  # fmt: skip
    assert job["advice"]["stop_pids"] == [shell, zombie]
    [z] = [f for f in doc["findings"] if f["kind"] == "zombie-gpu-memory"]
    assert (z["root_pid"], z["details"]["holder_pid"]) == (shell, shell)
    done = run_cli("terminate", str(shell), "--dry-run", "--config", str(cfg))
    assert done.returncode == 0 and done.stdout.splitlines()[1:] == [
        f"  PID {shell} `{_shell_text(tmp_path, '', 100)}`: would send"
        " SIGSTOP (the whole tree frozen first), SIGTERM, then SIGKILL after 10 s if still alive",
        f"  PID {zombie} ` `: no signal: gone (PID {zombie} is a zombie (already exited); its "
        f"parent PID {shell} holds it)",
        "outcome: dry-run",
    ], done.stdout
    done = run_cli("terminate", str(shell), "--config", str(cfg))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "outcome: ok", done.stdout
    poll("the shell gone", lambda: _state(shell) in (None, "Z"), 10, 0.05)
    poll("the zombie reaped (re-parented to init)", lambda: _state(zombie) is None, 10, 0.05)

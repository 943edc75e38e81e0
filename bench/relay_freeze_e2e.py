"""`terminate` of a job under a stop-mirroring relay, end to end, as the user ran it.

A job started in the background from a non-interactive shell, with no tty, under a
relay (util-linux ``script -qfc``, ``sudo``, or both); the stand-in NVML
(``tests/fakenvml``, built with gcc) lists the trainer; ``rogue-watchdog scan`` then
``rogue-watchdog terminate PID`` of the checkout on ``--pythonpath`` (a directory with a
``rogue_watchdog`` symlink: this worktree's or main's). Prints, per run, the outcome and
the state of every process between the shell and the trainer one second later (``T``:
stopped, ``S``: still there, ``Z``/None: ended), and how long ``terminate`` took.

Run as root (``sudo -u nobody`` needs it), e.g.::

    nice -n 5 .venv/bin/python bench/relay_freeze_e2e.py --pythonpath PP --runs 8 \\
        --command "script -qfc 'sudo -u nobody RUN.sh'"

``RUN.sh`` in the command is replaced by a script that execs ``/usr/bin/python3
train.py 61``, ``TRAIN`` by that command itself (``script -qfc 'TRAIN'``: the user's
case), both in a 0755 sandbox under /tmp (removed at the end). Only processes this
script started are signalled, by PID, at the end of each run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.fakenvml.fixtures import fake_nvml, library_path


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _leaf(pid: int) -> int:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return pid
    return _leaf(int(kids[0])) if kids else pid


def _chain(top: int, leaf: int) -> list[int]:
    out, cur = [], leaf
    while cur != top:
        cur = int(Path(f"/proc/{cur}/stat").read_text().rsplit(")", 1)[1].split()[1])
        out.append(cur)
    return out


def one(pp: str, command: str, where: Path, n: int) -> str:
    """One run: start, scan, terminate, look; returns one line."""
    run_dir = where / f"run{n}"
    run_dir.mkdir()
    train_cmd = f"/usr/bin/python3 {where / 'train.py'} 61"
    text = command.replace("RUN.sh", str(where / "run.sh")).replace("TRAIN", train_cmd)
    sh = subprocess.Popen(
        ["sh", "-c", text + " >/dev/null 2>&1 & echo $!"], cwd=run_dir,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True, text=True,
    )  # fmt: skip
    assert sh.stdout is not None
    top = int(sh.stdout.readline())
    sh.wait()
    for _ in range(200):
        train = _leaf(top)
        try:
            argv = Path(f"/proc/{train}/cmdline").read_bytes().split(b"\0")
        except OSError:
            argv = []
        if train != top and argv[:1] == [b"/usr/bin/python3"]:
            break
        time.sleep(0.05)
    else:
        raise SystemExit(f"no trainer under PID {top}: {text}")
    chain = [top, *[p for p in _chain(top, train) if p != top]]
    try:
        procs = [{"pid": train, "mem": 3 << 30}]
        lib = fake_nvml(
            run_dir, {"devices": [{"uuid": "GPU-r", "total": 80 << 30, "processes": procs}]}
        )
        cfg = run_dir / "cfg.yaml"
        cfg.write_text(
            f"nvml: {{library: '{library_path(lib)}'}}\n"
            f"training: {{device_glob: '{run_dir}/nodev[0-9]*'}}\n"
            f"daemon: {{state_dir: '{run_dir}/state'}}\n"
        )
        env = dict(os.environ, PYTHONPATH=pp)

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "rogue_watchdog", *args, "--config", str(cfg)],
                capture_output=True, text=True, env=env, timeout=120, check=False,
            )  # fmt: skip

        cli("scan", "--json")
        t0 = time.monotonic()
        done = cli("terminate", str(train))
        took = time.monotonic() - t0
        outcome = next(
            (x for x in done.stdout.splitlines() if x.startswith("outcome:")), "no outcome"
        )
        time.sleep(1)
        states = " ".join(f"{p}:{_state(p)}" for p in sorted(set(chain)))
        return f"{outcome}; terminate {took:.2f} s; 1 s later {states}"
    finally:
        for pid in [train, *chain]:
            if _state(pid) not in (None, "Z"):
                os.kill(pid, signal.SIGKILL)


def main() -> None:
    """Parse the arguments, make the sandbox, run, clean up."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pythonpath", required=True)
    ap.add_argument("--command", default="script -qfc 'sudo -u nobody RUN.sh'")
    ap.add_argument("--runs", type=int, default=4)
    args = ap.parse_args()
    where = Path(tempfile.mkdtemp(prefix="rw-relay-bench-"))
    try:
        where.chmod(0o755)
        (where / "train.py").write_text("import time\ntime.sleep(600)\n")
        run = where / "run.sh"
        run.write_text(f"#!/bin/sh\nexec /usr/bin/python3 {where / 'train.py'} 61\n")
        run.chmod(0o755)
        print(f"command: {args.command}; load {os.getloadavg()[0]:.2f}")
        for n in range(args.runs):
            print(one(args.pythonpath, args.command, where, n), flush=True)
    finally:
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()

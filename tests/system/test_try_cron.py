"""docs/first-week.md's cron sandbox, run as printed (issue 33): the documented steps start a
private cron (scripts/try-cron.sh) and the daemon; the ghost line is found with its file
and line; the `disable-source` the finding prints and the `undo` that prints work pasted;
the documented stop ends the sandbox's cron, its jobs and the daemon.

Before (4456053): the docs had no such steps; the fresh-user hour (2026-12-06) built its
own `unshare -m` sandbox. The host's cron and crontabs are never touched: everything is
in a fresh directory, the private cron sees it in its own mount namespace only. Wall
time: cron's next minute plus a scan (about 1-1.5 minutes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, Spawned, need_program, need_root, poll

pytestmark = pytest.mark.system


def documented_blocks() -> list[str]:
    """The two ``sh`` blocks of "Try the cron flow in a sandbox first"."""
    text = (REPO / "docs" / "first-week.md").read_text()
    section = text.split("### Try the cron flow in a sandbox first", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def sh(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def host_view_origin(tmp_path: Path, env: dict[str, str], program: str) -> dict[str, Any]:
    """The origin `scan --json` gives the job running ``program``, under a configuration
    with the built-in (host) cron paths; it only reads them."""
    config = tmp_path / "host-view.yaml"
    config.write_text(f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/hv'}}\n")
    out = sh(f"rogue-watchdog scan --json --config {config}", env)
    assert out.returncode in (0, 1), out.stderr
    jobs = json.loads(out.stdout)["jobs"]
    (job,) = [j for j in jobs if program in " ".join(j.get("cmdline") or [])]
    origin: dict[str, Any] = job["origin"]
    return origin


def test_the_documented_cron_sandbox_works_as_printed(tmp_path: Path) -> None:
    need_root()
    need_program("cron", "unshare")
    start, stop = documented_blocks()
    box = tmp_path / "rw-try"
    # The one change: the sandbox's directory (the docs' /tmp/rw-try) is this test's.
    start = start.replace("DIR=/tmp/rw-try", f"DIR={box}")
    stop = f"DIR={box}\n" + stop
    env = {k: v for k, v in os.environ.items() if k != "ROGUE_WATCHDOG_SOCKET"}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    config = box / "config.yaml"
    try:
        done = sh(start, env)
        assert done.returncode == 0, done.stdout + done.stderr
        cron_pid = int((box / "cron.pid").read_text())
        daemon = int((box / "daemon.pid").read_text())  # there before `run` returned
        assert os.readlink(f"/proc/{cron_pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")

        def ghost() -> dict[str, object] | None:
            out = sh(f"rogue-watchdog status --json --config {config}", env)
            if out.returncode not in (0, 1):
                return None
            found = json.loads(out.stdout).get("findings") or []
            return next((f for f in found if "legacy-retrain:1" in str(f.get("message"))), None)

        finding = poll("the ghost's finding", ghost, timeout_s=150, interval_s=2)
        message = str(finding["message"])
        # A daemon configured with the host's cron paths (the README's, beside the
        # sandbox) judges the same run by the files that cron reads, as it sees them.
        # Before (b2ad21f): "entry_state": "removed", "no live entry matches ... nothing
        # will start it again from this line" of a line that runs every minute.
        origin = host_view_origin(tmp_path, env, f"{box}/ghost/train_ghost.py")
        assert (origin["file"], origin["line"], origin.get("entry_state")) == (
            f"/proc/{cron_pid}/root/etc/cron.d/legacy-retrain",
            1,
            None,
        )
        root = f"/proc/{cron_pid}/root"
        assert (
            f"the cron daemon (PID {cron_pid}) runs in another mount namespace and reads other"
            f" crontabs than the configured ones: {root}/etc/cron.d, {root}/etc/crontab read"
            " as it sees them"
        ) in origin["evidence"]
        assert f"from cron {box}/cron.d/legacy-retrain:1 (* * * * *)" in message, message
        hint = re.search(r"to stop the source: (rogue-watchdog disable-source [^(]*?) \(", message)
        assert hint is not None, message
        assert hint.group(1) == (
            f"rogue-watchdog disable-source --config {config} F{finding['id']}"
        )
        dry = sh(hint.group(1) + " --dry-run", env)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        done = sh(hint.group(1), env)
        assert done.returncode == 0, done.stdout + done.stderr
        line = (box / "cron.d" / "legacy-retrain").read_text()
        assert line.startswith("# disabled by rogue-watchdog at "), line
        undo = re.search(r"undo with: (rogue-watchdog undo .*)$", done.stdout, re.M)
        assert undo is not None, done.stdout
        assert undo.group(1) == f"rogue-watchdog undo --config {config} 1"
        back = sh(undo.group(1), env)
        assert back.returncode == 0, back.stdout + back.stderr
        assert (box / "cron.d" / "legacy-retrain").read_text() == (
            f"* * * * * root /usr/bin/python3 {box}/ghost/train_ghost.py --epochs 40\n"
        )
    finally:
        if (box / "cron.pid").exists() or (box / "daemon.pid").exists():
            done = sh(stop, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "try-cron: stopped the sandbox cron" in done.stdout
    poll("the sandbox cron gone", lambda: not os.path.exists(f"/proc/{cron_pid}"), 10)
    poll("the daemon gone", lambda: not os.path.exists(f"/proc/{daemon}"), 30)


def namespace_members(ns: str) -> list[int]:
    """The PIDs whose mount namespace is ``ns`` (a ``mnt:[N]`` link text)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/mnt") == ns:
                    found.append(int(name))
            except OSError:
                continue
    return sorted(found)


def test_stop_ends_every_sandbox_process_even_those_started_during_stop(
    tmp_path: Path, spawned: Spawned
) -> None:
    """`stop` freezes cron first, then every process of the sandbox until none it has not
    frozen is left, kills them, and names each; a process outside the sandbox running the
    sandbox's own ghost is not signalled.

    Before (132b2a1, fresh user F 2026-12-06): stop listed the namespace with a `readlink`
    per process (21 s on a busy host), killed that list once and printed `stopped the
    sandbox cron (PID 13313) and what it ran: 13313`; a cron job started during the
    listing (`CRON -f` → `/bin/sh -c ...train_ghost.py` → `python3 ...`) was left running.
    Here a job that keeps starting processes stands for it: 73 processes were left in the
    sandbox's namespace. After: 0 left, each stopped one named with its command line.
    """
    need_root()
    need_program("cron", "unshare")
    box = tmp_path / "rw-try"
    script = str(REPO / "scripts" / "try-cron.sh")
    env = dict(os.environ)
    cron_pid = 0
    try:
        start = subprocess.run(["bash", script, "start", str(box)], env=env, capture_output=True,
                               text=True, timeout=60, check=False)  # fmt: skip
        assert start.returncode == 0, start.stdout + start.stderr
        cron_pid = int((box / "cron.pid").read_text())
        ns = os.readlink(f"/proc/{cron_pid}/ns/mnt")
        ghost = f"{box}/ghost/train_ghost.py"
        # A job that starts a process every 0.2 s: whatever the listing takes, something
        # is started behind it.
        (box / "ghost" / "spawn.sh").write_text(
            f"/usr/bin/python3 {ghost} --epochs 40 &\nwhile :; do sleep 600 & sleep 0.2; done\n"
        )
        (box / "cron.d" / "legacy-retrain").write_text(
            f"* * * * * root /bin/sh {box}/ghost/spawn.sh\n"
        )

        def ghost_pid() -> int | None:
            for pid in namespace_members(ns):
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if argv[:2] == [b"/usr/bin/python3", ghost.encode()]:
                    return pid
            return None

        job = poll("cron running the job", ghost_pid, timeout_s=90, interval_s=0.5)
        # The same ghost run by hand on the host, outside the sandbox (it sleeps 40 s):
        # never signalled.
        decoy = spawned.start(["/usr/bin/python3", ghost, "--by-hand"])
        stop = subprocess.run(["bash", script, "stop", str(box)], env=env, capture_output=True,
                              text=True, timeout=120, check=False)  # fmt: skip
        assert stop.returncode == 0, stop.stdout + stop.stderr
        left = namespace_members(ns)
        assert left == [], stop.stdout
        lines = stop.stdout.splitlines()
        said = f"try-cron: stopped the sandbox cron (PID {cron_pid}) and what it ran: {cron_pid} "
        assert lines[0].startswith(said), lines[0]
        # Each stopped PID, then a line each: cron first, with its command line.
        stopped = lines[0][len(said) - len(f"{cron_pid} ") :].split()
        assert job in [int(p) for p in stopped], lines[0]
        assert [line.split()[1] for line in lines[1:]] == stopped
        assert lines[1] == f"try-cron:   {cron_pid} cron -f"
        assert f"try-cron:   {job} /usr/bin/python3 {ghost} --epochs 40" in lines
        assert decoy.poll() is None
        assert not (box / "cron.pid").exists()
        again = subprocess.run(["bash", script, "stop", str(box)], env=env, capture_output=True,
                               text=True, timeout=60, check=False)  # fmt: skip
        assert (again.returncode, again.stdout) == (
            0, f"try-cron: no sandbox cron of {box} runs, and nothing it started is left\n"
        )  # fmt: skip
    finally:
        if cron_pid and os.path.exists(f"/proc/{cron_pid}"):
            subprocess.run(
                ["bash", script, "stop", str(box)], capture_output=True, timeout=120, check=False
            )

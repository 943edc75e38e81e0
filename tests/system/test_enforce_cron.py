"""Real cron: ``disable-source`` comments out the matched line of an /etc/cron.d file and
of a user crontab, cron stops starting the job, ``undo`` restores both files byte for
byte and cron starts the job again. In the same minute windows a Daemon in terminate
mode with auto_disable_source (file changes only pretended) sees the cron job come back:
``remediation-failed``.

Wall time: three cron minutes (fire, stays off, back on), about 2.5 minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.actions.effects import Effects
from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.command import CommandResult
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from tests.conftest import need, need_program, need_root, run_cli
from tests.system.cronharness import PYTHON, CronHarness

pytestmark = pytest.mark.system


class PretendEffects(Effects):
    """Real signals; every file and command change only recorded (a pretend disable)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []

    def write_file_atomic(self, path: str, data: bytes, uid: int, gid: int, mode: int) -> None:
        self.calls.append(("write_file_atomic", path))

    def copy_backup(self, src: str, dst: str) -> None:
        self.calls.append(("copy_backup", src, dst))

    def rename(self, src: str, dst: str) -> None:
        self.calls.append(("rename", src, dst))

    def touch(self, path: str) -> None:
        self.calls.append(("touch", path))

    def run(self, argv: Sequence[str], input_bytes: bytes | None = None) -> CommandResult:
        self.calls.append(("run", tuple(argv)))
        return CommandResult(0, "", "")


def cli(config: Path, *args: str) -> tuple[int, str]:
    res = run_cli(*args, "--config", str(config), timeout=120)
    return res.returncode, res.stdout + res.stderr


def wait_until(t: float) -> None:
    left = t - time.time()
    if left > 0:
        time.sleep(left)


def test_disable_undo_and_comeback_with_real_cron(tmp_path: Path) -> None:
    need_root()
    need_program("cron", "crontab", "useradd", "userdel", "pgrep")
    need(Path(PYTHON).exists(), f"needs {PYTHON}")
    h = CronHarness()
    try:
        h.ensure_cron()
        t_sys, t_user, t_ret = h.trainer("sys"), h.trainer("user"), h.trainer("ret")
        sys_lines = [
            'MAILTO=""',
            "# rogue-watchdog enforcement test",
            f"* * * * * root {PYTHON} {t_sys}",
        ]
        cron_d = h.add_cron_d(sys_lines)
        ret_d = h.add_cron_d([f"* * * * * root {PYTHON} {t_ret} >/dev/null 2>&1"])
        user = h.add_user()
        spool = h.install_user_crontab(user, ['MAILTO=""', f"* * * * * {PYTHON} {t_user}"])
        sys_before, user_before = cron_d.read_bytes(), spool.read_bytes()
        user_stat = spool.stat()
        config = h.sandbox / "config.yaml"
        config.write_text(
            "nvml: {enabled: false}\n"
            f"daemon: {{state_dir: '{h.sandbox}/state'}}\n"
            "enforcement: {grace_s: 3}\n"
        )
        # The daemon acts only on its own trainer; everything else stays observed.
        dcfg = parse_config(
            "nvml: {enabled: false}\n"
            f"daemon: {{state_dir: '{h.sandbox}/dstate'}}\n"
            f"alerts: {{sinks: [{{type: log, path: '{h.sandbox}/alerts.log'}}]}}\n"
            "enforcement:\n  mode: observe\n  grace_s: 3\n  rules:\n"
            f"    - {{name: ret, cmdline: '*{t_ret}*', mode: terminate,\n"
            "       auto_disable_source: true}\n",
            "d.yaml",
        )
        d = Daemon(dcfg, None)
        pretend = PretendEffects()
        enf = Enforcer(dcfg, d.db, pretend)
        d.sources.append(enf)
        d.enforcers.append(enf)

        # -- window A: all three fire --------------------------------------------------
        pids = h.wait_for([t_sys, t_user, t_ret], h.seconds_to_fire() + 20)
        boundary_b = (time.time() // 60 + 1) * 60

        rc, out = cli(config, "disable-source", str(pids[t_sys]), "--dry-run")
        assert rc == 0, out
        assert f"would disable the source of rogue job PID {pids[t_sys]}" in out
        assert f"comment out line 3: `* * * * * root {PYTHON} {t_sys}`" in out
        assert cron_d.read_bytes() == sys_before

        rc, out = cli(config, "disable-source", str(pids[t_sys]))
        assert rc == 0, out
        rc, out = cli(config, "terminate", str(pids[t_sys]))
        assert rc == 0, out
        assert f"PID {pids[t_sys]} `{PYTHON} {t_sys}`: SIGSTOP, SIGTERM, SIGCONT: exited" in out
        # cron's `/bin/sh -c CMD` wrapper carries the command: stopped with it. (Its
        # parent, cron's CRON, may reap it before the SIGCONT: a default-fatal SIGTERM
        # ends even a stopped process.)
        wrapper = f"`/bin/sh -c {PYTHON} {t_sys}`: SIGSTOP, SIGTERM"
        assert f"{wrapper}, SIGCONT: exited" in out or f"{wrapper}: exited" in out, out
        rc, out = cli(config, "disable-source", str(pids[t_user]))
        assert rc == 0, out
        rc, out = cli(config, "terminate", str(pids[t_user]))
        assert rc == 0, out

        d.tick(time.time())  # terminates t_ret, pretends to disable its line
        assert enf.settle(10)  # the grace period is waited out off the tick
        ret_acts = [a for a in d.db.actions() if a.details["root"][0] == pids[t_ret]]
        assert [(a.kind, a.outcome) for a in ret_acts] == [
            ("terminate", "ok"),
            ("disable-source", "ok"),
        ]
        assert ("write_file_atomic", str(ret_d)) in pretend.calls
        assert ret_d.read_bytes() == f"* * * * * root {PYTHON} {t_ret} >/dev/null 2>&1\n".encode()
        assert time.time() < boundary_b - 3, "window A took too long; cron may have fired"

        # The exact edits.
        after = cron_d.read_bytes().decode().splitlines()
        assert after[:2] == sys_lines[:2]
        assert after[2].startswith("# disabled by rogue-watchdog at ")
        assert after[2].endswith(f"): * * * * * root {PYTHON} {t_sys}")
        assert len(after) == 3
        listed = os.popen(f"crontab -u {user} -l").read().splitlines()
        assert listed[0] == 'MAILTO=""' and listed[1].startswith("# disabled by rogue-watchdog at ")
        assert len(listed) == 2

        rc, out = cli(config, "actions", "--json")
        acts = {(a["kind"], a["target"]): a for a in json.loads(out) if not a["dry_run"]}
        sys_act = acts[("disable-source", f"{cron_d}:3")]
        user_act = acts[("disable-source", f"{spool}:5")]
        assert sys_act["outcome"] == user_act["outcome"] == "ok"
        assert sys_act["actor"].startswith("cli:")
        [sys_op] = sys_act["undo"]
        assert Path(sys_op["backup"]).read_bytes() == sys_before
        assert (sys_op["uid"], sys_op["gid"], sys_op["mode"]) == (0, 0, 0o644)
        [user_op] = user_act["undo"]
        assert Path(user_op["backup"]).read_bytes() == user_before
        b = Path(user_op["backup"]).stat()
        assert (b.st_uid, b.st_gid, b.st_mode & 0o7777) == (
            user_stat.st_uid, user_stat.st_gid, user_stat.st_mode & 0o7777,
        )  # fmt: skip

        # -- window B: the disabled lines stay quiet; the pretend-disabled one is back --
        wait_until(boundary_b + 8)
        assert h.ours(t_sys) == [] and h.ours(t_user) == []
        back = h.wait_for([t_ret], 20)[t_ret]  # proves cron ran at this boundary
        d.tick(time.time())
        failed = [f for f in d.db.open_findings() if f.kind == "remediation-failed"]
        assert [(f.root_pid, f.severity) for f in failed] == [(back, "critical")]
        assert "disabled the source (cron-file: backup " in failed[0].message
        assert f"spawned this time by cron {ret_d}:1 (* * * * *)" in failed[0].message

        rc, out = cli(config, "undo", str(sys_act["id"]), "--dry-run")
        assert rc == 0 and f"restore {cron_d} from {sys_op['backup']}" in out, out
        assert cron_d.read_bytes() != sys_before
        for act in (sys_act, user_act):
            rc, out = cli(config, "undo", str(act["id"]))
            assert rc == 0, out
        assert cron_d.read_bytes() == sys_before
        assert spool.read_bytes() == user_before
        s = spool.stat()
        assert (s.st_uid, s.st_gid, s.st_mode & 0o7777) == (
            user_stat.st_uid, user_stat.st_gid, user_stat.st_mode & 0o7777,
        )  # fmt: skip
        rc, out = cli(config, "undo", str(sys_act["id"]))
        assert rc == 1 and "already undone" in out
        boundary_c = boundary_b + 60
        assert time.time() < boundary_c - 3, "window B took too long"

        # -- window C: cron starts both jobs again ---------------------------------------
        # Window B proved cron ran (it restarted t_ret). A concurrent test session may
        # have stopped the cron it had started and we were using: start our own then.
        if not Path(f"/proc/{h.cron_pid}").exists():
            h.ensure_cron()
        again = h.wait_for([t_sys, t_user], boundary_c + 25 - time.time())
        assert again[t_sys] != pids[t_sys] and again[t_user] != pids[t_user]
    finally:
        for pid in [
            p for t in ("sys", "user", "ret") for p in h.ours(h.sandbox / t / "train_fake.py")
        ]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        h.close()

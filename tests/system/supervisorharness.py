"""A real supervisord (the test extra's ``supervisor`` package) on a private config.

Everything lives in the test's own directory: the config, its ``conf.d`` include, the
control socket, the logs, the pid file. supervisord runs in the foreground (``-n``) as
this test's child; :meth:`Supervisord.stop` asks it to shut down (it stops its programs)
and kills what is left of its own process group. The host's supervisord, if any, and
its config are never read or touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import need, need_root

BIN = Path(sys.executable).parent
MAIN = """\
[unix_http_server]
file=%(here)s/s.sock

[supervisord]
logfile=%(here)s/supervisord.log
pidfile=%(here)s/supervisord.pid
childlogdir=%(here)s
nodaemon=true

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://%(here)s/s.sock

[include]
files = conf.d/*.conf
"""


class Supervisord:
    """supervisord on ``DIR/supervisord.conf`` with programs in ``DIR/conf.d/``.

    Args:
        root: The test's directory (created).
        programs: File name in ``conf.d`` → its text (``[program:x]`` sections).
    """

    def __init__(self, root: Path, programs: dict[str, str]) -> None:
        need_root()
        need((BIN / "supervisord").exists(), "needs the supervisor package (test extra)")
        self.root = root
        (root / "conf.d").mkdir(parents=True, exist_ok=True)
        self.conf = root / "supervisord.conf"
        self.conf.write_text(MAIN)
        for name, text in programs.items():
            (root / "conf.d" / name).write_text(text)
        self.proc = subprocess.Popen(
            [str(BIN / "supervisord"), "-n", "-c", str(self.conf)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, cwd=root,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while not (root / "s.sock").exists():
            assert self.proc.poll() is None, (root / "supervisord.log").read_text()
            assert time.monotonic() < deadline, "supervisord did not open its socket"
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        """supervisord's PID."""
        return self.proc.pid

    def ctl(self, *args: str, check: bool = True) -> str:
        """``supervisorctl -c DIR/supervisord.conf ARGS``: its output."""
        done = subprocess.run(
            [str(BIN / "supervisorctl"), "-c", str(self.conf), *args],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        if check:
            assert done.returncode in (0, 3), done.stdout + done.stderr  # 3: not running
        return done.stdout

    def program_pid(self, name: str, timeout_s: float = 20, other_than: int = 0) -> int:
        """The PID supervisord runs program ``name`` as (a new one when ``other_than``)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out = self.ctl("pid", name, check=False).strip()
            if out.isdigit() and int(out) not in (0, other_than):
                return int(out)
            time.sleep(0.2)
        raise AssertionError(f"supervisord did not run {name}: {self.ctl('status', check=False)}")

    def stop(self) -> None:
        """Shut supervisord down (its programs with it); kill its group if it lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

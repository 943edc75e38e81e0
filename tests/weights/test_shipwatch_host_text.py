"""Ship-gate findings quote the host text they name (hostile tester wt9-attack, session j).

The product's own commands are told apart from host text by where they stand: host
text only inside single-backtick code spans (watchdog/hosttext.py). The ship gate's
messages wrote host text raw: the command line of a process that opened a refused file,
the file's path (its name chosen by whoever wrote it), the reader's error (which names
the file's tensors). A process running with the argument ``\\`\\`rogue-watchdog status
--config /tmp/evil.yaml\\`\\``` and reading a refused file had that argument sit outside
every span, where the alert spool's rewrite (adopt.py) read it as the product's command:
its text was rewritten and the alert told that it was "written under the configuration
/tmp/evil.yaml", the forgery commit fe6ee83 closed for job findings.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from rogue_watchdog.daemon.alerts.adopt import adopted
from rogue_watchdog.daemon.alerts.alert import Alert, Outgoing
from rogue_watchdog.hosttext import outside_code
from rogue_watchdog.weights.opengate import Decision, describe_opener

from .test_shipwatch import T0, dirs, nan_model, rig  # noqa: F401  (dirs: a fixture)

FORGED = "``rogue-watchdog status --config /tmp/evil.yaml``"
OURS = "/etc/rogue-watchdog/ours.yaml"


def _sent(message: str) -> str:
    doc = {"schema_version": 1, "event": "open", "host": "h", "time": None,
           "finding": {"id": 1, "message": message}, "config": OURS}  # fmt: skip
    return adopted(Outgoing(Alert.from_json(doc), "log", 1, 1.0), OURS).alert.finding.message


def test_the_command_line_of_a_refused_opener_is_quoted(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", FORGED])
    try:
        deadline = time.monotonic() + 10
        opener = describe_opener(proc.pid)
        while FORGED not in str(opener.get("command")) and time.monotonic() < deadline:
            time.sleep(0.05)  # until the interpreter's argv is in /proc
            opener = describe_opener(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert FORGED in str(opener["command"])
    r = rig(tmp_path)
    try:
        d = Decision(f"{tmp_path}/deploy/model.safetensors", opener, "REFUSED x: 1 of 1", True)
        message = r.source._open_finding(d, T0).message
    finally:
        r.close()
    assert "rogue-watchdog status" not in outside_code(message)
    assert _sent(message) == message  # before: rewritten, "written under /tmp/evil.yaml"


def test_a_deployed_file_name_is_quoted(tmp_path: Path, dirs: tuple[Path, Path]) -> None:  # noqa: F811
    deploy, _ = dirs
    name = "model ``rogue-watchdog status --config x`` next: nothing to do.safetensors"
    r = rig(tmp_path)
    try:
        nan_model(deploy / name)
        r.tick(T0)
        r.tick(T0 + 5)
        [f] = r.open("poisoned-weights")
    finally:
        r.close()
    assert name.split(".")[0] not in f.message  # shown, but never as written
    outside = outside_code(f.message)
    assert "rogue-watchdog status" not in outside and "nothing to do" not in outside
    assert _sent(f.message) == f.message

"""Real systemd (booted in a PID + mount namespace): ``disable-source`` disables the timer,
stops and masks a ``Restart=always`` service; the job does not return; ``undo`` restores
the exact ``is-enabled``/``is-active`` values. The CLI runs inside the namespace, as an
operator on a systemd host would.

A private tmpfs is mounted on /etc/systemd/system inside the namespace before anything is
enabled: ``enable``/``mask`` write symlinks there, and the host's directory (the root
file system is shared) must not be touched. The test units live in the namespace's own
/run/systemd/system (systemd's tmpfs there), which comes after /etc/systemd/system in the
unit search path as on a real host, so the mask shadows them; a unit in the harness's
``SYSTEMD_UNIT_PATH`` directory would come first and could not be masked.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, need, need_program, need_root
from tests.system.nsystemd import SYSTEMD, NamespacedSystemd

pytestmark = pytest.mark.system

SERVICE = "rwenf-train.service"
TIMER = "rwenf-train.timer"
UNITS = (TIMER, SERVICE)


@pytest.fixture(scope="module")
def sd() -> Iterator[NamespacedSystemd]:
    need_root()
    need_program("unshare", "nsenter", "systemctl", "mount")
    need(Path(SYSTEMD).exists(), f"needs {SYSTEMD}")
    manager = NamespacedSystemd()
    try:
        manager.start()
        manager.nsenter("mount", "-t", "tmpfs", "rwenf", "/etc/systemd/system")
        manager.systemctl("daemon-reload")
        yield manager
    finally:
        manager.stop()


def states(sd: NamespacedSystemd) -> dict[str, tuple[str, str]]:
    out = {}
    for u in UNITS:
        enabled = sd.systemctl("is-enabled", u, check=False).stdout.strip()
        active = sd.systemctl("is-active", u, check=False).stdout.strip()
        out[u] = (enabled, active)
    return out


def cli(sd: NamespacedSystemd, *args: str) -> tuple[int, str]:
    res = sd.nsenter(
        sys.executable, "-m", "rogue_watchdog", *args, "--config", str(sd.sandbox / "config.yaml"),
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, check=False,
    )  # fmt: skip
    return res.returncode, res.stdout + res.stderr


def test_disable_mask_stays_off_and_undo_restores(sd: NamespacedSystemd) -> None:
    script = sd.write_file("train_fake.py", "import time\ntime.sleep(600)\n")
    sd.write_file(
        "config.yaml",
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{sd.sandbox}/state'}}\n"
        "enforcement: {grace_s: 3}\n",
    )
    run_units = Path(f"/proc/{sd.pid}/root/run/systemd/system")
    (run_units / SERVICE).write_text(
        "[Unit]\nDefaultDependencies=no\n\n[Service]\n"
        f"ExecStart=/usr/bin/python3 {script}\nRestart=always\nRestartSec=1\n"
    )
    # OnUnitInactiveSec: a timer left enabled would start the service again 2 s after
    # it stops, so "it does not return" means something.
    (run_units / TIMER).write_text(
        "[Unit]\nDefaultDependencies=no\n\n[Timer]\nOnActiveSec=1\nOnUnitInactiveSec=2\n\n"
        "[Install]\nWantedBy=T.target\n"
    )
    sd.systemctl("daemon-reload")
    sd.systemctl("enable", "--now", TIMER)
    try:
        pid = sd.wait_main_pid(SERVICE)
        before = states(sd)
        assert before == {TIMER: ("enabled", "active"), SERVICE: ("static", "active")}

        rc, out = cli(sd, "disable-source", str(pid), "--dry-run")
        assert rc == 0, out
        for line in (
            f"before: {TIMER} is-enabled=enabled is-active=active",
            f"before: {SERVICE} is-enabled=static is-active=active",
            f"systemctl disable --now {TIMER}",
            f"systemctl stop {SERVICE}",
            f"systemctl mask {SERVICE}",
            f"(mask because Restart=always would start {SERVICE} again)",
        ):
            assert f"  {line}\n" in out, out
        assert states(sd) == before

        rc, out = cli(sd, "disable-source", str(pid))
        assert rc == 0, out
        # `disable --now` + `stop` ended the job with its unit: say so, never "not stopped".
        assert "the running job has stopped too (it ended with its source)\n" in out, out
        assert "not stopped by this" not in out
        assert states(sd) == {TIMER: ("disabled", "inactive"), SERVICE: ("masked", "inactive")}, (
            out + sd.nsenter("ls", "-la", "/etc/systemd/system").stdout
        )
        time.sleep(5)  # past RestartSec=1, OnActiveSec=1 and OnUnitInactiveSec=2
        assert states(sd) == {TIMER: ("disabled", "inactive"), SERVICE: ("masked", "inactive")}
        assert sd.show(SERVICE, "MainPID")["MainPID"] == "0"

        rc, out = cli(sd, "actions", "--json")
        [act] = [a for a in json.loads(out) if a["kind"] == "disable-source" and not a["dry_run"]]
        assert act["outcome"] == "ok"
        assert act["undo"] == [
            {"op": "systemctl", "argv": ["unmask", SERVICE]},
            {"op": "systemctl", "argv": ["enable", TIMER]},
            {"op": "systemctl", "argv": ["start", TIMER]},
            {"op": "systemctl", "argv": ["start", SERVICE]},
        ]
        rc, out = cli(sd, "undo", str(act["id"]))
        assert rc == 0, out
        assert states(sd) == before
        assert int(sd.show(SERVICE, "MainPID")["MainPID"]) > 0
    finally:
        sd.systemctl("disable", "--now", TIMER, check=False)
        sd.systemctl("unmask", SERVICE, check=False)
        sd.stop_units(UNITS)


ETC_SERVICE = "rwenf-etc.service"
ETC_TIMER = "rwenf-etc.timer"


def test_unit_file_in_etc_is_moved_aside_then_masked_and_undo_restores_it(
    sd: NamespacedSystemd,
) -> None:
    """The unit file lives in /etc/systemd/system, where `systemctl mask` wants to put its
    /dev/null link ("already exists", systemd #27965): it is moved to the backup dir, the
    unit masked (LoadState=masked verified), its active timer disabled first; undo puts
    the file back byte for byte and restores the exact states."""
    script = sd.write_file("train_etc.py", "import time\ntime.sleep(600)\n")
    sd.write_file(
        "config.yaml",
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{sd.sandbox}/state'}}\n"
        "enforcement: {grace_s: 3}\n",
    )
    etc = Path(f"/proc/{sd.pid}/root/etc/systemd/system")  # the namespace's own tmpfs
    unit_text = (
        "[Unit]\nDefaultDependencies=no\n\n[Service]\n"
        f"ExecStart=/usr/bin/python3 {script}\nRestart=always\nRestartSec=1\n"
    )
    (etc / ETC_SERVICE).write_text(unit_text)
    (etc / ETC_TIMER).write_text(
        "[Unit]\nDefaultDependencies=no\n\n[Timer]\nOnActiveSec=1\nOnUnitInactiveSec=2\n\n"
        "[Install]\nWantedBy=T.target\n"
    )
    sd.systemctl("daemon-reload")
    sd.systemctl("enable", "--now", ETC_TIMER)
    units = (ETC_TIMER, ETC_SERVICE)

    def now_states() -> dict[str, tuple[str, str]]:
        return {
            u: (
                sd.systemctl("is-enabled", u, check=False).stdout.strip(),
                sd.systemctl("is-active", u, check=False).stdout.strip(),
            )
            for u in units
        }

    try:
        pid = sd.wait_main_pid(ETC_SERVICE)
        before = now_states()
        assert before == {ETC_TIMER: ("enabled", "active"), ETC_SERVICE: ("static", "active")}
        assert sd.show(ETC_SERVICE, "FragmentPath")["FragmentPath"] == (
            f"/etc/systemd/system/{ETC_SERVICE}"
        )
        rc, out = cli(sd, "disable-source", str(pid))
        assert rc == 0, out
        assert now_states() == {
            ETC_TIMER: ("disabled", "inactive"),
            ETC_SERVICE: ("masked", "inactive"),
        }, out
        assert sd.show(ETC_SERVICE, "LoadState")["LoadState"] == "masked"
        assert os.readlink(etc / ETC_SERVICE) == "/dev/null"
        time.sleep(5)  # past RestartSec=1, OnActiveSec=1 and OnUnitInactiveSec=2
        assert now_states()[ETC_SERVICE] == ("masked", "inactive")
        assert sd.show(ETC_SERVICE, "MainPID")["MainPID"] == "0"

        rc, out = cli(sd, "actions", "--json")
        [act] = [
            a for a in json.loads(out)
            if a["kind"] == "disable-source" and not a["dry_run"]
            and ETC_SERVICE in a["target"]
        ]  # fmt: skip
        assert act["outcome"] == "ok", act
        [restore] = [op for op in act["undo"] if op["op"] == "restore_file"]
        backup = Path(restore["backup"])
        assert backup.read_text() == unit_text and str(backup).startswith(str(sd.sandbox))
        assert restore["path"] == f"/etc/systemd/system/{ETC_SERVICE}"
        assert act["undo"] == [
            {"op": "systemctl", "argv": ["unmask", ETC_SERVICE]},
            restore,
            {"op": "systemctl", "argv": ["daemon-reload"]},
            {"op": "systemctl", "argv": ["enable", ETC_TIMER]},
            {"op": "systemctl", "argv": ["start", ETC_TIMER]},
            {"op": "systemctl", "argv": ["start", ETC_SERVICE]},
        ]
        assert f"moved /etc/systemd/system/{ETC_SERVICE} to {backup}" in act["details"]["done"]
        assert f"verified: {ETC_SERVICE} LoadState=masked" in act["details"]["done"]

        rc, out = cli(sd, "undo", str(act["id"]))
        assert rc == 0, out
        assert (etc / ETC_SERVICE).read_text() == unit_text
        assert not (etc / ETC_SERVICE).is_symlink()
        assert now_states() == before
        assert int(sd.show(ETC_SERVICE, "MainPID")["MainPID"]) > 0
    finally:
        sd.systemctl("disable", "--now", ETC_TIMER, check=False)
        sd.systemctl("unmask", ETC_SERVICE, check=False)
        sd.stop_units(units)

"""The Debian package: build it (dh-virtualenv), install it with apt-get into a throwaway
root, boot that root's systemd and check ``status``; upgrade to a rebuilt version (config
and state survive), then ``remove`` (config, secrets, state stay) and ``purge`` (gone).

The throwaway root is an overlay of the host's root with a private upper directory,
mounted in a private mount namespace: every write (dpkg's database, /opt, /etc, /lib/
systemd) lands in the sandbox; the host is never changed. systemd runs chrooted into it as
PID 1 of a new PID namespace, on a minimal target, with sysinit.target, systemd-sysctl and
systemd-tmpfiles masked (they would change the host's kernel settings), so the package's
own maintainer scripts and deb-systemd-helper/-invoke do the Debian thing for real.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, need_program, need_root, poll
from tests.system.nsystemd import _ppid

pytestmark = pytest.mark.system

UNIT = "rogue-watchdog.service"
# Units that would touch the host's kernel settings or files from inside the namespace.
MASKED = (
    "sysinit.target",
    "basic.target",
    "systemd-tmpfiles-setup.service",
    "systemd-tmpfiles-setup-dev.service",
    "systemd-sysctl.service",
    "systemd-journald.service",
    "systemd-update-utmp.service",
    "systemd-remount-fs.service",
)

BOOT = r"""
set -eu
S=$1
mount -t overlay overlay -o "lowerdir=/,upperdir=$S/upper,workdir=$S/work" "$S/root"
R=$S/root
mount --rbind /dev "$R/dev"
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount -t tmpfs -o mode=0755 tmpfs "$R/run"
mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
# The throwaway root is a real Debian host: services may start on install.
rm -f "$R/usr/sbin/policy-rc.d"
U=$R/etc/systemd/system
mkdir -p "$U/rogue-watchdog.service.d"
printf '[Unit]\nDescription=test target\nDefaultDependencies=no\n' > "$U/T.target"
for u in $MASKED; do ln -sf /dev/null "$U/$u"; done
# The daemon's log is kept in a file (journald is masked): a failed start shows it.
printf '[Unit]\nDefaultDependencies=no\n[Service]\n%s\n' \
  'StandardOutput=append:/var/log/rw-test-daemon.log' > "$U/rogue-watchdog.service.d/test.conf"
echo booting > "$S/booted"
export container=other
exec chroot "$R" /lib/systemd/systemd --system --unit=T.target
"""


class Root:
    """The overlay root and its systemd."""

    def __init__(self, sandbox: Path) -> None:
        self.s = sandbox
        for d in ("upper", "work", "root"):
            (sandbox / d).mkdir()
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None

    def boot(self) -> None:
        log = open(self.s / "systemd.log", "wb")  # noqa: SIM115
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "MASKED": " ".join(MASKED),
        }
        self.proc = subprocess.Popen(
            [
                "unshare",
                "--pid",
                "--fork",
                "--mount",
                "--propagation",
                "private",
                "bash",
                "-c",
                BOOT,
                "boot",
                str(self.s),
            ],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        log.close()

        def running() -> bool:
            assert self.proc is not None
            assert self.proc.poll() is None, (self.s / "systemd.log").read_text()
            if self.pid is None:
                kids = [
                    int(n)
                    for n in os.listdir("/proc")
                    if n.isdigit() and _ppid(int(n)) == self.proc.pid
                ]
                self.pid = kids[0] if kids else None
            if self.pid is None:
                return False
            res = self.run("systemctl", "is-system-running", check=False)
            return res.stdout.strip() in ("running", "degraded")

        poll("systemd in the throwaway root", running, 30)

    def run(
        self, *argv: str, check: bool = True, timeout_s: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` inside the root (its mount and PID namespace, chrooted)."""
        assert self.pid is not None
        res = subprocess.run(
            [
                "nsenter",
                "-t",
                str(self.pid),
                "-p",
                "-m",
                "-r",
                "-w",
                "env",
                "-i",
                "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                "LANG=C.UTF-8",
                "DEBIAN_FRONTEND=noninteractive",
                *argv,
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"{argv}: exit {res.returncode}\n{res.stdout}\n{res.stderr}")
        return res

    def path(self, p: str) -> Path:
        """A path of the throwaway root, seen from the host (only while it runs)."""
        assert self.pid is not None
        return Path(f"/proc/{self.pid}/root") / p.lstrip("/")

    def stop(self) -> None:
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def debs() -> Iterator[tuple[Path, Path]]:
    """The package built from this checkout, and the same rebuilt as the next version."""
    need_root()
    need_program("dpkg-buildpackage", "dh_virtualenv", "dpkg-deb", "unshare", "nsenter", "git")
    out = Path(tempfile.mkdtemp(prefix="rwtest-deb-", dir="/var/tmp"))
    try:
        build = subprocess.run(
            ["bash", str(REPO / "scripts" / "build-deb.sh"), str(out)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert build.returncode == 0, build.stdout + build.stderr
        (first,) = out.glob("rogue-watchdog_0.1.0_*.deb")
        # The next version: the same files under a higher version number.
        tree = out / "tree"
        subprocess.run(["dpkg-deb", "-R", str(first), str(tree)], check=True)
        control = tree / "DEBIAN" / "control"
        control.write_text(control.read_text().replace("Version: 0.1.0", "Version: 0.1.1"))
        second = out / first.name.replace("0.1.0", "0.1.1")
        subprocess.run(
            ["dpkg-deb", "-b", "--root-owner-group", str(tree), str(second)],
            check=True,
            capture_output=True,
        )
        yield first, second
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture
def root(debs: tuple[Path, Path]) -> Iterator[Root]:
    sandbox = Path(tempfile.mkdtemp(prefix="rwtest-root-", dir="/var/tmp"))
    r = Root(sandbox)
    try:
        yield r
    finally:
        r.stop()
        shutil.rmtree(sandbox, ignore_errors=True)


def main_pid(r: Root) -> int | None:
    """The service's main PID inside the root, or None while it has none."""
    text = r.run("systemctl", "show", "-p", "MainPID", "--value", UNIT).stdout.strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def status(r: Root) -> dict[str, object] | None:
    """The status document, or None while the daemon has no socket yet (starting)."""
    res = r.run("rogue-watchdog", "status", "--json", check=False)
    if res.returncode == 3:
        return None
    assert res.returncode in (0, 1), res.stdout + res.stderr
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


# Longer than the unit's TimeoutStartSec (120 s): a slow start fails the install itself,
# with systemd's verdict, instead of the test killing apt-get halfway.
INSTALL_TIMEOUT_S = 300


def apt_install(r: Root, *argv: str) -> None:
    """``apt-get install ARGV`` in the root; on failure, what the service was doing."""
    try:
        r.run("apt-get", "install", "-y", "-q", *argv, timeout_s=INSTALL_TIMEOUT_S)
    except (AssertionError, subprocess.TimeoutExpired) as exc:
        raise AssertionError(f"{exc}\n{service_report(r)}") from None


def service_report(r: Root) -> str:
    """The unit's state, the daemon's log and where each of its threads waits."""
    out = [r.run("systemctl", "status", "--no-pager", UNIT, check=False, timeout_s=20).stdout]
    log = r.path("var/log/rw-test-daemon.log")
    out.append(log.read_text(errors="replace")[-4000:] if log.exists() else "(no daemon log)")
    pid = main_pid(r)
    task_dir = r.path(f"proc/{pid}/task") if pid else None
    if task_dir is not None and task_dir.is_dir():
        for task in sorted(task_dir.iterdir()):
            wchan = (task / "wchan").read_text(errors="replace")
            comm = (task / "comm").read_text(errors="replace").strip()
            out.append(f"thread {task.name} {comm}: waits in {wchan or '-'}")
    return "\n".join(out)


def answered(r: Root, what: str) -> dict[str, object]:
    """The status document once the started daemon answers; on a long wait, why not.

    Bounded by the unit's own start timeout: a daemon still silent then has failed.
    """
    try:
        doc: dict[str, object] = poll(what, lambda: status(r), 120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{service_report(r)}") from None
    return doc


def test_install_run_upgrade_remove_purge(root: Root, debs: tuple[Path, Path]) -> None:
    first, second = debs
    r = root
    assert host_knows_nothing()
    r.boot()
    apt_install(r, "--no-install-recommends", str(first))
    assert (
        r.run("dpkg-query", "-W", "-f", "${Status} ${Version}", "rogue-watchdog").stdout
        == "install ok installed 0.1.0"
    )
    # The product in its own venv; the hardened unit installed and enabled the Debian way.
    assert (
        r.run("/opt/rogue-watchdog/bin/rogue-watchdog", "--version").stdout.strip()
        == "rogue-watchdog 0.1.0"
    )
    assert (
        r.path("lib/systemd/system/rogue-watchdog.service").read_text()
        == (REPO / "systemd" / UNIT).read_text()
    )
    assert r.run("systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"
    conffiles = r.run("dpkg-query", "-W", "-f", "${Conffiles}", "rogue-watchdog").stdout
    assert "/etc/rogue-watchdog/config.yaml" in conffiles
    secrets = r.path("etc/rogue-watchdog/secrets.env")
    assert oct(secrets.stat().st_mode & 0o777) == "0o600"
    assert oct(r.path("etc/rogue-watchdog/config.yaml").stat().st_mode & 0o777) == "0o640"

    # Installed while the root's systemd runs: started by the package, answers status.
    main = poll("service running", lambda: main_pid(r), 30)
    doc = answered(r, "status answers")
    assert (doc["pid"], doc["version"]) == (main, "0.1.0")

    # The operator edits the config and keeps a secret; the daemon keeps state.
    config = r.path("etc/rogue-watchdog/config.yaml")
    edited = config.read_text() + "# edited by the operator\n"
    config.write_text(edited)
    secrets.write_text("ROGUE_WATCHDOG_SLACK_URL=https://hooks.example/T/B/secret\n")
    state_db = r.path("var/lib/rogue-watchdog/state.db")
    poll("state database", state_db.exists, 30)
    state_inode = state_db.stat().st_ino

    # Upgrade: config and secrets untouched, state kept, service restarted on the new one.
    apt_install(r, str(second))
    assert r.run("dpkg-query", "-W", "-f", "${Version}", "rogue-watchdog").stdout == "0.1.1"
    assert config.read_text() == edited
    assert secrets.read_text() == "ROGUE_WATCHDOG_SLACK_URL=https://hooks.example/T/B/secret\n"
    assert oct(secrets.stat().st_mode & 0o777) == "0o600"
    assert state_db.stat().st_ino == state_inode
    new_main = poll("restarted", lambda: (main_pid(r) or main) != main and main_pid(r), 30)
    assert answered(r, "status after upgrade")["pid"] == new_main

    # remove: the product and the running service go; config, secrets and state stay.
    r.run("apt-get", "remove", "-y", "-q", "rogue-watchdog")
    assert not r.path("opt/rogue-watchdog").exists()
    assert r.run("systemctl", "is-active", UNIT, check=False).stdout.strip() == "inactive"
    assert config.read_text() == edited
    assert secrets.exists() and state_db.exists()

    # purge: everything goes.
    r.run("apt-get", "purge", "-y", "-q", "rogue-watchdog")
    assert not r.path("etc/rogue-watchdog").exists()
    assert not r.path("var/lib/rogue-watchdog").exists()
    assert not r.path(
        "etc/systemd/system/multi-user.target.wants/rogue-watchdog.service"
    ).is_symlink()
    assert r.run("dpkg-query", "-W", "rogue-watchdog", check=False).returncode == 1
    # The host never saw any of it: its dpkg database does not know the package.
    assert host_knows_nothing()


def host_knows_nothing() -> bool:
    res = subprocess.run(["dpkg-query", "-W", "rogue-watchdog"], capture_output=True, check=False)
    return res.returncode == 1 and not Path("/var/lib/dpkg/info/rogue-watchdog.list").exists()

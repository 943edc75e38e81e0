"""scripts/install.sh into a sandbox: venv, config from the example (never overwritten),
the unit with substituted paths, the systemctl calls (recorded), idempotence, uninstall."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, need_program, need_root

pytestmark = pytest.mark.system

UNIT = "rogue-watchdog.service"


@pytest.fixture
def sandbox() -> Iterator[Path]:
    need_root()
    need_program("bash", "sed", "install", "systemd-analyze")
    s = Path(tempfile.mkdtemp(prefix="rwtest-install-", dir="/var/tmp"))
    # systemctl stand-in: records each call (the host's systemd is never touched).
    fake = s / "systemctl"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {s}/systemctl.log\n')
    fake.chmod(0o755)
    try:
        yield s
    finally:
        shutil.rmtree(s, ignore_errors=True)


def install(s: Path, *args: str, umask: int | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["bash", str(REPO / "scripts" / "install.sh"), "--prefix", f"{s}/opt"]
    argv += ["--config-dir", f"{s}/etc", "--unit-dir", f"{s}/units", *args]
    env = dict(os.environ, SYSTEMCTL=str(s / "systemctl"))
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=300, env=env, check=False,
        preexec_fn=None if umask is None else lambda: os.umask(umask),
    )  # fmt: skip


def writable_by_others(root: Path) -> list[str]:
    """Files and directories under ``root`` (itself included) that group or others may
    write; symlinks are skipped (their mode means nothing)."""
    out = []
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
            out.append(f"{path} {stat.S_IMODE(st.st_mode):04o}")
    return out


def calls(s: Path) -> list[str]:
    log = s / "systemctl.log"
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return lines


def test_install_upgrade_uninstall(sandbox: Path) -> None:
    s = sandbox
    res = install(s)
    assert res.returncode == 0, res.stdout + res.stderr
    exe = s / "opt" / "bin" / "rogue-watchdog"
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == "rogue-watchdog 0.1.0"
    example = (REPO / "config" / "example.yaml").read_bytes()
    config = s / "etc" / "config.yaml"
    assert config.read_bytes() == example
    assert oct(config.stat().st_mode & 0o777) == "0o640"
    unit = (s / "units" / UNIT).read_text()
    assert f"ExecStart={exe} run --config {config}\n" in unit
    # secrets.env follows --config-dir too: it lives beside the config (docs/alerts.md).
    assert [ln for ln in unit.splitlines() if ln.startswith("EnvironmentFile=")] == [
        f"EnvironmentFile=-{s}/etc/secrets.env"
    ]
    assert "/etc/rogue-watchdog" not in unit
    assert (
        unit.replace(str(s / "opt"), "/opt/rogue-watchdog").replace(
            str(s / "etc"), "/etc/rogue-watchdog"
        )
        == (REPO / "systemd" / UNIT).read_text()
    )  # only the paths differ
    assert calls(s) == ["daemon-reload", f"enable {UNIT}", f"restart {UNIT}"]
    verify = subprocess.run(
        ["systemd-analyze", "verify", str(s / "units" / UNIT)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stderr

    # Again, after the operator edited the config: kept; unit unchanged; venv reused.
    config.write_text(config.read_text() + "# edited by the operator\n")
    marker = (s / "opt" / ".rogue-watchdog-venv").stat().st_ino
    res = install(s, "--no-enable")
    assert res.returncode == 0, res.stdout + res.stderr
    assert config.read_text().endswith("# edited by the operator\n")
    assert f"install: kept existing {config}" in res.stdout
    assert f"install: unit {s}/units/{UNIT} unchanged" in res.stdout
    assert (s / "opt" / ".rogue-watchdog-venv").stat().st_ino == marker
    assert calls(s) == []  # --no-enable: no systemctl call at all

    res = install(s, "--uninstall")
    assert res.returncode == 0, res.stdout + res.stderr
    assert calls(s) == [f"disable --now {UNIT}", "daemon-reload"]
    assert not (s / "opt").exists() and not (s / "units" / UNIT).exists()
    assert config.exists()  # kept without --purge


def test_refuses_a_foreign_prefix(sandbox: Path) -> None:
    (sandbox / "opt").mkdir()
    (sandbox / "opt" / "precious").write_text("x")
    res = install(sandbox)
    assert res.returncode == 2
    assert "exists and is not a rogue-watchdog venv" in res.stderr
    assert (sandbox / "opt" / "precious").read_text() == "x"
    res = install(sandbox, "--uninstall", "--no-enable")
    assert res.returncode == 0 and (sandbox / "opt" / "precious").exists()


def test_modes_do_not_depend_on_the_callers_umask(sandbox: Path) -> None:
    s = sandbox
    res = install(s, "--no-enable", umask=0o000)
    assert res.returncode == 0, res.stdout + res.stderr
    assert oct(s.joinpath("opt").stat().st_mode & 0o7777) == "0o755"
    assert oct(s.joinpath("etc").stat().st_mode & 0o7777) == "0o755"
    assert oct(s.joinpath("etc", "config.yaml").stat().st_mode & 0o7777) == "0o640"
    assert oct(s.joinpath("etc", "config.yaml.example").stat().st_mode & 0o7777) == "0o644"
    assert oct(s.joinpath("units", UNIT).stat().st_mode & 0o7777) == "0o644"
    assert writable_by_others(s / "opt") == []
    assert writable_by_others(s / "etc") == []
    # check-config ran at the end and the installed configuration is trusted.
    assert f"{s}/etc/config.yaml: OK: " in res.stdout

    # A venv and config dir an earlier run left world-writable are tightened on upgrade.
    (s / "opt" / "bin").chmod(0o777)
    (s / "etc").chmod(0o777)
    res = install(s, "--no-enable")
    assert res.returncode == 0, res.stdout + res.stderr
    assert writable_by_others(s / "opt") == []
    assert oct(s.joinpath("etc").stat().st_mode & 0o7777) == "0o755"


def _fake_install(s: Path, state: Path) -> Path:
    """An installed instance without pip: the venv marker, its interpreter (this one,
    which imports this checkout) and a configuration naming ``state``."""
    (s / "opt" / "bin").mkdir(parents=True)
    (s / "opt" / ".rogue-watchdog-venv").touch()
    python = s / "opt" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    (s / "etc").mkdir(exist_ok=True)
    config = s / "etc" / "config.yaml"
    config.write_text(f"daemon: {{state_dir: '{state}', socket: '{s}/none.sock'}}\n")
    config.chmod(0o640)
    state.mkdir(exist_ok=True)
    (state / "state.db").write_bytes(b"")
    (state / "backups").mkdir(exist_ok=True)
    # what a daemon and a Slurm sweep leave beside it (daemon/inforce.py, slurmrecord.py)
    (state / "config-in-force.yaml").write_bytes(config.read_bytes())
    (state / "slurm-sweep.lock").write_bytes(b"")
    return config


def test_uninstall_names_and_purges_the_state_this_instance_used(sandbox: Path) -> None:
    # Before (issue 33): "kept CONFIG and /var/lib/rogue-watchdog" whatever the instance
    # used, and --purge removed /var/lib/rogue-watchdog (another instance's, maybe).
    s = sandbox
    state = s / "srv-state"
    config = _fake_install(s, state)
    res = install(s, "--uninstall", "--no-enable")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"install: kept {config} and the state in {state} (use --purge" in res.stdout
    assert "/var/lib/rogue-watchdog" not in res.stdout
    assert (state / "state.db").exists()

    _fake_install(s, state)
    (state / "notes.txt").write_text("the operator's")  # a shared folder: left, said
    res = install(s, "--uninstall", "--purge", "--no-enable")
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(p.name for p in state.iterdir()) == ["notes.txt"]
    assert f"install: left {state}: it holds files rogue-watchdog did not write" in res.stdout
    (state / "notes.txt").unlink()
    _fake_install(s, state)
    res = install(s, "--uninstall", "--purge", "--no-enable")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"install: removed {state}" in res.stdout and not state.exists()

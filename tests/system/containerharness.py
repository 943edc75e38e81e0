"""Real container engines for system tests: Debian's podman (runc) and dockerd, sandboxed.

Podman gets its own storage, run and temporary directories through ``CONTAINERS_CONF``
and ``CONTAINERS_STORAGE_CONF`` (containers.conf(5), containers-storage.conf(5)), the
cgroupfs manager and no network namespace setup. dockerd is started by hand with its own
socket, data root, exec root and PID file, no iptables, no bridge (dockerd(8)); clients
reach it through ``DOCKER_HOST``. Images come from a busybox-static root filesystem
(``podman import`` / ``docker import``), no registry. Teardown removes every container
and image the harness made, stops dockerd by its PID and deletes the sandbox, and
removes ``/var/lib/containers`` (podman's blob-info cache) when the test created it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import need_program, need_root

IMAGE = "localhost/trainer:1"
BLOB_CACHE_ROOT = "/var/lib/containers"
# PID 1 of the container: exits on SIGTERM (a bare sleep as PID 1 would ignore it).
PAYLOAD = ("/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done")


def busybox_rootfs(dest: Path) -> Path:
    """A tarball of a root filesystem holding /bin/busybox and its sh/sleep links."""
    busybox = shutil.which("busybox")
    assert busybox is not None
    tar = dest / "rootfs.tar"
    with tarfile.open(tar, "w") as tf:
        info = tarfile.TarInfo("bin")
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tf.addfile(info)
        tf.add(os.path.realpath(busybox), "bin/busybox")
        for name in ("sh", "sleep"):
            link = tarfile.TarInfo(f"bin/{name}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tf.addfile(link)
    return tar


class Engine:
    """One engine's CLI with the sandbox environment.

    Attributes:
        name: ``podman`` or ``docker``.
        env: Environment for the CLI (also set in this process for the resolver).
    """

    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.env = env

    def cli(self, *argv: str, check: bool = True, timeout: float = 60) -> str:
        """Run ``ENGINE ARGV`` and return stdout."""
        done = subprocess.run(
            [self.name, *argv],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{self.name} {' '.join(argv)}: {done.stderr.strip()}")
        return done.stdout.strip()

    def run(self, name: str, *options: str) -> str:
        """Start a detached container of :data:`IMAGE` running :data:`PAYLOAD`."""
        net = ("--network", "none")
        return self.cli("run", "-d", *net, "--name", name, *options, IMAGE, *PAYLOAD)

    def pid(self, cid: str) -> int:
        """Host PID of the container's init."""
        return int(self.cli("inspect", "--format", "{{.State.Pid}}", cid))

    def cleanup(self) -> None:
        """Remove every container and image of this sandbox; never raises."""
        with contextlib.suppress(Exception):
            ids = self.cli("ps", "-aq", check=False).split()
            if ids:
                self.cli("rm", "-f", *ids, check=False)
            self.cli("rmi", "-f", IMAGE, check=False)


@contextlib.contextmanager
def podman_engine(sandbox: Path, rootfs: Path) -> Iterator[Engine]:
    """Podman with storage, run and temporary directories in ``sandbox``."""
    for sub in ("root", "runroot", "tmp"):
        (sandbox / sub).mkdir()
    conf = sandbox / "containers.conf"
    conf.write_text(
        "[containers]\n"
        'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
        'netns = "none"\n'
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
        f'tmp_dir = "{sandbox}/tmp"\n'
    )
    storage = sandbox / "storage.conf"
    storage.write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{sandbox}/root"\n'
        f'runroot = "{sandbox}/runroot"\n'
    )
    env = dict(os.environ, CONTAINERS_CONF=str(conf), CONTAINERS_STORAGE_CONF=str(storage))
    engine = Engine("podman", env)
    # podman 4.3 as root keeps its blob-info cache in /var/lib/containers/cache whatever
    # the storage paths say: remove what the import created there unless it was there.
    had_cache = os.path.lexists(BLOB_CACHE_ROOT)
    try:
        engine.cli("import", str(rootfs), IMAGE)
        yield engine
    finally:
        engine.cleanup()
        if not had_cache:
            shutil.rmtree(BLOB_CACHE_ROOT, ignore_errors=True)


@contextlib.contextmanager
def docker_engine(sandbox: Path, rootfs: Path) -> Iterator[Engine]:
    """dockerd with its own socket, data and exec roots; no host network changes."""
    exec_root = Path(tempfile.mkdtemp(prefix="rw-docker-", dir="/run"))
    sock = sandbox / "docker.sock"
    log = open(sandbox / "dockerd.log", "wb")  # noqa: SIM115 - closed below
    daemon = subprocess.Popen(
        [
            "dockerd",
            "-H",
            f"unix://{sock}",
            "--data-root",
            str(sandbox / "data"),
            "--exec-root",
            str(exec_root),
            "--pidfile",
            str(sandbox / "dockerd.pid"),
            "--iptables=false",
            "--ip-forward=false",
            "--ip-masq=false",
            "--bridge=none",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    env = dict(os.environ, DOCKER_HOST=f"unix://{sock}")
    engine = Engine("docker", env)
    try:
        deadline = time.monotonic() + 30
        while engine.cli("version", check=False, timeout=10) == "" or not sock.exists():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dockerd did not start; see {sandbox}/dockerd.log")
            time.sleep(0.2)
        engine.cli("import", str(rootfs), IMAGE)
        yield engine
    finally:
        engine.cleanup()
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait(timeout=5)
        shutil.rmtree(exec_root, ignore_errors=True)


@pytest.fixture
def container_sandbox() -> Iterator[tuple[Path, Path]]:
    """A sandbox directory and a busybox rootfs tarball in it."""
    need_root()
    need_program("busybox")
    sandbox = Path(tempfile.mkdtemp(prefix="rw-ctr-", dir="/tmp"))
    try:
        yield sandbox, busybox_rootfs(sandbox)
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)

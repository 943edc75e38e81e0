"""The open gate's pieces that need no kernel: the opener's flags, and a host without
fanotify (the daemon says so and keeps the after-the-fact gate)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from rogue_watchdog.config import parse_config
from rogue_watchdog.state import StateDB
from rogue_watchdog.weights.fanotify import Fanotify, FanotifyUnavailable
from rogue_watchdog.weights.opengate import OpenGate, opener_writes
from rogue_watchdog.weights.shipwatch import ShipGateSource, make_open_gate
from rogue_watchdog.weights.verifyworker import VerifyWorker, verify_one

from .test_shipwatch import nan_model


@pytest.mark.parametrize(
    ("machine", "syscall", "writes"),
    [
        ("x86_64", "257 0xffffff9c 0x7ffd1 0x0 0x0 0x0 0x0 0x7ffd 0x7f", False),
        ("x86_64", "257 0xffffff9c 0x7ffd1 0x80000 0x0 0x0 0x0 0x7ffd 0x7f", False),
        ("x86_64", "257 0xffffff9c 0x7ffd1 0x201 0x1b6 0x0 0x0 0x7ffd 0x7f", True),  # cp over
        ("x86_64", "257 0xffffff9c 0x7ffd1 0xc1 0x1a4 0x0 0x0 0x7ffd 0x7f", True),  # create
        ("x86_64", "2 0x7ffd1 0x2 0x0 0x0 0x0 0x0 0x7ffd 0x7f", True),  # open O_RDWR
        ("x86_64", "85 0x7ffd1 0x1a4 0x0 0x0 0x0 0x0 0x7ffd 0x7f", True),  # creat
        ("x86_64", "0 0x3 0x7ffd1 0x1000 0x0 0x0 0x0 0x7ffd 0x7f", False),  # read: judged
        ("x86_64", "running", False),
        ("aarch64", "56 0xffffffffffffff9c 0x7ffd1 0x241 0x1b6 0x0 0x0 0x7ffd 0x7f", True),
    ],
)
def test_opener_flags_from_proc_syscall(
    tmp_path: Path, machine: str, syscall: str, writes: bool
) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "syscall").write_text(syscall + "\n")
    assert opener_writes(42, tmp_path, machine) is writes
    assert opener_writes(43, tmp_path, machine) is False  # gone: judged as a reader


def _no_fanotify() -> Fanotify:
    raise FanotifyUnavailable(errno.EPERM, "fanotify_init: Operation not permitted")


def test_without_fanotify_the_daemon_says_so_and_keeps_the_after_the_fact_gate(
    tmp_path: Path,
) -> None:
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    nan_model(deploy / "model.safetensors")
    cfg = parse_config(
        f"ship_gates:\n  - name: prod\n    deploy_dir: {deploy}\n    enforce: audit\n"
        "    settle_s: 0\n",  # ticks 1 s apart: two polls are what this test needs
        "t.yaml",
    )
    made: list[OpenGate] = []

    def factory(gate: object, on: object) -> OpenGate:
        g = make_open_gate(cfg.ship_gates[0], lambda d: None, kernel=_no_fanotify)
        made.append(g)
        return g

    db = StateDB(str(tmp_path / "state"))
    worker = VerifyWorker(verify_one)
    src = ShipGateSource(cfg.ship_gates[0], db, worker, open_gate=factory, wait_s=60.0)
    try:
        src.findings(1000.0)
        worker.wait(60)
        kinds = sorted(f.kind for f in src.findings(1001.0))
        assert kinds == ["poisoned-weights", "ship-gate-degraded"]
        assert src.enforcement() == (
            "not enforcing",
            "fanotify unavailable: fanotify_init: Operation not permitted",
        )
        [deg] = [f for f in src.findings(1002.0) if f.kind == "ship-gate-degraded"]
        assert deg.message == (
            "ship gate prod: not enforcing at open (fanotify unavailable: fanotify_init:"
            " Operation not permitted); the after-the-fact gate still runs"
        )
        assert len(made) == 1  # started once, not retried each tick
    finally:
        src.close()
        worker.stop()
        db.close()


def test_enforce_off_builds_no_listener(tmp_path: Path) -> None:
    cfg = parse_config(f"ship_gates:\n  - name: p\n    deploy_dir: {tmp_path}\n", "t.yaml")
    db = StateDB(str(tmp_path / "state"))
    worker = VerifyWorker(verify_one)

    def never(gate: object, on: object) -> OpenGate:
        raise AssertionError("no open gate with enforce: off")

    src = ShipGateSource(cfg.ship_gates[0], db, worker, open_gate=never)
    try:
        assert src.findings(1.0) == []
        assert src.enforcement() == (
            "not enforcing",
            "enforce: off (the after-the-fact gate only)",
        )
    finally:
        worker.stop()
        db.close()


def test_verify_through_a_descriptor_takes_the_format_from_the_listed_name(
    tmp_path: Path,
) -> None:
    # The gate verifies /proc/self/fd/N (no suffix): the listed name's suffix decides the
    # format, so a polyglot cannot pass as whatever its content sniffs as.
    import os

    from rogue_watchdog.weights.api import verify_file
    from rogue_watchdog.weights.scan import ScanContext

    p = nan_model(tmp_path / "model.safetensors")
    fd = os.open(p, os.O_RDONLY)
    ctx = ScanContext.default(None, mapped=False)
    try:
        via = Path(f"/proc/self/fd/{fd}")
        as_st = verify_file(via, ctx, name=p)
        assert (as_st.format, as_st.status.value) == ("safetensors", "non-finite")
        as_pt = verify_file(via, ctx, name=tmp_path / "model.pt")
        assert as_pt.error == (
            "content is safetensors but the suffix .pt makes loaders read it as torch-zip:"
            " not verified"
        )
    finally:
        os.close(fd)
        ctx.close()

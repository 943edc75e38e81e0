"""Tell Slurm about a node whose GPU is taken: drain it, and resume only our own drain.

``slurm.drain_on: [rogue, excess]`` makes the daemon run
``scontrol update nodename=NODE state=drain reason="rogue-watchdog: ..."`` while a job
with one of those verdicts runs, so the scheduler stops placing jobs there
(scontrol(1) "update NodeName"), and ``state=resume`` once no such job is left — but only
when the node is still drained with the very reason this daemon set. A drain by an admin
(any other reason, or ours replaced by theirs) is never undone. What this daemon drained
is remembered in ``STATE_DIR/slurm-drain.json`` so a restart does not forget it.

The node's state is read with ``sinfo -h -N -n NODE -o '%T|%E'`` (sinfo(1): ``%T``
extended state such as ``idle``, ``drained``, ``draining``, ``mixed+drain``; ``%E`` the
reason text without the ``[user@time]`` suffix scontrol adds).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..command import CommandResult, CommandRunner, run
from ..config.slurm import SlurmNodeSettings
from ..hosttext import clip, code_span
from ..model import UNSANCTIONED_VERDICTS, Finding, Job

if TYPE_CHECKING:
    from ..model import ScanResult
    from ..plugins import TrackResult

REASON_PREFIX = "rogue-watchdog: "
MAX_REASON_CHARS = 200
DRAIN_VERDICTS = UNSANCTIONED_VERDICTS


def clean_reason(text: str) -> str:
    """A drain reason safe for Slurm and for people: printable ASCII, one line, bounded.

    Host text (user names, origins) is hostile: control characters and non-ASCII are
    replaced with ``?`` so the reason cannot forge lines in ``sinfo -R`` or logs.
    """
    safe = "".join(c if 32 <= ord(c) < 127 else "?" for c in text)
    if not safe.startswith(REASON_PREFIX):
        safe = REASON_PREFIX + safe
    return safe[:MAX_REASON_CHARS]


@dataclass(frozen=True)
class NodeState:
    """What sinfo said about this node.

    Attributes:
        state: Extended state, e.g. ``idle``, ``drained``, ``mixed+drain``.
        reason: Reason text (``none`` in sinfo is given as None).
    """

    state: str
    reason: str | None

    @property
    def drained(self) -> bool:
        """True for ``drain``, ``drained``, ``draining`` and ``+drain`` states."""
        return "drain" in self.state


def node_state(node: str, run_cmd: CommandRunner, timeout_s: float) -> NodeState | str:
    """Ask sinfo for the node's state and reason.

    Args:
        node: The Slurm node name.
        run_cmd: Runs ``sinfo`` (:func:`watchdog.command.run`, or a test's double).
        timeout_s: Seconds sinfo may take (``slurm.command_timeout_s``).

    Returns:
        The state, or a sentence saying why it could not be read (sinfo missing, timed
        out, failed, or printed no ``STATE|REASON`` line).
    """
    res = run_cmd(["sinfo", "-h", "-N", "-n", node, "-o", "%T|%E"], timeout_s)
    out = res.stdout
    line = out.splitlines()[0] if out.strip() else ""
    if res.returncode != 0 or "|" not in line:
        why = _why(res) or f"sinfo printed {_said(out)}"
        return f"cannot read the state of Slurm node {node}: {why}"
    state, reason = line.split("|", 1)
    reason = reason.strip()
    # sinfo(1) NODE STATE CODES: a trailing * (not responding), ~ (powered off), # ... is
    # a flag on the state, not part of it.
    return NodeState(
        state.strip().lower().rstrip("*~#!%$@^-"), None if reason in ("", "none") else reason
    )


def drain(node: str, reason: str, run_cmd: CommandRunner, timeout_s: float) -> str | None:
    """``scontrol update nodename=NODE state=drain reason=REASON``.

    Args:
        node: The Slurm node name.
        reason: The drain reason; cleaned by :func:`clean_reason`.
        run_cmd: Runs ``scontrol``.
        timeout_s: Seconds scontrol may take.

    Returns:
        None on success, else why not (scontrol's stderr, or its exit status).
    """
    argv = ["scontrol", "update", f"nodename={node}", "state=drain"]
    return _failure(run_cmd([*argv, f"reason={clean_reason(reason)}"], timeout_s))


def resume(node: str, run_cmd: CommandRunner, timeout_s: float) -> str | None:
    """``scontrol update nodename=NODE state=resume``; arguments and result as for
    :func:`drain`."""
    return _failure(run_cmd(["scontrol", "update", f"nodename={node}", "state=resume"], timeout_s))


def _failure(res: CommandResult) -> str | None:
    if res.returncode == 0:
        return None
    return _why(res) or f"scontrol exited {res.returncode}"


def _why(res: CommandResult) -> str:
    # Why a command did not run is ours (``sinfo: timed out after 2 s``); what it wrote
    # is Slurm's, quoted: its errors echo node, job and user names.
    if not res.ran:
        return res.reason or ""
    return _said(res.stderr) if res.stderr.strip() else ""


def _said(text: str) -> str:
    return code_span(clip(" ".join(text.split()), 200))


def drain_reason(jobs: Sequence[Job]) -> str:
    """The drain reason naming the first offending job (PID, user, origin kind)."""
    job = jobs[0]
    more = f" and {len(jobs) - 1} more" if len(jobs) > 1 else ""
    return clean_reason(
        f"{REASON_PREFIX}{job.verdict} training job PID {job.root_pid} user {job.user} "
        f"({job.origin.kind}){more} holds the GPU"
    )


class SlurmDrainer:
    """Daemon enforcer: drain this node while a rogue/excess job runs; resume our drain.

    Args:
        settings: The ``slurm:`` section.
        state_dir: Where ``slurm-drain.json`` records the drain this daemon set.
        run: Runs Slurm commands (:func:`watchdog.command.run`; tests pass a double, or
            the real one against the Slurm harness), each limited to
            ``settings.command_timeout_s``.
    """

    name = "slurm-drain"

    def __init__(
        self, settings: SlurmNodeSettings, state_dir: str, run: CommandRunner = run
    ) -> None:
        self.settings = settings
        self.marker = os.path.join(state_dir, "slurm-drain.json")
        self.run = run

    def _ours(self) -> dict[str, Any] | None:
        try:
            with open(self.marker, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and isinstance(data.get("reason"), str) else None

    def _remember(self, node: str, reason: str | None) -> None:
        if reason is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.marker)
            return
        os.makedirs(os.path.dirname(self.marker) or ".", exist_ok=True)
        tmp = self.marker + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"node": node, "reason": reason}, fh)
        os.replace(tmp, self.marker)

    def act(self, now: float, result: ScanResult, track: TrackResult) -> list[Finding]:
        """Drain or resume according to this scan's jobs; findings say what was done."""
        return self.apply(result.jobs)

    def apply(self, jobs: Sequence[Job]) -> list[Finding]:
        """Drain while a job with a ``drain_on`` verdict runs (one that may train: not a
        notebook, server, system program or probe); else resume our own drain.

        Returns:
            ``slurm-node-drained`` (info) while our drain holds, ``slurm-drain-failed``
            (warning) when Slurm could not be asked or refused.
        """
        node = self.settings.node
        # A notebook, server or probe outside the allowlist is reported, never a reason
        # to take the node from Slurm.
        offending = [j for j in jobs if j.verdict in self.settings.drain_on and j.may_train]
        ours = self._ours()
        if not offending and ours is None:
            return []
        timeout_s = self.settings.command_timeout_s
        st = node_state(node, self.run, timeout_s)
        if isinstance(st, str):
            return [Finding("slurm-drain-failed", "warning", st, details={"node": node})]
        if offending:
            if st.drained and (ours is None or st.reason != ours["reason"]):
                # Someone else's drain: leave it, and never claim it.
                self._remember(node, None)
                return []
            reason = drain_reason(offending)
            if st.drained and ours is not None and ours["reason"] == reason:
                return [self._held(node, reason)]
            # Not drained yet, or our drain names a job that is gone: (re)drain with the
            # reason naming what holds the GPU now.
            err = drain(node, reason, self.run, timeout_s)
            if err is not None:
                return [
                    Finding(
                        "slurm-drain-failed",
                        "warning",
                        f"could not drain Slurm node {node}: {err}",
                        details={"node": node},
                    )
                ]
            self._remember(node, reason)
            return [self._held(node, reason)]
        assert ours is not None
        if not st.drained or st.reason != ours["reason"]:
            # Resumed or re-drained by someone else meanwhile: theirs now.
            self._remember(node, None)
            return []
        err = resume(node, self.run, timeout_s)
        if err is not None:
            return [
                Finding(
                    "slurm-drain-failed",
                    "warning",
                    f"could not resume Slurm node {node} after the GPU was freed: {err}",
                    details={"node": node},
                )
            ]
        self._remember(node, None)
        return []

    @staticmethod
    def _held(node: str, reason: str) -> Finding:
        return Finding(
            "slurm-node-drained",
            "info",
            f"Slurm node {node} drained by rogue-watchdog: {reason}",
            details={"node": node, "reason": reason, "fingerprint": node},
        )


def build_slurm_enforcers(settings: SlurmNodeSettings, state_dir: str) -> list[SlurmDrainer]:
    """The drainer when ``slurm.drain_on`` is set, else nothing."""
    return [SlurmDrainer(settings, state_dir)] if settings.drain_on else []

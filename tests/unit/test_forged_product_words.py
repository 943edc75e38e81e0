"""Host text cannot pass for the product's own words (hostile helper wt9, session j).

1. The alert spool's ``--config`` rewrite (:func:`rogue_watchdog.daemon.alerts.adopt.adopted`)
   took any code span starting ``rogue-watchdog `` for a command of the product's. A rogue
   whose command line is ``rogue-watchdog status --config /tmp/evil.yaml`` is quoted that
   way in its finding; before (main e8eba73), ``adopted`` rewrote its command line to name
   this daemon's configuration and added a note that the alert was "written under the
   configuration /tmp/evil.yaml". The product now sets its own commands as code with
   :func:`~rogue_watchdog.hosttext.own_code` (two backticks each side), which leaves them
   outside every span: whose words they are follows from where they stand.
"""

from __future__ import annotations

from rogue_watchdog.daemon.alerts.adopt import adopted
from rogue_watchdog.daemon.alerts.alert import Alert, Outgoing
from rogue_watchdog.daemon.loop import restart_hint
from rogue_watchdog.hosttext import (
    code_span,
    find_outside_code,
    map_outside_code,
    outside_code,
    own_code,
)
from rogue_watchdog.model import Job, Origin
from rogue_watchdog.policy.findings import job_findings
from rogue_watchdog.records import ActionRecord
from rogue_watchdog.state.actions import SourceUndo

OURS = "/srv/ours/config.yaml"
OTHER = "/srv/other/config.yaml"
EVIL = "/tmp/evil.yaml"
FORGED = ("rogue-watchdog", "status", "--config", EVIL)


def _rogue_message(argv: tuple[str, ...]) -> str:
    """The message the product writes for a rogue job running ``argv``."""
    job = Job(
        root_pid=48213, pids=[48213], user="bob", cmdline=argv, start_ticks=1,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[], origin=Origin(), verdict="rogue",
        reason="not sanctioned", gpus=[],
    )  # fmt: skip
    (f,) = job_findings([job])
    return f.message


def _out(message: str, config: str | None) -> Outgoing:
    doc = {"schema_version": 1, "event": "open", "host": "h", "time": None,
           "finding": {"id": 1, "message": message}}  # fmt: skip
    if config is not None:
        doc["config"] = config
    return Outgoing(Alert.from_json(doc), "log", 1, 1.0)


def test_own_code_sits_outside_every_span() -> None:
    text = f"a {code_span('x; y')} b {own_code('rogue-watchdog run --config /a; b')} c"
    assert text == "a `x; y` b ``rogue-watchdog run --config /a; b`` c"
    assert find_outside_code(text, "; ") == text.index("/a; b") + 2
    assert outside_code(text) == "a `` b ``rogue-watchdog run --config /a; b`` c"
    assert map_outside_code(text, str.upper).count("ROGUE-WATCHDOG RUN") == 1
    # A backtick in the product's words cannot shift the spans after it.
    assert own_code("rogue-watchdog run --config '/a`b'") == (
        "``rogue-watchdog run --config '/a\\x60b'``"
    )


def test_a_command_line_spelling_a_product_command_is_never_rewritten() -> None:
    message = _rogue_message(FORGED)
    assert message == (
        "rogue training job PID 48213, user bob, "
        f"`rogue-watchdog status --config {EVIL}`, from unknown origin"
    )
    # Spooled by this very daemon: sent as written (before: rewritten to name OURS, with a
    # note that it was written under /tmp/evil.yaml).
    assert adopted(_out(message, OURS), OURS).alert.finding.message == message
    assert adopted(_out(message, None), OURS).alert.finding.message == message
    # Spooled by another install: the note names that one only, the quote is kept.
    got = adopted(_out(message, OTHER), OURS).alert.finding.message
    assert got == (
        f"{message}; [written under the configuration {OTHER} (another install sharing "
        "this state directory, or this daemon before a reload): the commands in it name "
        f"this daemon's configuration ({OURS}), which reads the same state database]"
    )


def test_the_products_own_commands_set_as_code_are_still_renamed() -> None:
    """The commands the product sets as code in finding messages (a reload's restart hint,
    an operator's undo) still name the sending daemon's configuration."""
    undo = ActionRecord(9, 0.0, "root", "undo", "t", None, None, False, "ok", {}, None, None)
    disable = ActionRecord(4, 0.0, "root", "disable-source", "t", 3, None, False, "ok", {},
                           None, None)  # fmt: skip
    message = (
        f"{_rogue_message(FORGED)}; {SourceUndo(undo, disable).note(f' --config {OTHER}')}"
        f"; restart the daemon ({restart_hint(OTHER)})"
    )
    assert f"by ``rogue-watchdog undo --config {OTHER} 4`` (action 9)" in message
    assert f"start ``rogue-watchdog run --config {OTHER}`` again" in message
    got = adopted(_out(message, OTHER), OURS).alert.finding.message
    assert f"by ``rogue-watchdog undo --config {OURS} 4`` (action 9)" in got
    assert f"start ``rogue-watchdog run --config {OURS}`` again" in got
    assert f"`rogue-watchdog status --config {EVIL}`" in got  # host text as it was
    assert f"[written under the configuration {OTHER} (" in got
    assert EVIL not in got.split("; [")[1]

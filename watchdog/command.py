"""The one way to run an external command, and the one record of what it returned.

Readers (``lineage``: ``systemctl show``, ``squeue``; ``queue``: ``squeue``), actors
(``actions.effects``: ``systemctl mask``, ``crontab -``; ``actions.slurmnode``:
``scontrol update``; ``queue.actions``: ``scontrol hold``) and the live view (``top``)
all run commands through :func:`run` and get a :class:`CommandResult`. Whoever takes a
runner takes a :data:`CommandRunner`, so one recording double, :class:`RecordingRunner`,
answers for every one of them in tests.

Failure convention (the one a shell uses, bash(1) "EXIT STATUS"): a program that cannot
be started (missing, not executable) gives returncode 127, one that outlives its time
limit is killed and gives 124 (as timeout(1) reports it); both carry the reason in
``stderr`` and in :attr:`CommandResult.reason`, so a caller that only needs "did it
succeed" reads :attr:`CommandResult.ok`, and one that must tell "Slurm said no" from
"Slurm could not be asked" reads :attr:`CommandResult.ran`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

# Exit statuses for a command that did not run to its end (bash(1), timeout(1)).
NOT_RUNNABLE = 127
TIMED_OUT = 124


@dataclass(frozen=True)
class CommandResult:
    """What a command returned: its exit status and its output decoded as text.

    Attributes:
        returncode: The exit status (``subprocess.CompletedProcess.returncode``; a
            negative number for a program killed by a signal); :data:`NOT_RUNNABLE`
            (127) for a program that could not be started and :data:`TIMED_OUT` (124)
            for one that was killed at its time limit, as a shell would report them.
        stdout: Standard output (UTF-8, undecodable bytes replaced).
        stderr: Standard error, likewise; the reason when the program did not run.
        reason: Why the program did not run to its end (``"squeue: No such file or
            directory"``, ``"sinfo: timed out after 10 s"``); None when it ran and exited
            by itself, whatever its status.
    """

    returncode: int
    stdout: str
    stderr: str
    reason: str | None = None

    @property
    def ran(self) -> bool:
        """True when the program started and exited by itself (any exit status)."""
        return self.reason is None

    @property
    def ok(self) -> bool:
        """True when the program ran and exited 0."""
        return self.reason is None and self.returncode == 0

    @classmethod
    def not_runnable(cls, program: str, why: str = "No such file or directory") -> CommandResult:
        """The result for a program that could not be started (127, ``why`` in stderr).

        Args:
            program: ``argv[0]``.
            why: The operating system's words (``strerror``), missing file by default.
        """
        reason = f"{program}: {why}"
        return cls(NOT_RUNNABLE, "", reason, reason)

    @classmethod
    def timed_out(cls, program: str, timeout_s: float) -> CommandResult:
        """The result for a program killed at its time limit (124, the reason in stderr).

        Args:
            program: ``argv[0]``.
            timeout_s: The limit it ran past, in seconds.
        """
        reason = f"{program}: timed out after {timeout_s:g} s"
        return cls(TIMED_OUT, "", reason, reason)


# Runs ``argv`` (never through a shell) with a limit of ``timeout_s`` seconds; it never
# raises for a failing, missing or hung program (see the module's failure convention).
CommandRunner = Callable[[Sequence[str], float], CommandResult]


def run(argv: Sequence[str], timeout_s: float, input_bytes: bytes | None = None) -> CommandResult:
    """Run a command and collect what it printed; the :data:`CommandRunner` in use.

    The program is started directly (``subprocess.run`` with a list: never a shell, so
    host text in arguments is never interpreted). Its stdin is ``/dev/null`` unless
    ``input_bytes`` is given, so it can neither wait for a terminal nor read the
    caller's. A program still running at ``timeout_s`` is killed (SIGKILL, by
    ``subprocess.run``) and reported as :data:`TIMED_OUT`.

    Args:
        argv: Program and arguments; the program is looked up on ``PATH`` when it has no
            slash.
        timeout_s: Wall-clock limit in seconds.
        input_bytes: Written to the program's stdin, which is then closed; None gives
            it ``/dev/null``.

    Returns:
        Its result; 127 (:meth:`CommandResult.not_runnable`) when it could not be
        started (missing, not executable, an argument with a NUL byte), 124
        (:meth:`CommandResult.timed_out`) when it ran past ``timeout_s``.

    Raises:
        ValueError: ``argv`` is empty (a caller's mistake, not the host's).
    """
    args = list(argv)
    if not args:
        raise ValueError("run: empty argv")
    try:
        done = subprocess.run(
            args,
            input=input_bytes,
            stdin=None if input_bytes is not None else subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return CommandResult.timed_out(args[0], timeout_s)
    except OSError as exc:
        return CommandResult.not_runnable(args[0], exc.strerror or str(exc))
    except ValueError as exc:  # "embedded null byte": exec(2) cannot take the argument
        return CommandResult.not_runnable(args[0], str(exc))
    return CommandResult(
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


@dataclass
class RecordingRunner:
    """A :data:`CommandRunner` for tests: answers from a table and records every call.

    It stands in for :func:`run` wherever a runner is taken (``ResolveContext.run_cmd``,
    ``SlurmQueue``, ``QueueEnforcer``, ``SlurmDrainer``), and
    :class:`watchdog.actions.effects.RecordingEffects` answers its commands through it.

    Attributes:
        answers: Replies by argv tuple.
        answer: Optional function computing a reply from an argv; it wins over
            ``answers``, and None from it falls through to them.
        default: The reply to any other argv; None: the program is missing
            (:meth:`CommandResult.not_runnable`, as on a host without it).
        calls: The argv of every call, in order.
    """

    answers: Mapping[tuple[str, ...], CommandResult] = field(default_factory=dict)
    answer: Callable[[tuple[str, ...]], CommandResult | None] | None = None
    default: CommandResult | None = None
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def __call__(
        self, argv: Sequence[str], timeout_s: float, input_bytes: bytes | None = None
    ) -> CommandResult:
        """Record ``argv`` and reply as :meth:`reply` does (``timeout_s`` is not used)."""
        self.calls.append(tuple(argv))
        return self.reply(tuple(argv))

    def reply(self, argv: tuple[str, ...]) -> CommandResult:
        """The canned reply to ``argv``, without recording it."""
        if self.answer is not None and (res := self.answer(argv)) is not None:
            return res
        if argv in self.answers:
            return self.answers[argv]
        if self.default is not None:
            return self.default
        return CommandResult.not_runnable(argv[0] if argv else "")

"""What the guard decided for a job: its advice, the services it would stop with it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..spelling import optional
from .origin import Restarts

#: Between a job finding's "its crontab entry was disabled" and the ``terminate`` that
#: stops the run left: the part a finding drops once that run is gone.
RUN_ONLY = ": only the run is left; to stop it: "

#: How many of the copies a job's terminate takes in :class:`Copies` names; the rest
#: are counted (``and 2 more``): the line stays short with a dozen workers.
COPIES_NAMED = 3


@dataclass(frozen=True)
class Copies:
    """The other jobs of the scan that a job's ``terminate`` stops with it: the copies
    it takes in (processes of its program and owner in a process group or session whose
    leader is gone or the job's: :class:`~watchdog.policy.copies.ScopeCopies`), which
    the scan lists as jobs of their own (their command lines differ: ``train.py 3601``
    beside ``train.py 3600``). Terminating one job stopped the others unsaid: every
    text that says what ``terminate`` does names them (the guard decides them).

    Attributes:
        pids: Their root PIDs, in scan order (the JSON ``advice.copies``).
        named: The first :data:`COPIES_NAMED` in words, their command lines quoted as
            host text: ``PID 12135 `python3 train.py 3601```.
        places: Where the terminate takes them from, one per process group or session:
            ``process group 12130 whose leader is gone``.
    """

    pids: tuple[int, ...]
    named: tuple[str, ...]
    places: tuple[str, ...]

    def text(self) -> str:
        """``terminate also stops 3 other jobs the scan lists separately: PID 12135
        `python3 train.py 3601`, … (the same program and owner, in process group 12130
        whose leader is gone: they are taken as this run's copies)``."""
        n = len(self.pids)
        more = n - len(self.named)
        listed = ", ".join(self.named) + (f", and {more} more" if more > 0 else "")
        jobs, taken = (
            ("1 other job", "it is taken as this run's copy")
            if n == 1
            else (f"{n} other jobs", "they are taken as this run's copies")
        )
        return (
            f"terminate also stops {jobs} the scan lists separately: {listed} (the same "
            f"program and owner, in {' and '.join(self.places)}: {taken})"
        )


@dataclass(frozen=True)
class Collateral:
    """A service that stopping a job's source would stop with it: the source (a unit, a
    container, a supervisor program) also runs work that is not the job's, such as a
    hub whose own process launches the trainer. It is never stopped automatically, never
    in a ``stop:`` line without being named, and by hand only with ``--stop-service
    NAME`` (:func:`watchdog.policy.guard.service_collateral` decides it).

    Attributes:
        name: What ``--stop-service`` must name: the unit, container or program.
        arg: ``name`` quoted for a shell.
        what: The source in words (``systemd unit td-hub.service``).
        others: Its processes that are not the job's, ``PID 408 `python3 hub.py```.
        by_hand: The by-hand command that stops the source, service and all.
    """

    name: str
    arg: str
    what: str
    others: tuple[str, ...]
    by_hand: str | None = None

    def text(self) -> str:
        """``systemd unit td-hub.service also runs PID 408 `…`, not part of the job``."""
        return f"{self.what} also runs {', '.join(self.others)}, not part of the job"

    def command(self, target: int | str, cli_args: str = "") -> str:
        """The explicit ``disable-source`` that stops the service too (``cli_args``: as
        :attr:`Advice.cli_args`)."""
        return f"rogue-watchdog disable-source{cli_args} {target} --stop-service {self.arg}"

    def to_json(self) -> dict[str, Any]:
        """``jobs[].advice.collateral`` of the scan JSON."""
        return {"name": self.name, "what": self.what, "others": list(self.others),
                "by_hand": self.by_hand}  # fmt: skip


@dataclass(frozen=True)
class Advice:
    """What a person (or the daemon) may do about one job, decided by the one guard
    (:func:`watchdog.policy.guard.advise`); every text naming a target is made here.

    Attributes:
        refused: Why the job must not be a target at all (sanctioned, protected); then
            nothing else is set.
        stop_pids: What stopping it by hand signals: the job's processes and its
            exclusive wrappers (empty when refused).
        disable: ``disable-source`` may act on its source (a cron line, a system unit
            that no protected source is).
        by_hand: The by-hand command that stops the source (or, for kinds with no
            source, the job), when it targets nothing protected; the JSON
            ``origin.remediation``.
        source_refused: Why its source is never disabled, with what to change instead.
        disables: What ``disable-source`` keeps to put the source back, as the hint says
            it (``backs up the cron.d file /etc/cron.d/x``: :meth:`Origin.disables_text`).
        source_gone: Why the source needs nothing done (its crontab line was
            disabled or removed since the job started).
        stops_job: :attr:`by_hand` stops the job itself (a ``kill`` of its processes:
            shell and orphan origins name no source that would start it again).
        cli_args: What every ``rogue-watchdog`` command the advice prints carries after
            its verb (`` --config /srv/rw.yaml``: the configuration that judged the job,
            when it is not the default file), so the command works as printed.
        collateral: The job's source is a service that also runs other work: stopping
            the source stops it (never unasked; see :class:`Collateral`).
        restarts: What starts the job again once it ends (:class:`Restarts`), or None.
        then_terminate: :attr:`by_hand` leaves the running job (``atrm``): the ``stop:``
            line adds ``terminate`` after it.
        copies: The other jobs of the scan its ``terminate`` stops as its copies
            (:class:`Copies`), or None.
    """

    refused: str | None = None
    stop_pids: tuple[int, ...] = ()
    disable: bool = False
    by_hand: str | None = None
    source_refused: str | None = None
    disables: str | None = None
    source_gone: str | None = None
    stops_job: bool = False
    collateral: Collateral | None = None
    restarts: Restarts | None = None
    then_terminate: bool = False
    cli_args: str = ""
    copies: Copies | None = None

    def _cli(self, verb: str) -> str:
        """``rogue-watchdog VERB`` with :attr:`cli_args`."""
        return f"rogue-watchdog {verb}{self.cli_args}"

    def to_json(self, pid: int) -> dict[str, Any]:
        """``jobs[].advice`` of the scan JSON (docs/scan-json-schema.md): what may be done
        about the job rooted at ``pid``, each field decided by the guard."""
        return {
            "refused": self.refused,
            "stop": self.stop_line(pid),
            "stop_pids": list(self.stop_pids),
            "disable": self.disable,
            "source_refused": self.source_refused,
            "source_gone": self.source_gone,
            "collateral": self.collateral.to_json() if self.collateral else None,
            "restarts": self.restarts.to_json() if self.restarts else None,
            "copies": list(self.copies.pids) if self.copies else [],
        }

    def stop_source(self, target: int | str) -> str | None:
        """What to run to stop the source, best way first, or None (see :attr:`disable`,
        :attr:`by_hand`). ``target`` names the job to the CLI: PID or ``F12``."""
        if self.refused is not None or self.source_refused is not None or self.stops_job:
            return None
        if self.collateral is not None:
            c = self.collateral
            return (
                f"{c.command(target, self.cli_args)} (stops the service {c.name} too: {c.text()})"
            )
        if self.disable:
            text = (
                # The action's id does not exist yet: say where it will be printed.
                f"{self._cli('disable-source')} {target} ({self.disables}; "
                "the undo command it prints, with the action id, restores it)"
            )
            return f"{text}, or by hand: {self.by_hand}" if self.by_hand else text
        return self.by_hand

    def finding_text(self, target: int | str) -> str:
        """The tail of a job finding's message: how to stop the source, or why it is
        not disabled and how to stop this run; empty when nothing may be done."""
        if self.refused is not None:
            return ""
        if self.restarts is not None:
            return f"; {self.restarts.line()}" + self._finding_stop(target)
        return self._finding_stop(target)

    def _finding_stop(self, target: int | str) -> str:
        """:meth:`finding_text` without the ``restarts it`` part."""
        if self.stops_job:
            return f"; to stop it: {self._stop_first(target)}"
        if self.collateral is not None:
            c = self.collateral
            return (
                f"; its source is a service: {c.text()}; it is never stopped unasked; to "
                f"stop this run: {self._cli('terminate')} {target}; to stop the service "
                f"{c.name} as well: {c.command(target, self.cli_args)}"
            )
        stop = self.stop_source(target)
        if stop:
            return f"; to stop the source: {stop}{self._and_the_run(target)}"
        if self.source_gone is not None:
            # The same next step as the scan's ``stop:`` line (:meth:`stop_line`): `status`
            # gave a disabled line's run none (issue 33, fresh user E).
            return f"; {self.source_gone}{RUN_ONLY}{self._cli('terminate')} {target}"
        if self.source_refused is not None:
            return (
                f"; its source is not disabled: {self.source_refused}; to stop this run: "
                f"{self._cli('terminate')} {target}"
            )
        return ""

    def stop_line(self, pid: int) -> str | None:
        """The ``stop:`` line of a scan table row, or None for a job with none: a command
        that pastes as printed, what to know about it after ``  # `` (a shell comment)."""
        if self.refused is not None:
            return None
        if self.source_refused is not None:
            return (
                f"{self._cli('terminate')} {pid}  # --dry-run first to preview; its source "
                f"is not disabled: {self.source_refused}"
            )
        if self.source_gone is not None:
            return f"{self._cli('terminate')} {pid}  # {self.source_gone}: only the run is left"
        if self.collateral is not None:
            c = self.collateral
            return (
                f"{self._cli('terminate')} {pid}  # --dry-run first to preview; stops the run "
                f"only: its source is a service, {c.text()}, never stopped unasked; to stop "
                f"the service {c.name} too: {c.command(pid, self.cli_args)}"
            )
        if self.disable:
            return (
                f"{self._cli('disable-source')} {pid} && {self._cli('terminate')} {pid}"
                "  # --dry-run first to preview"
            )
        if self.stops_job:
            return self._stop_first(pid)
        if self.by_hand and self.then_terminate:
            return (
                f"{self.by_hand} && {self._cli('terminate')} {pid}  # the first stops what is "
                "queued, not the running job"
            )
        if self.by_hand:
            return self.by_hand
        return f"{self._cli('terminate')} {pid}  # its origin is unknown: see explain {pid}"

    def _terminate(self, target: int | str) -> str:
        """``rogue-watchdog terminate T``, and the by-hand ``kill`` beside it."""
        text = f"{self._cli('terminate')} {target}"
        return f"{text}, or by hand: {self.by_hand}" if self.by_hand else text

    def _stop_first(self, target: int | str) -> str:
        """:meth:`_terminate`, after what keeps starting the job when ``terminate`` leaves
        it (a shell loop whose shell also runs something else)."""
        r = self.restarts
        if r is not None and r.after_terminate and r.stops:
            return f"{r.stops}, then {self._terminate(target)}"
        return self._terminate(target)

    def explain_line(self, target: int | str | None) -> str:
        """The ``Remediation:`` line of ``explain``: the command, or why there is none,
        and the other jobs of the scan a ``terminate`` of it stops (:attr:`copies`)."""
        text = self._explain_head(target)
        if self.copies is not None and self.refused is None:
            return f"{text}; {self.copies.text()}"
        return text

    def _explain_head(self, target: int | str | None) -> str:
        """:meth:`explain_line` without the copies."""
        if self.refused is not None:
            return f"none: {self.refused}"
        if self.source_gone is not None:
            text = (
                f"none needed for the source ({self.source_gone}); "
                "the running job must still be stopped"
            )
            return f"{text}: {self._cli('terminate')} {target}" if target is not None else text
        if self.source_refused is not None:
            return f"its source is not disabled: {self.source_refused}" + (
                f"; to stop this run: {self._cli('terminate')} {target}" if target else ""
            )
        if self.collateral is not None:
            c = self.collateral
            text = f"its source is a service: {c.text()}; it is never stopped unasked"
            if target is not None:
                text += (
                    f"; to stop this run: {self._cli('terminate')} {target}; to stop the "
                    f"service {c.name} as well: {c.command(target, self.cli_args)}"
                )
            return text + (f", or by hand: {c.by_hand}" if c.by_hand else "")
        if self.stops_job and self.restarts is not None and self.restarts.after_terminate:
            if target is not None:
                return f"{self.restarts.line()}; to stop it: {self._stop_first(target)}"
            # What stops it is optional (a cron line not found names none): never "None".
            return self.restarts.line() + optional(self.restarts.stops, "; to stop it: {}")
        if self.stops_job and self.restarts is not None and self.restarts.known:
            # A loop that terminate stops with the job (its shell runs nothing else): the
            # loop is its source, stopped by the same command ("none needed for the
            # source" beside "restarts it" read as a contradiction).
            r = self.restarts
            head = r.line() + optional(r.stops, "; {}")
            return (
                f"{head}; to stop both: {self._terminate(target)}" if target is not None else head
            )
        if self.stops_job:
            nothing = (
                "nothing would start it again"
                if self.restarts is None
                else self.restarts.line() + optional(self.restarts.stops, "; {}")
            )
            return (
                f"none needed for the source ({nothing}); "
                + (f"to stop it: {self._terminate(target)}" if target is not None else "")
            ).rstrip("; ")
        stop = self.stop_source(target) if target is not None else self.by_hand
        if stop:
            return stop + (self._and_the_run(target) if target is not None else "")
        return "none known: the origin could not be named"

    def _and_the_run(self, target: int | str) -> str:
        """``; to stop this run: rogue-watchdog terminate T`` when stopping the source
        leaves the running job (:attr:`then_terminate`: ``atrm`` of queued at jobs)."""
        return (
            f"; to stop this run: {self._cli('terminate')} {target}" if self.then_terminate else ""
        )


#: The advice of a job the guard has not judged: nothing may be done about it.
UNDECIDED = Advice(refused="the guard has not judged this job")

"""The origin kinds' records, one class per kind, and :data:`ORIGIN_KINDS`, the typed list
of them in resolver priority order (docs/architecture.md, "Origin kinds")."""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from ..hosttext import clip, code_span, plain_or_code
from ..spelling import optional
from .origin import (
    DISABLE_FIRST,
    HIDDEN,
    UNLESS_EMPTY,
    UNLESS_NONE,
    Origin,
    OriginKind,
    PinKey,
    Restarts,
    bounded_label,
    shown_if,
    shown_with,
    unit_label,
)

# When each systemd Restart= value starts the service again (systemd.service(5)), and
# whether the SIGTERM a terminate sends first is among them (on-success: a clean signal).
_SYSTEMD_WHEN = {
    "always": ("at once", True),
    "on-success": ("at once after a clean exit or SIGTERM", True),
    "on-failure": ("on failure (not after a clean exit or SIGTERM)", False),
    "on-abnormal": ("on a signal other than SIGTERM, or a timeout", False),
    "on-abort": ("on an uncaught signal other than SIGTERM", False),
    "on-watchdog": ("on a watchdog timeout", False),
}
_ENGINES = {"docker": "Docker", "podman": "Podman"}


# supervisord's boolean spellings (supervisor/datatypes.py: boolean() and auto_restart());
# lineage/supervisorconf.py reads the configuration with them.
TRUTHY = ("yes", "true", "on", "1")
FALSY = ("no", "false", "off", "0")


# Entry states of a cron origin whose line no longer starts anything.
NOT_LIVE = ("disabled", "removed", "ignored")


@dataclass(frozen=True)
class CronOrigin(Origin):
    """Started by a crontab line (or a script that line runs).

    Attributes:
        file: The crontab holding the line; None when no line can be named.
        line: 1-based line number in ``file``.
        entry: The line as written.
        user: The user the line runs as (or the job's owner when no line is named).
        schedule: The schedule field, e.g. ``0 2 * * 0`` or ``@reboot``.
        next_run: ISO 8601 time of the next run (``when cron starts`` for ``@reboot``);
            None when the line no longer runs.
        script: The run-parts script the line ran, when it ran a directory.
        launch_script: The script the line runs that daemonised the job.
        also: ``FILE:LINE`` of the other lines that can have started it (identical
            commands): the attribution is not sure.
        confidence: ``high`` or ``medium``: how sure the ``launch_script`` attribution is.
        entry_state: ``disabled``/``removed`` when the line no longer runs, ``ignored``
            when cron no longer reads its file (a mode or owner cron refuses),
            ``unattributed`` when a real cron ran it but no entry can have; None: live.
    """

    kind: ClassVar[OriginKind] = "cron"
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("file", "line", "script")
    DISABLES: ClassVar[str | None] = "the crontab"
    PINS: ClassVar[Mapping[str, PinKey]] = {
        "cron_file": PinKey("cron file", field="file"),
        "cron_line": PinKey("line", "line", needs="cron_file", field="line"),
    }
    file: str | None = None
    line: int | None = None
    entry: str | None = None
    user: str | None = None
    schedule: str | None = None
    next_run: str | None = None
    script: str | None = field(default=None, metadata=UNLESS_NONE)
    launch_script: str | None = field(default=None, metadata=UNLESS_NONE)
    confidence: str | None = field(default=None, metadata=UNLESS_NONE)
    entry_state: str | None = field(default=None, metadata=UNLESS_NONE)
    also: tuple[str, ...] = field(default=(), metadata=UNLESS_EMPTY)

    def alternatives(self) -> tuple[Origin, ...]:
        """The other crontab lines that can have started it (``also``): an identical
        line in another file or at another minute."""
        out: list[Origin] = []
        for where in self.also:
            path, _, line = where.rpartition(":")
            if path and line.isdigit():
                out.append(replace(self, file=path, line=int(line), also=(), entry=None))
        return tuple(out)

    def describe(self) -> str:
        """See :meth:`Origin.describe`; never ``cron None:None``: a missing line says why."""
        if not self.file:
            if self.entry_state == "removed":
                return "cron, entry gone (no crontab line runs this command now)"
            if self.entry_state == "unattributed":
                return "cron, no entry can have started it (wrong user or time)"
            return "cron, entry not found (some crontabs could not be read)"
        text = f"cron {self.file}" + optional(self.line, ":{}")
        if self.schedule:
            text += f" ({self.schedule})"
        if self.script:
            text += f" via {plain_or_code(self.script)}"
        if self.launch_script:
            text += f" via {plain_or_code(self.launch_script)}" + optional(
                self.confidence, " ({} confidence)"
            )
        if self.entry_state in NOT_LIVE:
            text += f", entry since {self.entry_state}"
        return text

    def label(self) -> str:
        """``FILE:LINE`` (see :meth:`Origin.label`)."""
        return bounded_label(f"{self.file}:{self.line}" if self.file else "")

    def next_start(self) -> str | None:
        """See :meth:`Origin.next_start`."""
        return self.next_run

    @property
    def definite(self) -> bool:
        """True when a crontab line is named."""
        return self.file is not None

    def source_gone(self) -> str | None:
        """``its crontab entry was disabled`` (or ``removed``)."""
        if self.entry_state == "ignored":
            return "cron no longer reads its crontab (writable by group or others, or not root's)"
        if self.entry_state in NOT_LIVE:
            return f"its crontab entry was {self.entry_state}"
        return None

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The crontab line (and the run-parts script it runs, when it runs a folder)."""
        if not self.file:
            return ()
        line = (("cron-line", self.file, self.line),)
        return (*line, ("run-parts", self.script)) if self.script else line

    def pin(self) -> dict[str, object] | None:
        """``cron_file`` and ``cron_line``, when a line is named."""
        if self.file is None or self.line is None or self.line < 1:
            return None
        return {"cron_file": self.file, "cron_line": self.line}

    def rule_stem(self) -> str:
        """``cron-FILE-LINE`` (the file's base name)."""
        if not self.file:
            return super().rule_stem()
        return f"cron-{self.file.rsplit('/', 1)[-1]}-{self.line}"

    def names(self) -> frozenset[str]:
        """Also ``FILE`` and ``FILE:LINE``."""
        extra = {self.file, f"{self.file}:{self.line}"} if self.file else set()
        return super().names() | extra

    def source_file(self) -> str | None:
        """The crontab."""
        return self.file or None

    def disables_text(
        self, spool_dirs: Sequence[str] = (), cron_d: str | None = None
    ) -> str | None:
        """See :meth:`Origin.disables_text`: what is kept is the file the line is in,
        named for what it is (a user's crontab, a ``cron.d`` file, ``/etc/crontab``),
        or, for a line that runs a run-parts folder, the script renamed aside (the
        planners of :mod:`watchdog.actions.disable`)."""
        if self.script:
            return f"renames {plain_or_code(self.script)} aside (run-parts skips it)"
        if not self.file:
            return super().disables_text(spool_dirs, cron_d)
        folder = os.path.dirname(os.path.abspath(self.file))
        if folder in {os.path.abspath(d) for d in spool_dirs}:
            owner = plain_or_code(os.path.basename(self.file))
            return f"backs up the user crontab of {owner} (what crontab -l lists for it)"
        if folder == os.path.abspath(cron_d or "/etc/cron.d"):
            return f"backs up the cron.d file {plain_or_code(self.file)}"
        return f"backs up {plain_or_code(self.file)}"

    def source_detail(self) -> str | None:
        """``file F, line N, schedule S``."""
        return (
            f"file {self.file}"
            + optional(self.line, ", line {}")
            + optional(self.schedule, ", schedule {}")
            if self.file
            else None
        )

    def restarts(self) -> Restarts | None:
        """A live crontab line starts it on its schedule (``@reboot``: on boot)."""
        if self.entry_state in NOT_LIVE:
            return None
        if not self.file:
            return Restarts("unknown", "cron (the line that started it was not found)")
        where = "its cron line" + optional(self.schedule, " ({})")
        if self.schedule == "@reboot":
            return Restarts("on boot", where, DISABLE_FIRST)
        # No next run time: a finding's message outlives it (explain gives it, as of its look).
        return Restarts("on schedule", where, DISABLE_FIRST)

    def watched_path(self) -> str | None:
        """The crontab."""
        return self.file or None

    def keeps_first(self, fresh: Origin) -> Origin:
        """``fresh`` with the ``also`` lines this first look found; a line no longer
        identical says why it is still named (an identical line edited after the start,
        to run under ``flock``, a mode cron skips, did not stop being one that can have
        started it, and one that becomes identical later cannot have)."""
        if not isinstance(fresh, CronOrigin) or fresh.also == self.also:
            return fresh
        notes = tuple(
            f"ambiguous: {plain_or_code(where)} had the same command when this process was "
            "first seen "
            "(kept for its lifetime: a later edit of that line does not change what can "
            "have started it)"
            for where in self.also
            if where not in fresh.also
        )
        return replace(fresh, also=self.also, evidence=(*fresh.evidence, *notes))

    def one_at_a_time(self) -> str:
        """``flock -n`` around the line's command (cron starts a run on schedule whether
        or not the last one ended)."""
        return (
            "run the line's command under `flock -n LOCKFILE` so a run never starts while "
            "one is running"
        )

    def disable_handled(self) -> bool:
        """A crontab line that was found."""
        return any(t[0] == "cron-line" and t[2] is not None for t in self.stop_targets())


@dataclass(frozen=True)
class SystemdOrigin(Origin):
    """A systemd unit of the system manager or of a user's manager (``user@UID``).

    Attributes:
        unit: The unit name, e.g. ``train.service``.
        unit_file: Path of its unit file, when found.
        timer: The timer that starts it, when one does.
        timer_schedule: The timer's ``OnCalendar=``/``OnUnitActiveSec=``... joined by ``; ``.
        next_run: ISO 8601 time of the timer's next elapse.
        restart: The unit's ``Restart=`` value.
        user_unit: True for a unit of a user's manager: it is stopped through that
            manager (``systemctl --user -M USER@``), never disabled automatically. Not a
            JSON key of its own: ``user`` and ``uid`` appear exactly for user units.
        user: The user owning the manager (None when the uid has no name).
        uid: That user's uid (None when the cgroup did not say).
        tmux_socket: With the tmux fields: the server socket, when the job runs in a
            tmux session the unit started.
        tmux_session: The tmux session name.
        tmux_session_id: The tmux session id (``$0``).
        in_tmux: True when the tmux fields apply (not a JSON key of its own).
    """

    kind: ClassVar[OriginKind] = "systemd"
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("unit", "user")
    DISABLES: ClassVar[str | None] = "the unit states"
    PINS: ClassVar[Mapping[str, PinKey]] = {
        "systemd_unit": PinKey("systemd unit", "unit", field="unit"),
        "systemd_timer": PinKey("triggered by systemd timer", "timer", field="timer"),
    }
    unit: str | None = None
    unit_file: str | None = None
    timer: str | None = None
    timer_schedule: str | None = None
    next_run: str | None = None
    restart: str | None = None
    user_unit: bool = field(default=False, metadata=HIDDEN)
    user: str | None = field(default=None, metadata=shown_if("user_unit"))
    uid: int | None = field(default=None, metadata=shown_if("user_unit"))
    in_tmux: bool = field(default=False, metadata=HIDDEN)
    tmux_socket: str | None = field(default=None, metadata=shown_if("in_tmux"))
    tmux_session: str | None = field(default=None, metadata=shown_if("in_tmux"))
    tmux_session_id: str | None = field(default=None, metadata=shown_if("in_tmux"))

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        text = f"systemd {'user unit' if self.user_unit else 'unit'} {self.unit}"
        if self.timer:
            text += f" via {self.timer}"
            if self.timer_schedule:
                # A user unit's timer file is its user's text: quoted unless one word.
                text += f" ({plain_or_code(self.timer_schedule)})"
        return text

    def label(self) -> str:
        """The unit, a template's instance as its template (:func:`unit_label`)."""
        return bounded_label(unit_label(self.unit) if self.unit else "")

    def next_start(self) -> str | None:
        """See :meth:`Origin.next_start`."""
        return self.next_run

    @property
    def definite(self) -> bool:
        """True: a unit is named (or its manager is)."""
        return True

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The unit and the timer that starts it, in their manager (system or user)."""
        scope = ("user", self.uid, self.user) if self.user_unit or self.uid is not None else ()
        out: tuple[tuple[object, ...], ...] = ()
        if self.unit:
            out += (("systemd-unit", self.unit, *scope),)
        if self.timer:
            out += (("systemd-unit", self.timer, *scope),)
        return out

    def pin(self) -> dict[str, object] | None:
        """``systemd_unit``, and ``systemd_timer`` when exactly one timer triggers it."""
        if not self.unit:
            return None
        unit: dict[str, object] = {"systemd_unit": self.unit}
        # A unit several timers trigger records the first: pinning it would make the
        # rule hang on which timer systemd lists first, so such a unit is pinned alone.
        several = any(e.startswith("also triggered by") for e in self.evidence)
        return unit | ({"systemd_timer": self.timer} if self.timer and not several else {})

    @property
    def by_hand(self) -> bool:
        """True in a tmux session (a person's, which systemd only hosts)."""
        return self.in_tmux

    def unproposable(self) -> str | None:
        """``started by hand in tmux`` for a tmux session."""
        return "started by hand in tmux" if self.in_tmux else None

    def rule_stem(self) -> str:
        """The unit's name without its type suffix."""
        return self.unit.rsplit(".", 1)[0] if self.unit else super().rule_stem()

    def names(self) -> frozenset[str]:
        """Also the unit's name."""
        return super().names() | ({self.unit} if self.unit else set())

    def restarts(self) -> Restarts | None:
        """``Restart=`` starts the unit's main process again; a timer starts the unit on
        its schedule; a socket or path unit on demand (systemd.service(5), .timer(5));
        ``unknown`` when ``Restart=`` was not read and nothing else is known to start it."""
        if not self.unit:
            return None
        stops = (
            DISABLE_FIRST
            if not self.user_unit
            else optional(self.remediation, "stop it first: {}") or None
        )
        parts: list[str] = []
        when: str | None = None
        again = False
        if self.restart in _SYSTEMD_WHEN:
            when, again = _SYSTEMD_WHEN[self.restart]
            parts.append(f"systemd Restart={self.restart}")
        if self.timer:
            sched = f" ({plain_or_code(self.timer_schedule)})" if self.timer_schedule else ""
            parts.append(f"timer {self.timer}{sched}")
            when = when or "on schedule"
            again = True
        triggers = [
            e.removeprefix("also triggered by ").removesuffix(" (TriggeredBy)")
            for e in self.evidence
            if e.startswith("also triggered by ") and e.endswith("(TriggeredBy)")
        ]
        if triggers:
            parts.append(f"{', '.join(triggers)} (on demand)")
            when = when or "on demand"
            again = True
        if when is None and self.restart is None:
            # Neither systemctl nor a unit file gave Restart= (no bus, a unit file outside
            # the unit dirs, a user unit created at run time): "never" would be a guess,
            # and a terminate would say ok while the unit may start the job again.
            return Restarts(
                "unknown",
                f"systemd unit {self.unit} (its Restart= was not read: neither systemctl "
                "nor its unit file answered)",
                stops,
            )
        if when is None:
            return None
        return Restarts(when, "; ".join(parts), stops, again)

    READ_BACK_KEYS: ClassVar[frozenset[str]] = frozenset({"user_unit"})

    @classmethod
    def _read_back(cls, doc: Mapping[str, object], kw: dict[str, Any]) -> None:
        """``user_unit``: said outright (true, or the unit's name as early records spelled
        it), or implied by the keys to_json writes for a user unit: any doubt is a user
        unit, which disable-source refuses rather than disabling a system unit's name."""
        said = doc.get("user_unit")
        kw["user_unit"] = bool(said) or "uid" in doc or "user" in doc

    def watched_path(self) -> str | None:
        """The unit file."""
        return self.unit_file

    def owner_pin(self, keys: Collection[str]) -> tuple[str | None, str] | None:
        """A user unit is its owner's to name: anyone can write
        ``~/.config/systemd/user/train.service``. Only a rule that also pins that user may
        sanction it by ``systemd_unit``."""
        if "systemd_unit" not in keys or not self.user_unit:
            return None
        return self.user, (
            f"origin is user {code_span(str(self.user))}'s own unit {code_span(str(self.unit))}; "
            "a unit pin matches a user unit only with 'user:' naming its owner"
        )

    def service_name(self) -> str | None:
        """The unit."""
        return self.unit


@dataclass(frozen=True)
class SlurmOrigin(Origin):
    """A Slurm job step.

    Attributes:
        job_id: The numeric job id.
        job_name: The job's name (from Slurm, else from its environment).
        account: The job's account; None unless Slurm itself said.
        user: The job's user.
        partition: The job's partition.
        step: The step (``batch``, ``0``...) when known.
        state: Slurm's job state (``RUNNING``...) when Slurm was asked.
        array_job_id: The job array this job is a task of, as Slurm said (never the
            job's environment); None for a job of no array (and then none of the
            ``array_*`` keys is in the scan JSON).
        array_task_id: Its task id in the array, when Slurm gave one.
        array_pending: True when tasks of the array wait to start (each runs the same
            batch script), False when Slurm listed the whole array and none waits, None
            when that could not be told.
        array_pending_tasks: The waiting task ids as Slurm prints them (``1-9``).
        array_pending_count: How many tasks wait, when that could be counted.
        array_claimed: When Slurm was not asked: the array the job's environment
            (``SLURM_ARRAY_JOB_ID``) says it is a task of. A claim: it names nothing to
            act on, and only makes :meth:`restarts` say it could not tell.
    """

    kind: ClassVar[OriginKind] = "slurm"
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("account", "job_name")
    PINS: ClassVar[Mapping[str, PinKey]] = {
        "slurm_account": PinKey("Slurm account", field="account"),
        "slurm_job_name": PinKey("Slurm job name", field="job_name"),
    }
    job_id: int | None = None
    job_name: str | None = None
    account: str | None = None
    user: str | None = None
    partition: str | None = None
    step: str | None = None
    state: str | None = None
    array_job_id: int | None = field(default=None, metadata=UNLESS_NONE)
    array_task_id: int | None = field(default=None, metadata=shown_with("array_job_id"))
    array_pending: bool | None = field(default=None, metadata=shown_with("array_job_id"))
    array_pending_tasks: str | None = field(default=None, metadata=shown_with("array_job_id"))
    array_pending_count: int | None = field(default=None, metadata=shown_with("array_job_id"))
    array_claimed: int | None = field(default=None, metadata=UNLESS_NONE)

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        text = f"Slurm job {self.job_id}"
        if self.array_job_id is not None:
            task = "a task" if self.array_task_id is None else f"task {self.array_task_id}"
            text += f" ({task} of array {self.array_job_id})"
        if self.job_name:
            # Chosen by its user (`sbatch -J`): quoted like every host text in a message.
            text += f" {code_span(clip(self.job_name, 80))}"
        if self.account:
            text += f" account {self.account}"
        return text

    def label(self) -> str:
        """The account."""
        return bounded_label(self.account or "")

    def stable_name(self) -> str:
        """See :meth:`Origin.stable_name`: the job name and account, no job id."""
        text = "Slurm job" + (" array task" if self.array_job_id is not None else "")
        if self.job_name:
            text += f" {code_span(clip(self.job_name, 80))}"
        if self.account:
            text += f" account {self.account}"
        return text

    @property
    def definite(self) -> bool:
        """True: Slurm ran it."""
        return True

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The Slurm job (``scancel`` acts on the whole job, every step of it), and for a
        task of an array the array (what stops it returning cancels the array's waiting
        tasks: never advised while a sanctioned job is a task of the same array)."""
        job = (("slurm-job", self.job_id),) if self.job_id is not None else ()
        array = (("slurm-array", self.array_job_id),) if self.array_job_id is not None else ()
        return job + array

    def restarts(self) -> Restarts | None:
        """A task of a job array: Slurm starts the array's waiting tasks, each running the
        same batch script (sbatch(1) ``--array``), and a ``scancel`` of this task's own job
        id leaves them; ``unknown`` when whether any waits could not be told. None for a
        job of no array, and for an array Slurm listed whole with no task waiting. When
        Slurm was not asked and the job's environment claims an array: ``unknown``,
        naming no command (the claim is the job user's to write)."""
        array = self.array_job_id
        if array is None and self.array_claimed is not None:
            return Restarts(
                "unknown",
                f"Slurm job array {self.array_claimed}, as the job's environment claims "
                "(Slurm was not asked: whether tasks of it wait to start could not be told)",
                each_run=True,
            )
        if array is None or self.array_pending is False:
            return None
        stops = f"cancel the array's waiting tasks first: {array_stop(array)}"
        if self.array_pending is None:
            return Restarts(
                "unknown",
                f"Slurm job array {array} (whether tasks of it wait to start could not be "
                "told; each runs the same batch script)",
                stops,
                each_run=True,
            )
        tasks = (
            f"tasks {plain_or_code(self.array_pending_tasks)}"
            if self.array_pending_tasks
            else "tasks"
        )
        count = self.array_pending_count
        counted = f" ({count} task{'s' if count != 1 else ''})" if count is not None else ""
        return Restarts(
            "when Slurm starts the array's next task",
            f"Slurm job array {array} has {tasks} pending{counted}, each runs the same "
            "batch script",
            stops,
            # An array has only so many tasks: terminating each as it starts uses them up.
            each_run=True,
        )

    def pin(self) -> dict[str, object] | None:
        """``slurm_account`` and ``slurm_job_name``, when Slurm said both."""
        if self.account is None or self.job_name is None:
            return None
        return {"slurm_account": self.account, "slurm_job_name": self.job_name}

    def unproposable(self) -> str | None:
        """Unconfirmed when Slurm did not give the account (only the environment said)."""
        if self.account is None:
            return "only its environment claims a Slurm job (Slurm did not confirm it)"
        return None


@dataclass(frozen=True)
class ContainerOrigin(Origin):
    """A container of a container engine (Docker, Podman, containerd, CRI-O).

    Attributes:
        container_id: 64 hex digits, or what the shim said; None when unknown.
        pod_uid: The Kubernetes pod UID when the container is a pod's.
        runtime: ``docker``, ``podman``, ``containerd``, ``cri-o``...
        namespace: The containerd namespace (``k8s.io``, ``moby``...).
        image: Image name, when the engine said.
        image_id: Image id, when the engine said.
        name: Container name, when the engine said.
        restart_policy: The engine's restart policy (``no``, ``always``...).
    """

    kind: ClassVar[OriginKind] = "container"
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("image", "pod_uid")
    DISABLES: ClassVar[str | None] = "the restart policy and running state"
    PINS: ClassVar[Mapping[str, PinKey]] = {
        "container_image": PinKey("container image", field="image"),
        "container_image_digest": PinKey("container image digest", field="image_id"),
    }
    container_id: str | None = None
    pod_uid: str | None = None
    runtime: str | None = None
    namespace: str | None = None
    image: str | None = None
    image_id: str | None = None
    name: str | None = None
    restart_policy: str | None = None

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        cid = str(self.container_id or "?")[:12]
        return f"container {cid}" + (f" pod {self.pod_uid}" if self.pod_uid else "")

    def label(self) -> str:
        """The image."""
        return bounded_label(self.image or "")

    def stable_name(self) -> str:
        """See :meth:`Origin.stable_name`: the image, no container or pod id."""
        text = f"container of image {plain_or_code(self.image)}" if self.image else "container"
        return text + (" in a pod" if self.pod_uid else "")

    @property
    def definite(self) -> bool:
        """True when the container is named."""
        return self.container_id is not None

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The container (stopping it stops everything in it)."""
        return (("container", self.container_id),) if self.container_id else ()

    def pin(self) -> dict[str, object] | None:
        """``container_image_digest``, else ``container_image``."""
        if self.image_id:
            return {"container_image_digest": self.image_id}
        return {"container_image": self.image} if self.image else None

    def restarts(self) -> Restarts | None:
        """The engine's restart policy (Docker, Podman: ``docker inspect``); ``unknown``
        when the engine could not be asked."""
        if self.pod_uid is not None or not self.container_id:
            return None  # a pod's container: the Kubernetes origin answers for its owner
        engine = _ENGINES.get(self.runtime or "", self.runtime or "the engine")
        policy = self.restart_policy
        cid = self.container_id[:12]
        if policy is None:
            return Restarts(
                "unknown",
                f"{engine} restart policy unknown (the engine did not answer for {cid})",
                optional(self.remediation, "stop it and remove the policy first: {}") or None,
            )
        if policy == "no":
            return None
        stops = (
            DISABLE_FIRST
            if self.runtime in ("docker", "podman")
            else optional(self.remediation, "stop it and remove the policy first: {}") or None
        )
        # A main process ended by a signal exits 128+N, non-zero: on-failure starts it again
        # after terminate's SIGTERM as always does (only the engine's own `stop` is exempt).
        when = {"always": "at once", "unless-stopped": "at once (until stopped by hand)"}.get(
            policy,
            "on failure (a non-zero exit; a kill by a signal is one)"
            if policy.startswith("on-failure")
            else "unknown",
        )
        return Restarts(when, f"{engine} restart policy {policy} of container {cid}", stops)

    def disable_handled(self) -> bool:
        """A Docker or Podman container of no pod (a pod's owner recreates it)."""
        return self.pod_uid is None and self.runtime in ("docker", "podman")


@dataclass(frozen=True)
class KubernetesOrigin(Origin):
    """A container of a Kubernetes pod (docs/kubernetes.md).

    Attributes:
        pod_uid: The pod UID from the cgroup.
        container_id: The container id.
        runtime: The container runtime.
        qos_class: ``guaranteed``, ``burstable`` or ``besteffort`` (from the cgroup).
        namespace: The pod's namespace (None: the API did not say, as below).
        pod: The pod name.
        container: The container name in the pod.
        service_account: The pod's service account.
        node: The node the pod runs on.
        owner_kind: The topmost owner's kind (``Pod`` when it has none).
        owner_name: The topmost owner's name.
        owner_chain: Owners as ``Kind/name``, nearest first.
        image: Image name.
        image_id: Image id.
        api: ``ok`` or why the API was not asked or did not answer.
        schedule: With the CronJob fields (present only for CronJob origins): its schedule.
        time_zone: The CronJob's ``timeZone``.
        next_run: ISO 8601 time of its next run (None when suspended).
        suspended: Whether the CronJob is suspended; None: not a CronJob.
    """

    kind: ClassVar[OriginKind] = "kubernetes"
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("namespace", "owner_kind", "owner_name")
    PINS: ClassVar[Mapping[str, PinKey]] = {
        "k8s_namespace": PinKey("Kubernetes namespace", field="namespace"),
        "k8s_owner": PinKey("Kubernetes owner"),
        "k8s_service_account": PinKey("Kubernetes service account", field="service_account"),
    }
    pod_uid: str | None = None
    container_id: str | None = None
    runtime: str | None = None
    qos_class: str | None = None
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    service_account: str | None = None
    node: str | None = None
    owner_kind: str | None = None
    owner_name: str | None = None
    owner_chain: tuple[str, ...] = ()
    image: str | None = None
    image_id: str | None = None
    api: str | None = None
    schedule: str | None = field(default=None, metadata=shown_with("suspended"))
    time_zone: str | None = field(default=None, metadata=shown_with("suspended"))
    next_run: str | None = field(default=None, metadata=shown_with("suspended"))
    suspended: bool | None = field(default=None, metadata=UNLESS_NONE)

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        if self.pod is None:
            return f"Kubernetes pod {self.pod_uid} (API: {self.api})"
        text = f"Kubernetes pod {self.namespace}/{self.pod}"
        if self.owner_kind not in (None, "Pod"):
            text += f" of {self.owner_kind} {self.owner_name}"
        if self.schedule:
            text += f" ({self.schedule})"
        return text

    def stable_name(self) -> str:
        """See :meth:`Origin.stable_name`: the owner (a Deployment's pods are renamed
        each time), a bare pod by its name; never a pod id."""
        if self.pod is None:
            return f"Kubernetes pod (API: {self.api})"
        if self.owner_kind in (None, "Pod"):
            return f"Kubernetes pod {self.namespace}/{self.pod}"
        text = f"Kubernetes {self.owner_kind} {self.namespace}/{self.owner_name}"
        return text + (f" ({self.schedule})" if self.schedule else "")

    def next_start(self) -> str | None:
        """See :meth:`Origin.next_start` (a CronJob's next run)."""
        return self.next_run

    @property
    def definite(self) -> bool:
        """True: a pod is named (its owner may be unknown)."""
        return True

    def pin_values(self) -> dict[str, object]:
        """Also ``k8s_owner`` as ``Kind/name``."""
        values = super().pin_values()
        values["k8s_owner"] = f"{self.owner_kind}/{self.owner_name}" if self.owner_kind else None
        return {k: values[k] for k in self.PINS}

    def pin_unknown(self) -> str | None:
        """``Kubernetes API <why>`` when the API did not say."""
        return None if self.api == "ok" else f"Kubernetes API {self.api}"

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The pod and its topmost owner (deleting the owner stops every pod of it)."""
        out: tuple[tuple[object, ...], ...] = ()
        if self.pod_uid:
            out += (("pod", self.pod_uid),)
        if self.owner_kind not in (None, "Pod"):
            out += (("k8s-owner", self.namespace, self.owner_kind, self.owner_name),)
        return out

    def pin(self) -> dict[str, object] | None:
        """``k8s_namespace``, ``k8s_owner`` and ``k8s_service_account`` when known."""
        if not (self.namespace and self.owner_kind and self.owner_name):
            return None
        pin: dict[str, object] = {
            "k8s_namespace": self.namespace,
            "k8s_owner": f"{self.owner_kind}/{self.owner_name}",
        }
        if self.service_account:
            pin["k8s_service_account"] = self.service_account
        return pin

    def restarts(self) -> Restarts | None:
        """A pod's owner recreates it: a Deployment/ReplicaSet/StatefulSet/DaemonSet at once,
        a Job on failure, a CronJob on its schedule."""
        kind, name = self.owner_kind, self.owner_name
        if kind in (None, "Pod"):
            return None
        stops = "scale down or delete its owner first: " + (self.remediation or "kubectl")
        if kind == "CronJob":
            if self.suspended:
                return None
            return Restarts("on schedule", f"Kubernetes CronJob {name} ({self.schedule})", stops)
        if kind == "Job":
            return Restarts(
                "on failure", f"Kubernetes Job {name} retries a failed pod", stops, False
            )
        return Restarts("at once", f"Kubernetes {kind} {name} recreates the pod", stops)


@dataclass(frozen=True)
class ShellOrigin(Origin):
    """Started by hand from a login session.

    Attributes:
        session: Summary such as ``ssh from 10.0.0.5 port 51234, tmux session 'train'``.
        user: The process owner.
        client: The SSH client address, when known.
        tty: The controlling terminal.
        login_session: The logind session scope.
        tmux_socket: The tmux server socket, when in tmux.
        tmux_session: The tmux session name.
        tmux_session_id: The tmux session id (``$0``).
    """

    kind: ClassVar[OriginKind] = "shell"
    session: str | None = None
    user: str | None = None
    client: str | None = None
    tty: str | None = None
    login_session: str | None = None
    tmux_socket: str | None = None
    tmux_session: str | None = None
    tmux_session_id: str | None = None

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        return f"shell {self.session or ''}".strip()

    def stable_name(self) -> str:
        """See :meth:`Origin.stable_name`: the session summary without the ssh client's
        port (a new one each connection) or the terminal's number (``pts/N``)."""
        session = _TTY_NUMBER.sub(r"\1N", _SSH_PORT.sub("", self.session or ""))
        return f"shell {session}".strip()

    @property
    def definite(self) -> bool:
        """True: a person started it from a login."""
        return True

    @property
    def by_hand(self) -> bool:
        """True: a person started it."""
        return True

    def unproposable(self) -> str | None:
        """``started by hand in a shell or tmux``."""
        return "started by hand in a shell or tmux"


@dataclass(frozen=True)
class AtOrigin(Origin):
    """An ``at``/``batch`` job run by atd.

    Attributes:
        job: The at job number (None when the spool was unreadable).
        queue: The queue letter.
        user: The job shell's owner.
        scheduled: ISO 8601 time the job was scheduled for.
        command: The job's commands.
        file: The spool file being run.
        pending_same_command: Queued job numbers running the same commands (for a
            run whose own job file was not read: queued jobs of the same owner that run
            ``queued_match``).
        queued_match: Set only when the run's own job file was not read (the run
            ended and atd removed it, seen only at its exec): the program queued jobs
            were matched by instead: the script's absolute path, ``INTERPRETER -m
            MODULE``, or a base name only (a relative path: it proves no copy). None
            when the run's command line names no program (``sh -c``, ``python3 -c``).
        uid: The run's owner (its job shell's UID) when its job file was not read:
            only a queued job of this owner (at's ``# atrun uid=`` header) is a copy.
        queued_unsure: Queued jobs of the same owner neither proven copies nor ruled
            out (not read, not parsed, the program given by a variable...).
        queue_read: For a run whose job file was not read: whether a spool was
            listed. None otherwise.
    """

    kind: ClassVar[OriginKind] = "at"
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("command",)
    DISABLES: ClassVar[str | None] = "the queued jobs' scripts"
    REMEDIATION_STOPS_JOB: ClassVar[bool] = False
    job: int | None = None
    queue: str | None = None
    user: str | None = None
    scheduled: str | None = None
    command: str | None = None
    file: str | None = None
    pending_same_command: tuple[int, ...] = ()
    queued_match: str | None = field(default=None, metadata=UNLESS_NONE)
    uid: int | None = field(default=None, metadata=UNLESS_NONE)
    queued_unsure: tuple[int, ...] = field(default=(), metadata=UNLESS_EMPTY)
    queue_read: bool | None = field(default=None, metadata=UNLESS_NONE)

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        return f"at job {self.job or '?'}"

    def stable_name(self) -> str:
        """See :meth:`Origin.stable_name`: no job number (each queued run has its own)."""
        return "at job"

    @property
    def definite(self) -> bool:
        """True: atd ran it."""
        return True

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The at job and the queued jobs running the same commands."""
        return tuple(("at-job", j) for j in (self.job, *self.pending_same_command) if j)

    def restarts(self) -> Restarts | None:
        """An at job that queued another run of the same commands (it re-queues itself),
        whichever run is asked about, also one that already ended (its job file gone: the
        queued jobs of the same owner that run its program); ``unknown`` when neither its
        commands nor the queue were read, or when a queued job of the same owner could
        not be ruled out (hostile tester i: never a job of another user, nor one that
        only shares the interpreter or mentions the name)."""
        jobs = ", ".join(str(j) for j in self.pending_same_command)
        if jobs and self.queued_match is not None:
            return Restarts(
                "on schedule",
                f"at job(s) {jobs} of the same user queued that run {_quoted(self.queued_match)}"
                " (it re-queues itself; this run's own job file was not read)",
                DISABLE_FIRST,
            )
        if jobs:
            return Restarts(
                "on schedule",
                f"at job(s) {jobs} queued with the same commands (it re-queues itself)",
                DISABLE_FIRST,
            )
        if self.queued_unsure:
            what = _quoted(self.queued_match) if self.queued_match else "this run's program"
            unsure = ", ".join(str(j) for j in self.queued_unsure)
            return Restarts(
                "unknown",
                f"atd (at job(s) {unsure} of the same user queued, not ruled out as runs of "
                f"{what}; this run's own job file was not read)",
            )
        if self.command is None and (
            self.queue_read is False or (self.queue_read is None and self.queued_match is None)
        ):
            return Restarts(
                "unknown",
                "atd (neither this run's job file nor atd's queue was read: a queued copy "
                "may run it again)",
            )
        return None

    def watched_path(self) -> str | None:
        """The spool directory (issue 31, case 3): it changes when a job is queued, starts
        or is removed, and the queued copies are read again."""
        return os.path.dirname(self.file) if self.file else None

    def disable_handled(self) -> bool:
        """Queued runs of the same commands to remove (matched by the whole job's
        commands: a copy matched by command alone is removed by hand)."""
        return bool(self.pending_same_command) and self.queued_match is None


def array_stop(array_id: int) -> str:
    """What cancels the tasks of Slurm job array ``array_id`` that wait to start and
    leaves its running ones (``--state`` restricts scancel to jobs in that state,
    scancel(1)): ``scancel --state=PENDING 1230``."""
    return f"scancel --state=PENDING {array_id}"


def _quoted(text: str) -> str:
    # Host text in the product's sentence: quoted, so a path cannot read as its words.
    return "`" + text.replace("`", "\\x60") + "`"


@dataclass(frozen=True)
class SupervisorOrigin(Origin):
    """A program of a process supervisor (supervisord, runit, s6, PM2...).

    Attributes:
        program: The supervisor's name for it (supervisorctl name, service dir, PM2 app).
        supervisor: Which supervisor.
        supervisor_pid: The supervisor's PID.
        config: The configuration file naming it, when found.
        section: supervisord: the program's section (``program:train``), when read.
        section_file: supervisord: the file holding that section.
        autostart: supervisord: ``autostart`` as configured (``true`` by default).
        autostart_at: Where it was set: ``FILE:LINE``, or ``default``.
        autorestart: supervisord: ``autorestart`` (``unexpected`` by default).
        autorestart_at: Where it was set: ``FILE:LINE``, or ``default``.
        startretries: supervisord: ``startretries`` (``3`` by default).
        exitcodes: supervisord: ``exitcodes`` (``0`` by default).
        settings_unread: supervisord: why its configuration could not be read (then
            the settings above are None).
    """

    kind: ClassVar[OriginKind] = "supervisor"
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("program",)
    DISABLES: ClassVar[str | None] = "the supervisord config"
    program: str | None = None
    supervisor: str | None = None
    supervisor_pid: int | None = None
    config: str | None = None
    section: str | None = field(default=None, metadata=UNLESS_NONE)
    section_file: str | None = field(default=None, metadata=UNLESS_NONE)
    autostart: str | None = field(default=None, metadata=UNLESS_NONE)
    autostart_at: str | None = field(default=None, metadata=UNLESS_NONE)
    autorestart: str | None = field(default=None, metadata=UNLESS_NONE)
    autorestart_at: str | None = field(default=None, metadata=UNLESS_NONE)
    startretries: str | None = field(default=None, metadata=UNLESS_NONE)
    exitcodes: str | None = field(default=None, metadata=UNLESS_NONE)
    settings_unread: str | None = field(default=None, metadata=UNLESS_NONE)

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        # The name comes from the job's environment (SUPERVISOR_PROCESS_NAME) or its
        # command line: host text, quoted unless it is one plain word.
        return f"supervisor program {plain_or_code(self.program) if self.program else '?'}"

    def label(self) -> str:
        """The program."""
        return bounded_label(self.program or "")

    @property
    def definite(self) -> bool:
        """True: a supervisor runs it."""
        return True

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        """The supervisor's program."""
        return (("supervisor-program", self.supervisor, self.program),)

    def restarts(self) -> Restarts | None:
        """supervisord: the program's ``autorestart`` (and ``autostart``, ``exitcodes``) as
        its configuration says (supervisord docs, "[program:x] Section Settings"):

        * ``true``: started again at once whenever it exits;
        * ``unexpected`` (the default): at once after an exit code not in ``exitcodes``, or
          a signal (supervisord counts a death by signal as unexpected, so the SIGTERM of a
          ``terminate`` brings it back);
        * ``false``: not after it ends; ``autostart=true`` starts it when supervisord starts.

        Other supervisors (runit, s6, PM2...) and an unreadable configuration: ``unknown``.
        """
        who = self.supervisor or "supervisor"
        stops = optional(self.remediation, "stop it in the supervisor first: {}") or None
        if who == "supervisord" and self.autorestart is not None:
            stops = DISABLE_FIRST
            # Names, values and places from a supervisord configuration, which the user
            # running that supervisord may have written: quoted unless one plain word.
            src = f"supervisord {plain_or_code(self.section or 'program:' + str(self.program))}"
            setting = f"autorestart={plain_or_code(self.autorestart)}"
            at = src + optional(self.autorestart_at and plain_or_code(self.autorestart_at), ", {}")
            value = self.autorestart
            if value in TRUTHY:
                return Restarts("at once", f"will return: {setting} ({at})", stops)
            if value in FALSY:
                if self.autostart in TRUTHY:
                    return Restarts(
                        "when supervisord starts (not after it ends)",
                        f"won't return: {setting} ({at}); autostart={plain_or_code(self.autostart)}"
                        + optional(self.autostart_at and plain_or_code(self.autostart_at), " ({})")
                        + " starts it when supervisord starts",
                        stops,
                        False,
                    )
                return None
            if value == "unexpected":
                codes = self.exitcodes or "0"
                codes = codes if re.fullmatch(r"[0-9, ]+", codes) else plain_or_code(codes)
                return Restarts(
                    f"at once after a signal or an exit code not in exitcodes={codes}",
                    f"will return: {setting} ({at})",
                    stops,
                )
            return Restarts("unknown", f"{src}: {setting} is not a value it takes", stops)
        if who == "supervisord":
            why = self.settings_unread or "its configuration was not read"
            return Restarts(
                "unknown",
                f"supervisord program {plain_or_code(str(self.program))} (autorestart unknown: "
                f"{why}; "
                "autorestart=unexpected, the default, restarts it after a signal)",
                stops,
            )
        return Restarts(
            "unknown",
            f"{who} program {plain_or_code(str(self.program))} (its autorestart is not read; "
            "supervisors "
            "restart their programs by default)",
            stops,
        )

    def watched_path(self) -> str | None:
        """The supervisord configuration file."""
        return self.config or None

    def disable_handled(self) -> bool:
        """A supervisord program of its own section; one in a group with others is
        refused (``update GROUP`` restarts them)."""
        grouped = ":" in (self.program or "")
        return self.supervisor == "supervisord" and self.section is not None and not grouped


@dataclass(frozen=True)
class OrphanOrigin(Origin):
    """A process whose starter exited (adopted by PID 1 or a subreaper).

    Attributes:
        message: One line, e.g. ``orphan of Slurm job 1 (CANCELLED)``.
        parent_pid: The adopting parent's PID.
        cgroup: The process's systemd cgroup path.
        slurm_job_id: The Slurm job its cgroup names.
        slurm_job_state: That job's state, when Slurm said.
        supervisor_program: ``SUPERVISOR_PROCESS_NAME`` from its environment.
        unit: The systemd unit its cgroup names.
        session: The logind session its cgroup names.
    """

    kind: ClassVar[OriginKind] = "orphan"
    message: str | None = None
    parent_pid: int | None = None
    cgroup: str | None = None
    slurm_job_id: int | None = None
    slurm_job_state: str | None = None
    supervisor_program: str | None = None
    unit: str | None = None
    session: str | None = None

    def describe(self) -> str:
        """See :meth:`Origin.describe`."""
        return self.message or "orphan (parent exited)"

    def stable_name(self) -> str:
        """See :meth:`Origin.stable_name`: ``orphan: its wrapper bash was adopted (the
        wrapper's parent exited)``, ``orphan of a Slurm job``: no PID, no job id."""
        if self.slurm_job_id is not None:
            return "orphan of a Slurm job"
        return _PID_MENTION.sub("", self.describe())

    def unproposable(self) -> str | None:
        """``an orphan: what started it is gone``."""
        return "an orphan: what started it is gone"


#: What :meth:`ShellOrigin.stable_name` drops: the ssh client's port (lineage.shell's
#: ``ssh from ADDR port PORT``) and a terminal's number (``/dev/pts/3``).
_SSH_PORT = re.compile(r" port [^\s,]+")
_TTY_NUMBER = re.compile(r"\b(pts/|tty)\d+\b")
#: What :meth:`OrphanOrigin.stable_name` drops: `` (PID 24914)`` (lineage.orphan's words).
_PID_MENTION = re.compile(r" \(PID \d+\)")


#: Every origin kind's record, once, in resolver priority order (the typed list;
#: docs/architecture.md, "Origin kinds"): more specific spawners first (a Slurm job inside
#: a unit is a Slurm job; a cron job living on in cron.service's cgroup is a cron job);
#: systemd last but for orphan, since every process sits in some unit. ``Origin`` itself
#: is the ``unknown`` kind. lineage.RESOLVERS and actions.planners.PLANNERS list the
#: kinds' resolvers and disable-source planners in their layers.
ORIGIN_KINDS: tuple[type[Origin], ...] = (
    SlurmOrigin,
    KubernetesOrigin,
    ContainerOrigin,
    CronOrigin,
    AtOrigin,
    SupervisorOrigin,
    ShellOrigin,
    SystemdOrigin,
    OrphanOrigin,
    Origin,
)


def origin_kinds() -> tuple[type[Origin], ...]:
    """The kinds in force: :data:`ORIGIN_KINDS` (a test adds a throwaway kind by handing
    in a longer tuple in its place)."""
    return ORIGIN_KINDS


def origin_kind(name: str, kinds: Sequence[type[Origin]] | None = None) -> type[Origin] | None:
    """The record class of the kind called ``name`` among ``kinds`` (default
    :data:`ORIGIN_KINDS`), or None."""
    for cls in origin_kinds() if kinds is None else kinds:
        if cls.kind == name:
            return cls
    return None

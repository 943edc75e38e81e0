"""Container origin: the process runs inside a Docker, Podman, containerd or CRI-O container.

Clues:

* a runtime shim ancestor: ``containerd-shim`` / ``containerd-shim-runc-v1|v2`` (its
  arguments ``-namespace NS -id ID``; namespace ``moby`` is Docker, ``k8s.io`` is the
  Kubernetes CRI), ``docker-containerd-shim``, or ``conmon`` (Podman and CRI-O; ``-c ID``
  / ``--cid ID``, CRI-O passes ``--exit-dir /var/run/crio/exits``);
* the container id in the cgroup path, as the runtimes name their cgroups:
  ``/docker/ID`` and ``docker-ID.scope`` (Docker's cgroupfs and systemd drivers),
  ``libpod-ID.scope`` / ``/libpod_parent/libpod-ID`` (Podman), ``cri-containerd-ID.scope``
  and ``/kubepods/.../podUID/ID`` (containerd CRI), ``crio-ID.scope`` (CRI-O);
  ``podUID`` (``pod`` + the UID, ``_`` for ``-`` under the systemd driver) gives the pod.

The runtime decides the remediation: ``docker stop ID``, ``podman stop ID``, or
``crictl stop ID`` for Kubernetes (whose controller will recreate the pod: the evidence
says so). ``ctr -n NS task kill ID`` for plain containerd namespaces.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ..hosttext import clip, code_span, own_code, plain_or_code
from ..model import ContainerOrigin, Origin, Proc
from .base import (
    Answer,
    ResolveContext,
    command,
    comment,
    exe_name,
    exe_owner,
    exe_path,
    with_notes,
)
from .cgroup import parse_cgroup


def _cmd(text: str) -> str:
    # A command line in evidence: quoted, so no argument reads as the product's words.
    return code_span(clip(text, 200))


# Runtime by the name the container's cgroup carries (the id itself is parsed by cgroup.py).
_RUNTIME_MARKERS: tuple[tuple[str, str], ...] = (
    ("cri-containerd-", "containerd"),
    ("crio-", "cri-o"),
    ("libpod", "podman"),
    ("docker", "docker"),
)
_SHIM_NAMES = frozenset(
    {
        "containerd-shim",
        "containerd-shim-runc-v1",
        "containerd-shim-runc-v2",
        "containerd-shim-runsc-v1",
        "containerd-shim-kata-v2",
        "docker-containerd-shim",
    }
)
# Runtimes seen as a plain ancestor (docker-in-docker, ``podman run`` without conmon).
_RUNTIME_COMMANDS = {"docker": "docker", "dockerd": "docker", "podman": "podman"}


@dataclass(frozen=True)
class ContainerClue:
    """A container found in a cgroup path.

    Attributes:
        container_id: The 64-hex container id.
        runtime: ``docker``, ``podman``, ``containerd`` or ``cri-o``.
        pod_uid: Kubernetes pod UID (dashed form) when the path is under ``kubepods``.
        line: The ``/proc/PID/cgroup`` line it came from.
    """

    container_id: str
    runtime: str
    pod_uid: str | None
    line: str


def cgroup_container(cgroup: Sequence[str]) -> ContainerClue | None:
    """Find a container id (and pod UID) in ``/proc/PID/cgroup`` lines.

    The id and pod UID come from :func:`watchdog.lineage.cgroup.parse_cgroup`; the
    runtime from the prefix the runtime gave the cgroup (``docker-``, ``libpod-``,
    ``cri-containerd-``, ``crio-``, ``/docker/``); a bare id under ``kubepods`` is
    taken as containerd's.

    Args:
        cgroup: The lines as read, ``HIERARCHY:CONTROLLERS:PATH``.

    Returns:
        The container found, or None.
    """
    info = parse_cgroup(cgroup)
    if info is None or info.container_id is None:
        return None
    cid = info.container_id
    line = next((ln for ln in cgroup if cid in ln), info.path)
    before = line[: line.index(cid)] if cid in line else ""
    last = before.rsplit("/", 2)
    near = "/".join(last[-2:])  # the id's own component and its parent
    runtime = next((rt for marker, rt in _RUNTIME_MARKERS if marker in near), "containerd")
    return ContainerClue(cid, runtime, info.pod_uid, line)


def _arg_after(cmdline: Sequence[str], *flags: str) -> str | None:
    """Value of ``-flag VALUE`` or ``--flag=VALUE`` in a command line."""
    for i, arg in enumerate(cmdline):
        for flag in flags:
            if arg == flag and i + 1 < len(cmdline):
                return cmdline[i + 1]
            if arg.startswith(flag + "="):
                return arg[len(flag) + 1 :]
    return None


def _names(proc: Proc) -> set[str]:
    names = {exe_name(proc)}
    if proc.cmdline:
        names.add(proc.cmdline[0].rsplit("/", 1)[-1])
    return names


def _shim_runtime(shim: Proc) -> tuple[str, str | None, str | None]:
    """(runtime, container id, containerd namespace) from a shim or conmon command line."""
    names = _names(shim)
    if "conmon" in names:
        cid = _arg_after(shim.cmdline, "-c", "--cid")
        crio = any("crio" in arg for arg in shim.cmdline)
        return ("cri-o" if crio else "podman"), cid, None
    cid = _arg_after(shim.cmdline, "-id", "--id")
    ns = _arg_after(shim.cmdline, "-namespace", "--namespace")
    if ns == "moby" or "docker-containerd-shim" in names:
        return "docker", cid, ns
    if ns == "k8s.io":
        return "containerd", cid, ns
    return "containerd", cid, ns


def is_shim(proc: Proc) -> bool:
    """True for a containerd shim or conmon (the parent of a container's init)."""
    return bool(_names(proc) & (_SHIM_NAMES | {"conmon"}))


def not_shim(proc: Proc, ctx: ResolveContext) -> str | None:
    """Why a shim-looking ancestor is not a real shim; None when it is.

    The executable the kernel runs (not argv) must have a shim's or conmon's name and
    belong to root (only root installs it); a containerd shim must run as root too
    (conmon of rootless podman runs as the container's user).

    Args:
        proc: A process :func:`is_shim` accepted.
        ctx: Resolve context (for the executable's owner).

    Returns:
        None, or a phrase for evidence.
    """
    name = (exe_path(proc) or "").rsplit("/", 1)[-1]
    if name not in _SHIM_NAMES and name != "conmon":
        return f"its executable {plain_or_code(comment(exe_path(proc) or 'unknown'))} is not a shim"
    owner = exe_owner(proc, ctx)
    if owner != 0:
        who = "could not be checked" if owner is None else f"is UID {owner}, not root"
        return f"the owner of its executable {plain_or_code(comment(exe_path(proc) or ''))} {who}"
    if name != "conmon" and proc.uid != 0:
        return f"it runs as UID {proc.uid}, not root"
    return None


def runtime_command(proc: Proc) -> str | None:
    """``docker`` or ``podman`` when ``proc`` is that runtime's daemon or command."""
    for name in _names(proc):
        runtime = _RUNTIME_COMMANDS.get(name)
        if runtime is not None:
            return runtime
    return None


def remediation_for(runtime: str, container_id: str, namespace: str | None, pod: bool) -> str:
    """The stop command for a container.

    Args:
        runtime: ``docker``, ``podman``, ``containerd`` or ``cri-o``.
        container_id: Full container id.
        namespace: containerd namespace, for plain containerd containers.
        pod: True when the container belongs to a Kubernetes pod.

    Returns:
        ``docker stop ID``, ``podman stop ID``, ``crictl stop ID`` (any Kubernetes pod,
        CRI-O), or ``ctr -n NS task kill ID``.
    """
    if runtime == "docker" and not pod:
        return command("docker", "stop", container_id)
    if runtime == "podman":
        return command("podman", "stop", container_id)
    if pod or runtime == "cri-o" or namespace == "k8s.io":
        return command("crictl", "stop", container_id)
    return command("ctr", "-n", namespace or "default", "task", "kill", container_id)


# One read-only inspect per container: docker-inspect(1) / podman-inspect(1) Go templates
# with ``json`` so hostile names arrive escaped; crictl inspect (CRI ContainerStatus).
_ENGINE_TEMPLATE = {
    "docker": "[{{json .Config.Image}},{{json .Image}},{{json .Name}},"
    "{{json .HostConfig.RestartPolicy.Name}}]",
    "podman": "[{{json .ImageName}},{{json .Image}},{{json .Name}},"
    "{{json .HostConfig.RestartPolicy.Name}}]",
}
_CRICTL = ("crictl", "inspect", "-o", "go-template", "--template", "{{.status.image.image}}")
INSPECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class EngineFacts:
    """What the container engine said about one container.

    Attributes:
        image: Image reference as the container was created from (``localhost/x:1``).
        image_id: Image ID / digest (``sha256:...``), when the engine gives it.
        name: Container name (Docker's leading ``/`` removed).
        restart_policy: ``no``, ``always``, ``unless-stopped``, ``on-failure``; None
            when unknown or unset.
    """

    image: str | None
    image_id: str | None = None
    name: str | None = None
    restart_policy: str | None = None


def _parse_engine(stdout: str) -> EngineFacts | None:
    try:
        data = json.loads(stdout)
    except ValueError:
        return None
    if not isinstance(data, list) or len(data) != 4:
        return None
    image, image_id, name, restart = (v if isinstance(v, str) and v else None for v in data)
    # The engine answered: an empty policy (podman's, with none set) is "no".
    restart = restart or "no"
    if name is not None:
        name = name.removeprefix("/")
    if image_id is not None and ":" not in image_id:
        image_id = f"sha256:{image_id}"  # podman prints the bare hex ID
    return EngineFacts(image, image_id, name, restart)


def engine_facts(
    runtime: str, container_id: str, pod: bool, ctx: ResolveContext
) -> EngineFacts | None:
    """Ask the engine's CLI about a container (read-only, with a timeout), cached per id.

    Args:
        runtime: ``docker``, ``podman``, ``containerd`` or ``cri-o``.
        container_id: Full container id.
        pod: True for a Kubernetes pod container (asked through crictl, image only).
        ctx: Provides ``run_cmd`` and the per-scan cache.

    Returns:
        The facts, or None when the CLI is missing, fails, times out or prints nothing.
    """
    if runtime == "containerd" and not pod:
        return None  # plain containerd: no CRI view of its namespace
    key = f"container:engine:{container_id}"
    if key in ctx.cache:
        cached = ctx.cache[key]
        return cached if isinstance(cached, EngineFacts) else None
    facts: EngineFacts | None = None
    if runtime in _ENGINE_TEMPLATE and not pod:
        argv = [runtime, "inspect", "--format", _ENGINE_TEMPLATE[runtime], container_id]
        res = ctx.run_cmd(argv, INSPECT_TIMEOUT_S)
        if res.ok:
            facts = _parse_engine(res.stdout.strip())
    else:
        res = ctx.run_cmd([*_CRICTL, container_id], INSPECT_TIMEOUT_S)
        if res.ok and res.stdout.strip():
            facts = EngineFacts(res.stdout.strip())
    ctx.cache[key] = facts
    return facts


def container_image(runtime: str, container_id: str, pod: bool, ctx: ResolveContext) -> str | None:
    """The image reference a container runs (see :func:`engine_facts`), or None."""
    facts = engine_facts(runtime, container_id, pod, ctx)
    return facts.image if facts is not None else None


def restart_when(policy: str) -> str:
    """When a Docker or Podman restart policy starts the container again, in words
    (docker-run(1) ``--restart``, podman-run(1) ``--restart``)."""
    if policy == "always":
        return (
            "the engine starts the container again at once whenever its main process ends "
            "(and after a daemon restart or reboot), unless the policy is removed"
        )
    if policy == "unless-stopped":
        return (
            "the engine starts the container again at once whenever its main process ends, "
            "unless it was stopped by hand (`stop`); also after a daemon restart or reboot"
        )
    if policy.startswith("on-failure"):
        most = policy.partition(":")[2]
        return (
            "the engine starts the container again when its main process exits non-zero "
            "(a kill by a signal included: exit 128+N)"
            + (f", at most {most} times" if most else "")
            + "; not after a clean exit or a `stop`"
        )
    return "the engine may start the container again (a policy not known here)"


class ContainerResolver:
    """Names the container a process runs in.

    Origin fields: ``container_id`` (64 hex, or what the shim said), ``pod_uid`` (None
    outside Kubernetes), ``runtime``, ``namespace`` (containerd namespace when known),
    ``image``, ``image_id``, ``name``, ``restart_policy`` (from ``docker``/``podman``
    ``inspect``, image only from ``crictl inspect``; None where that CLI does not answer).
    """

    name = "container"

    def resolve(self, lineage: Sequence[Proc], ctx: ResolveContext) -> Answer:
        """See :class:`~watchdog.lineage.base.OriginResolver`; with notes for an
        ancestor that only looks like one of its kind, or a claim it does not confirm."""
        notes: list[str] = []
        return with_notes(self._resolve(lineage, ctx, notes), notes)

    def _resolve(
        self, lineage: Sequence[Proc], ctx: ResolveContext, notes: list[str]
    ) -> Origin | None:
        if not lineage:
            return None
        # lineage[0] itself is never its own shim; look at its ancestors.
        shim = next((p for p in lineage[1:] if is_shim(p)), None)
        if shim is not None:
            why = not_shim(shim, ctx)
            if why is not None:
                # Its arguments name a container it does not run (``exec -a``, a user's
                # copy): believing them would pin the job to someone else's image.
                notes.append(
                    f"ancestor PID {shim.pid} looks like a container shim "
                    f"({_cmd(comment(shim.args_text))}) but is not: {why}"
                )
                shim = None
        runner = next((p for p in lineage[1:] if runtime_command(p)), None)
        cg = cgroup_container(lineage[0].cgroup)
        if shim is None and runner is None and cg is None:
            return None
        evidence: list[str] = []
        runtime = cg.runtime if cg else "containerd"
        cid = cg.container_id if cg else None
        namespace: str | None = None
        if shim is None and runner is not None:
            runtime = runtime_command(runner) or runtime
            evidence.append(f"ancestor PID {runner.pid} is {_cmd(runner.args_text)}")
        if shim is not None:
            s_runtime, s_cid, namespace = _shim_runtime(shim)
            evidence.append(
                f"ancestor PID {shim.pid} is {plain_or_code(exe_name(shim))}: "
                f"{_cmd(shim.args_text)}"
            )
            if cg is None or cg.runtime in ("containerd", "docker"):
                runtime = s_runtime
            cid = cid or s_cid
        if cg is not None:
            evidence.append(
                f"cgroup of PID {lineage[0].pid} names container {plain_or_code(cg.container_id)}"
            )
            evidence.append(plain_or_code(cg.line, 300))
        pod_uid = cg.pod_uid if cg else None
        if pod_uid is not None:
            evidence.append(
                f"Kubernetes pod {pod_uid}: its controller will recreate a stopped "
                "container; delete or scale down the owning workload with kubectl"
            )
        if runtime == "containerd" and namespace == "k8s.io":
            evidence.append("containerd namespace k8s.io: a Kubernetes (CRI) container")
        facts = engine_facts(runtime, cid, pod_uid is not None, ctx) if cid else None
        if cid:
            remediation = remediation_for(runtime, cid, namespace, pod_uid is not None)
            restart = facts.restart_policy if facts else None
            asked = runtime in _ENGINE_TEMPLATE and pod_uid is None
            if asked and restart is None:
                evidence.append(
                    f"restart policy unknown: {own_code(runtime + ' inspect')} did not answer; "
                    "the engine may start the container again once it stops"
                )
            elif restart not in (None, "no", ""):
                evidence.append(
                    f"restart policy {plain_or_code(str(restart))}: {restart_when(restart)}"
                )
            if asked and restart != "no":
                if runtime == "docker":
                    update = shlex.join(["docker", "update", "--restart=no", cid])
                    remediation = f"{update} && {remediation}"
                elif restart is None:
                    remediation += (
                        "  # restart policy unknown: podman inspect --format "
                        f"'{{{{.HostConfig.RestartPolicy.Name}}}}' {cid}"
                    )
                else:
                    remediation += f"  # then recreate it without --restart={restart}"
        else:
            tool = runtime if runtime in ("docker", "podman") else "crictl"
            remediation = f"{tool} ps  # find the container, then: {tool} stop ID"
            evidence.append("container id unknown: no shim argument and no container cgroup")
        return ContainerOrigin(
            evidence=tuple(evidence),
            remediation=remediation,
            container_id=cid,
            pod_uid=pod_uid,
            runtime=runtime,
            namespace=namespace,
            image=facts.image if facts else None,
            image_id=facts.image_id if facts else None,
            name=facts.name if facts else None,
            restart_policy=facts.restart_policy if facts else None,
        )

"""Parse ``/proc/PID/cgroup`` into the systemd unit, slice, session, container and Slurm job.

The unit, user unit, session, owner and slice rules follow systemd's own
``src/basic/cgroup-util.c`` (``cg_path_get_unit``, ``cg_path_get_user_unit``,
``cg_path_get_session``, ``cg_path_get_owner_uid``, ``cg_path_get_slice``,
``cg_path_get_user_slice``) and the unit-name grammar of ``src/basic/unit-name.c``; the
tests port systemd's vectors from ``src/test/test-cgroup-util.c``. Container and Slurm
layouts come from the cgroup drivers of Docker, Podman, containerd/CRI-O, the kubelet and
Slurm's ``proctrack/cgroup`` (v1) and ``cgroup/v2`` plugins.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

ROOT_SLICE = "-.slice"  # SPECIAL_ROOT_SLICE in systemd's special.h
UNIT_NAME_MAX = 256  # unit-name.h
UNIT_TYPES = frozenset(
    (
        "service",
        "socket",
        "target",
        "device",
        "mount",
        "automount",
        "swap",
        "timer",
        "path",
        "slice",
        "scope",
    )
)
_VALID_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ:-_.\\@")
_ALNUM = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

_HEX64 = r"[0-9a-f]{64}"
# Scopes/leaves named after a container: docker (systemd driver), podman, containerd, CRI-O.
_CONTAINER_SCOPE = re.compile(rf"^(?:docker|libpod|cri-containerd|crio)-({_HEX64})\.scope$")
# cgroupfs drivers: /docker/<id>, /libpod_parent/libpod-<id>, /kubepods/.../pod<uid>/<id>.
_CONTAINER_LEAF = re.compile(rf"^(?:libpod-)?({_HEX64})$")
# systemd driver: kubepods[-QOS]-pod<uid_>.slice; kind nests it under kubelet.slice with a
# ``kubelet-`` prefix on every level (kubelet-kubepods-burstable-pod<uid_>.slice).
_POD_SLICE = re.compile(r"(?:kubelet-)?kubepods(?:-[a-z]+)?-pod([0-9a-f_]{36})\.slice")
_POD_DIR = re.compile(r"pod([0-9a-f-]{36})")
_SLURM_UID = re.compile(r"uid_(\d+)")
_SLURM_JOB = re.compile(r"job_(\d+)")


@dataclass(frozen=True)
class CgroupInfo:
    """What a process's cgroup membership says about who started it.

    Attributes:
        path: The systemd-hierarchy cgroup path (``name=systemd`` line on v1/hybrid when it
            is not ``/``, otherwise the v2 ``0::`` line), e.g. ``/system.slice/x.service``.
        unit: System unit (``cg_path_get_unit``), e.g. ``nightly.service``,
            ``user@1000.service``, ``session-3.scope``; None when the path names none.
        slice: Right-most slice before the first non-slice component
            (``cg_path_get_slice``); ``-.slice`` for the root.
        user_unit: Unit inside a user manager or (legacy layout) a session scope
            (``cg_path_get_user_unit``), e.g. ``sched.service``.
        user_uid: Owner UID from the ``user-UID.slice`` (``cg_path_get_owner_uid``).
        session: Login session scope name, e.g. ``session-3.scope``; see :attr:`session_id`.
        container_id: 64-hex container ID (Docker, Podman, containerd, CRI-O).
        pod_uid: Kubernetes pod UID with dashes, e.g. ``5f1c...-...``.
        slurm_job_id: Slurm job ID from ``job_N``.
        slurm_uid: Job owner UID from Slurm's v1 ``uid_N`` level.
    """

    path: str
    unit: str | None = None
    slice: str = ROOT_SLICE
    user_unit: str | None = None
    user_uid: int | None = None
    session: str | None = None
    container_id: str | None = None
    pod_uid: str | None = None
    slurm_job_id: int | None = None
    slurm_uid: int | None = None

    @property
    def session_id(self) -> str | None:
        """Login session ID (``3`` for ``session-3.scope``), as ``cg_path_get_session``."""
        if self.session is None:
            return None
        return self.session.removeprefix("session-").removesuffix(".scope")


# -- unit-name grammar (unit-name.c) ---------------------------------------------------


def unit_name_is_valid(name: str, *, plain: bool = True, instance: bool = True) -> bool:
    """Whether ``name`` is a syntactically valid unit name (``unit_name_is_valid``).

    Args:
        name: Candidate such as ``getty@tty2.service``.
        plain: Accept names without ``@`` (UNIT_NAME_PLAIN).
        instance: Accept instances ``foo@bar.service`` (UNIT_NAME_INSTANCE); templates
            ``foo@.service`` are never accepted.

    Returns:
        True when valid under the chosen flags.
    """
    if not name or len(name) >= UNIT_NAME_MAX:
        return False
    dot = name.rfind(".")
    if dot <= 0 or name[dot + 1 :] not in UNIT_TYPES:
        return False
    prefix = name[:dot]
    if any(c not in _VALID_CHARS for c in prefix):
        return False
    at = prefix.find("@")
    if at == 0:
        return False
    if at < 0:
        return plain
    return instance and at + 1 < len(prefix)


def _unescape(component: str) -> str:
    # cg_unescape(): systemd prefixes '_' to names that could clash with kernel files.
    return component[1:] if component.startswith("_") else component


def _components(path: str) -> list[str]:
    return [c for c in path.split("/") if c]


def _is_slice(component: str) -> bool:
    # valid_slice_name(): at least "x.slice", a plain unit name once unescaped.
    return (
        len(component) >= len("x.slice")
        and component.endswith(".slice")
        and unit_name_is_valid(_unescape(component), instance=False)
    )


def _decode_unit(component: str) -> str | None:
    # cg_path_decode_unit(): first component, unescaped, must be a plain or instance name.
    if len(component) < 3:
        return None
    name = _unescape(component)
    return name if unit_name_is_valid(name) else None


def _skip_slices(parts: list[str]) -> list[str]:
    i = 0
    while i < len(parts) and _is_slice(parts[i]):
        i += 1
    return parts[i:]


def path_get_unit(path: str) -> str | None:
    """System unit of a cgroup path, as systemd's ``cg_path_get_unit``.

    Args:
        path: A cgroup path such as ``/system.slice/foo.service/sub``.

    Returns:
        The unit name, or None (systemd's -ENXIO) when the first non-slice component
        is not a unit.
    """
    rest = _skip_slices(_components(path))
    if not rest:
        return None
    unit = _decode_unit(rest[0])
    if unit is None or unit.endswith(".slice"):
        return None
    return unit


def _session_ok(sid: str) -> bool:
    # session_id_valid(): non-empty, letters and digits only.
    return bool(sid) and all(c in _ALNUM for c in sid)


def _uid_ok(text: str) -> int | None:
    # parse_uid(): decimal, not (uid_t)-1 and not the 16-bit overflow UID 65535.
    if not text.isdigit():
        return None
    uid = int(text)
    if uid >= 0xFFFFFFFF or uid == 0xFFFF:
        return None
    return uid


def _skip_user_prefix(path: str) -> list[str] | None:
    # skip_user_prefix(): slices, then user@UID.service or session-ID.scope.
    rest = _skip_slices(_components(path))
    if not rest:
        return None
    head = rest[0]
    if head.startswith("user@") and head.endswith(".service") and len(head) >= 14:
        if _uid_ok(head[5:-8]) is not None:
            return rest[1:]
        return None
    if head.startswith("session-") and head.endswith(".scope") and len(head) >= 15:
        return rest[1:] if _session_ok(head[8:-6]) else None
    return None


def path_get_user_unit(path: str) -> str | None:
    """Unit inside a user manager or session, as ``cg_path_get_user_unit``.

    Args:
        path: A cgroup path such as ``/user.slice/user-1000.slice/user@1000.service/a.service``.

    Returns:
        The user unit name, or None.
    """
    rest = _skip_user_prefix(path)
    return None if rest is None else path_get_unit("/".join(rest))


def path_get_session(path: str) -> str | None:
    """Session ID of a ``session-ID.scope`` unit path, as ``cg_path_get_session``.

    Returns:
        The ID (``2`` for ``session-2.scope``), or None.
    """
    unit = path_get_unit(path)
    if unit is None or not unit.startswith("session-") or not unit.endswith(".scope"):
        return None
    sid = unit[len("session-") : -len(".scope")]
    return sid if _session_ok(sid) else None


def path_get_slice(path: str) -> str:
    """Right-most leading slice, as ``cg_path_get_slice``; ``-.slice`` when there is none."""
    last = ROOT_SLICE
    for comp in _components(path):
        if not _is_slice(comp):
            break
        last = _unescape(comp)
    return last


def path_get_user_slice(path: str) -> str | None:
    """Slice inside a user manager or session, as ``cg_path_get_user_slice``."""
    rest = _skip_user_prefix(path)
    return None if rest is None else path_get_slice("/".join(rest))


def path_get_owner_uid(path: str) -> int | None:
    """Owner UID from a ``user-UID.slice``, as ``cg_path_get_owner_uid``."""
    sl = path_get_slice(path)
    if not sl.startswith("user-") or not sl.endswith(".slice"):
        return None
    return _uid_ok(sl[len("user-") : -len(".slice")])


# -- containers and Slurm ------------------------------------------------------------


def _container(path: str) -> tuple[str | None, str | None]:
    cid: str | None = None
    pod: str | None = None
    for comp in _components(path):
        m = _POD_SLICE.fullmatch(comp)
        if m:
            pod = m.group(1).replace("_", "-")
            continue
        m = _POD_DIR.fullmatch(comp)
        if m:
            pod = m.group(1)
            continue
        m = _CONTAINER_SCOPE.match(comp) or _CONTAINER_LEAF.match(comp)
        if m:
            cid = m.group(1)
    return cid, pod


def _slurm(path: str) -> tuple[int | None, int | None]:
    # Anchored at the hierarchy's root, where only root (slurmstepd) creates cgroups: a
    # user's delegated subtree (user@UID.service/...) may hold any name it likes.
    parts = _components(path)
    for i, comp in enumerate(parts[:2]):
        # v1 proctrack/cgroup: /slurm[_NODENAME]/uid_N/job_N/step_X
        if i == 0 and (comp == "slurm" or comp.startswith("slurm_")):
            uid = job = None
            for sub in parts[i + 1 : i + 3]:
                if m := _SLURM_UID.fullmatch(sub):
                    uid = int(m.group(1))
                elif m := _SLURM_JOB.fullmatch(sub):
                    job = int(m.group(1))
            if job is not None:
                return job, uid
        # v2 cgroup/v2 plugin: /system.slice/slurmstepd.scope/job_N/step_X/...
        stepd_scope = comp == "slurmstepd.scope" or comp.endswith("_slurmstepd.scope")
        if i == 1 and parts[0] == "system.slice" and stepd_scope and i + 1 < len(parts):
            m = _SLURM_JOB.fullmatch(parts[i + 1])
            if m:
                return int(m.group(1)), None
    return None, None


def parse_cgroup_path(path: str) -> CgroupInfo:
    """Everything :class:`CgroupInfo` holds, from one cgroup path.

    Args:
        path: A path from a ``/proc/PID/cgroup`` line, e.g. ``/system.slice/x.service``.

    Returns:
        The parsed membership; unknown layouts give a record with only ``path`` and slice.
    """
    sid = path_get_session(path)
    cid, pod = _container(path)
    job, slurm_uid = _slurm(path)
    return CgroupInfo(
        path=path,
        unit=path_get_unit(path),
        slice=path_get_slice(path),
        user_unit=path_get_user_unit(path),
        user_uid=path_get_owner_uid(path),
        session=None if sid is None else f"session-{sid}.scope",
        container_id=cid,
        pod_uid=pod,
        slurm_job_id=job,
        slurm_uid=slurm_uid,
    )


def systemd_path(lines: Iterable[str]) -> str | None:
    """Pick the systemd-managed path from ``/proc/PID/cgroup`` lines.

    Each line is ``HIERARCHY-ID:CONTROLLERS:PATH`` (cgroups(7)). On v1/hybrid systems
    systemd tracks units in the ``name=systemd`` hierarchy; on v2 only ``0::PATH`` exists.
    A hybrid host lists both with the same path; a legacy host whose cgroup2 mount is
    unused shows ``0::/``, so a non-root ``name=systemd`` path wins.

    Returns:
        The path, or None when neither line is present.
    """
    v1: str | None = None
    v2: str | None = None
    for line in lines:
        parts = line.rstrip("\n").split(":", 2)
        if len(parts) != 3:
            continue
        hid, ctrls, path = parts
        if ctrls == "name=systemd":
            v1 = path
        elif hid == "0" and ctrls == "":
            v2 = path
    if v1 is not None and v1 != "/":
        return v1
    return v2 if v2 is not None else v1


def parse_cgroup(lines: Iterable[str]) -> CgroupInfo | None:
    """Parse the lines of ``/proc/PID/cgroup``.

    The systemd path (see :func:`systemd_path`) gives unit, slice, user unit and session;
    container and Slurm IDs are also looked for on every other hierarchy's path, because
    on v1 hosts Docker and Slurm place processes in controller hierarchies only.

    Args:
        lines: The file's lines, e.g. ``("0::/system.slice/x.service",)``.

    Returns:
        The membership, or None when no line could be parsed.
    """
    # Most processes share a few cgroup files, and a scan asks for the same ones again
    # (service scope, lineage, Slurm): the parse of each distinct file is kept.
    return _parse_cgroup(lines if isinstance(lines, tuple) else tuple(lines))


@functools.lru_cache(maxsize=4096)
def _parse_cgroup(lines: tuple[str, ...]) -> CgroupInfo | None:
    path = systemd_path(lines)
    others: list[str] = []
    for line in lines:
        parts = line.rstrip("\n").split(":", 2)
        if len(parts) == 3 and parts[2] not in ("", "/") and parts[2] != path:
            others.append(parts[2])
    if path is None:
        if not others:
            return None
        path = "/"
    info = parse_cgroup_path(path)
    if info.container_id is None and info.slurm_job_id is None:
        for other in others:
            cid, pod = _container(other)
            job, slurm_uid = _slurm(other)
            if cid or pod or job is not None:
                return CgroupInfo(
                    path=info.path,
                    unit=info.unit,
                    slice=info.slice,
                    user_unit=info.user_unit,
                    user_uid=info.user_uid,
                    session=info.session,
                    container_id=cid,
                    pod_uid=pod,
                    slurm_job_id=job,
                    slurm_uid=slurm_uid,
                )
    return info

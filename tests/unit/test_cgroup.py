"""Cgroup path parsing.

The ``SYSTEMD_*`` vectors are ported with their exact expected values from systemd's
``src/test/test-cgroup-util.c`` (systemd/systemd, commit 018333725f9d8565a47abc54b7a6e301e8492f39:
``test_path_get_unit``, ``test_path_get_user_unit``, ``test_path_get_session``,
``test_path_get_owner_uid``, ``test_path_get_slice``, ``test_path_get_user_slice``,
``test_path_decode_unit``). systemd's ``-ENXIO`` (no such unit) is None here.
"""

from __future__ import annotations

import pytest

from rogue_watchdog.lineage.cgroup import (
    ROOT_SLICE,
    CgroupInfo,
    parse_cgroup,
    path_get_owner_uid,
    path_get_session,
    path_get_slice,
    path_get_unit,
    path_get_user_slice,
    path_get_user_unit,
    systemd_path,
    unit_name_is_valid,
)

SYSTEMD_GET_UNIT = [
    ("/system.slice/foobar.service/sdfdsaf", "foobar.service"),
    ("/system.slice/getty@tty5.service", "getty@tty5.service"),
    ("/system.slice/getty@tty5.service/aaa/bbb", "getty@tty5.service"),
    ("/system.slice/getty@tty5.service/", "getty@tty5.service"),
    ("/system.slice/getty@tty6.service/tty5", "getty@tty6.service"),
    ("sadfdsafsda", None),
    ("/system.slice/getty####@tty6.service/xxx", None),
    ("/system.slice/system-waldo.slice/foobar.service/sdfdsaf", "foobar.service"),
    ("/system.slice/system-waldo.slice/_cpu.service/sdfdsaf", "cpu.service"),
    ("/user.slice/user-1000.slice/user@1000.service/server.service", "user@1000.service"),
    ("/user.slice/user-1000.slice/user@.service/server.service", None),
]

SYSTEMD_GET_USER_UNIT = [
    ("/user.slice/user-1000.slice/session-2.scope/foobar.service", "foobar.service"),
    ("/user.slice/user-1000.slice/session-2.scope/waldo.slice/foobar.service", "foobar.service"),
    ("/user.slice/user-1002.slice/session-2.scope/foobar.service/waldo", "foobar.service"),
    ("/user.slice/user-1000.slice/session-2.scope/foobar.service/waldo/uuuux", "foobar.service"),
    ("/user.slice/user-1000.slice/session-2.scope/waldo/waldo/uuuux", None),
    ("/user.slice/user-1000.slice/session-2.scope/foobar@pie.service/pa/po", "foobar@pie.service"),
    ("/session-2.scope/foobar@pie.service/pa/po", "foobar@pie.service"),
    ("/xyz.slice/xyz-waldo.slice/session-77.scope/foobar@pie.service/pa/po", "foobar@pie.service"),
    ("/meh.service", None),
    ("/session-3.scope/_cpu.service", "cpu.service"),
    ("/user.slice/user-1000.slice/user@1000.service/server.service", "server.service"),
    (
        "/user.slice/user-1000.slice/user@1000.service/foobar.slice/foobar@pie.service",
        "foobar@pie.service",
    ),
    ("/user.slice/user-1000.slice/user@.service/server.service", None),
]

SYSTEMD_GET_SESSION = [
    ("/user.slice/user-1000.slice/session-2.scope/foobar.service", "2"),
    ("/session-3.scope", "3"),
    ("/session-.scope", None),
    ("", None),
]

SYSTEMD_GET_OWNER_UID = [
    ("/user.slice/user-1000.slice/session-2.scope/foobar.service", 1000),
    ("/user.slice/user-1006.slice", 1006),
    ("", None),
]

SYSTEMD_GET_SLICE = [
    ("/user.slice", "user.slice"),
    ("/foobar", ROOT_SLICE),
    ("/user.slice/user-waldo.slice", "user-waldo.slice"),
    ("", ROOT_SLICE),
    ("foobar", ROOT_SLICE),
    ("foobar.slice", "foobar.slice"),
    ("foo.slice/foo-bar.slice/waldo.service", "foo-bar.slice"),
]

SYSTEMD_GET_USER_SLICE = [
    ("/user.slice", None),
    ("/foobar", None),
    ("/user.slice/user-waldo.slice", None),
    ("", None),
    ("foobar", None),
    ("foobar.slice", None),
    ("foo.slice/foo-bar.slice/waldo.service", None),
    ("foo.slice/foo-bar.slice/user@1000.service", ROOT_SLICE),
    ("foo.slice/foo-bar.slice/user@1000.service/", ROOT_SLICE),
    ("foo.slice/foo-bar.slice/user@1000.service///", ROOT_SLICE),
    ("foo.slice/foo-bar.slice/user@1000.service/waldo.service", ROOT_SLICE),
    ("foo.slice/foo-bar.slice/user@1000.service/piep.slice/foo.service", "piep.slice"),
    (
        "/foo.slice//foo-bar.slice/user@1000.service/piep.slice//piep-pap.slice//foo.service",
        "piep-pap.slice",
    ),
]

# test_path_decode_unit: the first path component decoded on its own.
SYSTEMD_DECODE_UNIT = [
    ("getty@tty2.service", "getty@tty2.service"),
    ("getty@tty2.service/", "getty@tty2.service"),
    ("getty@tty2.service/xxx", "getty@tty2.service"),
    ("getty@.service/", None),
    ("getty@.service", None),
    ("getty.service", "getty.service"),
    ("getty", None),
    ("getty/waldo", None),
    ("_cpu.service", "cpu.service"),
]


@pytest.mark.parametrize(("path", "expected"), SYSTEMD_GET_UNIT)
def test_systemd_path_get_unit(path: str, expected: str | None) -> None:
    assert path_get_unit(path) == expected


@pytest.mark.parametrize(("path", "expected"), SYSTEMD_GET_USER_UNIT)
def test_systemd_path_get_user_unit(path: str, expected: str | None) -> None:
    assert path_get_user_unit(path) == expected


@pytest.mark.parametrize(("path", "expected"), SYSTEMD_GET_SESSION)
def test_systemd_path_get_session(path: str, expected: str | None) -> None:
    assert path_get_session(path) == expected


@pytest.mark.parametrize(("path", "expected"), SYSTEMD_GET_OWNER_UID)
def test_systemd_path_get_owner_uid(path: str, expected: int | None) -> None:
    assert path_get_owner_uid(path) == expected


@pytest.mark.parametrize(("path", "expected"), SYSTEMD_GET_SLICE)
def test_systemd_path_get_slice(path: str, expected: str) -> None:
    assert path_get_slice(path) == expected


@pytest.mark.parametrize(("path", "expected"), SYSTEMD_GET_USER_SLICE)
def test_systemd_path_get_user_slice(path: str, expected: str | None) -> None:
    assert path_get_user_slice(path) == expected


@pytest.mark.parametrize(("path", "expected"), SYSTEMD_DECODE_UNIT)
def test_systemd_path_decode_unit(path: str, expected: str | None) -> None:
    # cg_path_decode_unit is cg_path_get_unit without slice skipping; no vector has a slice.
    assert path_get_unit(path) == expected


def test_unit_name_grammar() -> None:
    assert unit_name_is_valid("foo@bar.service")
    assert not unit_name_is_valid("foo@.service")  # a template, not a running unit
    assert not unit_name_is_valid("@bar.service")
    assert not unit_name_is_valid("foo.nosuchtype")
    assert not unit_name_is_valid(".service")
    assert not unit_name_is_valid("a" * 250 + ".service")
    assert not unit_name_is_valid("foo@bar.slice", instance=False)


# -- whole /proc/PID/cgroup files ------------------------------------------------------


def test_v2_line_system_service() -> None:
    info = parse_cgroup(["0::/system.slice/nightly-retrain.service"])
    assert info == CgroupInfo(
        path="/system.slice/nightly-retrain.service",
        unit="nightly-retrain.service",
        slice="system.slice",
    )


def test_v1_hybrid_lines_as_seen_from_namespaced_systemd() -> None:
    # Real layout from this project's machine (notes/system-tests.md).
    lines = [
        "12:perf_event:/",
        "9:name=systemd:/system.slice/nightly.service",
        "4:memory:/process_api/72e829cb6fb588e2e777e2893f1ccaf2",
        "0::/system.slice/nightly.service",
    ]
    info = parse_cgroup(lines)
    assert info is not None
    assert (info.path, info.unit, info.slice) == (
        "/system.slice/nightly.service",
        "nightly.service",
        "system.slice",
    )
    assert info.container_id is None


def test_legacy_v1_unused_cgroup2_uses_name_systemd() -> None:
    assert systemd_path(["1:name=systemd:/system.slice/a.service", "0::/"]) == (
        "/system.slice/a.service"
    )
    assert systemd_path(["1:name=systemd:/", "0::/system.slice/b.service"]) == (
        "/system.slice/b.service"
    )
    assert systemd_path(["3:memory:/x"]) is None
    assert parse_cgroup([]) is None
    assert parse_cgroup(["garbage"]) is None


def test_nested_slices_and_template_instance() -> None:
    info = parse_cgroup(["0::/system.slice/system-train.slice/train@2.service"])
    assert info is not None
    assert (info.unit, info.slice) == ("train@2.service", "system-train.slice")


def test_user_unit_under_user_manager() -> None:
    info = parse_cgroup(
        ["0::/user.slice/user-1000.slice/user@1000.service/app.slice/sched.service"]
    )
    assert info is not None
    assert info.unit == "user@1000.service"
    assert info.user_unit == "sched.service"
    assert info.user_uid == 1000
    assert info.slice == "user-1000.slice"
    assert info.session is None


def test_login_session() -> None:
    info = parse_cgroup(["0::/user.slice/user-1000.slice/session-7.scope"])
    assert info is not None
    assert (info.unit, info.session, info.session_id, info.user_uid) == (
        "session-7.scope",
        "session-7.scope",
        "7",
        1000,
    )


DOCKER_ID = "4f1a" + "0" * 56 + "beef"
CID = "a3c1" + "9" * 56 + "0d0d"


@pytest.mark.parametrize(
    ("lines", "cid", "pod"),
    [
        (["0::/system.slice/docker-" + DOCKER_ID + ".scope"], DOCKER_ID, None),
        (["9:name=systemd:/docker/" + DOCKER_ID, "0::/"], DOCKER_ID, None),
        (["0::/machine.slice/libpod-" + DOCKER_ID + ".scope/container"], DOCKER_ID, None),
        (
            [
                "0::/kubepods.slice/kubepods-burstable.slice/"
                "kubepods-burstable-pod5f1c2a3b_1111_2222_3333_444455556666.slice/"
                "cri-containerd-" + CID + ".scope"
            ],
            CID,
            "5f1c2a3b-1111-2222-3333-444455556666",
        ),
        (
            [
                "4:memory:/kubepods/burstable/pod5f1c2a3b-1111-2222-3333-444455556666/" + CID,
                "1:name=systemd:/kubepods/burstable/pod5f1c2a3b-1111-2222-3333-444455556666/" + CID,
            ],
            CID,
            "5f1c2a3b-1111-2222-3333-444455556666",
        ),
        # v1 host where only a controller hierarchy names the container.
        (["9:name=systemd:/", "4:memory:/docker/" + DOCKER_ID, "0::/"], DOCKER_ID, None),
    ],
)
def test_containers(lines: list[str], cid: str, pod: str | None) -> None:
    info = parse_cgroup(lines)
    assert info is not None
    assert (info.container_id, info.pod_uid) == (cid, pod)


def test_libpod_conmon_is_not_the_container() -> None:
    info = parse_cgroup(["0::/machine.slice/libpod-conmon-" + DOCKER_ID + ".scope"])
    assert info is not None
    assert info.container_id is None


@pytest.mark.parametrize(
    ("lines", "job", "uid"),
    [
        (["4:memory:/slurm/uid_1000/job_42/step_batch/task_0", "0::/"], 42, 1000),
        (["1:name=systemd:/slurm_node7/uid_0/job_7/step_0"], 7, 0),
        (["0::/system.slice/slurmstepd.scope/job_13/step_batch/user/task_0"], 13, None),
    ],
)
def test_slurm(lines: list[str], job: int, uid: int | None) -> None:
    info = parse_cgroup(lines)
    assert info is not None
    assert (info.slurm_job_id, info.slurm_uid) == (job, uid)


def test_root_and_init_scope() -> None:
    root = parse_cgroup(["0::/"])
    assert root is not None
    assert (root.unit, root.slice) == (None, ROOT_SLICE)
    init = parse_cgroup(["0::/init.scope"])
    assert init is not None
    assert init.unit == "init.scope"

"""disable-source of a container, a supervisord program and queued at jobs (issue 31,
item 4): the plans against recorded engine answers, the undo of what was done and of
what an interrupted run may have done. The real components: tests/system/
test_restart_containers.py, test_supervisord_sources.py, test_cron_at.py."""

from __future__ import annotations

from pathlib import Path

from rogue_watchdog.actions.disable import PlanRequest
from rogue_watchdog.actions.effects import RecordingEffects
from rogue_watchdog.actions.recovery import disable_undo
from rogue_watchdog.actions.remedy import restore_plan
from rogue_watchdog.actions.sources import plan_container, plan_supervisor, undo_ops
from rogue_watchdog.command import CommandResult
from rogue_watchdog.lineage.at import job_commands
from rogue_watchdog.model import ContainerOrigin, SupervisorOrigin
from rogue_watchdog.records import ActionStep

CID = "c" * 64
INSPECT = (
    "{{json .%s}} {{json .HostConfig.RestartPolicy.Name}} "
    "{{json .HostConfig.RestartPolicy.MaximumRetryCount}} {{json .State.Running}}"
)


def _req(effects: RecordingEffects, tmp_path: Path) -> PlanRequest:
    return PlanRequest("rogue job", 1_800_000_000.0, str(tmp_path / "b"), effects, ("", "", ()))


def _engine(runtime: str, answer: str, rc: int = 0) -> RecordingEffects:
    field = {"docker": "Id", "podman": "ID"}[runtime]
    argv = (runtime, "inspect", "--format", INSPECT % field, CID)
    return RecordingEffects(answers={argv: CommandResult(rc, answer, "" if rc == 0 else "down")})


def test_docker_policy_is_set_to_no_and_put_back_as_it_was(tmp_path: Path) -> None:
    effects = _engine("docker", f'"{CID}" "on-failure" 3 true')
    origin = ContainerOrigin(container_id=CID, runtime="docker", restart_policy="on-failure")
    plan = plan_container(origin, _req(effects, tmp_path))
    assert (plan.kind, plan.target, plan.steps) == (
        "container", f"{CID[:12]} (docker)",
        ["before: restart policy on-failure:3, running", f"docker update --restart=no {CID}",
         f"docker stop {CID}"],
    )  # fmt: skip
    res = plan.execute(effects)
    assert (res.outcome, res.undo) == (
        "ok",
        [{"op": "docker", "argv": ["update", "--restart=on-failure:3", CID]},
         {"op": "docker", "argv": ["start", CID]}],
    )  # fmt: skip


def test_podman_is_stopped_and_an_engine_that_does_not_answer_is_refused(tmp_path: Path) -> None:
    effects = _engine("podman", f'"{CID}" "always" 0 true')
    origin = ContainerOrigin(container_id=CID, runtime="podman", restart_policy="always",
                             evidence=(), remediation=f"podman stop {CID}")  # fmt: skip
    plan = plan_container(origin, _req(effects, tmp_path))
    assert plan.data["commands"] == [["podman", "stop", CID]]
    assert plan.steps[-1].startswith("(podman 4 cannot change a restart policy: always stays")
    down = plan_container(origin, _req(_engine("podman", "", 125), tmp_path))
    assert down.refused == (
        f"`podman inspect {CID[:12]}` did not answer (`down`): its restart policy is unknown; "
        f"by hand: podman stop {CID}"
    )
    pod = ContainerOrigin(container_id=CID, runtime="docker", pod_uid="u")
    assert (plan_container(pod, _req(effects, tmp_path)).refused or "").startswith(
        "a Kubernetes pod's container"
    )


def test_an_interrupted_disable_gets_the_undo_of_what_may_have_run(tmp_path: Path) -> None:
    effects = _engine("docker", f'"{CID}" "always" 0 true')
    plan = plan_container(ContainerOrigin(container_id=CID, runtime="docker"),
                          _req(effects, tmp_path))  # fmt: skip
    restore = restore_plan(plan)
    update = ActionStep(1, 1, 0.0, "run", "done", {"argv": ["docker", "update", "--restart=no",
                        CID]}, {"returncode": 0})  # fmt: skip
    stop = ActionStep(2, 1, 0.0, "run", "intent", {"argv": ["docker", "stop", CID]}, None)
    assert disable_undo(restore, [update, stop]) == [
        {"op": "docker", "argv": ["update", "--restart=always", CID]},
        {"op": "docker", "argv": ["start", CID]},
    ]
    assert disable_undo(restore, [update]) == [
        {"op": "docker", "argv": ["update", "--restart=always", CID]}
    ]


def test_supervisord_settings_unknown_refuse_with_the_by_hand_command(tmp_path: Path) -> None:
    origin = SupervisorOrigin(program="p", supervisor="supervisord", remediation="by hand",
                              settings_unread="/x.conf could not be read: gone")  # fmt: skip
    plan = plan_supervisor(origin, _req(RecordingEffects(), tmp_path))
    assert plan.refused == (
        "supervisord's settings of p are unknown (/x.conf could not be read: gone); by hand: "
        "by hand"
    )
    runit = SupervisorOrigin(program="p", supervisor="runsv", remediation="sv down /e/p")
    assert plan_supervisor(runit, _req(RecordingEffects(), tmp_path)).refused == (
        "disabling a runsv program is not supported; by hand: sv down /e/p"
    )
    assert undo_ops("nothing", {}, [], []) == []


def test_a_requeued_saved_job_runs_the_same_commands() -> None:
    saved = (
        "#!/bin/sh\n# atrun uid=0 gid=0\n# mail root 0\numask 22\nX=1; export X\n"
        "cd /srv || {\n\t echo 'Execution directory inaccessible' >&2\n\t exit 1\n}\n"
        "/usr/bin/python3 /srv/train.py\n"
    )
    again = saved.replace("X=1", "Y=2").replace("/usr/bin/python3 /srv/train.py\n", saved)
    assert job_commands(saved) == job_commands(again) == "/usr/bin/python3 /srv/train.py"


def test_a_program_in_a_group_with_others_is_refused(tmp_path: Path) -> None:
    # `supervisorctl update GROUP` re-adds the whole group: the others would restart.
    conf = tmp_path / "s.conf"
    conf.write_text(
        "[supervisord]\n[group:pool]\nprograms=train,web\n"
        "[program:train]\ncommand=/usr/bin/python3 /srv/train.py\n"
        "[program:web]\ncommand=/usr/bin/python3 /srv/web.py\n"
    )
    origin = SupervisorOrigin(
        program="pool:train", supervisor="supervisord", config=str(conf),
        section="program:train", remediation="x",
    )  # fmt: skip
    plan = plan_supervisor(origin, _req(RecordingEffects(), tmp_path))
    assert plan.refused == (
        "pool:train runs in supervisord group pool ([program:train] is one of its programs): "
        "`supervisorctl update pool` would restart the group's other programs too; by hand: x"
    )

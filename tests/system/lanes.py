"""Which system test files run side by side in CI (scripts/test.sh), and which alone.

The system tests mostly wait (cron's minute, a timer, a grace period), so three lanes of
files run at once, each lane one file after another; then the *actors*, one after another.
Lanes are fixed lists rather than pytest-xdist groups: with pytest 9.2 and xdist 3.8,
``--dist loadgroup`` did not keep a group in one worker (a module's own
``xdist_group`` mark was split across two workers, 2026-12-06), and files that share
something host-wide must never run at once:

* an actor's daemon acts on whatever it sees on the whole host (terminate mode,
  ``auto_disable_source``, ``gpu_open: enforce``): beside other files it acted on their
  rogue-shaped jobs (one ran ``atrm`` on the at test's queued copy). Actors run after
  every lane has finished;
* cron and atd files share the host's ``/etc/cron.d`` and at queue (one cron and one atd
  serve every lane: tests/system/hostdaemon.py): one lane;
* both private Slurms use the same ``slurm_<host>`` cgroups, and one sweep saw the other
  file's jobs: one lane;
* the container engines share podman's blob cache; the package builds share the
  checkout's ``build/`` and the dpkg lock: each in one lane.

``python -m tests.system.lanes NAME`` prints a lane's (or ``actors``') paths;
tests/unit/test_lanes.py checks that every system test file is in exactly one list.
Balanced by the one-after-another durations of 2026-12-06 (about 8.5 min each).
"""

from __future__ import annotations

import sys
from pathlib import Path

LANES: dict[str, tuple[str, ...]] = {
    "cron": (
        "test_cron_at.py", "test_cron_system.py", "test_learn_cron.py", "test_proc_events.py",
        "test_respawn_cron.py", "test_try_cron.py",
    ),
    "box": (
        "test_slurm_failclosed.py", "test_slurm_node.py", "test_slurm_origin.py",
        "test_busy_box.py", "test_containers_real.py", "test_kubernetes_cgroup.py",
        "test_alert_labels_real_am.py", "test_blind_churn_real_am.py",
        "test_fleet_prometheus.py", "test_report_chromium.py",
    ),
    "build": (
        "test_deb_package.py", "test_prerequisites.py", "test_service_install.py",
        "test_pypi_watchdog.py", "test_no_systemd.py", "test_nsystemd_safety.py",
        "test_reliability.py", "test_service_systemd.py", "test_service_unit.py",
        "test_systemd.py", "test_systemd_tmux.py", "test_enforce_systemd.py",
    ),
}  # fmt: skip

#: Files whose daemon acts on whatever it sees on the host: run alone, after the lanes.
ACTORS: tuple[str, ...] = (
    "test_action_faults.py", "test_enforce_cron.py", "test_enforce_daemon.py",
    "test_gpu_open.py", "test_gpu_open_v2.py", "test_open_gate.py", "test_queue_slurm.py",
    "test_restart_containers.py", "test_restart_sources.py", "test_rogue_service_stop.py",
    "test_supervisord_sources.py", "test_trust_cron.py", "test_week_system.py",
    "test_zombie_holder.py",
)  # fmt: skip

HERE = Path(__file__).resolve().parent


def paths(name: str) -> list[str]:
    """The test files of lane ``name`` (or ``actors``), as paths under tests/system."""
    files = ACTORS if name == "actors" else LANES[name]
    return [str(HERE / f) for f in files]


if __name__ == "__main__":
    print("\n".join(paths(sys.argv[1])))

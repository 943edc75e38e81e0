""" "An unknown job is eating GPU 3": the human views answer it against the fake NVML.

Real processes the test started get GPU memory from the fake ``libnvidia-ml.so.1``
(tests/fakenvml), loaded through the real pynvml path; ``python -m rogue_watchdog scan`` runs as
a user would run it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rogue_watchdog.render import COMMAND_WORDS
from tests.conftest import Spawned, need_program, run_cli
from tests.fakenvml.fixtures import fake_nvml, library_path

GIB = 1024**3


def sleeper(spawned: Spawned, tmp_path: Path, name: str) -> int:
    script = tmp_path / name
    script.write_text("import time\ntime.sleep(120)\n")
    return spawned.start([sys.executable, str(script)]).pid


def four_gpus(tmp_path: Path, rogue: int, sanctioned: int) -> Path:
    def gpu(i: int, used: int, procs: list[dict[str, object]]) -> dict[str, object]:
        return {
            "name": "NVIDIA H200",
            "uuid": f"GPU-{i}",
            "total": 140 * GIB,
            "used": used,
            "processes": procs,
        }

    lib = fake_nvml(
        tmp_path,
        {
            "driver": "550.54.15",
            "devices": [
                gpu(0, 0, []),
                gpu(1, 2 * GIB, [{"pid": sanctioned, "mem": 2 * GIB}]),
                gpu(2, 0, []),
                # 1 GiB more than the rogue holds: memory no listed process accounts for.
                gpu(3, 5 * GIB, [{"pid": rogue, "mem": 4 * GIB}]),
            ],
        },
    )
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        f"nvml: {{library: '{library_path(lib)}'}}\n"
        f"training: {{device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
        "sanctioned:\n"
        "  - name: pipeline\n"
        "    cmdline: '* */pipeline_train.py'\n"
        "    origin: {any: true}\n"
    )
    return cfg


def test_scan_gpu_3_names_the_job_its_memory_and_the_split(
    spawned: Spawned, tmp_path: Path
) -> None:
    need_program("gcc")
    rogue = sleeper(spawned, tmp_path, "mystery_train.py")
    ok = sleeper(spawned, tmp_path, "pipeline_train.py")
    time.sleep(0.2)
    cfg = four_gpus(tmp_path, rogue, ok)

    # Wide enough for the whole command whatever the checkout's path (it ends each row).
    command = f"{sys.executable} {tmp_path}/mystery_train.py"
    columns = str(max(200, 60 + len(command)))
    done = run_cli("scan", "--gpu", "3", "--config", str(cfg), env={"COLUMNS": columns})
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == f"config: {cfg} (1 sanctioned rule)"
    assert lines[2] == "NVML: driver 550.54.15, 1 GPU(s)"
    assert lines[3] == (
        "  GPU 3  NVIDIA H200  5.0 GiB used of 140.0 GiB: sanctioned 0 B, unsanctioned 4.0 GiB,"
        " not attributable 1.0 GiB  GPU-3"
    )
    rows = [line for line in lines if line.split()[1:2] == [str(rogue)]]
    assert len(rows) == 1
    assert rows[0].split()[:7] == ["rogue", str(rogue), "root", "1", "3", "4.0", "GiB"]
    assert rows[0].endswith(command)
    assert not [line for line in lines if f" {ok} " in line]  # GPU 1's job is not shown
    i = lines.index(rows[0])
    assert lines[i + 1 : i + 4] == [
        "    why: not sanctioned: no rule matches the command line",
        "    class: unknown (no training launcher or script, known program, listening socket or"
        " short life seen: judged as training)",
        f"    stop: rogue-watchdog terminate --config {cfg} {rogue}  # its origin is unknown: "
        f"see explain {rogue}",
    ]
    found = [line for line in lines if line.startswith("  [high] rogue-job: ")]
    assert len(found) == 1
    assert found[0].startswith(
        f"  [high] rogue-job: rogue GPU job PID {rogue} on GPU 3 (4.0 GiB), user root, "
    )

    whole = json.loads(run_cli("scan", "--json", "--config", str(cfg)).stdout)
    by_pid = {j["root_pid"]: j for j in whole["jobs"]}
    assert by_pid[rogue]["gpus"] == [{"index": 3, "uuid": "GPU-3", "memory_bytes": 4 * GIB}]
    assert by_pid[ok]["gpus"] == [{"index": 1, "uuid": "GPU-1", "memory_bytes": 2 * GIB}]
    assert by_pid[ok]["verdict"] == "sanctioned"
    finding = next(f for f in whole["findings"] if f["root_pid"] == rogue)
    assert finding["details"]["gpu_indexes"] == [3]
    assert finding["details"]["gpus"] == [{"index": 3, "uuid": "GPU-3", "memory_bytes": 4 * GIB}]

    narrowed = json.loads(run_cli("scan", "--json", "--gpu", "1", "--config", str(cfg)).stdout)
    assert [g["index"] for g in narrowed["gpus"]] == [1]
    assert [j["root_pid"] for j in narrowed["jobs"]] == [ok]
    assert [f for f in narrowed["findings"] if f["kind"] == "rogue-job"] == []
    clean = run_cli("scan", "--gpu", "1", "--config", str(cfg))
    assert clean.returncode == 0, clean.stdout  # nothing unsanctioned on GPU 1
    assert (
        "  GPU 1  NVIDIA H200  2.0 GiB used of 140.0 GiB: sanctioned 2.0 GiB, unsanctioned 0 B,"
        " not attributable 0 B  GPU-1"
    ) in clean.stdout.splitlines()


def test_scan_at_80_columns_fits_and_keeps_the_script_name(
    spawned: Spawned, tmp_path: Path
) -> None:
    need_program("gcc")
    rogue = sleeper(spawned, tmp_path, "mystery_train.py")
    ok = sleeper(spawned, tmp_path, "pipeline_train.py")
    time.sleep(0.2)
    cfg = four_gpus(tmp_path, rogue, ok)
    done = run_cli("scan", "--config", str(cfg), env={"COLUMNS": "80"})
    lines = done.stdout.splitlines()

    # A stop: command stays whole however long (the terminal soft-wraps it; a hard wrap
    # breaks the paste), and so does one word (a path) wider than a line: it has a line
    # of its own (issue 33: `/tmp/pytest-of-root/p` / `ytest-938`); everything else fits.
    # With a long configuration path (pytest-xdist's popen-gwN folders) the command goes
    # on a line of its own, whole: that is the rule, not an overflow.
    def whole(line: str) -> bool:
        words = line.strip().removeprefix("stop: ").removeprefix("&& ").split()
        return bool(words) and words[0] in COMMAND_WORDS

    wide = [x for x in lines if len(x) > 80 and not whole(x) and " " in x.strip()]
    assert wide == []
    row = next(line for line in lines if line.split()[1:2] == [str(rogue)])
    assert row.endswith(" …/mystery_train.py") or row.endswith(f" {tmp_path}/mystery_train.py")
    assert row.split()[4:7] == ["3", "4.0", "GiB"]


def test_gpu_must_be_an_index(tmp_path: Path) -> None:
    done = run_cli("scan", "--gpu", "x")
    assert done.returncode == 2
    assert "argument --gpu: 'x': expected a GPU index (0, 1, ...)" in done.stderr


def test_an_empty_gpu_view_says_why(spawned: Spawned, tmp_path: Path) -> None:
    need_program("gcc")
    rogue = sleeper(spawned, tmp_path, "mystery_train.py")
    ok = sleeper(spawned, tmp_path, "pipeline_train.py")
    cfg = four_gpus(tmp_path, rogue, ok)
    # A GPU NVML does not list is an error naming those it lists (fresh user F, issue 33:
    # before, 132b2a1, exit 0 and an empty view under the same words).
    done = run_cli("scan", "--gpu", "9", "--config", str(cfg), env={"COLUMNS": "200"})
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines()[-1] == (
        "rogue-watchdog: GPU 9: NVML lists no such GPU here (GPUs: 0, 1, 2, 3)"
    )

    # NVML unavailable: no job can be placed, so none may be left out. Before, `scan
    # --gpu 3` printed "No training jobs found." and exited 0 beside a rogue job.
    blind = tmp_path / "blind.yaml"
    blind.write_text("nvml: {enabled: false}\ntraining: {launchers: ['mystery_train']}\n")
    done = run_cli("scan", "--gpu", "3", "--config", str(blind), env={"COLUMNS": "200"})
    assert done.stdout.splitlines()[3] == (
        "GPU 3: NVML is unavailable, so no job can be placed on a GPU: every training job is listed"
    )
    assert done.returncode == 1
    assert any(line.split()[:2] == ["rogue", str(rogue)] for line in done.stdout.splitlines())
